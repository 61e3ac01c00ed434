"""`lowerd serve` end to end: a real LSP client (testkit's driver, over pygls' client) drives the
real server over stdio, on a copy of tests/projects/editor, with real builds in the real worker
pool.

One server serves the whole module (its fork server's warm-up costs seconds). Before each test
the `editor` fixture puts the project back as it was (files, settings), has every target built
(an unchanged one is answered from its build record) and waits until the server shows the
project's known state; a test that finds anything else fails at that point, it is not skipped.
Edits are written atomically (a build never reads a half-written file). Tests wait for events
(diagnostics, the server's lowerd/buildStarted and lowerd/buildFinished notifications), checked
as each arrives, with one deadline, helpers.DEADLINE, that only guards against a hang; nothing
measures time.
"""

from __future__ import annotations

import asyncio
import html
import importlib.util
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from lsprotocol import types
from pygls.uris import to_fs_path
from pytest_lsp import client_capabilities

from lowerd.daemon.diagnostics import PROVISIONAL_NOTE

from helpers import DEADLINE, PROJECTS, async_wait_until, line_marks
from stock import forget_project_modules, run_stock_script
from testkit.lsp_driver import LspDriver
from testkit.lsp_events import BuildFinished, Progress, Published
from testkit.ports import free_port
from testkit.projects import copy_project, write_text_atomic

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.e2e]

PROJECT = PROJECTS / "editor"
TARGETS = ["net", "norms", "refused"]
# The editor's settings at start; a test that changes one, changes it back.
SETTINGS = {
    "notDelegatedSeverity": "warning",
    "workerTimeout": None,
    "workerMemoryLimit": None,
    "inlayHints": True,
}


# The editor: the shared LSP driver, with the project's LINE-MARKs and its known state --------


class Editor(LspDriver):
    """testkit's driver on the module's copy of tests/projects/editor."""

    def line(self, mark: str) -> tuple[str, int]:
        """(file relative to the root, 1-based line) of a LINE-MARK."""
        marks = line_marks(self.root)
        assert mark in marks, f"no LINE-MARK {mark}"
        return marks[mark]

    def at(self, mark: str, code: str | None = None) -> list[types.Diagnostic]:
        relative, line = self.line(mark)
        return [
            d
            for d in self.diagnostics(relative)
            if d.range.start.line == line - 1 and (code is None or d.code == code)
        ]

    def replace_line(self, mark: str, new: str) -> tuple[str, str]:
        """The text of the mark's file with its line replaced (indentation kept) and the text
        before: (edited, original)."""
        relative, line = self.line(mark)
        original = self.path(relative).read_text()
        lines = original.splitlines(keepends=True)
        indent = lines[line - 1][: len(lines[line - 1]) - len(lines[line - 1].lstrip())]
        lines[line - 1] = f"{indent}{new}  # LINE-MARK: {mark}\n"
        return "".join(lines), original

    async def reset(self) -> None:
        """The project, the settings and what the server shows, as they were at start.

        Files a test changed are saved back; then every target is built, which cancels a build
        still running and answers an unchanged target from its record, and the server's state
        is awaited: each target's current result ok, the known diagnostics, no open progress.
        """
        set_settings(self, SETTINGS)
        for source in sorted(PROJECT.rglob("*")):
            if source.is_file() and not {"build", "__pycache__"} & set(source.parts):
                relative = source.relative_to(PROJECT).as_posix()
                if self.path(relative).read_text() != source.read_text():
                    self.save(relative, source.read_text())
        since = len(self.events)
        built = await self.execute_command("lowerd.buildAll")
        statuses = {t.get("name"): t.get("status") for t in built.get("targets", [])}
        assert statuses == dict.fromkeys(TARGETS, "ok"), f"the restored project: {built}"
        for target in TARGETS:
            await self.built(target, since)
        await self.until("the restored project's diagnostics", self.shows_the_known_state)
        await self.until("every progress ended", self.progress_ended)

    def shows_the_known_state(self) -> bool:
        net = {d.code for d in self.diagnostics("models/net.py")}
        refused = {
            (d.range.start.line, d.severity)
            for d in self.diagnostics("models/refused.py")
            if d.code == "not-delegated"
        }
        warned = {
            (self.line(mark)[1] - 1, types.DiagnosticSeverity.Warning)
            for mark in ("refused.pow", "refused.cumsum")
        }
        return net == {"coverage"} and refused == warned and not self.diagnostics("pyproject.toml")

    def progress_ended(self) -> bool:
        return all(
            isinstance(values[-1], types.WorkDoneProgressEnd)
            for values in self.progress.values()
            if values
        )


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_project(PROJECT, tmp_path_factory.mktemp("editor") / "project")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lsp(project: Path, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Editor]:
    """The module's one server, with its first build of every target done."""
    editor = Editor(project, DEADLINE)
    env = dict(os.environ, LOWERD_CACHE_DIR=str(tmp_path_factory.mktemp("cache")))
    await editor.start(env=env)
    await editor.initialize(
        client_capabilities("visual-studio-code"), {"notDelegatedSeverity": "warning"}
    )
    for target in TARGETS:
        await editor.built(target, 0)
    yield editor
    await editor.stop()


@pytest_asyncio.fixture(loop_scope="module")
async def editor(lsp: Editor) -> Editor:
    """The module's server, reset to the project's known state before the test."""
    await lsp.reset()
    return lsp


# What the editor shows ----------------------------------------------------------------------


async def test_open_shows_refused_ops_at_their_lines_and_coverage(editor: Editor) -> None:
    editor.open("models/refused.py")
    await editor.until("pow warning", lambda: editor.at("refused.pow", "not-delegated"))
    [pow_warning] = editor.at("refused.pow", "not-delegated")
    assert pow_warning.severity == types.DiagnosticSeverity.Warning
    assert "aten.pow.Tensor_Scalar" in pow_warning.message
    assert "only support power == 2, got 3" in pow_warning.message
    [cumsum] = editor.at("refused.cumsum", "not-delegated")
    assert "aten.cumsum.default" in cumsum.message and "no XNNPACK support" in cumsum.message
    summary = "forward: 2 of 4 ops on XNNPACK in 2 partitions (50 %)"
    for mark in ("refused.entry", "refused.module"):
        [coverage] = editor.at(mark, "coverage")
        assert summary in coverage.message
        assert coverage.severity == types.DiagnosticSeverity.Information
    assert not editor.at("refused.linear")
    assert all(d.source == "lowerd" for d in editor.diagnostics("models/refused.py"))
    # The build's details at the entry: which way edge generation ran, and the gate that refused
    # (this small model has no layers to go by region).
    [details] = await editor.until(
        "the edge generation path at the entry",
        lambda: [
            d.message
            for d in editor.at("refused.entry", "coverage")
            if "edge generation" in d.message
        ],
    )
    assert re.search(r"\nedge generation: stock \(.+\)$", details), details
    assert all("edge generation" not in d.message for d in editor.at("refused.module", "coverage"))
    # The fully delegated model: coverage only.
    net = editor.diagnostics("models/net.py")
    assert {d.code for d in net} == {"coverage"}
    assert "forward: 2 of 2 ops on XNNPACK in 1 partition (100 %)" in net[0].message


async def test_coverage_is_shown_before_the_build_finishes(editor: Editor) -> None:
    """Diagnostics-first: the partitioned report is published before preprocess and emission
    end, so the first coverage for net.py precedes the end of net's first build."""
    uri = editor.uri("models/net.py")
    coverage = [
        i
        for i, e in enumerate(editor.events)
        if isinstance(e, Published)
        and e.uri == uri
        and any(d.code == "coverage" for d in e.diagnostics)
    ]
    finished = [
        i for i, e in enumerate(editor.events) if isinstance(e, BuildFinished) and e.target == "net"
    ]
    assert coverage and finished, editor.events[:20]
    assert coverage[0] < finished[0]


async def test_progress_reports_build_stages(editor: Editor) -> None:
    reports = editor.progress
    builds = [values for values in reports.values() if values]
    assert builds, "no $/progress"
    for values in builds:
        assert isinstance(values[0], types.WorkDoneProgressBegin)
        assert isinstance(values[-1], types.WorkDoneProgressEnd)
    messages = " ".join(
        v.message or "" for vs in builds for v in vs if isinstance(v, types.WorkDoneProgressReport)
    )
    for stage in ("export", "partition", "preprocess 1/1", "emit"):
        assert stage in messages


async def test_code_lens_and_hover(editor: Editor) -> None:
    relative, entry_line = editor.line("refused.entry")
    lenses = await editor.answer(
        editor.client.text_document_code_lens_async(
            types.CodeLensParams(types.TextDocumentIdentifier(editor.uri(relative)))
        )
    )
    assert lenses and all(lens.range.start.line == entry_line - 1 for lens in lenses)
    titles = {lens.command.title: lens.command for lens in lenses if lens.command}
    [summary] = [title for title in titles if "forward: 2 of 4 ops on XNNPACK" in title]
    assert titles[summary].command == "lowerd.report"
    assert titles["Build .pte"].command == "lowerd.build"
    assert list(titles["Build .pte"].arguments) == ["refused"]
    # Lenses are refreshed when builds end, so their titles follow the coverage.
    assert editor.refreshed(types.WORKSPACE_CODE_LENS_REFRESH)

    async def hover(mark: str) -> str | None:
        relative, line = editor.line(mark)
        found = await editor.answer(
            editor.client.text_document_hover_async(
                types.HoverParams(
                    types.TextDocumentIdentifier(editor.uri(relative)), types.Position(line - 1, 8)
                )
            )
        )
        return found.contents.value if found else None

    linear = await hover("refused.linear")
    # A miss in the first build; a hit if a test before had it rebuilt.
    assert linear and "`aten.linear.default`: XNNPACK partition 1 of 2, cache " in linear
    refused = await hover("refused.pow")
    assert refused and "`aten.pow.Tensor_Scalar`: **not delegated**: only support power" in refused
    assert await hover("refused.module") is None


async def test_ops_made_in_a_library_link_its_line_from_the_users_line(editor: Editor) -> None:
    """Issue 11: norms' RMSNorm mean and add are made in torch.nn's normalization.py. The
    warning sits at the user's line and carries relatedInformation at RMSNorm.forward's line (a
    click in the editor opens it), with the layers' module paths collapsed; the hover says the
    same; the coverage lens says how many fixes would leave one partition."""
    editor.open("models/norms.py")
    await editor.until("norm warning", lambda: editor.at("norms.norm", "not-delegated"))
    [warning] = editor.at("norms.norm", "not-delegated")
    assert "aten.mean.dim ×3" in warning.message and "aten.add.Scalar ×3" in warning.message
    normalization = torch_file("nn", "modules", "normalization.py")
    related = warning.related_information or []
    assert len(related) == 2, warning
    for info in related:
        assert os.path.realpath(to_fs_path(info.location.uri) or "") == str(normalization)
        line = normalization.read_text().splitlines()[info.location.range.start.line]
        assert "F.rms_norm(" in line, line
        assert "RMSNorm.forward of layers.{0..2}.norm" in info.message, info.message

    relative, line = editor.line("norms.norm")
    hover = await editor.answer(
        editor.client.text_document_hover_async(
            types.HoverParams(
                types.TextDocumentIdentifier(editor.uri(relative)), types.Position(line - 1, 8)
            )
        )
    )
    assert hover is not None
    assert "in `RMSNorm.forward` at [normalization.py:" in hover.contents.value
    assert "· `layers.{0..2}.norm`" in hover.contents.value

    relative, _ = editor.line("norms.entry")
    lenses = await editor.answer(
        editor.client.text_document_code_lens_async(
            types.CodeLensParams(types.TextDocumentIdentifier(editor.uri(relative)))
        )
    )
    titles = [lens.command.title for lens in lenses if lens.command]
    assert any("in 4 partitions" in t and "would make this 1 partition" in t for t in titles)


def torch_file(*parts: str) -> Path:
    """A file of the installed torch, found without importing it."""
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.submodule_search_locations
    return Path(os.path.realpath(Path(spec.submodule_search_locations[0], *parts)))


async def test_not_delegated_severity_follows_the_setting(editor: Editor) -> None:
    """A settings change re-publishes what is shown; nothing is rebuilt for it."""
    since = len(editor.events)
    for setting, severity in [
        ("hint", types.DiagnosticSeverity.Hint),
        ("warning", types.DiagnosticSeverity.Warning),
    ]:
        editor.configure({"notDelegatedSeverity": setting})
        await editor.until(
            setting,
            lambda severity=severity: [
                d for d in editor.at("refused.pow", "not-delegated") if d.severity == severity
            ],
        )
    assert not editor.started("refused", since) and not editor.finished("refused", since)


async def test_inlay_hints_say_where_each_lines_ops_ran_and_follow_moved_lines(
    editor: Editor,
) -> None:
    async def hints() -> dict[int, types.InlayHint]:
        everything = types.Range(types.Position(0, 0), types.Position(10_000, 0))
        found = await editor.answer(
            editor.client.text_document_inlay_hint_async(
                types.InlayHintParams(
                    text_document=types.TextDocumentIdentifier(editor.uri("models/refused.py")),
                    range=everything,
                )
            )
        )
        return {hint.position.line + 1: hint for hint in found or []}

    def expected() -> dict[int, str]:
        line = {mark: editor.line(f"refused.{mark}")[1] for mark in ("linear", "pow", "cumsum")}
        return {
            line["linear"]: "→ XNNPACK #1",
            line["pow"]: "→ CPU",
            line["cumsum"]: "→ CPU",
            line["cumsum"] + 1: "→ XNNPACK #2",  # return self.fc2(x)
        }

    found = await hints()
    assert {line: hint.label for line, hint in found.items()} == expected()
    pow_line = editor.line("refused.pow")[1]
    text = editor.path("models/refused.py").read_text().splitlines()[pow_line - 1]
    assert found[pow_line].position.character == len(text.rstrip())
    tooltip = found[pow_line].tooltip
    assert isinstance(tooltip, types.MarkupContent)
    assert tooltip.value.startswith("- `aten.pow.Tensor_Scalar` → CPU: ")

    # An edit that moves the code: the hints move with it, as the diagnostics do. Comments and
    # layout only: the worker keeps the .pte without loading the entry (lowering/token_keep.py).
    original = editor.path("models/refused.py").read_text()
    moved = original.replace("import torch\n", "import torch\n\n# two lines more above\n", 1)
    since = len(editor.events)
    editor.save("models/refused.py", moved)
    assert (await editor.built("refused", since))["reused"] == "same-source"
    await editor.until("the warnings at the moved lines", editor.shows_the_known_state)
    found = await hints()
    assert {line: hint.label for line, hint in found.items()} == expected()
    assert min(found) == pow_line - 1 + 2  # the linear's line, two lines down

    set_settings(editor, {"inlayHints": False})  # handled before the request that follows it
    assert await hints() == {}


async def test_inlay_hints_on_a_fifo_a_device_or_a_huge_file_are_none_and_answered(
    editor: Editor, tmp_path: Path
) -> None:
    """A FIFO's URI blocked the whole server (the read waited for a writer); /dev/zero's read
    until MemoryError. Only regular files under the cap are read."""
    fifo, huge = tmp_path / "pipe.py", tmp_path / "huge.py"
    os.mkfifo(fifo)
    with huge.open("wb") as sparse:
        sparse.truncate(64 * 1024 * 1024)
    everything = types.Range(types.Position(0, 0), types.Position(10_000, 0))
    for uri in (fifo.as_uri(), "file:///dev/zero", huge.as_uri()):
        params = types.InlayHintParams(types.TextDocumentIdentifier(uri), everything)
        found = await editor.answer(editor.client.text_document_inlay_hint_async(params))
        assert not found, (uri, found)
    report = await editor.execute_command("lowerd.report")
    assert {t["name"] for t in report["targets"]} == set(TARGETS)


async def test_code_actions_on_a_warning_and_the_stock_script_they_copy(
    editor: Editor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The actions on a not-delegated warning, found at the cursor from the server's own
    diagnostics (the request's context is empty, as vscode-languageclient's copy can be for a
    moment); *Copy a stock ExecuTorch script* copies what the server's lowerd.stockScript
    answers, which writes the bytes of lowerd's .pte."""
    [warning] = editor.at("refused.pow", "not-delegated")
    uri = editor.uri("models/refused.py")

    async def actions_at(where: types.Position) -> list[types.CodeAction]:
        found = await editor.answer(
            editor.client.text_document_code_action_async(
                types.CodeActionParams(
                    text_document=types.TextDocumentIdentifier(uri),
                    range=types.Range(where, where),
                    context=types.CodeActionContext(diagnostics=[]),
                )
            )
        )
        return [a for a in found or [] if isinstance(a, types.CodeAction)]

    start = warning.range.start
    actions = await actions_at(types.Position(start.line, start.character + 1))
    line = editor.line("refused.pow")[1]
    found = [(a.title, a.command.command, list(a.command.arguments)) for a in actions if a.command]
    assert found == [
        ("lowerd: Show in report (refused)", "lowerd.showInReport", ["refused", uri, line]),
        ("lowerd: Compare backends for refused", "lowerd.compareBackends", ["refused"]),
        ("lowerd: Explain this rebuild of refused", "lowerd.explainRebuild", ["refused"]),
        (
            "lowerd: Copy a stock ExecuTorch script for refused",
            "lowerd.copyStockScript",
            ["refused"],
        ),
    ]
    assert all([d.message for d in a.diagnostics or []] == [warning.message] for a in actions)
    above = warning.range.start.line - 1  # the fc1 line: delegated, nothing lowerd says there
    assert await actions_at(types.Position(above, 0)) == []

    answer = await editor.execute_command("lowerd.stockScript", "refused")
    report = await editor.execute_command("lowerd.report", "refused")
    [refused] = report["targets"]
    forget_project_modules(editor.root)
    written = run_stock_script(answer["script"], tmp_path / "stock", monkeypatch)
    forget_project_modules(editor.root)
    assert written == {"refused.pte": refused["sha256"]}


async def test_the_graph_view_is_the_html_report_of_the_last_build(editor: Editor) -> None:
    """lowerd.reportPage: `lowerd report --html`'s page, made by the server from its results."""
    answer = await editor.execute_command("lowerd.reportPage", "refused")
    page = answer["html"]
    assert page.startswith("<!DOCTYPE html>") and 'id="t-refused-forward-op-' in page
    [svg] = re.findall(r"<svg.*?</svg>", html.unescape(page), flags=re.S)
    nodes = re.findall(r'<g id="[^"]*node-\d+" class="([^"]*)"', svg)
    assert [classes.split()[-1] for classes in nodes] == ["p0", "cpu", "cpu", "p1"]
    assert "two_methods" not in page and 'id="t-net-' not in page
    unknown = await editor.execute_command("lowerd.reportPage", "nope")
    assert unknown == {"error": "unknown targets: nope"}
    # An argument of the wrong type: the converter's error, in the command's own answer.
    wrong = await editor.execute_command("lowerd.reportPage", 5)
    assert wrong == {"error": "targets[0]: expected str, got int 5"}


async def test_commands_report_and_build(editor: Editor) -> None:
    report = await editor.execute_command("lowerd.report")
    targets = {t["name"]: t for t in report["targets"]}
    assert set(targets) == set(TARGETS)
    assert targets["refused"]["methods"]["forward"]["ops_delegated"] == 2
    built = await editor.execute_command("lowerd.build", "net")
    [net] = built["targets"]
    assert net["status"] == "ok" and Path(net["output"]).is_file()


async def test_command_explain_answers_what_lowerd_explain_prints(editor: Editor) -> None:
    """The editor's *Explain this rebuild* shows the document `lowerd explain --json` prints."""
    from lowerd.project.config import load_config
    from lowerd.project.explain import explain_targets
    from lowerd.project.wire import encode

    answer = await editor.execute_command("lowerd.explain", "refused")
    expected = encode(explain_targets(load_config(editor.path("pyproject.toml")), ["refused"]))
    assert answer == expected and answer["targets"][0]["lines"][0].startswith("refused: ")
    unknown = await editor.execute_command("lowerd.explain", "nope")
    assert unknown["targets"] == [] and "nope" in unknown["error"]


async def test_the_server_process_never_loads_torch(editor: Editor) -> None:
    """User code, torch and ExecuTorch run in the worker processes only."""
    assert editor.process is not None
    server = editor.process.pid
    maps = Path(f"/proc/{server}/maps").read_text()
    assert "torch" not in maps and "executorch" not in maps
    # The check can see torch: the server's child, the fork server, has it loaded.
    children = Path(f"/proc/{server}/task/{server}/children").read_text().split()
    child_maps = [Path(f"/proc/{pid}/maps").read_text() for pid in children]
    assert any("libtorch" in m for m in child_maps)


# Edits and saves ------------------------------------------------------------------------------


async def test_an_op_xnnpack_refuses_warns_at_its_line_until_reverted(editor: Editor) -> None:
    editor.open("models/net.py")
    edited, original = editor.replace_line("net.edit", "x = x**3")
    since = len(editor.events)
    editor.save("models/net.py", edited)
    try:
        await editor.until("pow warning", lambda: editor.at("net.edit", "not-delegated"))
        [warning] = editor.at("net.edit", "not-delegated")
        assert "aten.pow.Tensor_Scalar" in warning.message
        assert (await editor.built("net", since))["status"] == "ok"
    finally:
        since = len(editor.events)
        editor.save("models/net.py", original)
    await editor.built("net", since)
    await editor.until("warning gone", lambda: not editor.at("net.edit"))
    assert {d.code for d in editor.diagnostics("models/net.py")} == {"coverage"}


@pytest.mark.parametrize(
    ("line", "code", "words"),
    [
        ("x = x if x.sum() > 0 else -x", "export-error", "torch.export of 'forward' failed"),
        ("x = = x", "entry-error", "syntax error"),
    ],
    ids=["export", "syntax"],
)
async def test_an_error_shows_at_its_line(editor: Editor, line: str, code: str, words: str) -> None:
    edited, original = editor.replace_line("net.edit", line)
    since = len(editor.events)
    editor.save("models/net.py", edited)
    try:
        await editor.until(code, lambda: editor.at("net.edit", code))
        [error] = editor.at("net.edit", code)
        assert error.severity == types.DiagnosticSeverity.Error and words in error.message
        # The stale coverage of the last good build is gone with it.
        assert {d.code for d in editor.diagnostics("models/net.py")} == {code}
        assert (await editor.built("net", since))["errorKind"] == code
    finally:
        since = len(editor.events)
        editor.save("models/net.py", original)
    assert (await editor.built("net", since))["status"] == "ok"
    await editor.until("error gone", lambda: not editor.at("net.edit"))


async def test_a_runtime_without_a_kernel_and_a_regressed_baseline_show_at_their_lines(
    editor: Editor,
) -> None:
    """[runtime] ops without cumsum and pow: an Error at each op's line (the .pte would not
    load); a committed baseline whose coverage the build falls short of: a Warning at the
    target's entry (docs/runtime.md)."""
    editor.open("models/refused.py")
    (editor.path("device_ops.yaml")).write_text("operators: {}\n")  # a runtime with no kernel
    (editor.path("lowerd.baseline.toml")).write_text("[targets.refused]\ncoverage_percent = 100\n")
    original = editor.path("pyproject.toml").read_text()
    entry = 'entry = "models/refused.py:make"\n'
    since = len(editor.events)
    editor.save(
        "pyproject.toml", original.replace(entry, entry + 'runtime.ops = "device_ops.yaml"\n')
    )
    try:
        await editor.until("missing kernel", lambda: editor.at("refused.cumsum", "missing-kernel"))
        [cumsum] = editor.at("refused.cumsum", "missing-kernel")
        assert cumsum.severity == types.DiagnosticSeverity.Error
        assert "aten::cumsum.out is not in the op list device_ops.yaml" in cumsum.message
        assert editor.at("refused.pow", "missing-kernel")
        [regressed] = editor.at("refused.entry", "baseline-regression")
        assert regressed.severity == types.DiagnosticSeverity.Warning
        assert "coverage_percent regressed from 100 to 50" in regressed.message
    finally:
        editor.path("lowerd.baseline.toml").unlink()
        since = len(editor.events)
        editor.save("pyproject.toml", original)
        editor.path("device_ops.yaml").unlink()
    await editor.built("refused", since)
    await editor.until("errors gone", lambda: not editor.at("refused.cumsum", "missing-kernel"))
    assert not editor.at("refused.entry", "baseline-regression")


async def test_a_refused_baseline_is_its_one_error_and_every_other_diagnostic_stays(
    editor: Editor, capfd: pytest.CaptureFixture[str]
) -> None:
    """A baseline value lowerd refuses (an integer of 401 digits, past a float's range) costs the
    baseline's warnings only: its one Error at the value's line of lowerd.baseline.toml, shown on
    its save, while the builds' coverage and refusals stay, through a rebuild too; the server
    logs no traceback (its stderr is this test's)."""
    baseline = "lowerd.baseline.toml"
    capfd.readouterr()
    editor.save(baseline, f"[targets.refused]\ncoverage_percent = 100\npartitions = {'9' * 401}\n")
    try:
        await editor.until("the baseline's error", lambda: editor.diagnostics(baseline))
        since = len(editor.events)
        await editor.execute_command("lowerd.buildAll")
        for target in TARGETS:
            await editor.built(target, since)
        await editor.until("the builds' diagnostics", editor.shows_the_known_state)
        [error] = editor.diagnostics(baseline)
        assert (error.severity, error.code) == (types.DiagnosticSeverity.Error, "config-error")
        assert error.range.start.line == 2, error
        assert error.message.startswith("partitions must be a finite number >= 0, got an integer")
        assert not editor.at("refused.entry", "baseline-regression")
    finally:
        editor.path(baseline).unlink()
    await editor.until("the error gone", lambda: not editor.diagnostics(baseline))
    assert "Traceback" not in capfd.readouterr().err


async def test_a_builds_diagnostics_come_before_its_build_finished(editor: Editor) -> None:
    """A client that acts on lowerd/buildFinished (a status line, a test) finds the build's
    diagnostics already published. A build that fails sends no partitioned report first, so
    its error reaches the client with the result alone: what is checked is the order in which
    the client received the two, not how long anything took."""
    edited, original = editor.replace_line("net.edit", "x = = x")
    since = len(editor.events)
    editor.save("models/net.py", edited)
    try:
        finished = await editor.built("net", since)
        assert finished["errorKind"] == "entry-error"
        [at] = [
            i
            for i, e in enumerate(editor.events)
            if isinstance(e, BuildFinished) and e.params is finished
        ]
        _, line = editor.line("net.edit")
        published_before = [
            d
            for e in editor.events[since:at]
            if isinstance(e, Published) and e.uri == editor.uri("models/net.py")
            for d in e.diagnostics
            if d.code == "entry-error" and d.range.start.line == line - 1
        ]
        assert published_before, f"buildFinished came first: {editor.events[since:]}"
    finally:
        since = len(editor.events)
        editor.save("models/net.py", original)
    assert (await editor.built("net", since))["status"] == "ok"
    await editor.until("error gone", lambda: not editor.at("net.edit"))


def _warnings_at(editor: Editor, since: int, mark: str) -> list[tuple[int, types.Diagnostic]]:
    """The not-delegated warnings published at the mark's line from event `since` on, with the
    index of the event that published each."""
    relative, line = editor.line(mark)
    uri = editor.uri(relative)
    return [
        (index, d)
        for index, e in enumerate(editor.events)
        if index >= since and isinstance(e, Published) and e.uri == uri
        for d in e.diagnostics
        if d.code == "not-delegated" and d.range.start.line == line - 1
    ]


def _first_stage(editor: Editor, since: int, stage: str) -> int | None:
    """The index of the first $/progress report of `stage` from event `since` on."""
    return next(
        (
            index
            for index, e in enumerate(editor.events)
            if index >= since
            and isinstance(e, Progress)
            and isinstance(e.value, types.WorkDoneProgressReport)
            and (e.value.message or "").split(" ")[0] == stage
        ),
        None,
    )


async def test_an_edited_submodule_is_refused_provisionally_first_then_exactly(
    editor: Editor,
) -> None:
    """Net's head swapped (Identity -> Running, whose cumsum XNNPACK refuses): the head is
    lowered alone once the entry is loaded, so the running sum's line is warned about, marked
    provisional, before the whole program is exported; the build's own partitioned report says
    it before emit, and replaces it. Without the edited region the provisional report is the
    last build's, which refused nothing."""
    edited, original = editor.replace_line("net.head", "self.head = Running()")
    since = len(editor.events)
    editor.save("models/net.py", edited)
    try:
        assert (await editor.built("net", since))["status"] == "ok"
        at_line = _warnings_at(editor, since, "net.running")
        said = [PROVISIONAL_NOTE in d.message for _, d in at_line]
        # Provisional first, then exact, never provisional again.
        assert said[0] and not said[-1] and said == sorted(said, reverse=True), at_line
        assert all("aten.cumsum.default" in d.message for _, d in at_line)
        # Before the first stage after load that the bar showed (one passing while the bar was
        # created is not shown), and the exact report before emit.
        later = [_first_stage(editor, since, stage) for stage in ("export", "partition", "emit")]
        assert at_line[0][0] < min(i for i in later if i is not None), "provisional late"
        exact = next(index for index, d in at_line if PROVISIONAL_NOTE not in d.message)
        emit = later[-1]
        assert emit is not None and exact < emit, "the exact report after emit"
        [now] = editor.at("net.running", "not-delegated")
        assert PROVISIONAL_NOTE not in now.message
    finally:
        await _net_saved_back(editor, original)
    await editor.until("warning gone", lambda: not editor.at("net.running"))


async def test_an_edited_submodule_that_does_not_export_alone_gets_no_provisional_report(
    editor: Editor,
) -> None:
    """A head whose forward branches on a tensor's value: neither it alone nor the program
    exports, and nothing provisional is shown on the way to the export error."""
    edited, original = editor.replace_line("net.head", "self.head = Branching()")
    since = len(editor.events)
    editor.save("models/net.py", edited)
    try:
        assert (await editor.built("net", since))["errorKind"] == "export-error"
        uri = editor.uri("models/net.py")
        published = [
            d
            for e in editor.events[since:]
            if isinstance(e, Published) and e.uri == uri
            for d in e.diagnostics
        ]
        assert published and not [d for d in published if PROVISIONAL_NOTE in d.message]
    finally:
        await _net_saved_back(editor, original)


async def _net_saved_back(editor: Editor, original: str) -> None:
    since = len(editor.events)
    editor.save("models/net.py", original)
    assert (await editor.built("net", since))["status"] == "ok"


# What a worker prints must not reach the LSP client's pipe: this one would break the protocol.
EXIT = 'print("Content-Length: 2", flush=True); import os; os._exit(1)'


@pytest.mark.parametrize(
    ("line", "limit", "code", "words"),
    [
        (EXIT, {}, "worker-crash", "exited with code 1"),
        ("import os; os.kill(os.getpid(), 9)", {}, "worker-crash", "SIGKILL"),
        ("while True: pass", {"workerTimeout": 1}, "worker-timeout", "did not finish within 1 s"),
        ("torch.manual_seed(1)", {"workerMemoryLimit": 200}, "worker-crash", "memory limit 200"),
    ],
    ids=["exit", "kill", "hang", "memory"],
)
async def test_a_dying_worker_is_an_error_at_the_entry_and_the_next_save_works(
    editor: Editor, line: str, limit: dict[str, int], code: str, words: str
) -> None:
    """Shown at the entry function (a dead worker reports no line); the server lives on, and
    the next save builds. A limit set in the editor applies to the builds after it."""
    set_settings(editor, limit)
    edited, original = editor.replace_line("net.make", line)
    since = len(editor.events)
    editor.save("models/net.py", edited)
    try:
        await editor.until(code, lambda: editor.at("net.entry", code))
        [error] = editor.at("net.entry", code)
        assert error.severity == types.DiagnosticSeverity.Error and words in error.message
        assert (await editor.built("net", since))["errorKind"] == code
    finally:
        set_settings(editor, dict.fromkeys(limit))
        since = len(editor.events)
        editor.save("models/net.py", original)
    assert (await editor.built("net", since))["status"] == "ok"
    await editor.until("error gone", lambda: not editor.at("net.entry", code))
    assert editor.at("net.entry", "coverage")


def set_settings(editor: Editor, settings: dict[str, Any]) -> None:
    if settings:
        editor.configure(settings)


async def test_a_second_save_cancels_the_running_build(editor: Editor, tmp_path: Path) -> None:
    """The second save comes once the slow build runs the saved code: a build whose worker
    started after the second write would read the restored file, find the target up to date and
    be the current one, rightly."""
    inside = tmp_path / "inside-make"  # outside the project: no watcher event
    slow, original = editor.replace_line(
        "net.make", f"import pathlib, time; pathlib.Path({str(inside)!r}).touch(); time.sleep(600)"
    )
    since = len(editor.events)
    editor.save("models/net.py", slow)
    try:
        # Polled: the file, not the server, says the build runs make()
        await async_wait_until(inside.exists, what="the slow build inside make()")
        [first] = editor.started("net", since)
    finally:
        editor.save("models/net.py", original)
    result = await editor.built("net", since)
    assert result["status"] == "ok"
    [superseded] = await editor.until(
        "the slow build ended",
        lambda: [
            e.params
            for e in editor.events
            if isinstance(e, BuildFinished) and e.params["buildId"] == first["buildId"]
        ],
    )
    assert superseded["current"] is False and superseded["errorKind"] == "cancelled"
    assert {d.code for d in editor.diagnostics("models/net.py")} == {"coverage"}


async def test_a_change_on_disk_rebuilds_the_targets_that_read_the_file(editor: Editor) -> None:
    """No didSave: the watcher sees the write. x**2 is delegated, so the warning goes away."""
    path = editor.path("models/refused.py")
    original = path.read_text()
    since = len(editor.events)
    write_text_atomic(path, original.replace("x = x**3", "x = x**2"))
    try:
        await editor.built("refused", since)
        await editor.until("pow delegated", lambda: not editor.at("refused.pow"))
        assert not editor.started("net", since) and not editor.finished("net", since)
    finally:
        since = len(editor.events)
        write_text_atomic(path, original)
    await editor.built("refused", since)
    await editor.until("pow refused again", lambda: editor.at("refused.pow", "not-delegated"))


async def test_a_config_error_shows_at_its_line_until_fixed(editor: Editor) -> None:
    relative, line = editor.line("target.net")
    original = editor.path(relative).read_text()
    lines = original.splitlines(keepends=True)
    lines.insert(line, 'entyr = "models/net.py:make"\n')  # line + 1: a misspelt key
    since = len(editor.events)
    editor.save(relative, "".join(lines))
    try:
        await editor.until("config error", lambda: editor.diagnostics(relative))
        [error] = editor.diagnostics(relative)
        assert (error.code, error.range.start.line) == ("config-error", line)
        assert "entyr" in error.message
        # While the config is broken, no target's diagnostics are shown.
        assert not editor.diagnostics("models/net.py")
    finally:
        editor.save(relative, original)
    await editor.built("net", since)
    await editor.until("config error gone", lambda: not editor.diagnostics(relative))
    await editor.until("coverage back", lambda: editor.at("net.entry", "coverage"))


# Transport and start-up without a project ------------------------------------------------------


async def test_tcp_transport_and_a_config_error_at_start(tmp_path: Path) -> None:
    """`lowerd serve --tcp`: a workspace whose [tool.lowerd] is broken gets the error at its
    line, and the server waits for a fix instead of exiting."""
    write_text_atomic(tmp_path / "pyproject.toml", '[tool.lowerd]\nbackends = ["xnnpak"]\n')
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lowerd", "serve", "--tcp", f"127.0.0.1:{port}", cwd=tmp_path
    )
    editor = LspDriver(tmp_path, DEADLINE)
    try:
        await editor.connect_tcp("127.0.0.1", port)
        # 0.7 does not pull: it is pushed diagnostics
        await editor.initialize(client_capabilities("neovim@v0.7.0"))
        uri = (tmp_path / "pyproject.toml").as_uri()
        await editor.until("the config error", lambda: editor.published.get(uri))
        [error] = editor.published[uri]
        assert (error.code, error.range.start.line, error.source) == ("config-error", 1, "lowerd")
        assert "xnnpak" in error.message
        await editor.shutdown()
        assert await asyncio.wait_for(server.wait(), DEADLINE) == 0
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
        await editor.close()


async def test_a_client_that_pulls_gets_result_ids_and_refreshes_not_pushes(
    tmp_path: Path,
) -> None:
    """Pull diagnostics (textDocument/diagnostic, workspace/diagnostic) for a client that
    pulls: a result id per file and build, `unchanged` while it holds, a refresh request when a
    change of the project moves them, and no publishDiagnostics."""
    pyproject = tmp_path / "pyproject.toml"
    write_text_atomic(pyproject, '[tool.lowerd]\nbackends = ["xnnpak"]\n')
    uri = pyproject.as_uri()
    editor = LspDriver(tmp_path, DEADLINE)
    await editor.start()
    try:
        capabilities = client_capabilities("neovim")  # 0.11: it pulls
        assert capabilities.workspace is not None
        capabilities.workspace.diagnostics = types.DiagnosticWorkspaceClientCapabilities(
            refresh_support=True
        )
        await editor.initialize(capabilities)
        refresh = types.WORKSPACE_DIAGNOSTIC_REFRESH
        await editor.until("a refresh", lambda: editor.refreshed(refresh))

        def pull(previous: str | None = None) -> Any:
            document = types.TextDocumentIdentifier(uri=uri)
            return editor.answer(
                editor.client.text_document_diagnostic_async(
                    types.DocumentDiagnosticParams(
                        text_document=document, previous_result_id=previous
                    )
                )
            )

        first = await pull()
        assert first.kind == "full" and first.result_id
        [error] = first.items
        assert (error.code, error.range.start.line) == ("config-error", 1)
        assert "xnnpak" in error.message
        same = await pull(first.result_id)
        assert same.kind == "unchanged" and same.result_id == first.result_id
        workspace = await editor.answer(
            editor.client.workspace_diagnostic_async(
                types.WorkspaceDiagnosticParams(
                    previous_result_ids=[types.PreviousResultId(uri=uri, value=first.result_id)]
                )
            )
        )
        [report] = workspace.items
        assert (report.uri, report.kind, report.result_id) == (uri, "unchanged", first.result_id)

        since = len(editor.events)
        write_text_atomic(pyproject, '[tool.lowerd]\nbackends = ["vulkn"]\n')
        await editor.until("a refresh", lambda: editor.refreshed(refresh, since))
        moved = await pull(first.result_id)
        assert moved.kind == "full" and moved.result_id != first.result_id
        [error] = moved.items
        assert "vulkn" in error.message and error.range.start.line == 1
        # Pulled, never pushed: a client holding both would show every problem twice.
        assert not [event for event in editor.events[since:] if isinstance(event, Published)]
        assert uri not in editor.published
        await editor.shutdown()
    finally:
        await editor.close()
