/**
 * Renders a report JSON (`lowerd build --json`, or a saved `lowerd.report` answer) to the report
 * webview's HTML as a standalone file:
 *   npm run --silent render-report -- report.json report.html [project-name]
 * scripts/screenshot.sh turns it into media/report.png with headless Chromium.
 */

import { readFileSync, writeFileSync } from "node:fs";

import { parseReport } from "../src/report";
import { renderReportPage } from "../src/reportHtml";

const [input, output, projectName = "project"] = process.argv.slice(2);
if (!input || !output) {
  console.error("usage: render-report REPORT.json OUT.html [PROJECT-NAME]");
  process.exit(2);
}
const report = parseReport(JSON.parse(readFileSync(input, "utf-8")) as unknown);
writeFileSync(output, renderReportPage(report, { cspSource: null, nonce: "standalone", projectName }));
