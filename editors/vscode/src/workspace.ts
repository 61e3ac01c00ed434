/** Finding lowerd projects in the open workspace (VS Code side of project.ts). */

import * as path from "node:path";
import * as vscode from "vscode";

import { hasLowerdConfig, sortRoots, targetNames } from "./project";

const PYPROJECT_GLOB = "**/pyproject.toml";
const SKIPPED = "**/{node_modules,.venv,venv,.git,build,dist,site-packages}/**";
const MAX_PYPROJECTS = 200;

async function readText(uri: vscode.Uri): Promise<string> {
  try {
    return new TextDecoder().decode(await vscode.workspace.fs.readFile(uri));
  } catch {
    return "";
  }
}

/** Folders whose pyproject.toml declares `[tool.lowerd]`, shallowest first. */
export async function findProjectRoots(): Promise<string[]> {
  const files = await vscode.workspace.findFiles(PYPROJECT_GLOB, SKIPPED, MAX_PYPROJECTS);
  const roots: string[] = [];
  for (const file of files) {
    if (file.scheme === "file" && hasLowerdConfig(await readText(file))) {
      roots.push(path.dirname(file.fsPath));
    }
  }
  return sortRoots(roots);
}

/** The targets the project's pyproject.toml declares. */
export async function declaredTargets(root: string): Promise<string[]> {
  return targetNames(await readText(vscode.Uri.file(path.join(root, "pyproject.toml"))));
}

/** Calls `listener` when a pyproject.toml is created, changed or deleted. */
export function watchPyprojects(listener: () => void): vscode.Disposable {
  const watcher = vscode.workspace.createFileSystemWatcher(PYPROJECT_GLOB);
  watcher.onDidCreate(listener);
  watcher.onDidChange(listener);
  watcher.onDidDelete(listener);
  return watcher;
}

export function workspaceFolderOf(root: string): vscode.WorkspaceFolder | undefined {
  return vscode.workspace.getWorkspaceFolder(vscode.Uri.file(root));
}
