/**
 * lowerd projects: folders whose pyproject.toml has a `[tool.lowerd]` table.
 */

import * as path from "node:path";

/** A `[tool.lowerd]` table (or one of its sub-tables) in a pyproject.toml's text. */
export function hasLowerdConfig(pyprojectText: string): boolean {
  return /^[ \t]*\[[ \t]*tool[ \t]*\.[ \t]*lowerd[ \t]*[.\]]/m.test(pyprojectText);
}

/** The deepest project root that contains `file`, if any. */
export function rootFor(file: string, roots: readonly string[]): string | undefined {
  let best: string | undefined;
  for (const root of roots) {
    const relative = path.relative(root, file);
    const inside = relative === "" || (!relative.startsWith("..") && !path.isAbsolute(relative));
    if (inside && (best === undefined || root.length > best.length)) {
      best = root;
    }
  }
  return best;
}

/** Roots shallowest first, so the first is the one a single server runs in. */
export function sortRoots(roots: readonly string[]): string[] {
  return [...new Set(roots)].sort(
    (a, b) => a.split(path.sep).length - b.split(path.sep).length || a.localeCompare(b),
  );
}

/** The names of the `[tool.lowerd.targets.<name>]` tables, in file order. */
export function targetNames(pyprojectText: string): string[] {
  const names: string[] = [];
  const header = /^[ \t]*\[[ \t]*tool\.lowerd\.targets\.(?:"([^"]+)"|'([^']+)'|([A-Za-z0-9_-]+))[ \t]*\]/gm;
  for (const match of pyprojectText.matchAll(header)) {
    const name = match[1] ?? match[2] ?? match[3];
    if (name !== undefined && !names.includes(name)) {
      names.push(name);
    }
  }
  return names;
}
