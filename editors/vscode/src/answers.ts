/**
 * What the server's lowerd.explain and lowerd.stockScript commands answer, read defensively:
 * the text to show (or copy), or the error to say.
 */

export type Answer = { text: string } | { error: string };

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** `lowerd explain --json`'s document as its printed lines (each target's `lines`). */
export function explanationText(answer: unknown): Answer {
  if (!isRecord(answer)) {
    return { error: "lowerd.explain gave no answer" };
  }
  if (typeof answer.error === "string" && answer.error) {
    return { error: answer.error };
  }
  const targets = Array.isArray(answer.targets) ? answer.targets.filter(isRecord) : [];
  const blocks = targets.map((target) => {
    const lines = Array.isArray(target.lines) ? target.lines.filter((l) => typeof l === "string") : [];
    return ["```", ...lines, "```"].join("\n");
  });
  if (blocks.length === 0) {
    return { error: "nothing to explain" };
  }
  return { text: `# lowerd explain\n\n${blocks.join("\n\n")}\n` };
}

/** lowerd.stockScript's script. */
export function stockScriptText(answer: unknown): Answer {
  if (!isRecord(answer)) {
    return { error: "lowerd.stockScript gave no answer" };
  }
  if (typeof answer.error === "string" && answer.error) {
    return { error: answer.error };
  }
  return typeof answer.script === "string" && answer.script
    ? { text: answer.script }
    : { error: "lowerd.stockScript gave no script" };
}

/** lowerd.reportPage's page (`lowerd report --html` of the server's last results). */
export function reportPageText(answer: unknown): Answer {
  if (!isRecord(answer)) {
    return { error: "lowerd.reportPage gave no page" };
  }
  if (typeof answer.error === "string" && answer.error) {
    return { error: answer.error };
  }
  return typeof answer.html === "string" ? { text: answer.html } : { error: "lowerd.reportPage gave no page" };
}
