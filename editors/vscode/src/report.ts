/**
 * The JSON report `lowerd.report` returns (and `lowerd build --json` prints): ReportAnswer and
 * TargetResult in docs/schema/lowerd.schema.json (generated from the server's classes), files
 * relative to the project root. Parsing is lenient: unknown fields are ignored, missing ones get empty values,
 * so a newer server never breaks an older extension.
 */

import * as path from "node:path";

export interface SourceSite {
  file: string;
  line: number;
}

/** A line of a library (absolute, e.g. in site-packages), or of the project (relative). */
export interface LibraryFrame {
  file: string;
  line: number;
  function: string | null;
}

export interface NotDelegatedOp {
  op: string;
  /** The user's innermost frame, relative to the project root. */
  file: string | null;
  line: number | null;
  reason: string;
  node: string | null;
  /** Where a library made the op (transformers' LlamaRMSNorm.forward), when not the user. */
  library: LibraryFrame | null;
  /** nn_module_stack's innermost: model.layers.0.input_layernorm. */
  modulePath: string | null;
  moduleClass: string | null;
  /** Elements the op outputs: its work left on the CPU. */
  elements: number;
}

/**
 * Not-delegated ops with one cause at one place (same op, reason and library line), repeated
 * over modules; the report lists them most costly first.
 */
export interface RefusalGroup {
  op: string;
  reason: string;
  count: number;
  file: string | null;
  line: number | null;
  library: LibraryFrame | null;
  nodes: string[];
  modulePaths: string[];
  /** The paths collapsed: model.layers.{0..3}.input_layernorm. */
  modules: string | null;
  moduleClass: string | null;
  /** Partition boundaries these ops cause: partitions that would merge if they were delegated. */
  boundaries: number;
  elements: number;
}

/** Coverage of one module path's subtree; "" is the root. */
export interface ModuleCoverage {
  /** "model.layers.*.mlp" when aggregated over repeated layers. */
  path: string;
  moduleClass: string | null;
  ops: number;
  opsDelegated: number;
  /** Module paths merged into this row: 4 for model.layers.* of 4 layers. */
  instances: number;
  /**
   * The server's percent of the row (`percent`, rounded so that 100 means every op is
   * delegated); null from an older server.
   */
  percent: number | null;
}

export interface Partition {
  backend: string;
  ops: number;
  /** "hit", "rebased", "miss", "uncached"; null before preprocess. */
  cache: string | null;
  /** [file, line, op] of each delegated op with a user source line. */
  sources: [string, number, string][];
  /** Bytes of the backend's blob and of the named data beside it; null before preprocess. */
  blobBytes: number | null;
  dataBytes: number | null;
}

/** What the .pte costs on a device (the server's `sizes`); null from an older server. */
export interface ProgramSizes {
  pteBytes: number;
  constantBytes: number;
  delegateBlobBytes: number;
  delegateDataBytes: number;
}

export interface BackendTotals {
  ops: number;
  partitions: number;
}

export interface MethodReport {
  ops: number;
  opsDelegated: number;
  coverage: number;
  /**
   * The server's percent (`coverage_percent`, rounded so that 100 means every op is delegated);
   * null from an older server.
   */
  coveragePercent: number | null;
  /**
   * The server's coverage sentence without the method's name ("231 of 271 ops on XNNPACK in
   * 42 partitions (85 %)"); null from an older server.
   */
  summary: string | null;
  /** What fixing the top refusal groups would do ("3 fixes would make this 1 partition"). */
  fixesHint: string | null;
  backends: Record<string, BackendTotals>;
  partitions: Partition[];
  notDelegated: NotDelegatedOp[];
  /** notDelegated grouped by cause and place, most costly first; [] from an older server. */
  refusals: RefusalGroup[];
  /** Coverage over the module tree, parents before children; [] from an older server. */
  modules: ModuleCoverage[];
  /** The method's memory-planned arena and the constants its plan uses; null when unknown. */
  plannedMemoryBytes: number | null;
  constantBytes: number | null;
  /**
   * The server's words for which way the method's edge generation ran ("regional (6 regions
   * from 4 templates)", "stock (2 methods)": the gate that refused); null when the report does
   * not say (a kept .pte, an older server).
   */
  edgeGeneration: string | null;
}

export interface TargetError {
  kind: string;
  message: string;
  file: string | null;
  line: number | null;
}

/** A target's coverage as the server computed it over its methods. */
export interface TargetCoverage {
  percent: number;
  /** Display names of the backends that took ops, most ops first; [] when the CPU runs all. */
  backends: string[];
}

export interface TargetResult {
  name: string;
  status: string;
  output: string | null;
  seconds: number | null;
  cache: { hits: number; misses: number; rebased: number } | null;
  methods: Record<string, MethodReport>;
  /** The server's; null for a target not built yet, or from an older server. */
  coverage: TargetCoverage | null;
  error: TargetError | null;
  entry: SourceSite | null;
  modules: Record<string, SourceSite>;
  sizes: ProgramSizes | null;
}

export interface Report {
  /**
   * Absolute project root: the folder of the report's `config` (the pyproject.toml), when the
   * server says; else the caller knows it.
   */
  root: string | null;
  targets: TargetResult[];
  /** Targets the server is rebuilding right now. */
  building: string[];
  /** A `[tool.lowerd]` config error that stops every build. */
  error: TargetError | null;
}

type Json = Record<string, unknown>;

function isObject(value: unknown): value is Json {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function asString(value: unknown, fallback = ""): string {
  return typeof value === "string" ? value : fallback;
}

function asNumber(value: unknown, fallback = 0): number {
  return typeof value === "number" && Number.isFinite(value) ? value : fallback;
}

function asNullableString(value: unknown): string | null {
  return typeof value === "string" ? value : null;
}

function asNullableNumber(value: unknown): number | null {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

function asArray(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

function asRecord(value: unknown): Json {
  return isObject(value) ? value : {};
}

function parseSite(value: unknown): SourceSite | null {
  if (!isObject(value) || typeof value.file !== "string") {
    return null;
  }
  return { file: value.file, line: asNumber(value.line, 1) };
}

function parseFrame(value: unknown): LibraryFrame | null {
  if (!isObject(value) || typeof value.file !== "string") {
    return null;
  }
  return { file: value.file, line: asNumber(value.line, 1), function: asNullableString(value.function) };
}

function asStrings(value: unknown): string[] {
  return asArray(value).filter((item): item is string => typeof item === "string");
}

function parseNotDelegated(value: unknown): NotDelegatedOp {
  const raw = asRecord(value);
  return {
    op: asString(raw.op, "?"),
    file: asNullableString(raw.file),
    line: asNullableNumber(raw.line),
    reason: asString(raw.reason),
    node: asNullableString(raw.node),
    library: parseFrame(raw.library),
    modulePath: asNullableString(raw.module_path),
    moduleClass: asNullableString(raw.module_class),
    elements: asNumber(raw.elements),
  };
}

function parseRefusal(value: unknown): RefusalGroup {
  const raw = asRecord(value);
  return {
    op: asString(raw.op, "?"),
    reason: asString(raw.reason),
    count: asNumber(raw.count),
    file: asNullableString(raw.file),
    line: asNullableNumber(raw.line),
    library: parseFrame(raw.library),
    nodes: asStrings(raw.nodes),
    modulePaths: asStrings(raw.module_paths),
    modules: asNullableString(raw.modules),
    moduleClass: asNullableString(raw.module_class),
    boundaries: asNumber(raw.boundaries),
    elements: asNumber(raw.elements),
  };
}

function parseModule(value: unknown): ModuleCoverage {
  const raw = asRecord(value);
  return {
    path: asString(raw.path),
    moduleClass: asNullableString(raw.module_class),
    ops: asNumber(raw.ops),
    opsDelegated: asNumber(raw.ops_delegated),
    instances: asNumber(raw.instances, 1),
    percent: asNullableNumber(raw.percent),
  };
}

function parseSource(value: unknown): [string, number, string] | null {
  const [file, line, op] = asArray(value);
  if (typeof file !== "string" || typeof line !== "number") {
    return null;
  }
  return [file, line, asString(op)];
}

function parsePartition(value: unknown): Partition {
  const raw = asRecord(value);
  return {
    backend: asString(raw.backend, "?"),
    ops: asNumber(raw.ops),
    cache: asNullableString(raw.cache),
    sources: asArray(raw.sources)
      .map(parseSource)
      .filter((source): source is [string, number, string] => source !== null),
    blobBytes: asNullableNumber(raw.blob_bytes),
    dataBytes: asNullableNumber(raw.data_bytes),
  };
}

function parseSizes(value: unknown): ProgramSizes | null {
  if (!isObject(value) || typeof value.pte_bytes !== "number") {
    return null;
  }
  return {
    pteBytes: value.pte_bytes,
    constantBytes: asNumber(value.constant_bytes),
    delegateBlobBytes: asNumber(value.delegate_blob_bytes),
    delegateDataBytes: asNumber(value.delegate_data_bytes),
  };
}

function parseBackends(value: unknown): Record<string, BackendTotals> {
  const backends: Record<string, BackendTotals> = {};
  for (const [name, totals] of Object.entries(asRecord(value))) {
    const raw = asRecord(totals);
    backends[name] = { ops: asNumber(raw.ops), partitions: asNumber(raw.partitions) };
  }
  return backends;
}

export function parseMethod(value: unknown): MethodReport {
  const raw = asRecord(value);
  return {
    ops: asNumber(raw.ops),
    opsDelegated: asNumber(raw.ops_delegated),
    coverage: asNumber(raw.coverage),
    coveragePercent: asNullableNumber(raw.coverage_percent),
    summary: asNullableString(raw.summary),
    fixesHint: asNullableString(raw.fixes_hint),
    backends: parseBackends(raw.backends),
    partitions: asArray(raw.partitions).map(parsePartition),
    notDelegated: asArray(raw.not_delegated).map(parseNotDelegated),
    refusals: asArray(raw.refusals).map(parseRefusal),
    modules: asArray(raw.modules).map(parseModule),
    plannedMemoryBytes: asNullableNumber(raw.planned_memory_bytes),
    constantBytes: asNullableNumber(raw.constant_bytes),
    edgeGeneration: asNullableString(asRecord(raw.edge_generation).words),
  };
}

function parseError(value: unknown): TargetError | null {
  if (!isObject(value)) {
    return null;
  }
  return {
    kind: asString(value.kind, "error"),
    message: asString(value.message, "failed"),
    file: asNullableString(value.file),
    line: asNullableNumber(value.line),
  };
}

function parseCoverage(value: unknown): TargetCoverage | null {
  if (!isObject(value) || typeof value.percent !== "number" || !Number.isFinite(value.percent)) {
    return null;
  }
  return { percent: value.percent, backends: asStrings(value.backends) };
}

function parseCache(value: unknown): TargetResult["cache"] {
  if (!isObject(value)) {
    return null;
  }
  return {
    hits: asNumber(value.hits),
    misses: asNumber(value.misses),
    rebased: asNumber(value.rebased),
  };
}

export function parseTarget(value: unknown): TargetResult {
  const raw = asRecord(value);
  const methods: Record<string, MethodReport> = {};
  for (const [name, method] of Object.entries(asRecord(raw.methods))) {
    methods[name] = parseMethod(method);
  }
  const modules: Record<string, SourceSite> = {};
  for (const [name, site] of Object.entries(asRecord(raw.modules))) {
    const parsed = parseSite(site);
    if (parsed) {
      modules[name] = parsed;
    }
  }
  return {
    name: asString(raw.name, "?"),
    status: asString(raw.status, "unknown"),
    output: asNullableString(raw.output),
    seconds: asNullableNumber(raw.seconds),
    cache: parseCache(raw.cache),
    methods,
    coverage: parseCoverage(raw.coverage),
    error: parseError(raw.error),
    entry: parseSite(raw.entry),
    modules,
    sizes: parseSizes(raw.sizes),
  };
}

function rootOf(raw: Json): string | null {
  const root = asNullableString(raw.root);
  if (root !== null) {
    return root;
  }
  const config = asNullableString(raw.config);
  return config === null ? null : path.dirname(config);
}

/**
 * A report from the server's `lowerd.report` answer ({config, error, targets, building}) or from
 * `lowerd build --json`; an unusable answer is an empty report.
 */
export function parseReport(value: unknown): Report {
  const raw = asRecord(value);
  return {
    root: rootOf(raw),
    targets: asArray(raw.targets).map(parseTarget),
    building: asArray(raw.building).filter((name): name is string => typeof name === "string"),
    error: parseError(raw.error),
  };
}

/** A target the server knows of but has not built yet (`{"name": ...}` only). */
export function isBuilt(target: TargetResult): boolean {
  return target.status === "ok" || target.status === "error";
}

export function isFailed(target: TargetResult): boolean {
  return target.status === "error";
}
