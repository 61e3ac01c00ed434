/**
 * Ties the pieces together: finds the project, picks the interpreter, runs the server, and keeps
 * the status bar and the report panel in step with builds.
 */

import { execFile } from "node:child_process";
import * as path from "node:path";
import * as vscode from "vscode";

import {
  clearCacheCommand,
  describeInterpreter,
  type Interpreter,
  resolveInterpreter,
} from "./interpreter";
import { probeLowerd, probeMessage } from "./probe";
import { ProgressTracker } from "./progress";
import { onInterpreterChanged, selectedInterpreter, hasPythonExtension } from "./python";
import { parseReport, type Report } from "./report";
import { type Answer, explanationText, reportPageText, stockScriptText } from "./answers";
import { ComparePanel, SERVER_COMPARE } from "./comparePanel";
import { GraphPanel, SERVER_REPORT_PAGE } from "./graphPanel";
import { ReportPanel } from "./reportPanel";
import { LowerdServer } from "./server";
import { readServerSettings, RESTART_SETTINGS } from "./settings";
import type { ServerState } from "./status";
import { CoverageStatusBar } from "./statusBar";
import { declaredTargets, findProjectRoots, watchPyprojects, workspaceFolderOf } from "./workspace";

export const COMMANDS = {
  buildTarget: "lowerd.buildTarget",
  buildAll: "lowerd.buildAllTargets",
  showReport: "lowerd.showReport",
  restart: "lowerd.restartServer",
  clearCache: "lowerd.clearCache",
  // Behind the code actions on lowerd's diagnostics (daemon/editor_view.py code_actions).
  showInReport: "lowerd.showInReport",
  explainRebuild: "lowerd.explainRebuild",
  copyStockScript: "lowerd.copyStockScript",
} as const;

/** The server's own workspace/executeCommand commands. */
const SERVER = {
  build: "lowerd.build",
  buildAll: "lowerd.buildAll",
  report: "lowerd.report",
  explain: "lowerd.explain",
  stockScript: "lowerd.stockScript",
};

const INSTALL = "Install instructions";
const SELECT_INTERPRETER = "Select interpreter";
const OPEN_SETTING = "Open setting";
const REPORT_DEBOUNCE_MS = 300;

export class Controller implements vscode.Disposable {
  private readonly output = vscode.window.createOutputChannel("lowerd");
  private readonly progress = new ProgressTracker();
  private readonly statusBar = new CoverageStatusBar(COMMANDS.showReport);
  private readonly panel = new ReportPanel();
  private readonly comparePanel = new ComparePanel();
  private readonly graphPanel = new GraphPanel();
  private readonly server: LowerdServer;
  private readonly disposables: vscode.Disposable[] = [];
  private root: string | undefined;
  private interpreter: Interpreter | undefined;
  private state: ServerState = "stopped";
  private report: Report | undefined;
  private reportTimer: NodeJS.Timeout | undefined;
  private starting: Promise<void> | undefined;

  constructor(private readonly extensionUri: vscode.Uri) {
    this.server = new LowerdServer(this.output, {
      progress: (token, value) => {
        const ended = this.progress.update(token, value);
        this.refreshStatus();
        if (ended) {
          this.scheduleReport();
        }
      },
      diagnostics: () => this.scheduleReport(),
      buildFinished: () => this.scheduleReport(),
      reportRequested: (target) => void this.showReport(target),
      state: (running) => {
        // While starting, the client passes through "stopped"; only a running server stops.
        if (running) {
          this.state = "running";
        } else if (this.state === "running") {
          this.state = "stopped";
        }
        if (running) {
          this.scheduleReport();
        } else {
          this.progress.clear();
        }
        this.refreshStatus();
      },
    });
  }

  async activate(): Promise<void> {
    this.disposables.push(
      this.output,
      this.statusBar,
      this.panel,
      vscode.window.onDidChangeActiveTextEditor(() => this.refreshStatus()),
      vscode.workspace.onDidChangeConfiguration((event) => this.configurationChanged(event)),
      vscode.workspace.onDidChangeWorkspaceFolders(() => this.restart()),
      watchPyprojects(() => this.pyprojectChanged()),
      await onInterpreterChanged(() => this.pythonInterpreterChanged()),
    );
    await this.restart();
  }

  // Server lifecycle ----------------------------------------------------------------------------

  /** (Re)starts the server for the workspace's lowerd project, if it has one. */
  restart(): Promise<void> {
    // Restarts queue up behind the one running, so two never start servers at once.
    const previous = this.starting ?? Promise.resolve();
    const next: Promise<void> = previous
      .catch(() => undefined)
      .then(() => this.startServer())
      .finally(() => {
        if (this.starting === next) {
          this.starting = undefined;
        }
      });
    this.starting = next;
    return next;
  }

  private async startServer(): Promise<void> {
    await this.server.stop();
    this.report = undefined;
    const roots = await findProjectRoots();
    this.root = this.pickRoot(roots);
    if (!this.root) {
      this.statusBar.hide();
      this.output.appendLine("No pyproject.toml with [tool.lowerd] in this workspace.");
      return;
    }
    const folder = workspaceFolderOf(this.root);
    const configuration = vscode.workspace.getConfiguration("lowerd", folder?.uri);
    this.interpreter = resolveInterpreter({
      setting: configuration.get<string>("interpreter"),
      pythonExtension: await selectedInterpreter(folder?.uri),
      workspaceFolder: folder?.uri.fsPath,
    });
    this.state = "starting";
    this.refreshStatus();
    const probe = await probeLowerd(this.interpreter, this.root);
    const problem = probeMessage(probe, describeInterpreter(this.interpreter));
    if (problem) {
      this.state = "missing";
      this.output.appendLine(problem);
      this.refreshStatus();
      void this.explainMissing(problem);
      return;
    }
    this.output.appendLine(`lowerd ${probe.ok ? probe.version : "?"}: ${describeInterpreter(this.interpreter)}`);
    try {
      await this.server.start({
        root: this.root,
        interpreter: this.interpreter,
        settings: readServerSettings((key) => configuration.get(key)),
      });
      this.state = "running";
    } catch (error) {
      this.state = "stopped";
      this.output.appendLine(`The lowerd server did not start: ${String(error)}`);
      void vscode.window.showErrorMessage(`lowerd: the server did not start (${String(error)}).`);
    }
    this.refreshStatus();
  }

  /** The project of the active file if it is in one, else the shallowest. */
  private pickRoot(roots: string[]): string | undefined {
    const active = vscode.window.activeTextEditor?.document.uri;
    if (active?.scheme === "file") {
      const containing = roots.filter((root) => !path.relative(root, active.fsPath).startsWith(".."));
      if (containing.length > 0) {
        return containing.sort((a, b) => b.length - a.length)[0];
      }
    }
    return roots[0];
  }

  private async explainMissing(problem: string): Promise<void> {
    const actions = hasPythonExtension() ? [INSTALL, SELECT_INTERPRETER, OPEN_SETTING] : [INSTALL, OPEN_SETTING];
    const choice = await vscode.window.showErrorMessage(problem, ...actions);
    if (choice === INSTALL) {
      await vscode.commands.executeCommand("markdown.showPreview", await this.readme());
    } else if (choice === SELECT_INTERPRETER) {
      await vscode.commands.executeCommand("python.setInterpreter");
    } else if (choice === OPEN_SETTING) {
      await vscode.commands.executeCommand("workbench.action.openSettings", "lowerd.interpreter");
    }
  }

  /** The extension's README: `readme.md` once packaged (vsce lowercases it), else `README.md`. */
  private async readme(): Promise<vscode.Uri> {
    for (const name of ["readme.md", "README.md"]) {
      const uri = vscode.Uri.joinPath(this.extensionUri, name);
      try {
        await vscode.workspace.fs.stat(uri);
        return uri;
      } catch {
        // try the next spelling
      }
    }
    return vscode.Uri.joinPath(this.extensionUri, "README.md");
  }

  private configurationChanged(event: vscode.ConfigurationChangeEvent): void {
    if (RESTART_SETTINGS.some((setting) => event.affectsConfiguration(setting))) {
      void this.restart();
    } else if (event.affectsConfiguration("lowerd") && this.root) {
      const configuration = vscode.workspace.getConfiguration("lowerd", workspaceFolderOf(this.root)?.uri);
      void this.server.notifySettings(readServerSettings((key) => configuration.get(key)));
    }
  }

  private pythonInterpreterChanged(): void {
    if (this.interpreter?.source !== "setting") {
      void this.restart();
    }
  }

  private pyprojectChanged(): void {
    // A project appearing (or the server missing one) is worth a start; edits to a running
    // project's config are the server's business.
    if (!this.server.running && this.state !== "starting") {
      void this.restart();
    }
  }

  // Report and status ---------------------------------------------------------------------------

  private scheduleReport(): void {
    clearTimeout(this.reportTimer);
    this.reportTimer = setTimeout(() => void this.fetchReport(), REPORT_DEBOUNCE_MS);
  }

  private async fetchReport(): Promise<Report | undefined> {
    if (!this.server.running) {
      return this.report;
    }
    try {
      this.report = parseReport(await this.server.executeCommand(SERVER.report));
      if (this.report.root) {
        this.root = this.report.root;
      }
    } catch (error) {
      this.output.appendLine(`lowerd.report failed: ${String(error)}`);
    }
    this.refreshStatus();
    if (this.panel.visible && this.report && this.root) {
      this.panel.update(this.report, this.root, this.progress.describe());
    }
    return this.report;
  }

  private refreshStatus(): void {
    if (!this.root) {
      this.statusBar.hide();
      return;
    }
    const active = vscode.window.activeTextEditor?.document.uri;
    this.statusBar.show({
      server: this.state,
      report: this.report,
      root: this.root,
      activeFile: active?.scheme === "file" ? active.fsPath : undefined,
      building: this.progress.describe(),
    });
  }

  // Commands ------------------------------------------------------------------------------------

  async buildTarget(name?: string): Promise<void> {
    const target = name ?? (await this.pickTarget());
    if (target) {
      await this.run(() => this.server.executeCommand(SERVER.build, [target]));
    }
  }

  /** The report with each method's op graph, as `lowerd report --html` writes it. */
  async showGraphReport(): Promise<void> {
    const html = await this.ask(SERVER_REPORT_PAGE, [], reportPageText);
    if (html !== undefined && this.root) {
      this.graphPanel.show(html, this.root);
    }
  }

  /** `lowerd compare` of the target, one backend at a time, in a webview (src/comparePanel.ts). */
  async compareBackends(target: string): Promise<void> {
    await this.comparePanel.compare(target, (args) => this.server.executeCommand(SERVER_COMPARE, args));
  }

  async buildAll(): Promise<void> {
    await this.run(() => this.server.executeCommand(SERVER.buildAll));
  }

  async showReport(target?: string): Promise<void> {
    if (!this.root) {
      void vscode.window.showInformationMessage("lowerd: no pyproject.toml with [tool.lowerd] in this workspace.");
      return;
    }
    const report = (await this.fetchReport()) ?? parseReport({});
    this.panel.show(report, this.root, this.progress.describe(), target);
  }

  /** The report, scrolled to the target and the op rows made at the diagnostic's line. */
  async showInReport(target: string, uri: string, line: number): Promise<void> {
    if (!this.root) {
      return;
    }
    const report = (await this.fetchReport()) ?? parseReport({});
    const file = path.relative(this.root, vscode.Uri.parse(uri).fsPath).split(path.sep).join("/");
    this.panel.show(report, this.root, this.progress.describe(), target, { file, line });
  }

  /** `lowerd explain` for the target, in a Markdown document beside the code. */
  async explainRebuild(target: string): Promise<void> {
    const text = await this.ask(SERVER.explain, [target], explanationText);
    if (text !== undefined) {
      const document = await vscode.workspace.openTextDocument({ content: text, language: "markdown" });
      await vscode.window.showTextDocument(document, { viewColumn: vscode.ViewColumn.Beside, preview: true });
    }
  }

  /** The stock ExecuTorch script that reproduces the target, on the clipboard. */
  async copyStockScript(target: string): Promise<void> {
    const script = await this.ask(SERVER.stockScript, [target], stockScriptText);
    if (script === undefined) {
      return;
    }
    await vscode.env.clipboard.writeText(script);
    const open = "Open";
    const choice = await vscode.window.showInformationMessage(
      `lowerd: copied a stock ExecuTorch script for ${target}; run it with the project's Python: it writes ${target}.pte with lowerd's sha256.`,
      open,
    );
    if (choice === open) {
      const document = await vscode.workspace.openTextDocument({ content: script, language: "python" });
      await vscode.window.showTextDocument(document);
    }
  }

  async clearCache(): Promise<void> {
    if (!this.root || !this.interpreter) {
      return;
    }
    if (this.server.offers("lowerd.clearCache")) {
      await this.run(() => this.server.executeCommand("lowerd.clearCache"));
      return;
    }
    const { command, args } = clearCacheCommand(this.interpreter, path.join(this.root, "pyproject.toml"));
    execFile(command, args, { cwd: this.root }, (error, stdout, stderr) => {
      const text = (stdout + stderr).trim();
      this.output.appendLine(`${[command, ...args].join(" ")}: ${text}`);
      if (error) {
        void vscode.window.showErrorMessage(`lowerd: clearing the cache failed: ${text || error.message}`);
      } else {
        void vscode.window.showInformationMessage(`lowerd: ${text || "cache cleared"}`);
      }
    });
  }

  async pickTarget(): Promise<string | undefined> {
    const fromReport = this.report?.targets.map((t) => t.name) ?? [];
    const declared = this.root ? await declaredTargets(this.root) : [];
    const names = [...new Set([...declared, ...fromReport])];
    if (names.length === 0) {
      void vscode.window.showInformationMessage("lowerd: this project declares no targets.");
      return undefined;
    }
    const items = names.map((name) => {
      const result = this.report?.targets.find((t) => t.name === name);
      return { label: name, description: result ? result.status : "not built yet" };
    });
    return (await vscode.window.showQuickPick(items, { placeHolder: "Target to build" }))?.label;
  }

  /** A server command's answer read by `read`; undefined (and said) when it failed. */
  private async ask(command: string, args: unknown[], read: (answer: unknown) => Answer): Promise<string | undefined> {
    let answer: Answer;
    try {
      answer = read(await this.server.executeCommand(command, args));
    } catch (error) {
      answer = { error: error instanceof Error ? error.message : String(error) };
    }
    if ("error" in answer) {
      void vscode.window.showErrorMessage(`lowerd: ${answer.error}`);
      return undefined;
    }
    return answer.text;
  }

  private async run(action: () => Promise<unknown>): Promise<void> {
    try {
      await action();
    } catch (error) {
      void vscode.window.showErrorMessage(`lowerd: ${error instanceof Error ? error.message : String(error)}`);
    }
    this.scheduleReport();
  }

  dispose(): void {
    clearTimeout(this.reportTimer);
    this.server.dispose();
    this.comparePanel.dispose();
    this.graphPanel.dispose();
    for (const disposable of this.disposables) {
      disposable.dispose();
    }
  }
}
