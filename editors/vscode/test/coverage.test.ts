import { describe, expect, it } from "vitest";

import { filesOf, lowestCoverage, methodLine, targetsTouching } from "../src/coverage";
import { parseMethod, parseTarget } from "../src/report";
import { fixtureReport, ROOT } from "./fixture";

describe("targetsTouching", () => {
  const report = fixtureReport();
  const names = (file: string): string[] => targetsTouching(report, ROOT, file).map((t) => t.name);

  it("finds the targets whose report points at the file", () => {
    expect(names("/project/models/refused.py")).toEqual(["refused"]);
    expect(names("/project/models/export_fail.py")).toEqual(["export_fail"]);
    expect(names("/project/models/unrelated.py")).toEqual([]);
  });

  it("counts the project's pyproject.toml as touching every target", () => {
    expect(names("/project/pyproject.toml")).toHaveLength(4);
  });

  it("lists each file once", () => {
    expect(filesOf(report.targets[0]!)).toEqual(["models/refused.py"]);
  });
});

describe("lowestCoverage", () => {
  const target = (name: string, coverage: unknown): ReturnType<typeof parseTarget> =>
    parseTarget({ name, status: "ok", coverage });

  it("picks the target with the lowest percent the server sent, the first of equals", () => {
    const targets = [
      target("a", { percent: 97, backends: ["Vulkan", "XNNPACK"] }),
      target("b", { percent: 85, backends: ["XNNPACK"] }),
      target("c", { percent: 85, backends: [] }),
    ];
    expect(lowestCoverage(targets)?.name).toBe("b");
    expect(lowestCoverage(fixtureReport().targets.slice(0, 3))?.name).toBe("refused");
  });

  it("skips targets without a coverage (not built, an older server) and failed ones", () => {
    const failed = parseTarget({ name: "failed", status: "error", coverage: { percent: 0, backends: [] } });
    const targets = [parseTarget({ name: "later" }), target("old", undefined), failed, target("b", { percent: 100, backends: [] })];
    expect(lowestCoverage(targets)?.name).toBe("b");
    expect(lowestCoverage(targets.slice(0, 3))).toBeNull();
  });
});

describe("methodLine", () => {
  it("puts the method's name before the server's sentence", () => {
    const forward = fixtureReport().targets[0]!.methods.forward!;
    expect(methodLine("forward", forward)).toBe("forward: 2 of 4 ops on XNNPACK in 2 partitions (50 %)");
  });

  it("shows the sentence as sent, computing nothing", () => {
    const method = parseMethod({ ops: 271, ops_delegated: 270, summary: "whatever the server says" });
    expect(methodLine("f", method)).toBe("f: whatever the server says");
    expect(methodLine("f", parseMethod({ ops: 3 }))).toBe("f"); // an older server: no sentence
  });
});
