import { readFileSync } from "node:fs";
import * as path from "node:path";

import { parseReport, type Report } from "../src/report";

/** A real `lowerd build --json` report of tests/projects/basic (refused, two_methods,
 * tiny_linear) plus tests/projects/broken's export_fail, its root rewritten to /project; written
 * again in the server's current shape by tests/editor_fixtures.py. */
export function fixtureReport(): Report {
  const text = readFileSync(path.join(__dirname, "fixtures", "report.json"), "utf-8");
  return parseReport(JSON.parse(text) as unknown);
}

export const ROOT = "/project";
