import { existsSync } from "node:fs";
import * as path from "node:path";
import { describe, expect, it } from "vitest";

import { probeLowerd, probeMessage } from "../src/probe";

// The repository's own virtual environment, where lowerd is installed (README quick start).
const VENV_PYTHON = path.resolve(__dirname, "../../../.venv/bin/python");

describe("probeLowerd", () => {
  it("reports a missing interpreter", async () => {
    const probe = await probeLowerd({ command: ["/nonexistent/bin/python"], source: "setting" });
    expect(probe).toMatchObject({ ok: false, reason: "interpreter-not-found" });
    expect(probeMessage(probe, "/nonexistent/bin/python")).toContain("was not found");
  });

  it("reports an interpreter without lowerd", async () => {
    // `python3 -I` ignores the environment and user site, so lowerd is not on its path.
    const probe = await probeLowerd({ command: ["python3", "-I"], source: "default" }, "/");
    expect(probe).toMatchObject({ ok: false, reason: "not-installed" });
    expect(probeMessage(probe, "python3")).toMatch(/lowerd is not installed for python3 \(.*ModuleNotFoundError/);
  });

  it.runIf(existsSync(VENV_PYTHON))("finds lowerd in the repository's .venv", async () => {
    const probe = await probeLowerd({ command: [VENV_PYTHON], source: "setting" }, "/");
    expect(probe).toEqual({ ok: true, version: expect.stringMatching(/^\d+\.\d+/) as unknown });
    expect(probeMessage(probe, VENV_PYTHON)).toBeUndefined();
  }, 30_000);
});
