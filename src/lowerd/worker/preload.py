"""The engine's imports, paid once in a process that then forks one worker per build: the fork
server's, or the CLI's own when it builds in-process."""

from __future__ import annotations

from lowerd.cache.store import BlobStore


def import_engine(store: BlobStore | None) -> None:
    """torch, ExecuTorch (its op table served from the store) and lowerd's engine. No torch op
    runs here: a fork after GNU OpenMP's thread pool started hangs at the worker's first
    parallel op."""
    import torch  # noqa: F401

    from lowerd.project.library_output import route_library_logs

    route_library_logs()  # torch's handlers exist now; ExecuTorch's imports log through them
    from lowerd.lowering.edge_speedups import EdgeSpeedups

    with EdgeSpeedups(store).op_table_served():  # ExecuTorch's op table from the store
        import executorch.exir  # noqa: F401

    import lowerd.lowering.build  # noqa: F401
    import lowerd.lowering.preprocess_cache  # noqa: F401
    import lowerd.lowering.report  # noqa: F401
