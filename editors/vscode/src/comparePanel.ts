/** "lowerd: Compare backends": the server's `lowerd.compare` answer in a webview beside the code. */

import * as vscode from "vscode";

import { type Comparison, parseComparison, renderComparePage } from "./compare";

/** The server's command: arguments [target, backends?] (daemon/compare_service.py). */
export const SERVER_COMPARE = "lowerd.compare";
/** The extension's command (palette, and the server's code action): arguments [target?]. */
export const COMPARE_BACKENDS = "lowerd.compareBackends";

export class ComparePanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private asked = 0; // the latest compare shown: an older one's late answer is dropped

  /** Shows "comparing…" at once, then the table; `ask` sends `lowerd.compare` with its arguments. */
  async compare(target: string, ask: (args: unknown[]) => Promise<unknown>): Promise<void> {
    const asked = ++this.asked;
    const waiting: Comparison = { target, backends: [], warnings: [], error: null };
    const panel = this.open();
    panel.webview.html = renderComparePage(waiting, { cspSource: panel.webview.cspSource, comparing: true });
    let comparison: Comparison;
    try {
      comparison = parseComparison(await ask([target]));
    } catch (error) {
      const message = error instanceof Error ? error.message : String(error);
      comparison = { ...waiting, error: message };
    }
    if (asked === this.asked && this.panel) {
      this.panel.webview.html = renderComparePage(comparison, { cspSource: this.panel.webview.cspSource });
    }
  }

  private open(): vscode.WebviewPanel {
    if (!this.panel) {
      this.panel = vscode.window.createWebviewPanel(
        "lowerd.compare",
        "lowerd compare",
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
        { enableScripts: false, enableFindWidget: true, localResourceRoots: [] },
      );
      this.panel.onDidDispose(() => (this.panel = undefined));
    } else {
      this.panel.reveal(undefined, true);
    }
    return this.panel;
  }

  dispose(): void {
    this.panel?.dispose();
  }
}
