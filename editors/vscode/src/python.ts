/**
 * The interpreter selected in the Python extension (ms-python.python), through its environment
 * API as vscode-mypy and ruff-vscode use it. Everything degrades to "no answer" when the Python
 * extension is not installed.
 */

import { PythonExtension } from "@vscode/python-extension";
import * as vscode from "vscode";

const PYTHON_EXTENSION_ID = "ms-python.python";

let api: PythonExtension | undefined;

async function pythonApi(): Promise<PythonExtension | undefined> {
  if (api) {
    return api;
  }
  if (!vscode.extensions.getExtension(PYTHON_EXTENSION_ID)) {
    return undefined;
  }
  try {
    api = await PythonExtension.api();
  } catch {
    api = undefined;
  }
  return api;
}

/** The active environment's executable for `resource`'s workspace folder, if it has one. */
export async function selectedInterpreter(resource: vscode.Uri | undefined): Promise<string | undefined> {
  const python = await pythonApi();
  if (!python) {
    return undefined;
  }
  try {
    const path = python.environments.getActiveEnvironmentPath(resource);
    const environment = await python.environments.resolveEnvironment(path);
    return environment?.executable.uri?.fsPath;
  } catch {
    return undefined;
  }
}

/** Calls `listener` when the user selects another interpreter in the Python extension. */
export async function onInterpreterChanged(listener: () => void): Promise<vscode.Disposable> {
  const python = await pythonApi();
  if (!python) {
    return new vscode.Disposable(() => undefined);
  }
  return python.environments.onDidChangeActiveEnvironmentPath(() => listener());
}

export function hasPythonExtension(): boolean {
  return vscode.extensions.getExtension(PYTHON_EXTENSION_ID) !== undefined;
}
