/**
 * What the status bar item says: the lowest coverage among the targets touching the active file,
 * as the server computed it ("XNNPACK 85 %"), a spinner while building, an error look when one
 * of them failed. A pure function of the report, the active file and the server's state.
 */

import { lowestCoverage, methodLine, targetsTouching } from "./coverage";
import { isBuilt, isFailed, type Report, type TargetResult } from "./report";

export type ServerState = "starting" | "running" | "stopped" | "missing";

export interface StatusInput {
  server: ServerState;
  report: Report | undefined;
  /** Absolute project root the report's files are relative to. */
  root: string | undefined;
  /** Absolute path of the active editor's file, if any. */
  activeFile: string | undefined;
  /** The progress tracker's description while a build runs. */
  building: string | undefined;
}

export interface StatusView {
  text: string;
  tooltip: string;
  /** "error" makes the item red. */
  look: "normal" | "error" | "warning";
}

const SPINNER = "$(sync~spin)";

/**
 * The coverage of the target with the lowest: "XNNPACK 85 %", "Vulkan+XNNPACK 97 %", or
 * "CPU only 0 %" when no backend took an op; null when no target has a coverage.
 */
export function coverageText(targets: TargetResult[]): string | null {
  const coverage = lowestCoverage(targets)?.coverage;
  if (!coverage) {
    return null;
  }
  const where = coverage.backends.length ? coverage.backends.join("+") : "CPU only";
  return `${where} ${coverage.percent} %`;
}

function targetLines(targets: TargetResult[]): string[] {
  const lines: string[] = [];
  for (const target of targets) {
    if (!isBuilt(target)) {
      lines.push(`${target.name}: not built yet`);
      continue;
    }
    if (isFailed(target)) {
      const error = target.error;
      lines.push(`${target.name}: failed (${error?.kind ?? "error"}): ${error?.message ?? ""}`);
      continue;
    }
    for (const [name, method] of Object.entries(target.methods)) {
      lines.push(`${target.name} · ${methodLine(name, method)}`);
    }
  }
  return lines;
}

function buildingText(report: Report | undefined): string | undefined {
  return report?.building.length ? report.building.join(", ") : undefined;
}

export function statusView(input: StatusInput): StatusView {
  if (input.server === "missing") {
    return {
      text: "$(warning) lowerd",
      tooltip: "lowerd is not installed for the selected Python interpreter",
      look: "warning",
    };
  }
  if (input.server === "stopped") {
    return { text: "$(circle-slash) lowerd", tooltip: "lowerd server stopped", look: "warning" };
  }
  const report = input.report;
  const building = input.building ?? buildingText(report);
  const spinner = building ? `${SPINNER} ` : "";
  const buildingLine = building ? [`Building: ${building}`] : [];
  if (report?.error) {
    const file = report.error.file ?? "pyproject.toml";
    const where = report.error.line ? ` (${file}:${report.error.line})` : "";
    return {
      text: `${spinner || "$(error) "}lowerd: config error`,
      tooltip: [...buildingLine, `${report.error.message}${where}`].join("\n"),
      look: "error",
    };
  }
  if (!report || !report.targets.some(isBuilt) || !input.root) {
    const waiting = input.server === "starting" ? "starting" : "no build yet";
    return {
      text: `${spinner || "$(circuit-board) "}lowerd`,
      tooltip: [...buildingLine, `lowerd: ${waiting}`].join("\n"),
      look: "normal",
    };
  }
  const touching = input.activeFile ? targetsTouching(report, input.root, input.activeFile) : [];
  const shown = touching.length > 0 ? touching : report.targets;
  const heading =
    touching.length > 0
      ? `Targets touching this file: ${touching.map((t) => t.name).join(", ")}`
      : "All targets (none touches this file)";
  const failed = shown.filter(isFailed);
  const tooltip = [...buildingLine, heading, ...targetLines(shown), "", "Click for the report"];
  if (failed.length > 0) {
    const names = failed.map((t) => t.name).join(", ");
    return {
      text: `${spinner || "$(error) "}lowerd: ${names} failed`,
      tooltip: tooltip.join("\n"),
      look: "error",
    };
  }
  const coverage = coverageText(shown);
  return {
    text: coverage ? `${spinner}${coverage}` : `${spinner || "$(circuit-board) "}lowerd`,
    tooltip: tooltip.join("\n"),
    look: "normal",
  };
}
