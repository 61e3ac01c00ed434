/** Entry point: VS Code calls activate() for workspaces with a pyproject.toml or Python files. */

import * as vscode from "vscode";

import { COMPARE_BACKENDS } from "./comparePanel";
import { SHOW_GRAPH_REPORT } from "./graphPanel";
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
    // Also what the server's "Compare backends" code action runs, with the target.
    vscode.commands.registerCommand(COMPARE_BACKENDS, async (target?: unknown) => {
      const name = typeof target === "string" ? target : await active.pickTarget();
      if (name) {
        await active.compareBackends(name);
      }
    }),
    vscode.commands.registerCommand(COMMANDS.showReport, () => active.showReport()),
    vscode.commands.registerCommand(COMMANDS.restart, () => active.restart()),
    vscode.commands.registerCommand(COMMANDS.clearCache, () => active.clearCache()),
    vscode.commands.registerCommand(SHOW_GRAPH_REPORT, () => active.showGraphReport()),
    vscode.commands.registerCommand(COMMANDS.showInReport, (target: unknown, uri: unknown, line: unknown) =>
      typeof target === "string" && typeof uri === "string" && typeof line === "number"
        ? active.showInReport(target, uri, line)
        : active.showReport(),
    ),
    vscode.commands.registerCommand(COMMANDS.explainRebuild, async (target?: unknown) => {
      const name = typeof target === "string" ? target : await active.pickTarget();
      if (name) {
        await active.explainRebuild(name);
      }
    }),
    vscode.commands.registerCommand(COMMANDS.copyStockScript, async (target?: unknown) => {
      const name = typeof target === "string" ? target : await active.pickTarget();
      if (name) {
        await active.copyStockScript(name);
      }
    }),
  );
  await active.activate();
}

export function deactivate(): void {
  controller?.dispose();
  controller = undefined;
}
