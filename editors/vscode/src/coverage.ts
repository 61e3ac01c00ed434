/**
 * Coverage arithmetic over report targets: which targets a file touches, and how much of their
 * ops run on a delegate. Percentages are rounded down, as the server's code lenses do, so that
 * "100 %" means every op is delegated.
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

export interface Coverage {
  ops: number;
  delegated: number;
  /** 0..100, rounded down; 100 only when every op is delegated. */
  percent: number;
  /** Backends that took ops, most ops first. */
  backends: string[];
}

export function percentOf(delegated: number, ops: number): number {
  if (ops <= 0 || delegated >= ops) {
    return ops <= 0 ? 0 : 100;
  }
  return Math.floor((delegated / ops) * 100);
}

export function coverageOf(methods: MethodReport[]): Coverage {
  let ops = 0;
  let delegated = 0;
  const perBackend = new Map<string, number>();
  for (const method of methods) {
    ops += method.ops;
    delegated += method.opsDelegated;
    for (const [backend, totals] of Object.entries(method.backends)) {
      if (totals.ops > 0) {
        perBackend.set(backend, (perBackend.get(backend) ?? 0) + totals.ops);
      }
    }
  }
  const backends = [...perBackend.entries()]
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([backend]) => backend);
  return { ops, delegated, percent: percentOf(delegated, ops), backends };
}

export function methodsOf(targets: TargetResult[]): MethodReport[] {
  return targets.flatMap((target) => Object.values(target.methods));
}

function plural(count: number, noun: string): string {
  return count === 1 ? `${count} ${noun}` : `${count} ${noun}s`;
}

/**
 * "forward: 231 of 271 ops on XNNPACK in 42 partitions (85 %)", the wording of the server's
 * code lens (daemon/diagnostics.py coverage_summary).
 */
export function methodSummary(name: string, method: MethodReport): string {
  const percent = percentOf(method.opsDelegated, method.ops);
  const backends = Object.entries(method.backends).filter(([, totals]) => totals.ops > 0);
  if (backends.length === 0) {
    return `${name}: 0 of ${method.ops} ops delegated (0 %)`;
  }
  const [only] = backends;
  if (backends.length === 1 && only) {
    const [backend, totals] = only;
    const where = `on ${backend} in ${plural(totals.partitions, "partition")}`;
    return `${name}: ${method.opsDelegated} of ${method.ops} ops ${where} (${percent} %)`;
  }
  const each = backends
    .map(([backend, t]) => `${t.ops} on ${backend} in ${plural(t.partitions, "partition")}`)
    .join(", ");
  return `${name}: ${method.opsDelegated} of ${method.ops} ops delegated (${each}; ${percent} %)`;
}

export function partitionCount(method: MethodReport): number {
  return Object.values(method.backends).reduce((sum, totals) => sum + totals.partitions, 0);
}

/** When leaving the fewest partitions takes more fixes than this, the hint says what the first do. */
export const EARLY_FIXES = 5;

/**
 * Partitions left after fixing the top 1, 2, … refusal groups: the server's count
 * (`partitions_if_fixed`), else each group's boundaries taken off in turn.
 */
export function partitionsAfterFixes(method: MethodReport): number[] {
  if (method.partitionsIfFixed) {
    return method.partitionsIfFixed;
  }
  let left = partitionCount(method);
  return method.refusals.map((group) => (left = Math.max(1, left - group.boundaries)));
}

function fixes(count: number): string {
  return count === 1 ? "1 fix" : `${count} fixes`;
}

/**
 * "3 fixes would make this 1 partition": how many of the top refusal groups (in the report's
 * order) must be delegated to leave the fewest partitions, and when that takes more than
 * EARLY_FIXES, what the first ones do ("4 fixes would make this 6 partitions, 34 would make 1");
 * the wording of the server's coverage lens (daemon/diagnostics.py fixes_hint). null when no fix
 * would merge partitions.
 */
export function fixesHint(method: MethodReport): string | null {
  const current = partitionCount(method);
  const after = partitionsAfterFixes(method);
  if (current <= 1 || after.length === 0 || Math.min(...after) >= current) {
    return null;
  }
  const fewest = Math.min(...after);
  const count = after.indexOf(fewest) + 1;
  const early = Math.min(...after.slice(0, EARLY_FIXES));
  if (count > EARLY_FIXES && early < current) {
    const first = after.indexOf(early) + 1;
    return `${fixes(first)} would make this ${plural(early, "partition")}, ${count} would make ${fewest}`;
  }
  return `${fixes(count)} would make this ${plural(fewest, "partition")}`;
}
