/**
 * The delegation report as one HTML page, for the webview: per target, per method, a backend
 * table and the ops left on the CPU, each linking to its source line. Pure: the page posts
 * `{type: "open", file, line}` to the extension when a link is clicked, and works (without the
 * links) as a plain file too, which is how the README's screenshot is made.
 */

import * as path from "node:path";

import { methodLine } from "./coverage";
import {
  isBuilt,
  type LibraryFrame,
  type MethodReport,
  type ModuleCoverage,
  type NotDelegatedOp,
  type RefusalGroup,
  type Report,
  type TargetResult,
} from "./report";

export interface PageOptions {
  /** The webview's `cspSource`; null for a standalone file. */
  cspSource: string | null;
  /** A fresh random nonce for the page's one script. */
  nonce: string;
  /** Shown in the heading: the project root. */
  projectName: string;
  /** Shown while the server builds. */
  building?: string | undefined;
  /** A target to scroll to. */
  focus?: string | undefined;
  /** Within it, the op rows made at this line of this file (relative to the root) to mark. */
  focusSource?: { file: string; line: number } | undefined;
}

export function escapeHtml(text: string): string {
  return text
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

function sourceLink(file: string | null, line: number | null): string {
  if (!file) {
    return `<span class="muted">(no source line)</span>`;
  }
  const label = escapeHtml(line ? `${file}:${line}` : file);
  return (
    `<a class="source" href="#" data-file="${escapeHtml(file)}" data-line="${line ?? 1}">` +
    `${label}</a>`
  );
}

const CACHE_WORDS: Record<string, string> = {
  hit: "cache hit",
  rebased: "cache hit (rebased)",
  miss: "cache miss",
  uncached: "not cached",
};

/** The server's percent as a bar; none from an older server that sends no percent. */
function coverageBar(method: MethodReport): string {
  if (method.coveragePercent === null) {
    return "";
  }
  const percent = Math.max(0, Math.min(100, method.coveragePercent));
  return (
    `<div class="bar" role="img" aria-label="${percent} % delegated">` +
    `<div class="fill" style="width:${percent}%"></div></div>`
  );
}

/** A byte count as the CLI writes it (cache/location.py format_size): "512 B", "1.5 MiB". */
export function formatSize(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (unit < units.length - 1 && Math.round(value * 10) / 10 >= 1024) {
    value /= 1024;
    unit += 1;
  }
  return `${Number(value.toFixed(1))} ${units[unit]}`;
}

/** The summed bytes of the partitions' blobs (and weights); "–" when none is known. */
function bytesOf(values: (number | null)[]): string {
  const known = values.filter((value): value is number => value !== null);
  return known.length ? formatSize(known.reduce((sum, value) => sum + value, 0)) : "–";
}

function backendTable(method: MethodReport): string {
  const cpu = method.ops - method.opsDelegated;
  const rows = Object.entries(method.backends)
    .filter(([, totals]) => totals.ops > 0 || totals.partitions > 0)
    .map(([backend, totals]) => {
      const hits = method.partitions.filter((p) => p.backend === backend);
      const cache = summarizeCache(hits.map((p) => p.cache));
      return (
        `<tr><td>${escapeHtml(backend)}</td><td class="num">${totals.ops}</td>` +
        `<td class="num">${totals.partitions}</td>` +
        `<td class="num">${bytesOf(hits.map((p) => p.blobBytes))}</td>` +
        `<td class="num">${bytesOf(hits.map((p) => p.dataBytes))}</td>` +
        `<td>${escapeHtml(cache)}</td></tr>`
      );
    });
  rows.push(
    `<tr class="cpu"><td>portable CPU</td><td class="num">${cpu}</td><td class="num">–</td>` +
      `<td class="num"></td><td class="num"></td><td></td></tr>`,
  );
  return (
    `<table class="backends"><thead><tr><th>backend</th><th class="num">ops</th>` +
    `<th class="num">partitions</th><th class="num">blobs</th><th class="num">weights</th>` +
    `<th>cache</th></tr></thead><tbody>${rows.join("")}</tbody></table>`
  );
}

/** "planned memory 192 B · constants 0 B": what the method costs a device at run time. */
function memoryLine(method: MethodReport): string {
  const parts: string[] = [];
  if (method.plannedMemoryBytes !== null) {
    parts.push(`planned memory ${formatSize(method.plannedMemoryBytes)}`);
  }
  if (method.constantBytes !== null) {
    parts.push(`constants ${formatSize(method.constantBytes)}`);
  }
  return parts.length ? `<p class="memory muted">${parts.join(" · ")}</p>` : "";
}

/** "edge generation: stock (2 methods)": why the method's lowering costs what it does. */
function edgeGenerationLine(method: MethodReport): string {
  const words = method.edgeGeneration;
  return words ? `<p class="edge muted">edge generation: ${escapeHtml(words)}</p>` : "";
}

function summarizeCache(outcomes: (string | null)[]): string {
  const counts = new Map<string, number>();
  for (const outcome of outcomes) {
    const word = outcome === null ? "not preprocessed" : (CACHE_WORDS[outcome] ?? outcome);
    counts.set(word, (counts.get(word) ?? 0) + 1);
  }
  return [...counts.entries()].map(([word, n]) => `${n} ${word}`).join(", ");
}

/** `LlamaRMSNorm` of `transformers.models.llama.modeling_llama.LlamaRMSNorm`. */
function shortClass(name: string | null): string | null {
  return name ? (name.split(".").pop() ?? name) : null;
}

/**
 * Where a library made an op: `LlamaRMSNorm.forward` and a link to its line (the file is
 * absolute when in site-packages; the link opens it).
 */
function madeIn(library: LibraryFrame | null, moduleClass: string | null): string {
  if (!library) {
    return "";
  }
  const cls = shortClass(moduleClass);
  const fn = library.function === "forward" && cls ? `${cls}.forward` : library.function;
  const label = escapeHtml(`${path.basename(library.file)}:${library.line}`);
  const link =
    `<a class="source" href="#" title="${escapeHtml(library.file)}" ` +
    `data-file="${escapeHtml(library.file)}" data-line="${library.line}">${label}</a>`;
  return fn ? `<code>${escapeHtml(fn)}</code> ${link}` : link;
}

function moduleCell(modules: string | null, moduleClass: string | null): string {
  const cls = shortClass(moduleClass);
  const parts = [modules ? `<code>${escapeHtml(modules)}</code>` : "", cls ? `<span class="muted">${escapeHtml(cls)}</span>` : ""];
  return parts.filter(Boolean).join(" ");
}

function times(op: string, count: number): string {
  return `<code>${escapeHtml(op)}</code>${count === 1 ? "" : ` ×${count}`}`;
}

function notDelegatedTable(ops: NotDelegatedOp[]): string {
  if (ops.length === 0) {
    return `<p class="all-delegated">Every op is delegated.</p>`;
  }
  const located = ops.some((op) => op.library !== null || op.modulePath !== null);
  const rows = ops.map(
    (op) =>
      `<tr><td><code>${escapeHtml(op.op)}</code></td><td>${sourceLink(op.file, op.line)}</td>` +
      (located
        ? `<td>${madeIn(op.library, op.moduleClass)}</td><td>${moduleCell(op.modulePath, op.moduleClass)}</td>`
        : "") +
      `<td>${escapeHtml(op.reason)}</td></tr>`,
  );
  const more = located ? `<th>made in</th><th>module</th>` : "";
  return (
    `<table class="refused"><thead><tr><th>not delegated</th><th>at</th>${more}<th>why</th></tr></thead>` +
    `<tbody>${rows.join("")}</tbody></table>`
  );
}

/** The ops left on the CPU by cause, most costly first, as the server ranked them. */
function refusalsTable(groups: RefusalGroup[]): string {
  const rows = groups.map(
    (group, index) =>
      `<tr><td class="num">${index + 1}</td><td>${times(group.op, group.count)}</td>` +
      `<td>${sourceLink(group.file, group.line)}</td><td>${madeIn(group.library, group.moduleClass)}</td>` +
      `<td>${moduleCell(group.modules, group.moduleClass)}</td>` +
      `<td class="num">${group.boundaries}</td><td>${escapeHtml(group.reason)}</td></tr>`,
  );
  return (
    `<table class="refusals"><thead><tr><th class="num">#</th><th>not delegated</th><th>at</th>` +
    `<th>made in</th><th>modules</th>` +
    `<th class="num" title="partition boundaries these ops cause">splits</th><th>why</th></tr></thead>` +
    `<tbody>${rows.join("")}</tbody></table>`
  );
}

const MODULES_OPEN = 40;

/** How many of the listed paths are ancestors of `modulePath` ("" is everyone's). */
function depthAmong(modulePath: string, listed: Set<string>): number {
  if (modulePath === "") {
    return 0;
  }
  const parts = modulePath.split(".");
  let depth = listed.has("") ? 1 : 0;
  for (let end = 1; end < parts.length; end++) {
    depth += listed.has(parts.slice(0, end).join(".")) ? 1 : 0;
  }
  return depth;
}

/** Coverage per module path, parents before children, each indented under its listed parents. */
function modulesTable(modules: ModuleCoverage[]): string {
  const listed = new Set(modules.map((module) => module.path));
  const rows = modules.map((module) => {
    const depth = depthAmong(module.path, listed);
    const name = module.path === "" ? "(model)" : module.path;
    // The server's percent of the row, shown as sent: 100 only when every op is delegated.
    const percent = module.percent === null ? null : Math.max(0, Math.min(100, module.percent));
    const bar =
      percent === null
        ? ""
        : `<div class="bar small"><div class="fill" style="width:${percent}%"></div></div>`;
    return (
      `<tr${percent === 100 ? ` class="full"` : ""}><td style="padding-left:${depth}em"><code>${escapeHtml(name)}</code></td>` +
      `<td>${escapeHtml(shortClass(module.moduleClass) ?? "")}${module.instances > 1 ? ` ×${module.instances}` : ""}</td>` +
      `<td class="num">${module.opsDelegated} of ${module.ops}</td>` +
      `<td class="num">${percent === null ? "" : `${percent} %`}</td><td>${bar}</td></tr>`
    );
  });
  return (
    `<details class="modules"${modules.length <= MODULES_OPEN ? " open" : ""}>` +
    `<summary>Coverage per module (${modules.length})</summary>` +
    `<table class="modules"><thead><tr><th>module</th><th>class</th><th class="num">delegated</th>` +
    `<th class="num"></th><th></th></tr></thead><tbody>${rows.join("")}</tbody></table></details>`
  );
}

function refusedSection(method: MethodReport): string {
  if (method.refusals.length === 0 || method.notDelegated.length === 0) {
    return notDelegatedTable(method.notDelegated);
  }
  return (
    refusalsTable(method.refusals) +
    `<details class="every-op"><summary>Every op left on the CPU (${method.notDelegated.length})</summary>` +
    `${notDelegatedTable(method.notDelegated)}</details>`
  );
}

function methodSection(name: string, method: MethodReport): string {
  const hint = method.fixesHint;
  return (
    `<section class="method"><h3>${escapeHtml(methodLine(name, method))}</h3>` +
    coverageBar(method) +
    (hint ? `<p class="fixes">${escapeHtml(hint)}</p>` : "") +
    memoryLine(method) +
    edgeGenerationLine(method) +
    backendTable(method) +
    refusedSection(method) +
    (method.modules.length > 0 ? modulesTable(method.modules) : "") +
    `</section>`
  );
}

/** The .pte's path relative to the project root when it is inside it. */
function displayPath(file: string, root: string | null): string {
  if (root === null) {
    return file;
  }
  const relative = path.relative(root, file);
  return relative.startsWith("..") || path.isAbsolute(relative) ? file : relative;
}

function targetFacts(target: TargetResult, root: string | null): string {
  const facts: string[] = [];
  if (target.output) {
    facts.push(`<code>${escapeHtml(displayPath(target.output, root))}</code>`);
  }
  if (target.seconds !== null) {
    facts.push(`${target.seconds.toFixed(1)} s`);
  }
  if (target.cache) {
    facts.push(`cache ${target.cache.hits} hit / ${target.cache.misses} miss`);
  }
  if (target.entry) {
    facts.push(`entry ${sourceLink(target.entry.file, target.entry.line)}`);
  }
  const sizes = target.sizes;
  if (sizes) {
    const parts = [`constants ${formatSize(sizes.constantBytes)}`];
    if (sizes.delegateBlobBytes) {
      parts.push(`delegate blobs ${formatSize(sizes.delegateBlobBytes)}`);
    }
    if (sizes.delegateDataBytes) {
      parts.push(`delegate weights ${formatSize(sizes.delegateDataBytes)}`);
    }
    facts.push(`<span class="sizes">.pte ${formatSize(sizes.pteBytes)} (${parts.join(", ")})</span>`);
  }
  return facts.length ? `<p class="facts">${facts.join(" · ")}</p>` : "";
}

function badgeOf(target: TargetResult, building: boolean): string {
  if (building) {
    return `<span class="badge pending">building</span>`;
  }
  if (!isBuilt(target)) {
    return `<span class="badge pending">not built yet</span>`;
  }
  if (target.status === "error") {
    return `<span class="badge error">${escapeHtml(target.error?.kind ?? "error")}</span>`;
  }
  return `<span class="badge ok">${escapeHtml(target.status)}</span>`;
}

function targetSection(target: TargetResult, building: boolean, root: string | null): string {
  const badge = badgeOf(target, building);
  let body: string;
  if (!isBuilt(target)) {
    body = "";
  } else if (target.status === "error") {
    const error = target.error;
    body =
      `<div class="error-box"><p class="message">${escapeHtml(error?.message ?? "failed")}</p>` +
      `<p>at ${sourceLink(error?.file ?? target.entry?.file ?? null, error?.line ?? target.entry?.line ?? null)}</p></div>`;
  } else {
    const methods = Object.entries(target.methods);
    body = methods.length
      ? methods.map(([name, method]) => methodSection(name, method)).join("")
      : `<p class="muted">No methods reported.</p>`;
  }
  return (
    `<section class="target" id="target-${escapeHtml(target.name)}">` +
    `<h2>${escapeHtml(target.name)} ${badge}</h2>${targetFacts(target, root)}${body}</section>`
  );
}

const STYLE = `
body { font-family: var(--vscode-font-family, system-ui, sans-serif); font-size: var(--vscode-font-size, 13px);
  color: var(--vscode-foreground, #1f2328); background: var(--vscode-editor-background, #ffffff); padding: 0 20px 20px; }
h1 { font-size: 1.4em; font-weight: 600; margin: 16px 0 4px; }
h2 { font-size: 1.2em; margin: 0 0 4px; }
h3 { font-size: 1em; font-weight: 600; margin: 12px 0 6px; }
.target { border: 1px solid var(--vscode-panel-border, #d0d7de); border-radius: 6px; padding: 12px 16px; margin: 14px 0; }
.facts, .muted, .subtitle { color: var(--vscode-descriptionForeground, #656d76); }
.facts { margin: 0 0 6px; }
table { border-collapse: collapse; margin: 6px 0 10px; }
th, td { text-align: left; padding: 3px 12px 3px 0; border-bottom: 1px solid var(--vscode-panel-border, #d8dee4); vertical-align: top; }
th { font-weight: 600; }
td.num, th.num { text-align: right; }
tr.cpu td { color: var(--vscode-descriptionForeground, #656d76); }
code { font-family: var(--vscode-editor-font-family, ui-monospace, monospace); }
a.source { color: var(--vscode-textLink-foreground, #0969da); text-decoration: none; }
a.source:hover { text-decoration: underline; }
.badge { font-size: 0.75em; font-weight: 600; padding: 1px 7px; border-radius: 10px; vertical-align: middle; }
.badge.ok { background: #1a7f37; color: #fff; }
.badge.error { background: var(--vscode-errorForeground, #cf222e); color: #fff; }
.badge.pending { background: var(--vscode-badge-background, #6e7781); color: var(--vscode-badge-foreground, #fff); }
.message { white-space: pre-wrap; }
.error-box { border-left: 3px solid var(--vscode-errorForeground, #cf222e); padding: 2px 10px; }
.bar { height: 8px; width: 320px; background: var(--vscode-editorWidget-background, #eaeef2); border-radius: 4px; overflow: hidden; }
.fill { height: 100%; background: var(--vscode-charts-green, #2da44e); }
.bar.small { width: 120px; height: 6px; margin-top: 5px; }
.fixes { color: var(--vscode-charts-blue, #0969da); margin: 6px 0; }
details { margin: 6px 0 10px; }
summary { cursor: pointer; font-weight: 600; }
tr.full td { color: var(--vscode-descriptionForeground, #656d76); }
tr.focused td { background: var(--vscode-editor-findMatchHighlightBackground, #fff8c5); }
.building { color: var(--vscode-charts-blue, #0969da); }
.all-delegated { color: var(--vscode-charts-green, #1a7f37); }
`;

const SCRIPT = `
const vscode = typeof acquireVsCodeApi === "function" ? acquireVsCodeApi() : undefined;
const focus = document.body.dataset.focus;
const section = focus ? document.getElementById("target-" + focus) : null;
section?.scrollIntoView();
const { focusFile, focusLine } = document.body.dataset;
if (section && focusFile && focusLine) {
  const links = [...section.querySelectorAll("a.source")].filter(
    (link) => link.dataset.file === focusFile && link.dataset.line === focusLine,
  );
  for (const link of links) link.closest("tr")?.classList.add("focused");
  links[0]?.scrollIntoView({ block: "center" });
}
document.addEventListener("click", (event) => {
  const link = event.target instanceof Element ? event.target.closest("a.source") : null;
  if (!link) return;
  event.preventDefault();
  if (vscode) vscode.postMessage({ type: "open", file: link.dataset.file, line: Number(link.dataset.line) });
});
`;

function bodyData(options: PageOptions): string {
  const data = [];
  if (options.focus) {
    data.push(` data-focus="${escapeHtml(options.focus)}"`);
  }
  if (options.focusSource) {
    data.push(` data-focus-file="${escapeHtml(options.focusSource.file)}"`);
    data.push(` data-focus-line="${options.focusSource.line}"`);
  }
  return data.join("");
}

export function renderReportPage(report: Report, options: PageOptions): string {
  const csp = [
    "default-src 'none'",
    // Inline style attributes (the coverage bars' widths) need 'unsafe-inline', which a nonce
    // in the same directive would switch off; scripts run only with the nonce.
    `style-src${options.cspSource ? ` ${options.cspSource}` : ""} 'unsafe-inline'`,
    `script-src 'nonce-${options.nonce}'`,
  ].join("; ");
  const building = options.building
    ? `<p class="building">Building: ${escapeHtml(options.building)}</p>`
    : "";
  const configError = report.error
    ? `<section class="target"><h2>[tool.lowerd] <span class="badge error">config-error</span></h2>` +
      `<div class="error-box"><p class="message">${escapeHtml(report.error.message)}</p>` +
      `<p>at ${sourceLink(report.error.file ?? "pyproject.toml", report.error.line)}</p></div></section>`
    : "";
  const targets = report.targets.length
    ? report.targets
        .map((target) => targetSection(target, report.building.includes(target.name), report.root))
        .join("")
    : `<p class="muted">No build yet: save a Python file of the project, or run “lowerd: Build all targets”.</p>`;
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>lowerd report</title><style>${STYLE}</style></head>
<body${bodyData(options)}><h1>lowerd delegation report</h1><p class="subtitle">${escapeHtml(options.projectName)}</p>
${building}${configError}${targets}
<script nonce="${options.nonce}">${SCRIPT}</script></body></html>
`;
}
