/**
 * The server's `lowerd.compare` answer (what `lowerd compare --json` prints: the target lowered
 * with each backend alone) read defensively, and its side-by-side table as one HTML page for the
 * webview: one column per backend. Pure: no "vscode" import, so vitest renders it.
 */

import { escapeHtml, formatSize } from "./reportHtml";

export interface NotDelegatedGroup {
  op: string;
  count: number;
  reason: string;
}

export interface BackendColumn {
  backend: string;
  display: string;
  ok: boolean;
  coveragePercent: number;
  ops: number;
  opsDelegated: number;
  partitions: number;
  notDelegated: NotDelegatedGroup[];
  pteBytes: number | null;
  seconds: number;
  cacheHits: number;
  cacheMisses: number;
  upToDate: boolean;
  error: { kind: string; message: string; file: string | null; line: number | null } | null;
}

export interface Comparison {
  target: string;
  backends: BackendColumn[];
  warnings: string[];
  /** Why nothing was compared (no project, an unknown target or backend). */
  error: string | null;
}

type Raw = Record<string, unknown>;

function isRecord(value: unknown): value is Raw {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function num(value: unknown): number {
  return typeof value === "number" && Number.isFinite(value) ? value : 0;
}

function str(value: unknown): string {
  return typeof value === "string" ? value : "";
}

function column(raw: Raw): BackendColumn {
  const cache = isRecord(raw.cache) ? raw.cache : {};
  const error = isRecord(raw.error) ? raw.error : null;
  const groups = Array.isArray(raw.not_delegated) ? raw.not_delegated.filter(isRecord) : [];
  return {
    backend: str(raw.backend),
    display: str(raw.display) || str(raw.backend),
    ok: raw.status === "ok",
    coveragePercent: num(raw.coverage_percent),
    ops: num(raw.ops),
    opsDelegated: num(raw.ops_delegated),
    partitions: num(raw.partitions),
    notDelegated: groups.map((g) => ({ op: str(g.op), count: num(g.count), reason: str(g.reason) })),
    pteBytes: typeof raw.pte_bytes === "number" ? raw.pte_bytes : null,
    seconds: num(raw.seconds),
    cacheHits: num(cache.hits),
    cacheMisses: num(cache.misses),
    upToDate: raw.reused === "up-to-date",
    error: error
      ? {
          kind: str(error.kind) || "error",
          message: str(error.message),
          file: typeof error.file === "string" ? error.file : null,
          line: typeof error.line === "number" ? error.line : null,
        }
      : null,
  };
}

export function parseComparison(raw: unknown): Comparison {
  if (!isRecord(raw)) {
    return { target: "", backends: [], warnings: [], error: "lowerd.compare gave no answer" };
  }
  const backends = Array.isArray(raw.backends) ? raw.backends.filter(isRecord).map(column) : [];
  const warnings = Array.isArray(raw.warnings) ? raw.warnings.filter((w) => typeof w === "string") : [];
  const error = typeof raw.error === "string" && raw.error ? raw.error : null;
  return { target: str(raw.target), backends, warnings, error };
}

function cacheText(column: BackendColumn): string {
  if (column.upToDate) {
    return "up to date";
  }
  const parts = [];
  if (column.cacheHits) {
    parts.push(`${column.cacheHits} hit${column.cacheHits === 1 ? "" : "s"}`);
  }
  if (column.cacheMisses) {
    parts.push(`${column.cacheMisses} miss${column.cacheMisses === 1 ? "" : "es"}`);
  }
  return parts.join(", ") || "–";
}

function coverageCell(column: BackendColumn): string {
  const percent = Math.max(0, Math.min(100, column.coveragePercent));
  return (
    `${percent} %<div class="bar" role="img" aria-label="${percent} % delegated">` +
    `<div class="fill" style="width:${percent}%"></div></div>`
  );
}

function notDelegatedCell(column: BackendColumn): string {
  if (column.notDelegated.length === 0) {
    return `<span class="muted">none</span>`;
  }
  const items = column.notDelegated.map(
    (g) => `<li title="${escapeHtml(g.reason)}">${g.count}× <code>${escapeHtml(g.op)}</code></li>`,
  );
  return `<ul>${items.join("")}</ul>`;
}

function errorCell(column: BackendColumn): string {
  const error = column.error;
  if (!error) {
    return `<span class="badge error">error</span>`;
  }
  const where = error.file ? ` <span class="muted">(${escapeHtml(error.file)}${error.line ? `:${error.line}` : ""})</span>` : "";
  return `<span class="badge error">${escapeHtml(error.kind)}</span>${where}<p class="message">${escapeHtml(error.message)}</p>`;
}

/** The rows of the table: a label, and a cell per backend (a failed backend shows its error once). */
const ROWS: [string, (column: BackendColumn) => string][] = [
  ["coverage", coverageCell],
  ["ops on backend", (c) => `${c.opsDelegated} of ${c.ops}`],
  ["partitions", (c) => String(c.partitions)],
  [".pte", (c) => (c.pteBytes === null ? "–" : formatSize(c.pteBytes))],
  ["cache", cacheText],
  ["seconds", (c) => c.seconds.toFixed(1)],
  ["not delegated", notDelegatedCell],
];

export function compareTable(comparison: Comparison): string {
  const columns = comparison.backends;
  const header = `<tr><th></th>${columns.map((c) => `<th>${escapeHtml(c.display)}</th>`).join("")}</tr>`;
  const rows = ROWS.map(([label, cell], index) => {
    const cells = columns.map((c) => {
      if (c.ok) {
        return `<td>${cell(c)}</td>`;
      }
      // A failed backend's error fills its whole column, once.
      return index === 0 ? `<td rowspan="${ROWS.length}" class="failed">${errorCell(c)}</td>` : "";
    });
    return `<tr><th>${label}</th>${cells.join("")}</tr>`;
  });
  return `<table class="compare">${header}${rows.join("")}</table>`;
}

const STYLE = `
body { font-family: var(--vscode-font-family, system-ui, sans-serif); font-size: var(--vscode-font-size, 13px);
  color: var(--vscode-foreground, #1f2328); background: var(--vscode-editor-background, #ffffff); padding: 0 20px 20px; }
h1 { font-size: 1.4em; font-weight: 600; margin: 16px 0 4px; }
.muted, .subtitle { color: var(--vscode-descriptionForeground, #656d76); }
table { border-collapse: collapse; margin: 10px 0; }
th, td { text-align: left; padding: 4px 16px 4px 0; border-bottom: 1px solid var(--vscode-panel-border, #d8dee4); vertical-align: top; }
th { font-weight: 600; }
ul { margin: 0; padding-left: 1.2em; }
.bar { width: 120px; height: 6px; background: var(--vscode-editorWidget-background, #eaeef2); border-radius: 3px; margin-top: 3px; }
.fill { height: 100%; background: var(--vscode-charts-green, #2da44e); border-radius: 3px; }
.badge { font-size: 0.85em; border-radius: 8px; padding: 1px 7px; }
.badge.error { background: var(--vscode-inputValidation-errorBackground, #ffebe9); color: var(--vscode-errorForeground, #cf222e); }
.message { white-space: pre-wrap; max-width: 40em; }
.warning { color: var(--vscode-editorWarning-foreground, #9a6700); }
`;

export interface ComparePageOptions {
  /** The webview's `cspSource`; null for a standalone file. */
  cspSource: string | null;
  /** Shown while the server compares. */
  comparing?: boolean;
}

export function renderComparePage(comparison: Comparison, options: ComparePageOptions): string {
  // No script at all; inline style attributes (the bars' widths) need 'unsafe-inline'.
  const csp = `default-src 'none'; style-src${options.cspSource ? ` ${options.cspSource}` : ""} 'unsafe-inline'`;
  const title = comparison.target ? `${escapeHtml(comparison.target)}, one backend at a time` : "lowerd compare";
  let body: string;
  if (options.comparing) {
    body = `<p class="muted">Lowering ${escapeHtml(comparison.target)} with each backend…</p>`;
  } else if (comparison.error) {
    body = `<p><span class="badge error">error</span> ${escapeHtml(comparison.error)}</p>`;
  } else {
    body = compareTable(comparison);
  }
  const warnings = comparison.warnings.map((w) => `<p class="warning">${escapeHtml(w)}</p>`).join("");
  return `<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<title>lowerd compare</title><style>${STYLE}</style></head>
<body><h1>${title}</h1><p class="subtitle">each backend lowered alone, as <code>lowerd compare</code> does</p>
${body}${warnings}</body></html>
`;
}
