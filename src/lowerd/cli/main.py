"""The `lowerd` command: build targets, run or ask the project's daemon, look after the blob cache.

Exit codes: 0 every target built; 1 a target failed (the others still build); 2 usage or config.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import TypeAlias

from lowerd import __version__
from lowerd.cli.exit_codes import EXIT_TARGET_FAILED, EXIT_USAGE
from lowerd.project.errors import ConfigError, LowerdError
from lowerd.project.hash_seed import run_with_pinned_seed
from lowerd.project.library_output import quiet_library_logs


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # run as the command: every lowering it starts under one hash seed
        run_with_pinned_seed()
    args = command_parser().parse_args(argv)
    if getattr(args, "verbose", False):  # before the handler reads it; the workers inherit it
        os.environ["LOWERD_LOG_LEVEL"] = "DEBUG"
    quiet_library_logs()
    try:
        exit_code: int = args.run(args)
        return exit_code
    except ConfigError as error:
        print(f"lowerd: {error}", file=sys.stderr)
        return EXIT_USAGE
    except LowerdError as error:
        print(f"lowerd: {error}", file=sys.stderr)
        return EXIT_TARGET_FAILED
    except KeyboardInterrupt:
        print("lowerd: interrupted", file=sys.stderr)
        return 130


# What add_subparsers returns (argparse names its class privately); each _add_* adds one command.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def command_parser() -> argparse.ArgumentParser:
    """The `lowerd` command's arguments, whose `--help` texts docs/cli.md shows (generated)."""
    parser = argparse.ArgumentParser(
        prog="lowerd", description="Fast, explainable ExecuTorch lowering."
    )
    parser.add_argument("--version", action="version", version=f"lowerd {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (
        _add_build,
        _add_verify,
        _add_report,
        _add_compare,
        _add_explain,
        _add_stock_script,
        _add_oplist,
        _add_check,
        _add_daemon,
        _add_cache,
        _add_serve,
    ):
        add(commands)
    return parser


def _add_build(commands: Subcommands) -> None:
    """`lowerd build`: export and lower targets."""
    build = commands.add_parser("build", help="export and lower targets to .pte files")
    build.add_argument(
        "targets", nargs="*", metavar="TARGET", help="targets to build (default all)"
    )
    _add_config(build)
    build.add_argument("--json", action="store_true", help="print the report as one JSON document")
    build.add_argument("--no-cache", action="store_true", help="preprocess every partition afresh")
    build.add_argument(
        "--all",
        action="store_true",
        dest="all_ops",
        help="list every op left on the CPU, instead of the costliest groups of them",
    )
    build.add_argument(
        "--modules", action="store_true", help="show the coverage of each module subtree"
    )
    build.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="also say how each method's edge generation ran (by region, or stock's and the "
        "gate that refused) and show libraries' log records and warnings (LOWERD_LOG_LEVEL=DEBUG)",
    )
    build.add_argument(
        "--jobs",
        "-j",
        type=_positive_int,
        help="targets built at once (default: the number of cores through the daemon, else 1)",
    )
    where = build.add_mutually_exclusive_group()
    where.add_argument(
        "--daemon",
        action="store_true",
        help="build through the project's daemon, starting it if none runs",
    )
    where.add_argument(
        "--no-daemon", action="store_true", help="build in this process, even if a daemon runs"
    )
    build.add_argument(
        "--executor",
        choices=("local", "ray"),
        help="where stale targets build: forked local workers, or Ray tasks (default: the "
        "config's `executor`, else local)",
    )
    build.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="the Ray cluster to build on (default: the config's `ray_address`, else what "
        "ray.init() finds, else a local instance)",
    )
    build.set_defaults(run=_run_build)


def _add_verify(commands: Subcommands) -> None:
    """`lowerd verify`: build, then run each .pte on this host's runtime against eager."""
    verify = commands.add_parser(
        "verify",
        help="build targets, run each .pte on this host's ExecuTorch runtime and compare every "
        "method's outputs with eager; exit 1 if one is off",
    )
    _add_targets(_add_config(verify))
    verify.add_argument(
        "--json", action="store_true", help="print the results as one JSON document"
    )
    verify.add_argument(
        "--bench",
        action="store_true",
        help="measure the host latency again, even of a program verified before",
    )
    verify.set_defaults(run=_run_verify)


def _run_verify(args: argparse.Namespace) -> int:
    from lowerd.cli.verify_command import run_verify

    return run_verify(args)


def _add_report(commands: Subcommands) -> None:
    """`lowerd report`: the last build's report, from the records."""
    report = commands.add_parser("report", help="show the last build's report, without building")
    _add_targets(_add_config(report))
    shown = report.add_mutually_exclusive_group()
    shown.add_argument("--json", action="store_true", help="print the report as one JSON document")
    shown.add_argument(
        "--html",
        metavar="FILE",
        help="write the report, with each method's graph, as one HTML file",
    )
    report.add_argument("--all", action="store_true", dest="all_ops", help="as lowerd build --all")
    report.add_argument("--modules", action="store_true", help="as lowerd build --modules")
    report.set_defaults(run=_run_report)


def _add_compare(commands: Subcommands) -> None:
    """`lowerd compare`: one target, each backend alone."""
    compare = commands.add_parser(
        "compare", help="lower a target with each backend alone and show them side by side"
    )
    compare.add_argument("target", metavar="TARGET", help="the target to compare")
    compare.add_argument(
        "--backends",
        metavar="B1,B2",
        help="backends to compare, comma-separated (default: every known one: "
        "xnnpack,vulkan,coreml)",
    )
    _add_config(compare)
    compare.add_argument("--json", action="store_true", help="print it as one JSON document")
    compare.add_argument(
        "--no-cache", action="store_true", help="preprocess every partition afresh"
    )
    compare.add_argument(
        "--jobs",
        "-j",
        type=_positive_int,
        help="backends lowered at once in this process (default: the number of cores; a daemon "
        "runs as many as it has workers)",
    )
    compare_where = compare.add_mutually_exclusive_group()
    compare_where.add_argument(
        "--daemon", action="store_true", help="compare through the project's daemon, starting it"
    )
    compare_where.add_argument(
        "--no-daemon", action="store_true", help="compare in this process, even if a daemon runs"
    )
    compare.set_defaults(run=_run_compare)


def _add_explain(commands: Subcommands) -> None:
    """`lowerd explain`: why the last build did what it did."""
    explain = commands.add_parser("explain", help="why the last build of targets did what it did")
    explain.add_argument(
        "targets", nargs="*", metavar="TARGET", help="targets to explain (default all)"
    )
    _add_config(explain)
    explain.add_argument("--json", action="store_true", help="print it as one JSON document")
    explain.set_defaults(run=_run_explain)


def _add_stock_script(commands: Subcommands) -> None:
    """`lowerd stock-script`: the stock ExecuTorch script of a target."""
    script = commands.add_parser(
        "stock-script", help="print a stock ExecuTorch script that reproduces a target"
    )
    script.add_argument("target", metavar="TARGET")
    _add_config(script)
    script.set_defaults(run=_run_stock_script)


def _add_oplist(commands: Subcommands) -> None:
    """`lowerd oplist`: the selective-build op list the targets' programs need."""
    oplist = commands.add_parser(
        "oplist",
        help="write the op list the targets' programs need, as ExecuTorch's selective build "
        "reads it (selected_operators.yaml)",
    )
    _add_targets(_add_config(oplist))
    oplist.add_argument("-o", "--output", metavar="FILE", help="write it to FILE (default: stdout)")
    oplist.set_defaults(run=_run_oplist)


def _add_check(commands: Subcommands) -> None:
    """`lowerd check`: the targets' facts against the committed baseline."""
    check = commands.add_parser(
        "check",
        help="build targets and compare their facts (coverage, partitions, .pte size, planned "
        "memory, error and latency when verified) with lowerd.baseline.toml; exit 1 on a "
        "regression",
    )
    _add_targets(_add_config(check))
    mode = check.add_mutually_exclusive_group()
    mode.add_argument(
        "--update", action="store_true", help="write this build's facts as the new baseline"
    )
    mode.add_argument(
        "--json", action="store_true", help="print the comparison as JSON instead of the table"
    )
    check.set_defaults(run=_run_check)


def _add_daemon(commands: Subcommands) -> None:
    """`lowerd daemon ACTION`."""
    daemon = commands.add_parser("daemon", help="start, stop or ask the project's build daemon")
    daemon.add_argument("--config", help="pyproject.toml of the project (default: found from cwd)")
    daemon.add_argument("action", choices=("start", "stop", "status", "restart"))
    daemon.set_defaults(run=_run_daemon)


def _add_cache(commands: Subcommands) -> None:
    """`lowerd cache ACTION`."""
    cache = commands.add_parser("cache", help="inspect or trim the delegate blob cache")
    cache.add_argument("--config", help="pyproject.toml whose cache settings apply")
    cache_commands = cache.add_subparsers(dest="cache_command", required=True, metavar="ACTION")
    cache_commands.add_parser("stats", help="entries and size").set_defaults(run=_run_cache_stats)
    gc = cache_commands.add_parser("gc", help="evict least-recently-used entries")
    gc.add_argument("--max-size", help="keep at most this much, e.g. 2G (default: the cap)")
    gc.set_defaults(run=_run_cache_gc)
    cache_commands.add_parser("clear", help="remove every entry").set_defaults(run=_run_cache_clear)


def _add_serve(commands: Subcommands) -> None:
    """`lowerd serve`: the language server."""
    serve = commands.add_parser("serve", help="run the language server editors start (stdio)")
    serve.add_argument("--tcp", metavar="HOST:PORT", type=_host_port, help="listen on TCP instead")
    serve.add_argument("--workers", type=_positive_int, default=2, help="builds run at once")
    serve.set_defaults(run=_run_serve)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _host_port(text: str) -> tuple[str, int]:
    host, colon, port = text.rpartition(":")
    if not colon or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError("expected HOST:PORT, e.g. 127.0.0.1:2087")
    return host or "127.0.0.1", int(port)


def _run_serve(args: argparse.Namespace) -> int:
    from lowerd.daemon.serve import serve

    return serve(tcp=args.tcp, workers=args.workers)


def _run_build(args: argparse.Namespace) -> int:
    """Through the project's daemon when one runs (or --daemon starts one), else in-process."""
    from lowerd.cli.build_output import BuildAsk

    ask = BuildAsk.from_args(args)
    asked_by = _ray_asked_by(args)
    if asked_by is not None:
        if args.daemon:  # a Ray build needs no local workers, warm or not
            print(f"lowerd: --daemon and {asked_by}: a Ray build uses no daemon", file=sys.stderr)
            return EXIT_USAGE
        from lowerd.cli.ray_executor import run_ray_build

        return run_ray_build(ask, args.ray_address, asked_by)
    if not args.no_daemon:
        from lowerd.cli.daemon_client import build_via_daemon  # torch-free: the daemon has it

        exit_code = build_via_daemon(ask, start=args.daemon)
        if exit_code is not None:
            return exit_code
    from lowerd.cli.build_command import run_build

    return run_build(ask)


def _ray_asked_by(args: argparse.Namespace) -> str | None:
    """What chose the Ray executor (`--executor ray`, or the config's `executor = "ray"`
    without an --executor); None: a local build. The config is read only without the flag."""
    if args.executor is not None:
        return "--executor ray" if args.executor == "ray" else None
    from lowerd.cli.daemon_client import load_project

    return 'executor = "ray"' if load_project(args.config).executor == "ray" else None


def _run_explain(args: argparse.Namespace) -> int:
    """Read from the build records: no torch, no daemon, no build."""
    import json

    from lowerd.cli.exit_codes import EXIT_OK
    from lowerd.project.config import choose_config, load_config
    from lowerd.project.explain import explain_targets
    from lowerd.project.wire import encode

    config = load_config(choose_config(args.config))
    answer = explain_targets(config, args.targets)
    if args.json:
        print(json.dumps(encode(answer), indent=2))
    else:
        print("\n".join(line for target in answer.targets for line in target.lines))
    return EXIT_OK


def _run_stock_script(args: argparse.Namespace) -> int:
    """From the config alone: no torch, no build (project/reproducer.py)."""

    from lowerd.cli.exit_codes import EXIT_OK
    from lowerd.project.config import choose_config, load_config, select_targets
    from lowerd.project.reproducer import stock_script

    config = load_config(choose_config(args.config))
    [target] = select_targets(config, [args.target])
    print(stock_script(config, target), end="")
    return EXIT_OK


def _run_oplist(args: argparse.Namespace) -> int:
    from lowerd.cli.oplist_command import run_oplist

    return run_oplist(args.config, args.targets, args.output)


def _run_check(args: argparse.Namespace) -> int:
    from lowerd.cli.check_command import run_check

    return run_check(args.config, args.targets, args.update, args.json)


def _run_compare(args: argparse.Namespace) -> int:
    from lowerd.cli.compare_command import run_compare

    return run_compare(
        config_path=args.config,
        target_name=args.target,
        backends=args.backends,
        as_json=args.json,
        use_cache=not args.no_cache,
        jobs=args.jobs or os.cpu_count() or 1,
        daemon=True if args.daemon else False if args.no_daemon else None,
    )


def _run_report(args: argparse.Namespace) -> int:
    from lowerd.cli.report_command import run_report
    from lowerd.cli.report_table import ReportView

    view = ReportView(all_ops=args.all_ops, modules=args.modules)
    return run_report(args.config, args.targets, args.html, args.json, view)


def _run_daemon(args: argparse.Namespace) -> int:
    from lowerd.cli.daemon_client import run_daemon_command

    return run_daemon_command(args.action, args.config)


def _run_cache_stats(args: argparse.Namespace) -> int:
    from lowerd.cache.location import format_size
    from lowerd.cli.cache_command import open_store, remote_lines, report

    store = open_store(args.config)
    stats = store.stats()
    cap = format_size(stats.max_bytes) if stats.max_bytes else "none"
    return report(
        store,
        [
            f"cache:   {stats.root}",
            f"entries: {stats.entries}",
            f"size:    {format_size(stats.total_bytes)} (cap {cap})",
            # left by writers still at work, or killed at it; gc removes old ones, clear all
            f"temp:    {stats.temp_files} files ({format_size(stats.temp_bytes)})",
            *remote_lines(store),
        ],
    )


def _run_cache_gc(args: argparse.Namespace) -> int:
    from lowerd.cache.location import format_size, parse_size
    from lowerd.cli.cache_command import open_store, report

    store = open_store(args.config)
    try:
        limit = parse_size(args.max_size) if args.max_size else store.max_bytes
    except ValueError as error:
        print(f"lowerd: --max-size: {error}", file=sys.stderr)
        return EXIT_USAGE
    result = store.gc(limit)
    removed = f"{result.removed_entries} entries ({format_size(result.removed_bytes)})"
    return report(store, [f"removed {removed}; {format_size(result.remaining_bytes)} remain"])


def _run_cache_clear(args: argparse.Namespace) -> int:
    from lowerd.cli.cache_command import open_store, report

    store = open_store(args.config)
    removed = store.clear()
    return report(store, [f"removed {removed} entries from {store.root}"])


if __name__ == "__main__":
    raise SystemExit(main())


def _add_config(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The --config every project command takes."""
    parser.add_argument("--config", help="pyproject.toml to use (default: found from the cwd up)")
    return parser


def _add_targets(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The targets a command acts on, all by default."""
    parser.add_argument("targets", nargs="*", metavar="TARGET", help="targets (default all)")
    return parser
