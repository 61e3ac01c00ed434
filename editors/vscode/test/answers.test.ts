import { describe, expect, it } from "vitest";

import { explanationText, reportPageText, stockScriptText } from "../src/answers";

describe("server answers", () => {
  it("shows each target's explanation lines as printed", () => {
    const answer = {
      targets: [
        { name: "net", lines: ["net: rebuilt 1 of 2 partitions (1 from the cache)", "  models/net.py changed (line 4)"] },
      ],
    };
    expect(explanationText(answer)).toEqual({
      text: "# lowerd explain\n\n```\nnet: rebuilt 1 of 2 partitions (1 from the cache)\n  models/net.py changed (line 4)\n```\n",
    });
  });

  it("says the server's error, or that there was nothing", () => {
    expect(explanationText({ targets: [], error: "no lowerd project is loaded" })).toEqual({
      error: "no lowerd project is loaded",
    });
    expect(explanationText({ targets: [] })).toEqual({ error: "nothing to explain" });
    expect(explanationText(null)).toEqual({ error: "lowerd.explain gave no answer" });
  });

  it("takes the stock script, or says why there is none", () => {
    expect(stockScriptText({ target: "net", script: "import torch\n" })).toEqual({ text: "import torch\n" });
    expect(stockScriptText({ error: "expected one target of net" })).toEqual({ error: "expected one target of net" });
    expect(stockScriptText({ target: "net" })).toEqual({ error: "lowerd.stockScript gave no script" });
  });
});

describe("the graph report's page", () => {
  it("takes the server's page as it is, or says its error", () => {
    expect(reportPageText({ html: "<!DOCTYPE html><svg></svg>" })).toEqual({ text: "<!DOCTYPE html><svg></svg>" });
    expect(reportPageText({ error: "unknown targets: nope" })).toEqual({ error: "unknown targets: nope" });
    expect(reportPageText(undefined)).toEqual({ error: "lowerd.reportPage gave no page" });
  });
});
