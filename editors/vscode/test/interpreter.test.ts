import { describe, expect, it } from "vitest";

import {
  clearCacheCommand,
  describeInterpreter,
  expandVariables,
  resolveInterpreter,
  serverCommand,
} from "../src/interpreter";

const HOME = "/home/dev";

describe("resolveInterpreter", () => {
  it("prefers the lowerd.interpreter setting", () => {
    const interpreter = resolveInterpreter({
      setting: "/opt/py/bin/python",
      pythonExtension: "/ws/.venv/bin/python",
      workspaceFolder: "/ws",
      home: HOME,
    });
    expect(interpreter).toEqual({ command: ["/opt/py/bin/python"], source: "setting" });
  });

  it("takes the Python extension's interpreter when the setting is unset or blank", () => {
    for (const setting of [undefined, "", "   "]) {
      expect(
        resolveInterpreter({ setting, pythonExtension: "/ws/.venv/bin/python", workspaceFolder: "/ws", home: HOME }),
      ).toEqual({ command: ["/ws/.venv/bin/python"], source: "python-extension" });
    }
  });

  it("falls back to python3", () => {
    expect(resolveInterpreter({ setting: "", pythonExtension: undefined, workspaceFolder: undefined })).toEqual({
      command: ["python3"],
      source: "default",
    });
  });

  it("expands variables and resolves relative paths against the workspace folder", () => {
    const resolve = (setting: string): string =>
      resolveInterpreter({ setting, pythonExtension: undefined, workspaceFolder: "/ws", home: HOME }).command[0];
    expect(resolve("${workspaceFolder}/.venv/bin/python")).toBe("/ws/.venv/bin/python");
    expect(resolve(".venv/bin/python")).toBe("/ws/.venv/bin/python");
    expect(resolve("~/venvs/lowerd/bin/python")).toBe("/home/dev/venvs/lowerd/bin/python");
    expect(resolve("python3.11")).toBe("python3.11"); // a bare name is looked up on PATH
  });
});

describe("expandVariables", () => {
  it("knows userHome and env, and leaves an unknown workspace folder alone", () => {
    expect(expandVariables("${userHome}/py", undefined, HOME)).toBe("/home/dev/py");
    expect(expandVariables("${env:PYROOT}/bin/python", undefined, HOME, { PYROOT: "/opt/x" })).toBe(
      "/opt/x/bin/python",
    );
    expect(expandVariables("${workspaceFolder}/py", undefined, HOME)).toBe("${workspaceFolder}/py");
  });
});

describe("commands", () => {
  const interpreter = resolveInterpreter({ setting: "/v/bin/python", pythonExtension: undefined, workspaceFolder: undefined });

  it("runs the server with -m lowerd serve and no --stdio", () => {
    expect(serverCommand(interpreter)).toEqual({ command: "/v/bin/python", args: ["-m", "lowerd", "serve"] });
  });

  it("clears the cache of the project's config", () => {
    expect(clearCacheCommand(interpreter, "/p/pyproject.toml")).toEqual({
      command: "/v/bin/python",
      args: ["-m", "lowerd", "cache", "--config", "/p/pyproject.toml", "clear"],
    });
  });

  it("says where the interpreter came from", () => {
    expect(describeInterpreter(interpreter)).toBe("/v/bin/python (from the lowerd.interpreter setting)");
  });
});
