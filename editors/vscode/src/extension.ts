/** Entry point: VS Code calls activate() for workspaces with a pyproject.toml or Python files. */

import * as vscode from "vscode";

import { COMMANDS, Controller } from "./controller";

let controller: Controller | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  controller = new Controller(context.extensionUri);
  const active = controller;
  context.subscriptions.push(
    active,
    vscode.commands.registerCommand(COMMANDS.buildTarget, (name?: unknown) =>
      active.buildTarget(typeof name === "string" ? name : undefined),
    ),
    vscode.commands.registerCommand(COMMANDS.buildAll, () => active.buildAll()),
    vscode.commands.registerCommand(COMMANDS.showReport, () => active.showReport()),
    vscode.commands.registerCommand(COMMANDS.restart, () => active.restart()),
    vscode.commands.registerCommand(COMMANDS.clearCache, () => active.clearCache()),
  );
  await active.activate();
}

export function deactivate(): void {
  controller?.dispose();
  controller = undefined;
}
