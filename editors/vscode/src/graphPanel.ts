/**
 * "lowerd: Show report with op graphs": the page `lowerd report --html` writes (the server's
 * `lowerd.reportPage`, made from its last results: coverage, partitions with sizes, the ops left
 * on the CPU, each method's op graph coloured by partition) in a webview. The page is whole as
 * the server writes it; its script asks to open a source line, which this panel does.
 */

import * as path from "path";
import * as vscode from "vscode";

import { openSource } from "./reportPanel";

/** The server's command: arguments [target...] (none: every target). */
export const SERVER_REPORT_PAGE = "lowerd.reportPage";
export const SHOW_GRAPH_REPORT = "lowerd.showGraphReport";

export class GraphPanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private root = "";

  show(html: string, root: string): void {
    this.root = root;
    if (!this.panel) {
      this.panel = vscode.window.createWebviewPanel(
        "lowerd.graphReport",
        `lowerd report: ${path.basename(root)}`,
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
        { enableScripts: true, enableFindWidget: true, localResourceRoots: [] },
      );
      this.panel.onDidDispose(() => (this.panel = undefined));
      this.panel.webview.onDidReceiveMessage((message: unknown) => openSource(this.root, message));
    } else {
      this.panel.reveal(undefined, true);
    }
    this.panel.webview.html = html;
  }

  dispose(): void {
    this.panel?.dispose();
  }
}
