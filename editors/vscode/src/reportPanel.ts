/** The delegation report in a webview beside the editor; links open the source lines. */

import { randomBytes } from "node:crypto";
import * as path from "node:path";
import * as vscode from "vscode";

import { absolutePath } from "./coverage";
import type { Report } from "./report";
import { renderReportPage } from "./reportHtml";

interface OpenMessage {
  type: "open";
  file: string;
  line: number;
}

function isOpenMessage(message: unknown): message is OpenMessage {
  const raw = message as Partial<OpenMessage> | null;
  return raw?.type === "open" && typeof raw.file === "string" && typeof raw.line === "number";
}

/** What a report page's link asks ({type: "open", file, line}): the line, in the first column. */
export async function openSource(root: string, message: unknown): Promise<void> {
  if (!isOpenMessage(message)) {
    return;
  }
  const position = new vscode.Position(Math.max(message.line - 1, 0), 0);
  await vscode.window.showTextDocument(vscode.Uri.file(absolutePath(root, message.file)), {
    viewColumn: vscode.ViewColumn.One,
    selection: new vscode.Range(position, position),
  });
}

export class ReportPanel implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;
  private root = "";

  /** Whether the panel is open, so that a new report is worth rendering. */
  get visible(): boolean {
    return this.panel !== undefined;
  }

  show(
    report: Report,
    root: string,
    building?: string,
    focus?: string,
    focusSource?: { file: string; line: number },
  ): void {
    this.root = root;
    if (!this.panel) {
      this.panel = vscode.window.createWebviewPanel(
        "lowerd.report",
        "lowerd report",
        { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true },
        { enableScripts: true, enableFindWidget: true, localResourceRoots: [] },
      );
      this.panel.onDidDispose(() => (this.panel = undefined));
      this.panel.webview.onDidReceiveMessage((message: unknown) => openSource(this.root, message));
    } else {
      this.panel.reveal(undefined, true);
    }
    this.update(report, root, building, focus, focusSource);
  }

  update(
    report: Report,
    root: string,
    building?: string,
    focus?: string,
    focusSource?: { file: string; line: number },
  ): void {
    if (!this.panel) {
      return;
    }
    this.root = root;
    this.panel.webview.html = renderReportPage(report, {
      cspSource: this.panel.webview.cspSource,
      nonce: randomBytes(16).toString("base64"),
      projectName: path.basename(root),
      building,
      focus,
      focusSource,
    });
  }

  dispose(): void {
    this.panel?.dispose();
  }
}
