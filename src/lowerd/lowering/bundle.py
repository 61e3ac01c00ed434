"""The bundled program (`bundled = true`): ExecuTorch's BundledProgram of the target's program
and a test suite per method, written beside the .pte as <target>.bpte.

Each method's test cases are the verification's (lowering/verify_reference.py): the entry's
example inputs, then `verify_inputs`' tuples, flat as the program takes them, with the eager
module's outputs, taken when the entry loaded (a quantized target's float model's). Serialized by
ExecuTorch's own serialize_from_bundled_program_to_flatbuffer, as the stock script does
(project/reproducer.py), so the bytes are the same. The program's bytes come from the
ExecutorchProgramManager when the program was emitted, from the .pte on disk when it was kept:
BundledProgram embeds the same bytes either way.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from lowerd.cache.atomic import write_atomic
from lowerd.lowering.stages import BuildContext, DataBytes, Emitted, Written
from lowerd.project.build_state import data_file_path
from lowerd.project.errors import LoweringError
from lowerd.project.result import DataFile

KIND = "bpte"


def bundle_emitted(ctx: BuildContext, emitted: Emitted) -> Emitted:
    """The stage: the .bpte among the data files written with the .pte."""
    if not ctx.target.bundled:
        return emitted
    path = data_file_path(ctx.config, ctx.target, KIND)
    data = bundled_bytes(ctx, manager=emitted.manager)
    return replace(emitted, data_files=(*emitted.data_files, DataBytes(path, data, KIND)))


def bundle_kept(ctx: BuildContext, written: Written) -> Written:
    """A kept .pte's .bpte, made again: its test cases may have changed (a `verify_inputs`
    edit keeps the program); written only when its bytes did. None once `bundled` is off."""
    path = data_file_path(ctx.config, ctx.target, KIND)
    listed = [file for file in written.data_files if file.kind != KIND]
    if not ctx.target.bundled:  # turned off: the last build's .bpte goes
        path.unlink(missing_ok=True)
        return replace(written, data_files=tuple(listed))
    data = bundled_bytes(ctx, pte_file=written.output)
    digest = hashlib.sha256(data).hexdigest()
    if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        write_atomic(path, data, mode=0o644)
    return replace(written, data_files=(*listed, DataFile(str(path), digest, KIND)))


def bundled_bytes(ctx: BuildContext, manager: Any = None, pte_file: str | None = None) -> bytes:
    """BundledProgram(program, suites) serialized, the program given as its manager (validated
    against the cases, as the stock script does) or as its .pte file."""
    from executorch.devtools import BundledProgram
    from executorch.devtools.bundled_program.serialize import (
        serialize_from_bundled_program_to_flatbuffer,
    )

    try:
        suites = _test_suites(ctx.reference)
        if manager is not None:
            bundled = BundledProgram(manager, suites)
        else:
            bundled = BundledProgram(None, suites, pte_file_path=str(Path(pte_file or "")))
        return bytes(serialize_from_bundled_program_to_flatbuffer(bundled))
    except Exception as error:
        raise ctx.blame(LoweringError, error, "bundling the program failed") from error


def _test_suites(reference: Any) -> list[Any]:
    """One MethodTestSuite per method, one MethodTestCase per input tuple."""
    from executorch.devtools.bundled_program.config import MethodTestCase, MethodTestSuite

    return [
        MethodTestSuite(
            method_name=name,
            test_cases=[
                MethodTestCase(inputs=list(case.inputs), expected_outputs=list(case.expected))
                for case in cases
            ],
        )
        for name, cases in reference.cases.items()
    ]
