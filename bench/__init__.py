"""The benchmarks: stock ExecuTorch against lowerd, each a script run from the repository's root
(`python -m bench.bench_build`; bench/README.md lists them). Scripts, not tests: nothing asserts
on a timing. What they share with the tests (the LSP driver, redis and Ray servers, the stock
lowering) is in testkit/."""
