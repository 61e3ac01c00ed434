"""`lowerd oplist`: the op list the targets' programs need, in the format of ExecuTorch's
selective build (project/oplist.py), for a device runtime built with only those kernels.

The targets are built first as `lowerd build` builds them (up-to-date ones answered from their
records): the op list is read from the programs written, never guessed from the model.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from lowerd.cache.atomic import write_atomic
from lowerd.cli.built_targets import build_document
from lowerd.cli.exit_codes import EXIT_OK, EXIT_TARGET_FAILED
from lowerd.project.config import choose_config
from lowerd.project.oplist import oplist_text
from lowerd.project.result import TargetResult
from lowerd.project.wire import decode


def run_oplist(config_path: str | None, target_names: Sequence[str], output: str | None) -> int:
    document, exit_code = build_document(config_path, target_names)
    if document is None:
        return exit_code
    results = [decode(TargetResult, target) for target in document["targets"]]
    failed = [result for result in results if not result.ok or result.runtime is None]
    for result in failed:
        error = result.error
        where = f"{error.file}:{error.line}: " if error and error.file else ""
        message = error.message if error else "its build made no program"
        print(f"lowerd: {result.name}: {where}{message}", file=sys.stderr)
    if failed:
        return EXIT_TARGET_FAILED
    root = choose_config(config_path).parent.resolve()
    programs = {_named(result, root): result.runtime.needs for result in results if result.runtime}
    text = oplist_text(programs)
    if output is None:
        sys.stdout.write(text)
    else:
        write_atomic(Path(output), text.encode("utf-8"), mode=0o644)
        count = len({kernel for needs in programs.values() for kernel in needs.kernels})
        print(f"lowerd: wrote {count} operators of {len(programs)} programs to {output}")
    return EXIT_OK


def _named(result: TargetResult, root: Path) -> str:
    """The .pte as gen_oplist names the model it read: relative to the project's root."""
    output = Path(result.output or result.name).resolve()
    try:
        return output.relative_to(root).as_posix()
    except ValueError:
        return str(output)
