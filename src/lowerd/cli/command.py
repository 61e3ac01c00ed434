"""The `lowerd` script's entry point: pins the hash seed before the command's modules load.

Re-executing under lowerd's seed (project/hash_seed.py) discards the interpreter: whatever it
imported first is imported again. cli/main.py's imports (config, build state, results: about
0.3 s of CPU) would be paid twice by every `lowerd` call, so the script and `python -m lowerd`
re-execute from here, having imported nothing but the seed's few lines.
"""

from __future__ import annotations

from lowerd.project.hash_seed import run_with_pinned_seed


def main() -> int:
    run_with_pinned_seed()
    from lowerd.cli.main import main as run_command  # after the re-execution: loaded once

    return run_command()
