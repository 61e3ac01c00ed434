/**
 * Which targets a file touches, and the coverage the server computed for them: the server
 * words each method's sentence, percent and fixes hint and each target's percent; the
 * extension only shows them.
 */

import * as path from "node:path";

import type { MethodReport, Report, TargetResult } from "./report";

/** A report's file (relative to the root, or absolute) as an absolute, normalized path. */
export function absolutePath(root: string, file: string): string {
  return path.resolve(root, file);
}

export function samePath(a: string, b: string): boolean {
  const normalize = (p: string): string => path.normalize(p).replace(/[\\/]+$/, "");
  return normalize(a) === normalize(b);
}

/** Every file a target points at: its entry, its modules, its ops' lines, its error. */
export function filesOf(target: TargetResult): string[] {
  const files = new Set<string>();
  const add = (file: string | null | undefined): void => {
    if (file) {
      files.add(file);
    }
  };
  add(target.entry?.file);
  add(target.error?.file);
  for (const site of Object.values(target.modules)) {
    add(site.file);
  }
  for (const method of Object.values(target.methods)) {
    for (const op of method.notDelegated) {
      add(op.file);
    }
    for (const partition of method.partitions) {
      for (const [file] of partition.sources) {
        add(file);
      }
    }
  }
  return [...files];
}

/**
 * The targets whose report points at `file`. The project's pyproject.toml touches them all,
 * since it declares them.
 */
export function targetsTouching(report: Report, root: string, file: string): TargetResult[] {
  if (samePath(file, path.join(root, "pyproject.toml"))) {
    return report.targets;
  }
  return report.targets.filter((target) =>
    filesOf(target).some((candidate) => samePath(absolutePath(root, candidate), file)),
  );
}

/**
 * "forward: 231 of 271 ops on XNNPACK in 42 partitions (85 %)": the method's name and the
 * server's sentence; the name alone from an older server that sends none.
 */
export function methodLine(name: string, method: MethodReport): string {
  return method.summary ? `${name}: ${method.summary}` : name;
}

/**
 * The built target with the lowest coverage the server sent, the first of equals; null when
 * none has any (not built, failed, or an older server).
 */
export function lowestCoverage(targets: TargetResult[]): TargetResult | null {
  let lowest: TargetResult | null = null;
  for (const target of targets) {
    if (target.status !== "ok" || !target.coverage) {
      continue;
    }
    if (!lowest?.coverage || target.coverage.percent < lowest.coverage.percent) {
      lowest = target;
    }
  }
  return lowest;
}
