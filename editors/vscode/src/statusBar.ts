/** The status bar item: shows statusView()'s answer; clicking it opens the report. */

import * as vscode from "vscode";

import { type StatusInput, statusView } from "./status";

export class CoverageStatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;

  constructor(openReportCommand: string) {
    this.item = vscode.window.createStatusBarItem("lowerd.coverage", vscode.StatusBarAlignment.Left, 50);
    this.item.name = "lowerd coverage";
    this.item.command = openReportCommand;
  }

  show(input: StatusInput): void {
    const view = statusView(input);
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.backgroundColor =
      view.look === "error"
        ? new vscode.ThemeColor("statusBarItem.errorBackground")
        : view.look === "warning"
          ? new vscode.ThemeColor("statusBarItem.warningBackground")
          : undefined;
    this.item.show();
  }

  hide(): void {
    this.item.hide();
  }

  dispose(): void {
    this.item.dispose();
  }
}
