"""Verification in the editor (issue 24 points 1, 2, 3): over the language server, a target whose
transform pass changes an op gets an Error at the line of the op it changed; a .pte the host
runtime cannot run (a kernel it lacks) is an Error at the entry and the server goes on; the code
lens carries the host latency."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from lsprotocol import types
from pytest_lsp import client_capabilities

from helpers import DEADLINE, PROJECTS, line_marks
from testkit.lsp_driver import LspDriver
from testkit.lsp_events import BuildFinished, BuildWritten, Published
from testkit.projects import copy_project

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.e2e]

CONFIG = """\
[tool.lowerd]
backends = ["xnnpack"]
out_dir = "build"
verify = true
verify_runs = 2
verify_warmup = 0

[tool.lowerd.targets.broken_pass]
entry = "models/nets.py:make"
transform_passes = "models/passes.py:hardtanh_as_relu"

[tool.lowerd.targets.running]
entry = "models/nets.py:make_running"
edge_compile_config._check_ir_validity = false
"""


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_project(PROJECTS / "verify", tmp_path_factory.mktemp("editor") / "verify")
    (root / "pyproject.toml").write_text(CONFIG)
    return root


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def editor(
    project: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[LspDriver]:
    driver = LspDriver(project, DEADLINE)
    env = dict(os.environ, LOWERD_CACHE_DIR=str(tmp_path_factory.mktemp("cache")))
    await driver.start(env=env)
    await driver.initialize(client_capabilities("visual-studio-code"), {})
    for target in ("broken_pass", "running"):
        await driver.built(target, 0)
    yield driver
    await driver.stop()


def at(editor: LspDriver, mark: str, code: str) -> list[types.Diagnostic]:
    relative, line = line_marks(editor.root)[mark]
    return [
        d for d in editor.diagnostics(relative) if d.range.start.line == line - 1 and d.code == code
    ]


async def test_a_diverging_op_is_an_error_at_its_line(editor: LspDriver) -> None:
    await editor.until("the divergence", lambda: at(editor, "hardtanh", "verify-diverged"))
    [error] = at(editor, "hardtanh", "verify-diverged")
    assert error.severity == types.DiagnosticSeverity.Error
    assert error.message.startswith("broken_pass, forward: aten.relu in place of eager's ")
    assert "on XNNPACK #1 differs from eager by" in error.message
    assert "first of 3 diverging ops" in error.message


async def test_a_pte_the_runtime_cannot_run_is_an_error_and_the_server_goes_on(
    editor: LspDriver,
) -> None:
    await editor.until("the runtime's refusal", lambda: at(editor, "running.entry", "verify-error"))
    [error] = at(editor, "running.entry", "verify-error")
    assert error.severity == types.DiagnosticSeverity.Error
    assert "running, forward: on example: loading method 'forward'" in error.message
    assert "(OperatorMissing)" in error.message
    # The server still answers: the lens of the running entry, with the other's latency.
    relative, _ = line_marks(editor.root)["running.entry"]
    lenses = await editor.answer(
        editor.client.text_document_code_lens_async(
            types.CodeLensParams(types.TextDocumentIdentifier(editor.uri(relative)))
        )
    )
    titles = [lens.command.title for lens in lenses if lens.command]
    assert any("forward " in title and " ms here · XNNPACK #1 " in title for title in titles), (
        titles
    )


async def hover(editor: LspDriver, mark: str) -> str:
    relative, line = line_marks(editor.root)[mark]
    found = await editor.answer(
        editor.client.text_document_hover_async(
            types.HoverParams(
                types.TextDocumentIdentifier(editor.uri(relative)), types.Position(line - 1, 8)
            )
        )
    )
    assert found is not None, mark
    assert isinstance(found.contents, types.MarkupContent)
    return found.contents.value


async def test_hover_gives_the_verdict_the_latency_and_the_cpu_time(editor: LspDriver) -> None:
    entry = await hover(editor, "make")
    assert "**lowerd** · broken_pass · fail against eager on executorch " in entry
    assert "- forward: max abs error " in entry and " ms here · XNNPACK #" in entry
    assert "not the device" in entry
    cumsum = await hover(editor, "cumsum")
    assert "- forward: `aten.cumsum` " in cumsum and " ms per run on the CPU kernels" in cumsum
    diverging = await hover(editor, "hardtanh")
    assert "- forward: aten.relu in place of eager's aten.hardtanh on XNNPACK #1" in diverging


async def test_the_build_diagnostics_come_before_its_verification(editor: LspDriver) -> None:
    """Verifying never delays the build's diagnostics (issue 24 point 8): by the order of what
    the server sent, the build's result is published and lowerd/buildWritten sent, then the
    verification's Error, then lowerd/buildFinished; the verdict is of the .pte written."""
    relative, _ = line_marks(editor.root)["hardtanh"]
    uri = editor.uri(relative)
    events = editor.events
    written = next(
        i for i, e in enumerate(events) if isinstance(e, BuildWritten) and e.target == "broken_pass"
    )
    finished = next(
        i
        for i, e in enumerate(events)
        if isinstance(e, BuildFinished) and e.target == "broken_pass" and e.current
    )
    shown = [(i, e) for i, e in enumerate(events) if isinstance(e, Published) and e.uri == uri]

    def of_the_target(event: Published, verifying: bool) -> list[types.Diagnostic]:
        return [
            d
            for d in event.diagnostics
            if "broken_pass" in d.message and str(d.code).startswith("verify-") == verifying
        ]

    [(_, before)] = [(i, e) for i, e in shown if i < written][-1:]
    assert of_the_target(before, verifying=False), before.diagnostics  # the build's
    assert not of_the_target(before, verifying=True), before.diagnostics
    verified = [i for i, e in shown if of_the_target(e, verifying=True)]
    assert verified and written < verified[0] < finished, (written, verified, finished)
    report = await editor.report("broken_pass")
    assert events[written].params["sha256"] == report["sha256"]
    assert report["verification"]["program"] == report["sha256"]
