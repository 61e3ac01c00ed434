"""Every source line a build's result names, moved through the line maps of edited files.

A result names the user's lines in many places: the entry's and each method's module site, each
op left on the CPU and each refusal group (and their library frames when a project file made
them), each partition's sources, the runtime check's load problems, the verification's diverging
op and its latency parts; the build record adds each exported node's line. A kept result must
name them where the code is now, each one, or it is not kept: `moved` returns None when one of
them is on a line the map does not place (project/source_tokens.py LineMap). No torch here.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lowerd.project.loadability import RuntimeCheck
from lowerd.project.report_model import Frame, MethodReport, NotDelegatedOp, RefusalGroup
from lowerd.project.result import SourceSite, TargetResult
from lowerd.project.source_tokens import LineMap
from lowerd.project.verification import MethodVerification, Verification

NodeLines = dict[str, list[list[Any] | None]]  # TargetState.method_lines


class LineMoves:
    """The maps of the edited files, by the name reports give them (relative to the root)."""

    def __init__(self, maps: Mapping[str, LineMap]):
        self.maps = maps
        self.lost = False  # a line named in an edited file that the map does not place

    def line(self, file: str | None, line: int | None) -> int | None:
        if file is None or line is None or file not in self.maps:
            return line
        moved = self.maps[file].move(line)
        if moved is None:
            self.lost = True
            return line
        return moved

    def moved(self, result: TargetResult) -> TargetResult | None:
        """The result with every line it names moved; None when one cannot be."""
        result = replace(
            result,
            entry=self._site(result.entry),
            modules={name: self._module(site) for name, site in result.modules.items()},
            methods={name: self._report(report) for name, report in result.methods.items()},
            runtime=self._runtime(result.runtime),
            verification=self._verification(result.verification),
        )
        return None if self.lost else result

    def node_lines(self, lines: NodeLines) -> NodeLines | None:
        """The build record's node lines moved; None when one cannot be."""
        moved: NodeLines = {
            method: [self._pair(node) for node in nodes] for method, nodes in lines.items()
        }
        return None if self.lost else moved

    def _pair(self, node: list[Any] | None) -> list[Any] | None:
        return None if node is None else [node[0], self.line(node[0], node[1])]

    def _site(self, site: SourceSite | None) -> SourceSite | None:
        return None if site is None else replace(site, line=self.line(site.file, site.line))

    def _module(self, site: SourceSite) -> SourceSite:
        return replace(site, line=self.line(site.file, site.line))

    def _frame(self, frame: Frame | None) -> Frame | None:
        if frame is None:
            return None
        return replace(frame, line=self.line(frame.file, frame.line) or frame.line)

    def _report(self, report: MethodReport) -> MethodReport:
        report = copy.deepcopy(report)  # the record's stays as it was read
        placed: list[NotDelegatedOp | RefusalGroup] = [*report.not_delegated, *report.refusals]
        for op in placed:
            op.line = self.line(op.file, op.line)
            op.library = self._frame(op.library)
        for partition in report.partitions:
            for source in partition.sources:
                source[1] = self.line(source[0], source[1])
        return report

    def _runtime(self, check: RuntimeCheck | None) -> RuntimeCheck | None:
        if check is None:
            return None
        problems = [replace(p, line=self.line(p.file, p.line)) for p in check.problems]
        return replace(check, problems=problems)

    def _verification(self, verification: Verification | None) -> Verification | None:
        if verification is None:
            return None
        methods = {name: self._method(method) for name, method in verification.methods.items()}
        return replace(verification, methods=methods)

    def _method(self, method: MethodVerification) -> MethodVerification:
        divergence, latency = method.divergence, method.latency
        if divergence is not None:
            divergence = replace(
                divergence,
                line=self.line(divergence.file, divergence.line),
                library_line=self.line(divergence.library_file, divergence.library_line),
            )
        if latency is not None:
            parts = tuple(replace(p, line=self.line(p.file, p.line)) for p in latency.parts)
            latency = replace(latency, parts=parts)
        return replace(method, divergence=divergence, latency=latency)
