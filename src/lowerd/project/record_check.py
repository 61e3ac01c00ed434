"""What the wire schema of a build record cannot say by types alone, checked when a record is
read (build_state.read_state): the [file, line] lists its `Any`-typed fields hold, which the
build, `lowerd explain` and the editor unpack; and that the record agrees with itself (its
report's digests are its output stamps', it is the target's). A record that fails is no record:
the target rebuilds, and nothing it says is shown or trusted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # build_state imports this module for its reader
    from lowerd.project.build_state import TargetState


class RecordRefused(ValueError):
    """A build record not to trust: why, in words."""


def _is_line(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def site_problem(site: list[Any] | None) -> str | None:
    """A [file, line] pair, or None."""
    if site is None or (len(site) == 2 and isinstance(site[0], str) and _is_line(site[1])):
        return None
    return "expected [file, line]"


def source_lines_problem(lines: dict[str, list[list[Any] | None]]) -> str | None:
    """Per method, each node's [file, line] or None."""
    for nodes in lines.values():
        if any(node is not None and site_problem(node) for node in nodes):
            return "expected [file, line] or None for each node"
    return None


def partition_sources_problem(sources: list[list[Any]]) -> str | None:
    """[file, line, op] of each delegated op with a source line."""
    for source in sources:
        if not (
            len(source) == 3 and site_problem(source[:2]) is None and isinstance(source[2], str)
        ):
            return "expected [file, line, op] for each source"
    return None


def inconsistency(state: TargetState, target: str | None) -> str | None:
    """Why a decoded record contradicts itself or is another target's; None when it does not.
    What `--json` and the report say of the .pte (its path and digest, its data files') must be
    what the stamps the up-to-date check verifies say. A data file the report names without a
    stamp (an older record's ETRecord) is checked by its content (build_state.why_out_of_date)."""
    report = state.report
    if target is not None and state.target != target:
        return f"the record of another target ({state.target[:40]!r})"
    if report.output != state.output.path or report.sha256 != state.output.sha256:
        return "its report's output or sha256 is not its output's"
    reported = {(data.path, data.sha256) for data in report.data_files}
    stamped = {(stamp.path, stamp.sha256) for stamp in state.data_files}
    if not stamped <= reported:
        return "its report's data files are not its stamped ones"
    return None
