import { describe, expect, it } from "vitest";

import { ProgressTracker } from "../src/progress";

describe("ProgressTracker", () => {
  it("follows begin, report and end per token", () => {
    const tracker = new ProgressTracker();
    expect(tracker.building).toBe(false);
    expect(tracker.update("t1", { kind: "begin", title: "lowerd: refused", percentage: 0 })).toBe(false);
    expect(tracker.building).toBe(true);
    tracker.update("t1", { kind: "report", message: "preprocess 1/2", percentage: 50 });
    expect(tracker.describe()).toBe("lowerd: refused: preprocess 1/2 (50 %)");
    expect(tracker.update("t1", { kind: "end" })).toBe(true);
    expect(tracker.building).toBe(false);
    expect(tracker.describe()).toBeUndefined();
  });

  it("shows the newest of overlapping builds, and ignores strangers", () => {
    const tracker = new ProgressTracker();
    tracker.update(1, { kind: "begin", title: "a" });
    tracker.update(2, { kind: "begin", title: "b", message: "export" });
    expect(tracker.describe()).toBe("b: export");
    tracker.update(3, { kind: "report", message: "ignored" });
    expect(tracker.update(3, { kind: "end" })).toBe(false);
    tracker.update(2, { kind: "end" });
    expect(tracker.describe()).toBe("a");
    tracker.clear();
    expect(tracker.building).toBe(false);
  });
});
