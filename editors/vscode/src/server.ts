/**
 * The `lowerd serve` process and its language client: start, stop, commands, and the two
 * signals the rest of the extension listens to (build progress and new diagnostics).
 */

import * as vscode from "vscode";
import {
  DidChangeConfigurationNotification,
  ExecuteCommandRequest,
  LanguageClient,
  type LanguageClientOptions,
  RevealOutputChannelOn,
  type ServerOptions,
  State,
} from "vscode-languageclient/node";

import { type Interpreter, serverCommand } from "./interpreter";
import type { ProgressToken, ProgressValue } from "./progress";
import type { ServerSettings } from "./settings";
import { initializationOptions } from "./settings";

export const CLIENT_ID = "lowerd";
/** Sent by the server after each target build (daemon/server.py). */
const BUILD_FINISHED = "lowerd/buildFinished";
const REPORT = "lowerd.report";

export interface ServerListeners {
  progress(token: ProgressToken, value: ProgressValue): void;
  diagnostics(uri: vscode.Uri): void;
  /** The server's `lowerd/buildFinished` notification. */
  buildFinished(): void;
  /** A `lowerd.report` code lens was clicked (its argument: the target). */
  reportRequested(target: string | undefined): void;
  state(running: boolean): void;
}

export interface StartOptions {
  root: string;
  interpreter: Interpreter;
  settings: ServerSettings;
}

export class LowerdServer implements vscode.Disposable {
  private client: LanguageClient | undefined;
  private stateListener: vscode.Disposable | undefined;

  constructor(
    private readonly output: vscode.OutputChannel,
    private readonly listeners: ServerListeners,
  ) {}

  get running(): boolean {
    return this.client?.state === State.Running;
  }

  async start(options: StartOptions): Promise<void> {
    await this.stop();
    const { command, args } = serverCommand(options.interpreter);
    const serverOptions: ServerOptions = { command, args, options: { cwd: options.root } };
    const rootUri = vscode.Uri.file(options.root);
    const clientOptions: LanguageClientOptions = {
      documentSelector: [
        { scheme: "file", language: "python" },
        { scheme: "file", pattern: "**/pyproject.toml" },
      ],
      // The project root is the server's one workspace folder, so its report's relative file
      // names resolve against it even in a multi-root window.
      workspaceFolder: { uri: rootUri, name: vscode.workspace.asRelativePath(rootUri), index: 0 },
      initializationOptions: initializationOptions(options.settings),
      outputChannel: this.output,
      traceOutputChannel: this.output,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      middleware: {
        handleWorkDoneProgress: (token, params, next) => {
          this.listeners.progress(token, params);
          next(token, params);
        },
        // The coverage code lens runs the server's `lowerd.report`, whose answer is data for
        // programs; a person who clicks it wants the report page.
        executeCommand: (command, args: unknown[], next) => {
          if (command === REPORT) {
            const [target] = args;
            this.listeners.reportRequested(typeof target === "string" ? target : undefined);
            return undefined;
          }
          return next(command, args) as vscode.ProviderResult<unknown>;
        },
        // Pushed to clients that do not pull; VS Code pulls (textDocument/diagnostic), and the
        // server asks it to pull again (workspace/diagnostic/refresh) when a build moves them.
        handleDiagnostics: (uri, diagnostics, next) => {
          next(uri, diagnostics);
          this.listeners.diagnostics(uri);
        },
        provideDiagnostics: async (document, previousResultId, token, next) => {
          const report = await next(document, previousResultId, token);
          this.listeners.diagnostics(document instanceof vscode.Uri ? document : document.uri);
          return report;
        },
      },
    };
    const client = new LanguageClient(CLIENT_ID, "lowerd", serverOptions, clientOptions);
    this.client = client;
    this.stateListener = client.onDidChangeState((event) =>
      this.listeners.state(event.newState === State.Running),
    );
    client.onNotification(BUILD_FINISHED, () => this.listeners.buildFinished());
    this.output.appendLine(`Starting ${[command, ...args].join(" ")} in ${options.root}`);
    await client.start();
  }

  async stop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.stateListener?.dispose();
    this.stateListener = undefined;
    if (client && client.state !== State.Stopped) {
      try {
        await client.stop();
      } catch (error) {
        this.output.appendLine(`Stopping the server: ${String(error)}`);
      }
    }
    this.listeners.state(false);
  }

  /** Does the running server offer `workspace/executeCommand` `command`? */
  offers(command: string): boolean {
    const commands = this.client?.initializeResult?.capabilities.executeCommandProvider?.commands;
    return commands?.includes(command) ?? false;
  }

  async executeCommand(command: string, args: unknown[] = []): Promise<unknown> {
    if (!this.client || !this.running) {
      throw new Error("the lowerd server is not running");
    }
    return this.client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args });
  }

  /** Tells a running server the settings changed (section "lowerd"). */
  async notifySettings(settings: ServerSettings): Promise<void> {
    if (this.client && this.running) {
      await this.client.sendNotification(DidChangeConfigurationNotification.type, {
        settings: { lowerd: initializationOptions(settings) },
      });
    }
  }

  dispose(): void {
    void this.stop();
  }
}
