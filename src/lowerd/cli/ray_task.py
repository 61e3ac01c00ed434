"""The Ray task of `lowerd build --executor ray`: one target built on a cluster node.

It runs in a Ray worker whose working folder is a copy of the project (runtime_env working_dir)
and builds the target exactly as a local `lowerd build` does: worker/local_builds.py forks a
worker that runs lowering/build.py's build_target, supervised by the one supervisor
(worker/workers.py), so user code that exits or crashes ends only that fork, and the same result
comes back. Outputs and the build record go to a private folder (the
copy has no out_dir, and an out_dir outside the project must not be written on the node); the
task returns them as one msgpack payload of plain values (never pickle of lowerd's own), with
the copy's and the folder's paths, which the client maps back to its own (cli/ray_outputs.py).

payload: {"version", "root", "out_dir", "versions", "result": TargetResult JSON,
          "files": {NAME: bytes} (the .pte and data files, by name in out_dir),
          "record": TargetState as saved | None, "stderr": str, "warnings": [str]}
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import signal
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgpack

PAYLOAD_VERSION = 1
# What a build printed (user code, a crashed worker's traceback) travels back up to this much,
# its end kept: the client shows it on stderr as a local build would have.
MAX_STDERR = 1 << 20
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def build_on_node(
    config_name: str, target_name: str, use_cache: bool, versions: list[str], config_digest: str
) -> bytes:
    """Build `target_name` of the project copy in the working folder; its payload.

    `versions` and `config_digest` are the client's: a node with other torch, ExecuTorch or
    lowerd versions, or a config that changed under the build, would not write the bytes the
    client's record stands for, so it refuses instead.
    """
    from lowerd.project.build_state import tool_versions

    root = Path.cwd()  # Ray runs the task in the working folder's copy
    if list(tool_versions()) != versions:
        mine, theirs = ", ".join(tool_versions()), ", ".join(versions)
        message = f"the Ray node runs {mine}, this machine {theirs}: install the same versions"
        return _refused(root, target_name, message)
    _kill_forks_with_this_process()
    _output_as_lowerd_has_it()
    with tempfile.TemporaryDirectory(prefix="lowerd-ray-") as out_dir, _stderr_kept() as stderr:
        payload = _build(root, Path(out_dir), config_name, target_name, use_cache, config_digest)
        payload["stderr"] = stderr()
    return _packed(payload)


def _build(
    root: Path,
    out_dir: Path,
    config_name: str,
    target_name: str,
    use_cache: bool,
    config_digest: str,
) -> dict[str, Any]:
    from lowerd.project.batch import Batch
    from lowerd.project.build_state import load_state, state_path
    from lowerd.project.config import load_config
    from lowerd.project.errors import ConfigError
    from lowerd.project.project_store import store_for
    from lowerd.project.result import TargetResult
    from lowerd.project.wire import encode
    from lowerd.worker.local_builds import build_in_workers, import_build_modules, local_job

    try:
        config = load_config(root / config_name)
    except ConfigError as error:
        info = error.info()
        failed = TargetResult.failed(target_name, info.kind, info.message, info.file, info.line)
        return _payload(root, out_dir, failed)
    if config.digest != config_digest or target_name not in config.targets:
        message = f"{config_name} changed while the build was sent to Ray: build again"
        return _payload(root, out_dir, TargetResult.failed(target_name, "executor-error", message))
    config = dataclasses.replace(config, out_dir=out_dir)
    target = config.targets[target_name]
    import_build_modules(store_for(config) if use_cache else None)  # once per Ray worker
    result = build_in_workers({target_name: local_job(config, target, use_cache)}, 1)[target_name]
    batch = Batch(config, [target], use_cache, results={target_name: result})
    document, _ = batch.outcome()  # the node's cache warnings; a failed target's files removed
    files = {}
    if result.ok:
        for path in (Path(result.output or ""), *(Path(f.path) for f in result.data_files)):
            files[path.name] = path.read_bytes()
    state = load_state(config, target)
    record = encode(state) if state is not None else None
    state_path(config, target).unlink(missing_ok=True)
    return _payload(root, out_dir, result, files, record, document["warnings"])


def _payload(
    root: Path,
    out_dir: Path,
    result: Any,
    files: dict[str, bytes] | None = None,
    record: dict[str, Any] | None = None,
    warnings: list[str] | None = None,
) -> dict[str, Any]:
    from lowerd.project.build_state import tool_versions
    from lowerd.project.wire import encode

    return {
        "version": PAYLOAD_VERSION,
        "root": str(root),
        "out_dir": str(out_dir),
        "versions": list(tool_versions()),
        "result": encode(result),
        "files": files or {},
        "record": record,
        "stderr": "",
        "warnings": warnings or [],
    }


def _refused(root: Path, target_name: str, message: str) -> bytes:
    from lowerd.project.result import TargetResult

    failed = TargetResult.failed(target_name, "executor-error", message)
    return _packed(_payload(root, root, failed))


def _packed(payload: dict[str, Any]) -> bytes:
    packed: bytes = msgpack.packb(payload, use_bin_type=True)
    return packed


@contextmanager
def _stderr_kept() -> Iterator[Callable[[], str]]:
    """File descriptor 2 goes to a temp file while the build runs (the forked worker inherits
    it, and sends its prints there); the callable reads what was written."""
    with tempfile.TemporaryFile() as kept:
        saved = os.dup(2)
        os.dup2(kept.fileno(), 2)
        try:
            yield lambda: _tail(kept)
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _tail(kept: Any) -> str:
    size = kept.seek(0, os.SEEK_END)
    kept.seek(max(0, size - MAX_STDERR))
    text: str = kept.read().decode(errors="replace")
    return text


_hooked = False
_quieted = False


def _output_as_lowerd_has_it() -> None:
    """What `lowerd` sets up before a build (cli/main.py), once per Ray worker: libraries'
    warnings and records behind $LOWERD_LOG_LEVEL, as in a local build's forks."""
    global _quieted
    if not _quieted:
        from lowerd.project.library_output import quiet_library_logs

        quiet_library_logs()
        _quieted = True


def _kill_forks_with_this_process() -> None:
    """A build's fork leads its own session, out of reach of the signal that ends this worker
    (a cancelled task is killed: ray.cancel(force=True)). Each fork asks the kernel for SIGKILL
    when its parent ends, so no build outlives its task."""
    global _hooked
    if not _hooked:
        os.register_at_fork(after_in_child=_die_with_parent)
        _hooked = True


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        pass
