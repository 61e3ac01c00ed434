import { readFileSync } from "node:fs";
import * as path from "node:path";

import { describe, expect, it } from "vitest";

import { compareTable, parseComparison, renderComparePage } from "../src/compare";

/** A real `lowerd compare refused --json` of tests/projects/basic: XNNPACK built (its blobs
 * from the cache), Vulkan up to date, CoreML without coremltools; its root rewritten to /project. */
function fixture(): unknown {
  return JSON.parse(readFileSync(path.join(__dirname, "fixtures", "compare.json"), "utf-8")) as unknown;
}

describe("renderComparePage", () => {
  const comparison = parseComparison(fixture());
  const html = renderComparePage(comparison, { cspSource: "vscode-webview://x" });

  it("has a column per backend, in the order compared", () => {
    expect(html).toContain("<h1>refused, one backend at a time</h1>");
    expect(html).toContain("<tr><th></th><th>XNNPACK</th><th>Vulkan</th><th>CoreML</th></tr>");
  });

  it("shows each backend's coverage, ops, partitions, .pte and cache side by side", () => {
    expect(html).toContain('<tr><th>coverage</th><td>50 %<div class="bar" role="img" aria-label="50 % delegated">');
    expect(html).toContain('<div class="fill" style="width:83%"></div>');
    expect(html).toContain("<tr><th>ops on backend</th><td>2 of 4</td><td>5 of 6</td></tr>");
    expect(html).toContain("<tr><th>partitions</th><td>2</td><td>2</td></tr>");
    expect(html).toContain("<tr><th>.pte</th><td>4.2 KiB</td><td>4.2 KiB</td></tr>");
    expect(html).toContain("<tr><th>cache</th><td>2 hits</td><td>up to date</td></tr>");
  });

  it("lists the ops each backend left on the CPU, with the reason on hover", () => {
    expect(html).toContain(
      '<li title="only support power == 2, got 3">1× <code>aten.pow.Tensor_Scalar</code></li>',
    );
    expect(html).toContain('<li title="no operator implementation">1× <code>aten.cumsum.default</code></li>');
  });

  it("fills a failed backend's column with its error, once", () => {
    expect(html).toContain('<td rowspan="7" class="failed"><span class="badge error">backend-unavailable</span>');
    expect(html).toContain("(pyproject.toml:9)");
    expect(html).toContain("CoreML&#39;s partitioner cannot be loaded: No module named coremltools");
    expect(html.match(/backend-unavailable/g)).toHaveLength(1);
  });

  it("runs no script and allows only its own styles", () => {
    expect(html).not.toContain("<script");
    expect(html).toContain(
      `content="default-src 'none'; style-src vscode-webview://x 'unsafe-inline'"`,
    );
  });

  it("says why nothing was compared, and escapes what the server said", () => {
    const failed = parseComparison({ target: "<net>", backends: [], error: "unknown target '<net>'" });
    const page = renderComparePage(failed, { cspSource: null });
    expect(page).toContain("<h1>&lt;net&gt;, one backend at a time</h1>");
    expect(page).toContain("unknown target &#39;&lt;net&gt;&#39;");
    expect(page).not.toContain("<table");
  });

  it("shows the compare running, and reads a malformed answer as an error", () => {
    const waiting = renderComparePage(parseComparison({ target: "net" }), { cspSource: null, comparing: true });
    expect(waiting).toContain("Lowering net with each backend…");
    expect(parseComparison(null).error).toBe("lowerd.compare gave no answer");
    expect(compareTable(parseComparison({ backends: [{ backend: "x", status: "ok" }] }))).toContain(
      '<span class="muted">none</span>',
    );
  });
});
