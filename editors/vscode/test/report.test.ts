import { readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";

import { isBuilt, isFailed, parseReport, parseTarget } from "../src/report";
import { statusView } from "../src/status";
import { fixtureReport } from "./fixture";

describe("parseReport", () => {
  it("reads a real build report", () => {
    const report = fixtureReport();
    expect(report.targets.map((t) => t.name)).toEqual([
      "refused",
      "two_methods",
      "tiny_linear",
      "export_fail",
    ]);
    const refused = report.targets[0]!;
    const forward = refused.methods.forward!;
    expect(forward.ops).toBe(4);
    expect(forward.opsDelegated).toBe(2);
    expect(forward.backends).toEqual({ XNNPACK: { ops: 2, partitions: 2 } });
    expect(forward.notDelegated.map((op) => [op.op, op.file, op.line])).toEqual([
      ["aten.pow.Tensor_Scalar", "models/refused.py", 22],
      ["aten.cumsum.default", "models/refused.py", 23],
    ]);
    expect(forward.partitions[0]!.sources).toEqual([["models/refused.py", 21, "aten.linear.default"]]);
    expect(refused.entry).toEqual({ file: "models/refused.py", line: 27 });
    expect(refused.modules.forward).toEqual({ file: "models/refused.py", line: 14 });
    expect(refused.cache).toEqual({ hits: 2, misses: 0, rebased: 0 });
  });

  it("keeps a failed target's error", () => {
    const failed = fixtureReport().targets[3]!;
    expect(isFailed(failed)).toBe(true);
    expect(failed.error).toMatchObject({ kind: "export-error", file: "models/export_fail.py", line: 13 });
    expect(failed.methods).toEqual({});
  });

  it("turns anything unusable into an empty report", () => {
    const empty = { root: null, targets: [], building: [], error: null };
    expect(parseReport(null)).toEqual(empty);
    expect(parseReport("nope")).toEqual(empty);
    expect(parseReport({ targets: "x" })).toEqual(empty);
  });

  it("fills in missing fields instead of failing", () => {
    const target = parseTarget({ name: "t", methods: { forward: { ops: 3 } }, entry: { line: 2 } });
    expect(target.status).toBe("unknown");
    expect(target.entry).toBeNull();
    expect(target.methods.forward).toEqual({
      ops: 3,
      opsDelegated: 0,
      coverage: 0,
      coveragePercent: null,
      summary: null,
      fixesHint: null,
      backends: {},
      partitions: [],
      notDelegated: [],
      refusals: [],
      modules: [],
      plannedMemoryBytes: null,
      constantBytes: null,
      edgeGeneration: null,
    });
    expect(target.coverage).toBeNull();
    expect(target.sizes).toBeNull(); // an older server's report has no sizes
  });

  it("reads the coverage the server computed: per method and per target", () => {
    const [refused, twoMethods, , failed] = fixtureReport().targets;
    const forward = refused!.methods.forward!;
    expect(forward.coveragePercent).toBe(50);
    expect(forward.summary).toBe("2 of 4 ops on XNNPACK in 2 partitions (50 %)");
    expect(forward.fixesHint).toBeNull();
    expect(refused!.coverage).toEqual({ percent: 50, backends: ["XNNPACK"] });
    expect(twoMethods!.coverage).toEqual({ percent: 100, backends: ["XNNPACK"] });
    expect(failed!.coverage).toEqual({ percent: 0, backends: [] }); // as the server sends it
    const junk = parseTarget({
      coverage: { percent: "85", backends: ["XNNPACK"] },
      methods: { f: { coverage_percent: "x", summary: 3, fixes_hint: ["y"] } },
    });
    expect(junk.coverage).toBeNull();
    expect(junk.methods.f).toMatchObject({ coveragePercent: null, summary: null, fixesHint: null });
    const cpu = parseTarget({ coverage: { percent: 0, backends: [1, "x"] } });
    expect(cpu.coverage).toEqual({ percent: 0, backends: ["x"] });
  });

  it("takes the root from the report's config, as lowerd.report and build --json say", () => {
    expect(fixtureReport().root).toBe("/project");
    expect(parseReport({ root: "/work/p", targets: [] }).root).toBe("/work/p");
  });

  it("reads the server's report: unbuilt targets, builds running, a config error", () => {
    const report = parseReport({
      config: "/p/pyproject.toml",
      error: null,
      targets: [{ name: "vit" }, { name: "cnn", status: "ok", methods: {} }],
      building: ["vit"],
    });
    expect(report.targets.map((t) => [t.name, isBuilt(t)])).toEqual([
      ["vit", false],
      ["cnn", true],
    ]);
    expect(report.building).toEqual(["vit"]);
    const broken = parseReport({
      config: null,
      error: { kind: "config-error", message: "unknown key 'backend'", file: "/p/pyproject.toml", line: 3 },
      targets: [],
    });
    expect(broken.error).toEqual({
      kind: "config-error",
      message: "unknown key 'backend'",
      file: "/p/pyproject.toml",
      line: 3,
    });
  });
});

describe("the server's lowerd.report answer", () => {
  // An older server's answer, kept as recorded (tests/editor_fixtures.py does not write it): the
  // extension must still read it.
  it("parses as recorded from `lowerd serve` (tests/projects/nvim, root rewritten)", () => {
    const text = readFileSync(path.join(__dirname, "fixtures", "server-report.json"), "utf-8");
    const report = parseReport(JSON.parse(text) as unknown);
    expect(report.root).toBe("/project");
    expect(report.building).toEqual([]);
    expect(report.error).toBeNull();
    const net = report.targets[0]!;
    expect(net.name).toBe("net");
    expect(net.methods.forward!.notDelegated.map((op) => op.line)).toEqual([17, 18]);
    expect(statusView({
      server: "running",
      report,
      root: "/project",
      activeFile: "/project/models/net.py",
      building: undefined,
    }).text).toBe("XNNPACK 50 %");
  });
});
