/**
 * Which Python runs `python -m lowerd serve`: the `lowerd.interpreter` setting if set, else the
 * interpreter selected in the Python extension, else `python3`. Pure: the caller asks VS Code
 * and the Python extension and passes their answers in.
 */

import * as os from "node:os";
import * as path from "node:path";

export type InterpreterSource = "setting" | "python-extension" | "default";

/** An executable and any arguments that go before `-m lowerd ...`. */
export type Command = [string, ...string[]];

export interface Interpreter {
  command: Command;
  source: InterpreterSource;
}

export interface InterpreterInputs {
  /** `lowerd.interpreter`; empty or blank means unset. */
  setting: string | undefined;
  /** The Python extension's active environment's executable, if it has one. */
  pythonExtension: string | undefined;
  /** The folder `${workspaceFolder}` stands for. */
  workspaceFolder: string | undefined;
  /** `os.homedir()` unless a test says otherwise. */
  home?: string;
}

export const DEFAULT_PYTHON = "python3";

/** Expands `~`, `${userHome}`, `${workspaceFolder}` and `${env:NAME}` as VS Code settings do. */
export function expandVariables(
  value: string,
  workspaceFolder: string | undefined,
  home: string = os.homedir(),
  env: NodeJS.ProcessEnv = process.env,
): string {
  let expanded = value.replace(/\$\{(workspaceFolder|userHome|env:([^}]+))\}/g, (match, name, envName) => {
    if (name === "workspaceFolder") {
      return workspaceFolder ?? match;
    }
    if (name === "userHome") {
      return home;
    }
    return env[envName as string] ?? "";
  });
  if (expanded === "~" || expanded.startsWith("~/")) {
    expanded = path.join(home, expanded.slice(1));
  }
  return expanded;
}

/**
 * A setting's value as a command: a path with spaces stays one word; a relative path with a
 * separator is resolved against the workspace folder; a bare name (`python3.11`) is looked up
 * on PATH by the process spawner.
 */
function settingCommand(setting: string, workspaceFolder: string | undefined, home: string): string {
  const expanded = expandVariables(setting.trim(), workspaceFolder, home);
  const relativeWithSeparator = !path.isAbsolute(expanded) && /[\\/]/.test(expanded);
  if (relativeWithSeparator && workspaceFolder) {
    return path.resolve(workspaceFolder, expanded);
  }
  return expanded;
}

export function resolveInterpreter(inputs: InterpreterInputs): Interpreter {
  const home = inputs.home ?? os.homedir();
  if (inputs.setting && inputs.setting.trim() !== "") {
    return {
      command: [settingCommand(inputs.setting, inputs.workspaceFolder, home)],
      source: "setting",
    };
  }
  if (inputs.pythonExtension && inputs.pythonExtension.trim() !== "") {
    return { command: [inputs.pythonExtension], source: "python-extension" };
  }
  return { command: [DEFAULT_PYTHON], source: "default" };
}

/** `<python> -m lowerd serve` as executable + arguments; no `--stdio`: stdio is the default. */
export function serverCommand(interpreter: Interpreter): { command: string; args: string[] } {
  const [command, ...prefix] = interpreter.command;
  return { command, args: [...prefix, "-m", "lowerd", "serve"] };
}

/** `<python> -m lowerd cache --config <pyproject.toml> clear`. */
export function clearCacheCommand(
  interpreter: Interpreter,
  configPath: string,
): { command: string; args: string[] } {
  const [command, ...prefix] = interpreter.command;
  return { command, args: [...prefix, "-m", "lowerd", "cache", "--config", configPath, "clear"] };
}

export function describeInterpreter(interpreter: Interpreter): string {
  const where = {
    setting: "from the lowerd.interpreter setting",
    "python-extension": "selected in the Python extension",
    default: "the default",
  }[interpreter.source];
  return `${interpreter.command.join(" ")} (${where})`;
}
