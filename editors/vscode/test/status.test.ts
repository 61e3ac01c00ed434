import { describe, expect, it } from "vitest";

import { parseReport } from "../src/report";
import { coverageText, type StatusInput, statusView } from "../src/status";
import { fixtureReport, ROOT } from "./fixture";

function input(overrides: Partial<StatusInput>): StatusInput {
  return {
    server: "running",
    report: fixtureReport(),
    root: ROOT,
    activeFile: undefined,
    building: undefined,
    ...overrides,
  };
}

describe("statusView", () => {
  it("shows the coverage of the targets touching the active file", () => {
    const view = statusView(input({ activeFile: "/project/models/refused.py" }));
    expect(view.text).toBe("XNNPACK 50 %");
    expect(view.look).toBe("normal");
    expect(view.tooltip).toContain("Targets touching this file: refused");
    expect(view.tooltip).toContain("refused · forward: 2 of 4 ops on XNNPACK in 2 partitions (50 %)");
  });

  it("shows 100 % for a fully delegated target", () => {
    expect(statusView(input({ activeFile: "/project/models/tiny_linear.py" })).text).toBe("XNNPACK 100 %");
  });

  it("turns red when a target touching the file failed", () => {
    const view = statusView(input({ activeFile: "/project/models/export_fail.py" }));
    expect(view.text).toBe("$(error) lowerd: export_fail failed");
    expect(view.look).toBe("error");
    expect(view.tooltip).toContain("export_fail: failed (export-error)");
  });

  it("spins while building, keeping the last coverage", () => {
    const view = statusView(
      input({ activeFile: "/project/models/refused.py", building: "building refused: lowering" }),
    );
    expect(view.text).toBe("$(sync~spin) XNNPACK 50 %");
    expect(view.tooltip.split("\n")[0]).toBe("Building: building refused: lowering");
  });

  it("falls back to every target for a file no target touches", () => {
    const view = statusView(input({ activeFile: "/elsewhere/notes.md" }));
    expect(view.tooltip).toContain("All targets (none touches this file)");
    expect(view.look).toBe("error"); // export_fail is among them
  });

  it("says when there is no build yet, or no lowerd", () => {
    expect(statusView(input({ report: parseReport({ targets: [] }) })).text).toBe("$(circuit-board) lowerd");
    expect(statusView(input({ report: undefined, building: "x" })).text).toBe("$(sync~spin) lowerd");
    const missing = statusView(input({ server: "missing" }));
    expect(missing.look).toBe("warning");
    expect(missing.tooltip).toContain("not installed");
  });
});

describe("statusView with the server's report", () => {
  it("spins for the targets the report says are building", () => {
    const report = { ...fixtureReport(), building: ["refused"] };
    const view = statusView(input({ report, activeFile: "/project/models/refused.py" }));
    expect(view.text).toBe("$(sync~spin) XNNPACK 50 %");
    expect(view.tooltip).toContain("Building: refused");
  });

  it("turns red on a config error", () => {
    const report = parseReport({
      error: { kind: "config-error", message: "unknown key 'backend'", file: "pyproject.toml", line: 3 },
      targets: [],
    });
    const view = statusView(input({ report }));
    expect(view).toMatchObject({ text: "$(error) lowerd: config error", look: "error" });
    expect(view.tooltip).toBe("unknown key 'backend' (pyproject.toml:3)");
  });

  it("waits for a first build of unbuilt targets", () => {
    const report = parseReport({ config: "/project/pyproject.toml", targets: [{ name: "vit" }] });
    expect(statusView(input({ report })).text).toBe("$(circuit-board) lowerd");
  });
});

describe("coverageText", () => {
  const report = parseReport({
    targets: [
      {
        name: "a",
        status: "ok",
        coverage: { percent: 97, backends: ["Vulkan", "XNNPACK"] },
        methods: { forward: { ops: 100, ops_delegated: 97, summary: "97 of 100 ops delegated" } },
      },
      { name: "b", status: "ok", coverage: { percent: 0, backends: [] }, methods: { forward: { ops: 5 } } },
      // An older server's target: no coverage sent, none computed here.
      { name: "c", status: "ok", methods: { forward: { ops: 4, ops_delegated: 4 } } },
    ],
  });

  it("names the delegates the server sent, or says CPU only", () => {
    expect(coverageText(report.targets.slice(0, 1))).toBe("Vulkan+XNNPACK 97 %");
    expect(coverageText(report.targets.slice(1, 2))).toBe("CPU only 0 %");
  });

  it("shows the target with the lowest coverage, adding nothing up", () => {
    expect(coverageText(report.targets)).toBe("CPU only 0 %");
    expect(coverageText([report.targets[2]!])).toBeNull();
  });
});

describe("statusView over several targets touching a file", () => {
  const target = (name: string, percent: number, backends: string[]): Record<string, unknown> => ({
    name,
    status: "ok",
    entry: { file: "models/shared.py", line: 3 },
    coverage: { percent, backends },
    methods: { forward: { summary: `${percent} % said the server` } },
  });
  const report = parseReport({
    config: "/project/pyproject.toml",
    targets: [target("big", 97, ["Vulkan", "XNNPACK"]), target("small", 85, ["XNNPACK"]), target("other", 3, [])],
  });

  it("shows the lowest of them with its backends, and every method's sentence in the tooltip", () => {
    report.targets[2]!.entry = { file: "models/other.py", line: 1 };
    const view = statusView(input({ report, activeFile: "/project/models/shared.py" }));
    expect(view.text).toBe("XNNPACK 85 %");
    expect(view.tooltip).toContain("Targets touching this file: big, small");
    expect(view.tooltip).toContain("big · forward: 97 % said the server");
  });

  it("says lowerd when the server sent no coverage (an older server)", () => {
    const old = parseReport({ config: "/project/pyproject.toml", targets: [{ name: "t", status: "ok", methods: {} }] });
    expect(statusView(input({ report: old })).text).toBe("$(circuit-board) lowerd");
  });
});
