/**
 * Is lowerd importable by an interpreter? Runs it once, without VS Code, so the answer can be
 * shown as a clear message with an install action instead of a server that dies at start.
 */

import { execFile } from "node:child_process";

import type { Interpreter } from "./interpreter";

export type Probe =
  | { ok: true; version: string }
  | { ok: false; reason: "interpreter-not-found" | "not-installed" | "failed"; detail: string };

// The server needs the daemon package and its LSP dependency, not only the CLI.
const PROBE_SCRIPT = "import lowerd, lowerd.daemon, pygls; print(lowerd.__version__)";

export function probeLowerd(interpreter: Interpreter, cwd?: string, timeoutMs = 20_000): Promise<Probe> {
  const [command, ...prefix] = interpreter.command;
  return new Promise((resolve) => {
    execFile(
      command,
      [...prefix, "-c", PROBE_SCRIPT],
      { cwd, timeout: timeoutMs, windowsHide: true },
      (error, stdout, stderr) => {
        if (!error) {
          resolve({ ok: true, version: stdout.trim() });
          return;
        }
        const code = (error as NodeJS.ErrnoException).code;
        if (code === "ENOENT" || code === "EACCES") {
          resolve({ ok: false, reason: "interpreter-not-found", detail: `${command}: ${error.message}` });
          return;
        }
        const lastLine = stderr.trim().split("\n").pop() ?? error.message;
        const missing = /ModuleNotFoundError|ImportError/.test(stderr);
        resolve({ ok: false, reason: missing ? "not-installed" : "failed", detail: lastLine });
      },
    );
  });
}

export function probeMessage(probe: Probe, interpreterText: string): string | undefined {
  if (probe.ok) {
    return undefined;
  }
  switch (probe.reason) {
    case "interpreter-not-found":
      return `lowerd: the Python interpreter ${interpreterText} was not found.`;
    case "not-installed":
      return `lowerd is not installed for ${interpreterText} (${probe.detail}).`;
    case "failed":
      return `lowerd could not be imported by ${interpreterText}: ${probe.detail}`;
  }
}
