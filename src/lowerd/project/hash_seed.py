"""The one string hash seed every process that lowers runs with.

ExecuTorch's bytes depend on Python's string hashing: to_backend duplicates the weights two
partitions share in the order of a set of their names (exir/backend/utils.py,
_maybe_duplicate_constant_nodes), which reorders the users of their common input, and the
partition's graph is then sorted by users' order (fx's legalize_graph): XNNPACK defines
independent ops in another order, and the delegate blob differs. Stock ExecuTorch's bytes so
vary from one `python export.py` to the next; lowerd's must be a function of its inputs alone, so
each lowering process runs with PYTHONHASHSEED fixed: the `lowerd` command re-executes itself
with it before it does anything (cli/command.py), and what it starts (the daemon, its fork server,
Ray's workers) inherits or is given it. The stock script equals lowerd's bytes when it runs
with the same seed (docs/guarantees.md).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

HASH_SEED = "0"


def pinned(environment: Mapping[str, str]) -> dict[str, str]:
    """The environment with lowerd's hash seed."""
    return {**environment, "PYTHONHASHSEED": HASH_SEED}


def run_with_pinned_seed() -> None:
    """Re-executes this interpreter, with its own arguments, under lowerd's hash seed, unless it
    runs under it already (the environment says so: under `python -E`, which ignores it, the
    second run does not execute again)."""
    if os.environ.get("PYTHONHASHSEED") == HASH_SEED:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, pinned(os.environ))
