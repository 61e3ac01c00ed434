// The extension end to end in a real VS Code: drives a running code-server (with the packaged
// lowerd.vsix installed) in Debian's chromium with playwright-core, as a user would, and asserts
// what the page shows. tests/test_vscode_e2e.py installs and starts code-server, writes the
// config this reads, and checks the result it writes.
//
//   node run.mjs CONFIG.json
//
// CONFIG: {url, file (the model, relative to the folder), target, pte (its .pte), lines: {linear,
// pow, cumsum, entry}, columns: {pow, cumsum} (a column inside each warning), linearMark,
// powMark, cumsumMark (the LINE-MARK texts on those lines), editFrom, editTo, screenshots
// (folder), result (file), waitMs (per wait), chromium}.
// Every wait polls what the page shows until a deadline; nothing waits on a clock. Each phase
// is recorded in the result ({name, ok, ms, observed, error, screenshot}); a failed phase leaves
// a screenshot named after it, and the run goes on with the next phase where it can.

// Node's globals, and the page's in the functions evaluated there.
/* global console, setTimeout, document, window, MutationObserver */

import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import * as path from "node:path";
import { chromium } from "playwright-core";

const config = JSON.parse(readFileSync(process.argv[2] ?? "", "utf8"));
const WAIT_MS = config.waitMs;
const POLL_MS = 100;
mkdirSync(config.screenshots, { recursive: true });

const result = { ok: false, phases: [], message: "" };
const started = Date.now();
const seconds = () => ((Date.now() - started) / 1000).toFixed(1);

function save() {
  writeFileSync(config.result, JSON.stringify(result, null, 2));
}

/**
 * Polls `probe` (its answer: {done, seen, value?}) until done and returns its value (else what it
 * saw); fails naming what it waited for and what the page showed last.
 */
async function until(what, probe, ms = WAIT_MS) {
  const deadline = Date.now() + ms;
  let seen;
  for (;;) {
    try {
      const answer = await probe();
      seen = answer.seen;
      if (answer.done) {
        return "value" in answer ? answer.value : seen;
      }
    } catch (error) {
      seen = `(probe failed: ${error instanceof Error ? error.message : String(error)})`;
    }
    if (Date.now() > deadline) {
      throw new Error(`waited ${ms / 1000} s for ${what}; the page showed: ${JSON.stringify(seen)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

const browser = await chromium.launch({
  executablePath: config.chromium,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
page.setDefaultTimeout(WAIT_MS);

async function phase(name, body) {
  const begun = Date.now();
  const record = { name, ok: false, ms: 0, observed: null, error: null, screenshot: null };
  result.phases.push(record);
  console.log(`[${seconds()} s] ${name}`);
  try {
    record.observed = await body();
    record.ok = true;
  } catch (error) {
    record.error = error instanceof Error ? error.message : String(error);
    record.screenshot = path.join(config.screenshots, `${name}.png`);
    await page.screenshot({ path: record.screenshot }).catch(() => (record.screenshot = null));
    console.log(`[${seconds()} s] ${name} FAILED: ${record.error}\n  screenshot: ${record.screenshot}`);
    await page.keyboard.press("Escape").catch(() => undefined);
  }
  record.ms = Date.now() - begun;
  save();
  return record.ok;
}

// What the page shows ---------------------------------------------------------------------------

/** The Problems panel's rows, as {severity, message, line} (their aria-labels, VS Code 1.100's). */
function problems() {
  return page.$$eval(".markers-panel .monaco-list-row", (rows) =>
    rows.flatMap((row) => {
      const label = row.getAttribute("aria-label") ?? "";
      const match = /^(Error|Warning|Info|Hint): ([\s\S]*?) at line (\d+) and character \d+\./.exec(label);
      return match ? [{ severity: match[1], message: match[2], line: Number(match[3]) }] : [];
    }),
  );
}

function statusItems() {
  return page.$$eval(".part.statusbar .statusbar-item", (items) =>
    items.map((item) => ({
      id: item.id,
      text: (item.textContent ?? "").trim(),
      spinning: item.querySelector(".codicon-sync, .codicon-loading, .codicon-modifier-spin") !== null,
    })),
  );
}

/** The editor's rendered line holding `mark` (inlay hints included in its text). */
function viewLine(mark) {
  return page.$$eval(
    ".monaco-editor .view-lines .view-line",
    // Spaces render as no-break spaces.
    (lines, wanted) =>
      lines.map((line) => (line.textContent ?? "").replace(/\u00a0/g, " ")).find((text) => text.includes(wanted)) ??
      null,
    mark,
  );
}

/** The text of every webview's document, found by `title` in its tab. */
async function webviewTexts() {
  const texts = [];
  for (const frame of page.frames()) {
    if (frame === page.mainFrame()) {
      continue;
    }
    const text = await frame.evaluate(() => document.body?.innerText ?? "").catch(() => "");
    if (text.trim()) {
      texts.push(text);
    }
  }
  return texts;
}

function tabs() {
  return page.$$eval(".tabs-container .tab", (all) =>
    all.map((tab) => ({ label: tab.getAttribute("aria-label") ?? "", active: tab.classList.contains("active") })),
  );
}

async function quickOpen(keys, text) {
  await page.keyboard.press(keys);
  const input = page.locator(".quick-input-widget .quick-input-box input");
  await input.waitFor({ state: "visible" });
  await input.fill(text);
}

/** A list's rows as shown: each row's label and whether it has the focus. */
function listRows(rowsSelector, labelSelector) {
  return page.$$eval(
    rowsSelector,
    (all, selector) =>
      all.map((row) => ({
        label: (row.querySelector(selector)?.textContent ?? row.getAttribute("aria-label") ?? "").trim(),
        focused: row.classList.contains("focused"),
      })),
    labelSelector,
  );
}

/** What `chooseRow` answers when the list closed under it before the row was chosen. */
const CLOSED = Symbol("the list closed");

/**
 * Runs the row labelled `label` of a list (the quick input's, the code actions'): waits for it,
 * moves the focus to it with the arrow keys (each step waits for the focus to move) and presses
 * Enter, as a user does from the keyboard. With `closable`, a list seen empty (VS Code closed it)
 * answers CLOSED instead of waiting on: the caller opens it again, as the user would.
 */
async function chooseRow(rowsSelector, labelSelector, label, closable = false) {
  const rows = () => listRows(rowsSelector, labelSelector);
  const closed = (all) => closable && all.length === 0;
  let focused = await until(`"${label}" in the list`, async () => {
    const all = await rows();
    const focus = all.find((row) => row.focused)?.label;
    if (closed(all)) {
      return { done: true, value: CLOSED, seen: all };
    }
    return { done: all.some((row) => row.label === label) && focus !== undefined, value: focus, seen: all };
  });
  for (let step = 0; focused !== label; step++) {
    if (focused === CLOSED) {
      return CLOSED;
    }
    if (step > 50) {
      throw new Error(`the arrow keys never reached "${label}" (the focus stayed on "${focused}")`);
    }
    const from = focused;
    await page.keyboard.press("ArrowDown");
    focused = await until(`the focus to move down from "${from}"`, async () => {
      const all = await rows();
      const focus = all.find((row) => row.focused)?.label;
      if (closed(all)) {
        return { done: true, value: CLOSED, seen: all };
      }
      return { done: focus !== undefined && focus !== from, value: focus, seen: focus };
    });
  }
  await page.keyboard.press("Enter");
  return label;
}

function pickRow(label) {
  return chooseRow(".quick-input-widget .quick-input-list .monaco-list-row", ".label-name", label);
}

const ACTION_ROWS = ".action-widget .monaco-list-row";

/** The code actions' list as shown (each row's title), and VS Code's message when it found none. */
async function codeActionsShown() {
  const rows = (await listRows(ACTION_ROWS, ".title")).map((row) => row.label);
  const message = await page.evaluate(
    () => document.querySelector(".monaco-editor-overlaymessage .message")?.textContent?.trim() || null,
  );
  return { rows, message };
}

/**
 * Opens the code actions at the cursor (Ctrl+.) and runs the one titled `title`. VS Code closes
 * the list when what the editor shows changes under it (a build's result arriving refreshes the
 * diagnostics, lenses and hints), and answers "No code actions available" while the client
 * re-pulls the diagnostics; both are seen on the page, and the user presses Ctrl+. again. Each
 * reopening is recorded in `reopened` (the phase's observations), never silently. Answers the
 * titles of the list the action was run from.
 */
async function runCodeAction(title, reopened) {
  for (let attempt = 1; ; attempt++) {
    await openCodeActions();
    const shown = await until("the code actions' list, or VS Code's message that there are none", async () => {
      const now = await codeActionsShown();
      return { done: now.rows.length > 0 || now.message !== null, value: now, seen: now };
    });
    const outcome =
      shown.rows.length > 0 ? await chooseRow(ACTION_ROWS, ".title", title, true) : `VS Code: ${shown.message}`;
    if (outcome === title) {
      return shown.rows;
    }
    const why = outcome === CLOSED ? "the list closed before the action was chosen" : outcome;
    if (attempt === 3) {
      throw new Error(`Ctrl+. three times without running "${title}": ${[...reopened, why].join("; ")}`);
    }
    reopened.push(why);
    await page.keyboard.press("Escape");
  }
}

/** The active editor group's index and its active tab's label. */
function activeEditor() {
  return page.$$eval(".part.editor .editor-group-container", (groups) => {
    const index = groups.findIndex((group) => group.classList.contains("active"));
    const tab = groups[index]?.querySelector(".tab.active");
    return { group: index, tab: tab?.getAttribute("aria-label") ?? null };
  });
}

/**
 * The model, active in the first editor group: where the user edits, with the report, the
 * explanation and the compare view opening beside it.
 */
async function openModel() {
  await page.keyboard.press("Control+1");
  await until("the first editor group focused", async () => {
    const active = await activeEditor();
    return { done: active.group === 0, seen: active };
  });
  await quickOpen("Control+P", config.file);
  await pickRow(path.basename(config.file));
  await until(`${config.file} active in the first editor group`, async () => {
    const active = await activeEditor();
    return { done: active.group === 0 && active.tab?.startsWith(path.basename(config.file)), seen: active };
  });
}

async function goToLine(line, column) {
  await quickOpen("Control+G", `:${line}:${column}`);
  await page.keyboard.press("Enter");
  await until(`the cursor on line ${line}`, async () => {
    const items = await statusItems();
    const position = items.find((item) => /^Ln \d+, Col \d+/.test(item.text));
    return { done: position?.text.startsWith(`Ln ${line}, Col ${column}`), seen: position?.text };
  });
}

/** Each status bar text as it appears (a MutationObserver records it however briefly it shows). */
async function watchStatusBar() {
  await page.waitForSelector(".part.statusbar");
  await page.evaluate(() => {
    const bar = document.querySelector(".part.statusbar");
    const appeared = [];
    let shown = new Set();
    window.__lowerdStatusAppeared = appeared;
    const record = () => {
      const now = new Set([...bar.querySelectorAll(".statusbar-item")].map((item) => (item.textContent ?? "").trim()));
      for (const text of now) {
        if (text && !shown.has(text)) {
          appeared.push(text);
        }
      }
      shown = now;
    };
    new MutationObserver(record).observe(bar, { subtree: true, childList: true, characterData: true });
    record();
  });
}

/** The status bar texts that appeared since `from` (an earlier answer's length). */
function statusAppeared(from = 0) {
  return page.evaluate((start) => window.__lowerdStatusAppeared.slice(start), from);
}

/** Ctrl+. at the cursor once the light bulb says the line has code actions. */
async function openCodeActions() {
  await until("the light bulb of the line's code actions", async () => ({
    done: await page.locator(".editor-group-container.active .monaco-editor .lightBulbWidget").isVisible(),
  }));
  await page.keyboard.press("Control+.");
}

// The phases ------------------------------------------------------------------------------------

const { lines } = config;
const isLowerdWarning = (p, line, op) =>
  p.severity === "Warning" && p.line === line && p.message.includes(`${op} not delegated`);

try {
  await phase("open", async () => {
    await page.goto(config.url);
    await page.waitForSelector(".monaco-workbench .part.editor", { state: "attached" });
    await watchStatusBar();
    await openModel();
    return { tabs: await tabs() };
  });

  await phase("problems", async () => {
    await page.keyboard.press("Control+Shift+M");
    return until("the not-delegated warnings at the pow and cumsum lines in Problems", async () => {
      const rows = await problems();
      const done =
        rows.some((p) => isLowerdWarning(p, lines.pow, "aten.pow.Tensor_Scalar")) &&
        rows.some((p) => isLowerdWarning(p, lines.cumsum, "aten.cumsum.default"));
      return { done, seen: rows };
    });
  });

  await phase("status-bar", () =>
    until("the coverage (XNNPACK NN %) in the status bar, not building", async () => {
      const items = await statusItems();
      const item = items.find((i) => /XNNPACK \d+ %/.test(i.text));
      return { done: item !== undefined && !item.spinning, seen: item ?? items.map((i) => i.text) };
    }),
  );

  await phase("code-lens", () =>
    until(`the coverage code lens right above line ${lines.entry}`, async () => {
      const lens = page.locator(".codelens-decoration a", { hasText: "ops on XNNPACK" }).first();
      const numbers = page.locator(".margin-view-overlays .line-numbers", { hasText: new RegExp(`^${lines.entry}$`) });
      if ((await lens.count()) === 0 || (await numbers.count()) === 0) {
        return { done: false, seen: await page.$$eval(".codelens-decoration", (all) => all.map((l) => l.textContent)) };
      }
      const [lensBox, lineBox] = [await lens.boundingBox(), await numbers.first().boundingBox()];
      const gap = lineBox && lensBox ? lineBox.y - (lensBox.y + lensBox.height) : NaN;
      const text = await lens.textContent();
      const all = await page.$$eval(".codelens-decoration", (l) => l.map((e) => e.textContent));
      return { done: gap >= -1 && gap < lineBox.height, seen: { text, gap, lenses: all } };
    }),
  );

  // The target is verified (verify = true): once its .pte has run on this host's runtime, the
  // coverage lens carries each method's host latency.
  await phase("verified-lens", () =>
    until("the host latency (forward … ms here) in the coverage code lens", async () => {
      const texts = await page.$$eval(".codelens-decoration a", (all) => all.map((a) => (a.textContent ?? "").trim()));
      const lens = texts.find((text) => text.includes("ops on XNNPACK"));
      return { done: / · forward [\d.e+-]+ ms here · XNNPACK #1 /.test(lens ?? ""), value: lens, seen: texts };
    }),
  );

  await phase("inlay-hints", () =>
    until("→ CPU at the pow and cumsum lines, → XNNPACK #1 at the first Linear's", async () => {
      const seen = {
        linear: await viewLine(config.linearMark),
        pow: await viewLine(config.powMark),
        cumsum: await viewLine(config.cumsumMark),
      };
      const done =
        seen.pow?.endsWith("→ CPU") && seen.cumsum?.endsWith("→ CPU") && seen.linear?.endsWith("→ XNNPACK #1");
      return { done, seen };
    }),
  );

  await phase("report-from-lens", async () => {
    await page.locator(".codelens-decoration a", { hasText: "ops on XNNPACK" }).first().click();
    await until('a "lowerd report" tab', async () => {
      const all = await tabs();
      return { done: all.some((t) => t.label.startsWith("lowerd report")), seen: all };
    });
    const text = await until("the report webview listing the refused ops at their lines", async () => {
      const texts = await webviewTexts();
      const report = texts.find((t) => t.includes("aten.pow.Tensor_Scalar") && t.includes(`${config.file}:${lines.pow}`));
      return { done: report !== undefined && report.includes(`${config.file}:${lines.cumsum}`), seen: report ?? texts };
    });
    return { text: text.slice(0, 2000) };
  });

  await phase("build-target", async () => {
    // The target's .pte deleted (the server does not watch its output): the build is stale and
    // only the command rebuilds it.
    rmSync(config.pte);
    await openModel();
    const before = (await statusAppeared()).length;
    await quickOpen("F1", ">lowerd: Build target");
    await pickRow("lowerd: Build target…");
    await pickRow(config.target);
    // The build shows as VS Code's window progress in the status bar ("lowerd: refused: …" with a
    // spinner); then the coverage again, and the .pte is back.
    return until(`the build of ${config.target} in the status bar, its coverage, then its .pte`, async () => {
      const appeared = await statusAppeared(before);
      const items = await statusItems();
      const coverage = items.find((i) => /XNNPACK \d+ %/.test(i.text));
      const built = appeared.some((text) => text.includes(config.target));
      const done = built && coverage !== undefined && !coverage.spinning && existsSync(config.pte);
      return { done, seen: { appeared, coverage } };
    });
  });

  await phase("code-action", async () => {
    await openModel();
    await goToLine(lines.pow, config.columns.pow);
    const reopened = [];
    const titles = await runCodeAction(`lowerd: Explain this rebuild of ${config.target}`, reopened);
    const document = await until("the explanation document beside the code", async () => {
      const text = await page.$$eval(".editor-group-container.active .monaco-editor .view-lines .view-line", (all) =>
        all.map((line) => (line.textContent ?? "").replace(/\u00a0/g, " ")).join("\n"),
      );
      return { done: text.includes("# lowerd explain") && text.includes(config.target), seen: { text, tabs: await tabs() } };
    });
    return { titles, reopened, document };
  });

  await phase("compare-view", async () => {
    await openModel();
    await goToLine(lines.cumsum, config.columns.cumsum);
    const reopened = [];
    await runCodeAction(`lowerd: Compare backends for ${config.target}`, reopened);
    await until('a "lowerd compare" tab', async () => {
      const all = await tabs();
      return { done: all.some((t) => t.label.startsWith("lowerd compare")), seen: all };
    });
    const text = await until("the compare view's table with an XNNPACK column", async () => {
      const texts = await webviewTexts();
      // Past "Lowering refused with each backend…": the table, a column per backend.
      const heading = `${config.target}, one backend at a time`;
      const view = texts.find((t) => t.includes(heading) && t.includes("XNNPACK") && t.includes("coverage"));
      return { done: view !== undefined, value: view, seen: texts.map((t) => t.slice(0, 500)) };
    });
    return { text: text.slice(0, 2000), reopened };
  });

  await phase("save-fix", async () => {
    await openModel();
    await page.keyboard.press("Control+H");
    const find = page.locator(".editor-group-container.active .find-widget .find-part textarea");
    const replace = page.locator(".editor-group-container.active .find-widget .replace-part textarea");
    await find.fill(config.editFrom);
    await replace.fill(config.editTo);
    await until(`the find widget matching ${config.editFrom}`, async () => {
      const count = await page.locator(".editor-group-container.active .find-widget .matchesCount").textContent();
      return { done: /^1 of 1$/.test((count ?? "").trim()), seen: count };
    });
    await replace.press("Control+Alt+Enter");
    await page.keyboard.press("Escape");
    await until(`${config.editTo} in the editor`, async () => {
      const line = await viewLine(config.powMark);
      return { done: line?.includes(config.editTo), seen: line };
    });
    await page.keyboard.press("Control+S");
    await until("the tab saved (not dirty)", async () => {
      // The active group's tab: the other group's (an untitled explanation) can stay dirty.
      const dirty = await page.locator(".editor-group-container.active .tabs-container .tab.active.dirty").count();
      return { done: dirty === 0, seen: await tabs() };
    });
    return until("the pow warning gone from Problems, the cumsum one kept, → XNNPACK at the pow line", async () => {
      const rows = await problems();
      const pow = await viewLine(config.powMark);
      const done =
        !rows.some((p) => p.line === lines.pow && p.message.includes("aten.pow")) &&
        rows.some((p) => isLowerdWarning(p, lines.cumsum, "aten.cumsum.default")) &&
        /→ XNNPACK #\d+$/.test(pow ?? "");
      return { done, seen: { rows, pow } };
    });
  });
} catch (error) {
  result.message = error instanceof Error ? error.stack ?? error.message : String(error);
} finally {
  result.ok = result.phases.length > 0 && result.phases.every((p) => p.ok) && !result.message;
  result.seconds = (Date.now() - started) / 1000;
  save();
  await browser.close();
}
console.log(`[${seconds()} s] ${result.ok ? "ok" : "FAILED"}`);
process.exit(result.ok ? 0 : 1);
