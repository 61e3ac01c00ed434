import { describe, expect, it } from "vitest";

import { parseMethod, parseReport } from "../src/report";
import { escapeHtml, formatSize, renderReportPage } from "../src/reportHtml";
import { fixtureReport } from "./fixture";

const OPTIONS = { cspSource: "vscode-webview://x", nonce: "abc123", projectName: "basic" };

describe("renderReportPage", () => {
  const html = renderReportPage(fixtureReport(), OPTIONS);

  it("has a section per target and a summary per method", () => {
    for (const name of ["refused", "two_methods", "tiny_linear", "export_fail"]) {
      expect(html).toContain(`id="target-${name}"`);
    }
    expect(html).toContain("forward: 2 of 4 ops on XNNPACK in 2 partitions (50 %)");
    expect(html).toContain("encode: 2 of 2 ops on XNNPACK in 1 partition (100 %)");
  });

  it("links each op left on the CPU to its source line, with the partitioner's reason", () => {
    expect(html).toContain('data-file="models/refused.py" data-line="22">models/refused.py:22</a>');
    expect(html).toContain("<code>aten.pow.Tensor_Scalar</code>");
    expect(html).toContain("only support power == 2, got 3");
    expect(html).toContain("no XNNPACK support for aten.cumsum.default");
  });

  it("shows backends with their blob and weight bytes, cache outcomes and the CPU remainder", () => {
    expect(html).toContain(
      '<td>XNNPACK</td><td class="num">2</td><td class="num">2</td><td class="num">1.4 KiB</td>' +
        '<td class="num">576 B</td><td>2 cache hit</td>',
    );
    expect(html).toMatch(/<td>portable CPU<\/td><td class="num">2<\/td>/);
  });

  it("shows the .pte's sizes and each method's planned memory", () => {
    expect(html).toContain(
      '<span class="sizes">.pte 4.2 KiB (constants 0 B, delegate blobs 1.4 KiB, delegate weights 576 B)</span>',
    );
    expect(html).toContain('<p class="memory muted">planned memory 192 B · constants 0 B</p>');
  });

  it("says which way each method's edge generation ran, in the server's words", () => {
    expect(html).not.toContain('class="edge'); // the fixture's server did not say
    const report = fixtureReport();
    const forward = report.targets[0]!.methods.forward!;
    forward.edgeGeneration = parseMethod({
      edge_generation: { path: "stock", reason: "2 methods", words: "stock (2 methods) <b>" },
    }).edgeGeneration;
    expect(renderReportPage(report, OPTIONS)).toContain(
      '<p class="edge muted">edge generation: stock (2 methods) &lt;b&gt;</p>',
    );
  });

  it("writes sizes as the CLI does", () => {
    expect([0, 512, 1023, 1024, 1536, 1048575, 5 * 1024 ** 3].map(formatSize)).toEqual([
      "0 B",
      "512 B",
      "1023 B",
      "1 KiB",
      "1.5 KiB",
      "1 MiB",
      "5 GiB",
    ]);
  });

  it("shows a failed target's error at its line", () => {
    expect(html).toContain('<span class="badge error">export-error</span>');
    expect(html).toContain('data-file="models/export_fail.py" data-line="13"');
    expect(html).toContain("GuardOnDataDependentSymNode");
  });

  it("runs only its own nonced script", () => {
    expect(html).toContain("script-src 'nonce-abc123'");
    expect(html).toContain('<script nonce="abc123">');
    expect(html.match(/<script/g)).toHaveLength(1);
  });

  it("escapes everything from the report", () => {
    const evil = parseReport({
      targets: [{ name: "<img src=x>", status: "error", error: { kind: "x", message: "<script>alert(1)</script>" } }],
    });
    const page = renderReportPage(evil, OPTIONS);
    expect(page).not.toContain("<img src=x>");
    expect(page).not.toContain("<script>alert(1)");
    expect(page).toContain("&lt;script&gt;alert(1)&lt;/script&gt;");
  });

  it("marks targets not built yet or building, and shows a config error", () => {
    const page = renderReportPage(
      parseReport({
        error: { kind: "config-error", message: "unknown key 'backend'", file: "pyproject.toml", line: 3 },
        targets: [{ name: "vit" }, { name: "cnn" }],
        building: ["cnn"],
      }),
      OPTIONS,
    );
    expect(page).toContain('id="target-vit"><h2>vit <span class="badge pending">not built yet</span>');
    expect(page).toContain('id="target-cnn"><h2>cnn <span class="badge pending">building</span>');
    expect(page).toContain("unknown key &#39;backend&#39;");
    expect(page).toContain('data-file="pyproject.toml" data-line="3"');
  });

  it("says what to do when nothing is built yet", () => {
    expect(renderReportPage(parseReport({}), OPTIONS)).toContain("No build yet");
  });

  it("escapes the five HTML characters", () => {
    expect(escapeHtml(`<a href="x">'&'</a>`)).toBe("&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
  });
});

describe("focus", () => {
  it("scrolls to the target a code lens asked for", () => {
    const page = renderReportPage(fixtureReport(), { ...OPTIONS, focus: "two_methods" });
    expect(page).toContain('<body data-focus="two_methods">');
    expect(page).toContain('document.getElementById("target-" + focus)');
  });

  it("marks the rows of the op a code action's diagnostic is about", () => {
    const focusSource = { file: "models/refused.py", line: 16 };
    const page = renderReportPage(fixtureReport(), { ...OPTIONS, focus: "refused", focusSource });
    expect(page).toContain('<body data-focus="refused" data-focus-file="models/refused.py" data-focus-line="16">');
    expect(page).toContain('link.closest("tr")?.classList.add("focused")');
  });
});

describe("paths", () => {
  it("shows the .pte relative to the project root", () => {
    const html = renderReportPage(fixtureReport(), OPTIONS);
    expect(html).toContain("<code>build/refused.pte</code>");
  });
});
