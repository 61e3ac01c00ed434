/**
 * Issue 11's report fields: refused ops' library lines and module paths, refusal groups ranked
 * most costly first, per-module coverage, and what fixing the top groups would do.
 */

import { readFileSync } from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";

import { parseMethod, parseReport } from "../src/report";
import { renderReportPage } from "../src/reportHtml";

const LIBRARY = "/venv/lib/python3.11/site-packages/transformers/models/llama/modeling_llama.py";
const MEAN = "mean.dim only supports averaging 4D tensors, got tensor of rank 3";

function op(name: string, layer: number, reason: string, line: number): Record<string, unknown> {
  return {
    op: name,
    file: "models/llama.py",
    line: 12,
    reason,
    node: `${name}_${layer}`,
    library: { file: LIBRARY, line, function: "forward" },
    module_path: `model.layers.${layer}.input_layernorm`,
    module_class: "transformers.models.llama.modeling_llama.LlamaRMSNorm",
    elements: 64,
  };
}

function group(name: string, reason: string, line: number, boundaries: number): Record<string, unknown> {
  return {
    op: name,
    reason,
    count: 4,
    file: "models/llama.py",
    line: 12,
    library: { file: LIBRARY, line, function: "forward" },
    nodes: [0, 1, 2, 3].map((i) => `${name}_${i}`),
    module_paths: [0, 1, 2, 3].map((i) => `model.layers.${i}.input_layernorm`),
    modules: "model.layers.{0..3}.input_layernorm",
    module_class: "LlamaRMSNorm",
    boundaries,
    elements: 256,
  };
}

/** A method JSON as the server sends it (report_model.MethodReport), four Llama layers. */
const METHOD = {
  ops: 40,
  ops_delegated: 32,
  coverage: 0.8,
  coverage_percent: 80,
  summary: "32 of 40 ops on XNNPACK in 5 partitions (80 %)",
  fixes_hint: "1 fix would make this 1 partition",
  backends: { XNNPACK: { ops: 32, partitions: 5 } },
  partitions: [],
  not_delegated: [0, 1, 2, 3].flatMap((i) => [
    op("aten.add.Scalar", i, "no XNNPACK support for aten.add.Scalar", 69),
    op("aten.mean.dim", i, MEAN, 68),
  ]),
  refusals: [
    group("aten.add.Scalar", "no XNNPACK support for aten.add.Scalar", 69, 4),
    group("aten.mean.dim", MEAN, 68, 0),
  ],
  modules: [
    { path: "", module_class: "LlamaForCausalLM", ops: 40, ops_delegated: 32, percent: 80 },
    { path: "model", module_class: "LlamaModel", ops: 38, ops_delegated: 30, percent: 78 },
    { path: "model.layers.*.input_layernorm", module_class: "LlamaRMSNorm", ops: 12, ops_delegated: 4, instances: 4, percent: 33 },
    { path: "model.layers.*.mlp", module_class: "LlamaMLP", ops: 8, ops_delegated: 8, instances: 4, percent: 100 },
  ],
  final: true,
  provisional: false,
};

describe("parsing issue 11's fields", () => {
  const method = parseMethod(METHOD);

  it("reads library frames, module paths and elements of refused ops", () => {
    expect(method.notDelegated[0]).toEqual({
      op: "aten.add.Scalar",
      file: "models/llama.py",
      line: 12,
      reason: "no XNNPACK support for aten.add.Scalar",
      node: "aten.add.Scalar_0",
      library: { file: LIBRARY, line: 69, function: "forward" },
      modulePath: "model.layers.0.input_layernorm",
      moduleClass: "transformers.models.llama.modeling_llama.LlamaRMSNorm",
      elements: 64,
    });
  });

  it("reads refusal groups in the server's order and the module tree", () => {
    expect(method.refusals.map((g) => [g.op, g.count, g.boundaries, g.modules])).toEqual([
      ["aten.add.Scalar", 4, 4, "model.layers.{0..3}.input_layernorm"],
      ["aten.mean.dim", 4, 0, "model.layers.{0..3}.input_layernorm"],
    ]);
    expect(method.refusals[0]!.library).toEqual({ file: LIBRARY, line: 69, function: "forward" });
    expect(method.modules[2]).toEqual({
      path: "model.layers.*.input_layernorm",
      moduleClass: "LlamaRMSNorm",
      ops: 12,
      opsDelegated: 4,
      instances: 4,
      percent: 33,
    });
    expect(method.modules[0]!.instances).toBe(1); // an older server's row: one module
  });

  it("tolerates an older server's report and junk in the new fields", () => {
    const old = parseMethod({ ops: 2, not_delegated: [{ op: "aten.cumsum.default", reason: "no" }] });
    expect(old.refusals).toEqual([]);
    expect(old.modules).toEqual([]);
    expect(old.notDelegated[0]).toMatchObject({ library: null, modulePath: null, moduleClass: null, elements: 0 });
    const junk = parseMethod({
      refusals: [{ library: "x", nodes: [1, "a"] }],
      modules: "x",
    });
    expect(junk.refusals[0]).toMatchObject({ op: "?", library: null, nodes: ["a"], count: 0 });
    expect(junk.modules).toEqual([]);
  });
});

describe("the fixes hint", () => {
  it("is the server's, as sent, null when it sends none", () => {
    expect(parseMethod(METHOD).fixesHint).toBe("1 fix would make this 1 partition");
    expect(parseMethod({ ...METHOD, fixes_hint: null }).fixesHint).toBeNull();
    expect(parseMethod({ ...METHOD, fixes_hint: undefined }).fixesHint).toBeNull();
  });
});

describe("the report page", () => {
  const report = parseReport({
    config: "/project/pyproject.toml",
    targets: [{ name: "llama", status: "ok", methods: { forward: METHOD } }],
  });
  const html = renderReportPage(report, { cspSource: null, nonce: "n", projectName: "p" });

  it("ranks refusal groups with the library line that made them and their modules", () => {
    const table = html.slice(html.indexOf('<table class="refusals">'));
    expect(table.indexOf("aten.add.Scalar")).toBeLessThan(table.indexOf("aten.mean.dim"));
    expect(html).toContain("<code>aten.add.Scalar</code> ×4");
    expect(html).toContain(
      `<code>LlamaRMSNorm.forward</code> <a class="source" href="#" title="${LIBRARY}" ` +
        `data-file="${LIBRARY}" data-line="69">modeling_llama.py:69</a>`,
    );
    expect(html).toContain("<code>model.layers.{0..3}.input_layernorm</code>");
    expect(html).toContain('data-file="models/llama.py" data-line="12"');
  });

  it("keeps every op, folded, and says what fixing the top groups would do", () => {
    expect(html).toContain("<summary>Every op left on the CPU (8)</summary>");
    expect(html).toContain('<p class="fixes">1 fix would make this 1 partition</p>');
  });

  it("heads each method with the server's sentence and draws the server's percent", () => {
    expect(html).toContain("<h3>forward: 32 of 40 ops on XNNPACK in 5 partitions (80 %)</h3>");
    expect(html).toContain('aria-label="80 % delegated"><div class="fill" style="width:80%">');
    const nearly = renderReportPage(
      parseReport({
        targets: [
          {
            name: "t",
            status: "ok",
            methods: { forward: { ...METHOD, ops: 271, ops_delegated: 270, coverage_percent: 99, fixes_hint: null } },
          },
        ],
      }),
      { cspSource: null, nonce: "n", projectName: "p" },
    );
    expect(nearly).toContain('aria-label="99 % delegated"'); // never 100 % unless every op is
    expect(nearly).not.toContain('class="fixes"');
  });

  it("shows coverage per module, each under its listed parents", () => {
    expect(html).toContain("<summary>Coverage per module (4)</summary>");
    expect(html).toContain(
      '<td style="padding-left:2em"><code>model.layers.*.input_layernorm</code></td><td>LlamaRMSNorm ×4</td>' +
        '<td class="num">4 of 12</td><td class="num">33 %</td>',
    );
    expect(html).toContain('<tr class="full"><td style="padding-left:2em"><code>model.layers.*.mlp</code>');
    expect(html).toContain("<code>(model)</code>");
  });

  it("shows each module row's percent as the server sent it, computing none", () => {
    const page = (modules: unknown[]): string =>
      renderReportPage(parseReport({ targets: [{ name: "t", status: "ok", methods: { forward: { ...METHOD, modules } } }] }), {
        cspSource: null,
        nonce: "n",
        projectName: "p",
      });
    const nearly = page([{ path: "", module_class: "Net", ops: 271, ops_delegated: 270, percent: 99 }]);
    expect(nearly).toContain('<td class="num">270 of 271</td><td class="num">99 %</td>'); // never 100 % unless every op is
    expect(nearly).toContain('<div class="fill" style="width:99%">');
    expect(nearly).not.toContain('<tr class="full">');
    // The server's number, not one made here from the counts.
    expect(page([{ path: "", ops: 4, ops_delegated: 3, percent: 42 }])).toContain('<td class="num">42 %</td>');
    // An older server's row has no percent: its counts only, no percent, no bar.
    const old = page([{ path: "", module_class: "Net", ops: 4, ops_delegated: 3 }]);
    expect(parseMethod({ modules: [{ path: "", ops: 4, ops_delegated: 3 }] }).modules[0]!.percent).toBeNull();
    expect(old).toContain('<td class="num">3 of 4</td><td class="num"></td><td></td></tr>');
    expect(old).not.toContain('class="bar small"');
  });

  it("shows an older server's report as before: each op, no module table", () => {
    const old = renderReportPage(
      parseReport({
        targets: [{ name: "t", status: "ok", methods: { forward: { ...METHOD, refusals: undefined, modules: undefined } } }],
      }),
      { cspSource: null, nonce: "n", projectName: "p" },
    );
    expect(old).not.toContain('class="refusals"');
    expect(old).not.toContain("Coverage per module");
    expect(old).toContain("<th>made in</th><th>module</th>");
  });

  it("computes no sentence, percent or hint an older server did not send", () => {
    const method = { ...METHOD, summary: undefined, coverage_percent: undefined, fixes_hint: undefined };
    const old = renderReportPage(
      parseReport({ targets: [{ name: "t", status: "ok", methods: { forward: method } }] }),
      { cspSource: null, nonce: "n", projectName: "p" },
    );
    expect(old).toContain("<h3>forward</h3>");
    expect(old).not.toContain('class="bar"');
    expect(old).not.toContain('class="fixes"');
  });
});

describe("a real report: transformers' Llama", () => {
  // `lowerd build --json` of tests/projects/llama (2 layers), paths rewritten to /project and
  // /venv, the partitions' source lists dropped; written again in the server's current shape by
  // tests/editor_fixtures.py.
  const text = readFileSync(path.join(__dirname, "fixtures", "llama-report.json"), "utf-8");
  const report = parseReport(JSON.parse(text) as unknown);
  const method = report.targets[0]!.methods.forward!;

  it("parses refusal groups, library lines, module paths and the module tree", () => {
    const [mean] = method.refusals;
    expect(mean).toMatchObject({ op: "aten.mean.dim", count: 5, moduleClass: "LlamaRMSNorm" });
    expect(mean!.library?.file).toBe("/venv/lib/python3.11/site-packages/transformers/models/llama/modeling_llama.py");
    expect(mean!.library?.function).toBe("forward");
    expect(mean!.modules).toContain("model.model.layers.{0,1}.{input_layernorm,post_attention_layernorm}");
    expect(method.notDelegated.every((op) => op.library !== null && op.modulePath !== null)).toBe(true);
    expect(method.modules[0]).toMatchObject({ path: "", moduleClass: "Logits", instances: 1 });
    expect(method.modules.find((m) => m.path === "model.model.layers.*")?.instances).toBe(2);
    expect(method.modules.find((m) => m.path === "model.model.layers.*.mlp")?.percent).toBe(100);
    expect(method.modules.find((m) => m.path === "model.model.norm")?.percent).toBe(83); // 5 of 6
    expect(method.coveragePercent).toBe(62);
    expect(method.summary).toBe("130 of 208 ops on XNNPACK in 13 partitions (62 %)");
  });

  it("renders the groups, the hint and the module tree", () => {
    expect(method.fixesHint).toBe("4 fixes would make this 6 partitions, 34 would make 1");
    const html = renderReportPage(report, { cspSource: null, nonce: "n", projectName: "llama" });
    expect(html).toContain("<code>LlamaRMSNorm.forward</code>");
    expect(html).toContain(">modeling_llama.py:");
    expect(html).toContain(`<summary>Coverage per module (${method.modules.length})</summary>`);
    expect(html).toContain("<code>model.model.layers.*.self_attn</code></td><td>LlamaAttention ×2</td>");
    expect(html).toContain('<p class="fixes">4 fixes would make this 6 partitions, 34 would make 1</p>');
  });
});
