"""What the tests (tests/) and the benchmarks (bench/) share, each piece once.

- `lsp_driver`: a typed LSP driver for `lowerd serve`: what an editor does (open, change, save,
  settings, commands) and waits for (diagnostics, lowerd/buildFinished), event-driven;
- `stock_lowering`: the stock ExecuTorch chain every lowerd .pte is compared with, by hand;
- `projects`: project copies without their outputs, files written in one step;
- `redis_server`, `ray_cluster`: real servers in a temp folder, each on a free port.

Not shipped: the wheel holds src/lowerd only. pytest imports it through its `pythonpath = ["."]`
option, the benches when run from the repository's root (`python -m bench.bench_build`).
"""
