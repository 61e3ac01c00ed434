import { describe, expect, it } from "vitest";

import { initializationOptions, readServerSettings } from "../src/settings";

function reader(values: Record<string, unknown>) {
  return (key: string): unknown => values[key];
}

describe("settings", () => {
  it("sends unset limits as null, which restores the server's defaults", () => {
    const settings = readServerSettings(reader({ notDelegatedSeverity: "hint", workerTimeout: null, backends: [] }));
    expect(initializationOptions(settings)).toEqual({
      notDelegatedSeverity: "hint",
      workerTimeout: null,
      workerMemoryLimit: null,
      workers: null,
      inlayHints: true,
    });
  });

  it("passes limits, workers and a backend override", () => {
    const settings = readServerSettings(
      reader({ workerTimeout: 120, workerMemoryLimit: 4096, workers: 2, backends: ["vulkan", "xnnpack", ""] }),
    );
    expect(initializationOptions(settings)).toEqual({
      notDelegatedSeverity: "warning",
      workerTimeout: 120,
      workerMemoryLimit: 4096,
      workers: 2,
      inlayHints: true,
      backends: ["vulkan", "xnnpack"],
    });
  });

  it("ignores nonsense values", () => {
    const settings = readServerSettings(reader({ notDelegatedSeverity: "error", workerTimeout: -1, workers: "2" }));
    expect(settings).toEqual({
      notDelegatedSeverity: "warning",
      backends: [],
      workerTimeout: null,
      workerMemoryLimit: null,
      workers: null,
      inlayHints: true,
    });
  });

  it("turns inlay hints off only when told so", () => {
    expect(readServerSettings(reader({ inlayHints: false })).inlayHints).toBe(false);
    expect(initializationOptions(readServerSettings(reader({ inlayHints: false }))).inlayHints).toBe(false);
  });
});
