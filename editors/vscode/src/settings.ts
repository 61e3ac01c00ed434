/**
 * The `lowerd.*` settings and what the server is told of them: as initializationOptions at start
 * and as `workspace/didChangeConfiguration` (section "lowerd") when they change.
 */

export type Severity = "warning" | "information" | "hint";

export interface ServerSettings {
  notDelegatedSeverity: Severity;
  /** Backends instead of `[tool.lowerd] backends`; empty: the project's own. */
  backends: string[];
  /** Seconds; null: the project's `timeout`. */
  workerTimeout: number | null;
  /** MB; null: no limit. */
  workerMemoryLimit: number | null;
  workers: number | null;
  /** `→ XNNPACK #2` / `→ CPU` at the end of each line that made ops. */
  inlayHints: boolean;
}

/** Reads one `lowerd.<key>` setting (vscode.WorkspaceConfiguration.get in the extension). */
export type SettingReader = (key: string) => unknown;

const SEVERITIES: readonly Severity[] = ["warning", "information", "hint"];

function positiveNumber(value: unknown): number | null {
  return typeof value === "number" && Number.isFinite(value) && value > 0 ? value : null;
}

export function readServerSettings(read: SettingReader): ServerSettings {
  const severity = read("notDelegatedSeverity");
  const backends = read("backends");
  return {
    notDelegatedSeverity: SEVERITIES.includes(severity as Severity)
      ? (severity as Severity)
      : "warning",
    backends: Array.isArray(backends)
      ? backends.filter((b): b is string => typeof b === "string" && b.trim() !== "")
      : [],
    workerTimeout: positiveNumber(read("workerTimeout")),
    workerMemoryLimit: positiveNumber(read("workerMemoryLimit")),
    workers: positiveNumber(read("workers")),
    inlayHints: read("inlayHints") !== false,
  };
}

/**
 * The settings as the server reads them (daemon/settings.py). Unset limits are sent as null,
 * which puts the server back on its default; an empty backend override is left out.
 */
export function initializationOptions(settings: ServerSettings): Record<string, unknown> {
  const options: Record<string, unknown> = {
    notDelegatedSeverity: settings.notDelegatedSeverity,
    workerTimeout: settings.workerTimeout,
    workerMemoryLimit: settings.workerMemoryLimit,
    workers: settings.workers,
    inlayHints: settings.inlayHints,
  };
  if (settings.backends.length > 0) {
    options.backends = settings.backends;
  }
  return options;
}

/** Settings whose change needs a new server process rather than a didChangeConfiguration. */
export const RESTART_SETTINGS = ["lowerd.interpreter", "lowerd.workers"] as const;
