import { describe, expect, it } from "vitest";

import { hasLowerdConfig, rootFor, sortRoots, targetNames } from "../src/project";

const PYPROJECT = `[project]
name = "demo"

[tool.ruff]
line-length = 100

[tool.lowerd]
backends = ["xnnpack"]

[tool.lowerd.targets.vit]
entry = "models/vit.py:make"

[tool.lowerd.targets."tiny-linear"]
entry = "models/tiny.py:make"
`;

describe("hasLowerdConfig", () => {
  it("finds [tool.lowerd] and its sub-tables only", () => {
    expect(hasLowerdConfig(PYPROJECT)).toBe(true);
    expect(hasLowerdConfig('[tool.lowerd.targets.a]\nentry = "m.py:f"\n')).toBe(true);
    expect(hasLowerdConfig("[tool.lowerdx]\n")).toBe(false);
    expect(hasLowerdConfig('[project]\ndescription = "[tool.lowerd] fan"\n')).toBe(false);
    expect(hasLowerdConfig("# [tool.lowerd]\n")).toBe(false);
  });
});

describe("targetNames", () => {
  it("lists declared targets in order, quoted names included", () => {
    expect(targetNames(PYPROJECT)).toEqual(["vit", "tiny-linear"]);
  });
});

describe("roots", () => {
  it("picks the deepest root containing a file", () => {
    const roots = ["/ws", "/ws/sub"];
    expect(rootFor("/ws/sub/models/a.py", roots)).toBe("/ws/sub");
    expect(rootFor("/ws/other.py", roots)).toBe("/ws");
    expect(rootFor("/elsewhere/a.py", roots)).toBeUndefined();
    expect(rootFor("/wsx/a.py", roots)).toBeUndefined();
  });

  it("sorts shallowest first without duplicates", () => {
    expect(sortRoots(["/ws/b/c", "/ws/a", "/ws/a"])).toEqual(["/ws/a", "/ws/b/c"]);
  });
});
