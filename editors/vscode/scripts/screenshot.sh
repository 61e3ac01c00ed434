#!/usr/bin/env bash
# Renders test/fixtures/report.json (a real `lowerd build --json` of tests/projects/basic plus
# broken's export_fail) as the report webview shows it, and screenshots it to media/report.png
# with Debian's headless Chromium (apt-get install chromium).
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
npm run --silent render-report -- test/fixtures/report.json "$out/report.html" basic
chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
  --disable-background-networking --disable-component-update --disable-sync \
  --user-data-dir="$out/profile" --hide-scrollbars --window-size=1000,1330 \
  --screenshot="$PWD/media/report.png" "file://$out/report.html"
