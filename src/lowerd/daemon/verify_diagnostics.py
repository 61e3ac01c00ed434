"""What a target's verification puts in the editor: an Error at the first diverging op's line
(or at the entry when no op is named, or when the runtime could not run the .pte), and the host
latency in the code lens ("forward 1.8 ms here · XNNPACK #1 1.2 ms · CPU 0.5 ms")."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from lsprotocol import types
from pygls.uris import from_fs_path

from lowerd.daemon.diagnostics import (
    FileDiagnostics,
    LineReader,
    error_diagnostic,
    read_lines_from_disk,
    site_of,
)
from lowerd.project.result import ErrorInfo, TargetResult
from lowerd.project.verification import MethodVerification, Verification
from lowerd.worker.entry_site import Site

VERIFY_ERROR = "verify-error"  # the runtime did not load or run the .pte
DIVERGED = "verify-diverged"  # an output is off: at the first diverging op's line
MISMATCH = "verify-mismatch"  # an output is off and no op is named: at the entry


def verification_diagnostics(
    result: TargetResult,
    root: Path,
    entry: Site | None,
    lines: LineReader = read_lines_from_disk,
) -> FileDiagnostics:
    """The Errors of one target's verification, by file; none when it passed or did not run."""
    verification = verification_of(result)
    found: FileDiagnostics = {}
    if verification is None:
        return found
    entry = site_of(result.entry, root) or entry
    if verification.error is not None and entry is not None:
        message = f"{result.name}: the .pte does not run on {verification.runtime}: "
        _add(found, entry, _error(entry, message + verification.error, VERIFY_ERROR, lines))
    for name, method in verification.methods.items():
        if method.verdict == "pass":
            continue
        where, message, code = _where_and_why(result.name, name, method, verification, root)
        site = where or entry
        if site is not None:
            _add(found, site, _error(site, message, code, lines, _library(method, where)))
    return found


def verification_of(result: TargetResult | None) -> Verification | None:
    """The result's verification when it is of the result's .pte (its sha256): a verdict is
    never shown of a program other than the one it ran."""
    if result is None or not result.ok or result.verification is None:
        return None
    return result.verification if result.verification.program == result.sha256 else None


def latency_title(result: TargetResult | None) -> str:
    """The lens's latency part: each method's host time by partition; "" when not measured."""
    verification = verification_of(result)
    if verification is None:
        return ""
    shares = [
        method.latency.summary(name)
        for name, method in verification.methods.items()
        if method.latency is not None
    ]
    return " · ".join(shares)


def verification_hover(results: Mapping[str, TargetResult], root: Path, site: Site) -> str | None:
    """At an entry: each method's verdict, error and host latency by part; at an op left on
    the CPU: its measured time; at a diverging op: the divergence. None when none is here."""
    sections = []
    for target, result in results.items():
        verification = verification_of(result)
        if verification is None:
            continue
        at_entry = site_of(result.entry, root) == site
        items = []
        for name, method in verification.methods.items():
            items.extend(_method_items(name, method, result, root, site, at_entry))
        if items:
            head = f"**lowerd** · {target} · {verification.verdict} against "
            head += f"{verification.reference} on {verification.runtime}"
            sections.append(head + "\n\n" + "\n".join(items))
    return "\n\n---\n\n".join(sections) or None


def _method_items(
    name: str, method: MethodVerification, result: TargetResult, root: Path, site: Site,
    at_entry: bool,
) -> list[str]:  # fmt: skip
    items = []
    latency = method.latency
    if at_entry:
        items.append(f"- {name}: max abs error {method.max_abs:.3g} ({method.verdict})")
        if latency is not None:
            items.append(f"- {latency.summary(name, most=len(latency.parts))} ({latency.host})")
    divergence = method.divergence
    if divergence is not None and site_of(divergence, root) == site:
        items.append(f"- {name}: {divergence.message()}")
    report = result.methods.get(name)
    if latency is not None and report is not None:
        here = {op.op.rsplit(".", 1)[0] for op in report.not_delegated if site_of(op, root) == site}
        for part in latency.parts:
            if part.kind == "cpu" and part.name in here:
                items.append(f"- {name}: `{part.name}` {part.median_ms * part.calls:.3g} ms per "
                             f"run on the CPU kernels, this host")  # fmt: skip
    return items


def _where_and_why(
    target: str, name: str, method: MethodVerification, verification: Verification, root: Path
) -> tuple[Site | None, str, str]:
    prefix = f"{target}, {name}: "
    divergence = method.divergence
    if divergence is not None:
        return site_of(divergence, root), prefix + divergence.message(), DIVERGED
    failing = next((check for check in method.inputs if not check.passed), None)
    if failing is not None and failing.error is not None:
        return None, f"{prefix}on {failing.label}: {failing.error}", VERIFY_ERROR
    tolerance = method.tolerance
    message = (
        f"{prefix}differs from {verification.reference} by {method.max_abs:.3g} (atol "
        f"{tolerance.atol:g}, rtol {tolerance.rtol:g}: {tolerance.why})"
    )
    return None, message, MISMATCH


def _library(
    method: MethodVerification, where: Site | None
) -> list[types.DiagnosticRelatedInformation]:
    divergence = method.divergence
    if where is None or divergence is None or not divergence.library_file:
        return []
    path = Path(divergence.library_file)
    line = max((divergence.library_line or 1) - 1, 0)
    location = types.Location(
        uri=from_fs_path(str(path)) or str(path),
        range=types.Range(types.Position(line, 0), types.Position(line, 0)),
    )
    return [types.DiagnosticRelatedInformation(location, "the library line that made the op")]


def _error(
    site: Site,
    message: str,
    code: str,
    lines: LineReader,
    related: list[types.DiagnosticRelatedInformation] | None = None,
) -> types.Diagnostic:
    """An Error at the site, the message prefixed with its target already."""
    diagnostic = error_diagnostic(site, ErrorInfo(code, message), None, lines)
    diagnostic.related_information = related or None
    return diagnostic


def _add(found: FileDiagnostics, site: Site, diagnostic: types.Diagnostic) -> None:
    found.setdefault(site.path, []).append(diagnostic)
