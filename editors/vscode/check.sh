#!/usr/bin/env bash
# The VS Code extension's checks, as the README's test command runs them: install the locked
# packages, type-check, lint, bundle, unit-test, and package dist/lowerd.vsix.
# Where Node.js is not installed it fails: an extension nobody built must not pass as tested.
set -euo pipefail
cd "$(dirname "$0")"
if ! command -v npm >/dev/null 2>&1; then
  echo "editors/vscode: npm not found: install Node.js 20 (with npm) to build and test the VS Code extension" >&2
  exit 1
fi
npm ci --no-audit --no-fund
npm run check
npm test
npm run package
