import { describe, expect, it } from "vitest";

import {
  coverageOf,
  filesOf,
  methodSummary,
  methodsOf,
  percentOf,
  targetsTouching,
} from "../src/coverage";
import { parseMethod } from "../src/report";
import { fixtureReport, ROOT } from "./fixture";

describe("percentOf", () => {
  it("rounds down so that 100 % means every op", () => {
    expect(percentOf(231, 271)).toBe(85);
    expect(percentOf(999, 1000)).toBe(99);
    expect(percentOf(4, 4)).toBe(100);
    expect(percentOf(0, 0)).toBe(0);
  });
});

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

describe("coverageOf", () => {
  it("adds up ops over methods and names the backends by ops", () => {
    const report = fixtureReport();
    const coverage = coverageOf(methodsOf(report.targets.slice(0, 3)));
    expect(coverage).toEqual({ ops: 10, delegated: 8, percent: 80, backends: ["XNNPACK"] });
  });

  it("orders several backends by the ops they took", () => {
    const method = parseMethod({
      ops: 10,
      ops_delegated: 9,
      backends: { XNNPACK: { ops: 2, partitions: 1 }, Vulkan: { ops: 7, partitions: 2 }, CoreML: { ops: 0 } },
    });
    expect(coverageOf([method]).backends).toEqual(["Vulkan", "XNNPACK"]);
  });
});

describe("methodSummary", () => {
  it("words one backend like the server's code lens", () => {
    const forward = fixtureReport().targets[0]!.methods.forward!;
    expect(methodSummary("forward", forward)).toBe("forward: 2 of 4 ops on XNNPACK in 2 partitions (50 %)");
  });

  it("words several backends and none", () => {
    const two = parseMethod({
      ops: 10,
      ops_delegated: 9,
      backends: { XNNPACK: { ops: 2, partitions: 1 }, Vulkan: { ops: 7, partitions: 2 } },
    });
    expect(methodSummary("forward", two)).toBe(
      "forward: 9 of 10 ops delegated (2 on XNNPACK in 1 partition, 7 on Vulkan in 2 partitions; 90 %)",
    );
    expect(methodSummary("f", parseMethod({ ops: 3 }))).toBe("f: 0 of 3 ops delegated (0 %)");
  });
});
