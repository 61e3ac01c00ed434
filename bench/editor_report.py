"""bench_editor.py's report: the tables, the timelines and the checks of its measurements.

Seconds are counted from the save (the file written, didSave sent); stock is a fresh stock
process on the same edited state. The goals are what an editor session should meet; they inform
a reader and fail nothing.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from bench.harness import installed_line, render, reuse, verdicts

if TYPE_CHECKING:
    from bench.bench_editor import Bench

COMMENT_GOAL_SECONDS = 1.5
EDIT_GOAL_RATIO = 0.5
PROVISIONAL_GOAL_SECONDS = 1.5  # issue 10 section 6: real models' one-line edits
# The build stages the server reports in $/progress (real models only), in order.
STAGES = ("load", "export", "partition", "preprocess", "emit", "write")


def describe(row: dict[str, Any]) -> str:
    publish = row["publish_seconds"]
    first = f"{publish:.2f} s" if publish is not None else "none"
    cache = row["cache"]
    return (
        f"first publishDiagnostics {first}, buildFinished {row['finished_seconds']:.2f} s "
        f"(reused: {row['reused']}, {cache.get('misses', 0)} preprocessed, "
        f"{cache.get('hits', 0)} reused, {cache.get('rebased', 0)} rebased); "
        f"stock {row['stock']['wall_seconds']:.1f} s whole process"
    )


def describe_real(row: dict[str, Any]) -> str:
    def at(key: str) -> str:
        return f"{row[key]:.2f} s" if row[key] is not None else "none"

    stock = row["stock"]
    verified = ""
    if row.get("verdict"):
        verified = f", verified ({row['verdict']}) {at('verified_seconds')} after its diagnostics"
    return (
        f"provisional {at('provisional_seconds')}, final {at('final_seconds')}, buildFinished "
        f"{row['finished_seconds']:.2f} s{verified} ({reuse(reuse_run(row))}); stock "
        f"{stock['wall_seconds']:.1f} s ({stock['seconds']:.1f} s work)"
    )


def reuse_run(row: dict[str, Any]) -> dict[str, Any]:
    """A row as bench_real.reuse() reads a build: cache counts and `reused`."""
    cache = row["cache"]
    return {
        "hits": cache.get("hits", 0),
        "misses": cache.get("misses", 0),
        "rebased": cache.get("rebased", 0),
        "reused": row["reused"],
    }


# Report ------------------------------------------------------------------------------------


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def seconds_cell(value: float | None, width: int) -> str:
    return f"{value:>{width}.2f}" if value is not None else f"{'none':>{width}}"


def save_medians(rows: list[dict[str, Any]]) -> tuple[float | None, float, float]:
    """Seconds from the save to the first publishDiagnostics (None: none came) and to
    buildFinished, and stock's whole process: medians over the rounds."""
    publish = median([r["publish_seconds"] for r in rows])
    finished = median([r["finished_seconds"] for r in rows])
    stock = median([r["stock"]["wall_seconds"] for r in rows])
    assert finished is not None and stock is not None
    return publish, finished, stock


def format_table(bench: Bench) -> str:
    head = (
        f"  {'edit':<16} {'publish s':>9} {'finished s':>10} {'stock s':>8} "
        f"{'publish/stk':>11} {'finished/stk':>12}  {'preproc.':>8} {'reused':>6} "
        f"{'rebased':>7}  {'kept .pte':>12}  {'= stock':>7}"
    )
    lines = [head]
    for key, name, _ in bench.workload.edits:
        rows = bench.rows[key]
        publish, finished, stock = save_medians(rows)
        ratio_publish = f"{publish / stock:>10.2f}x" if publish is not None else f"{'-':>11}"
        last = rows[-1]
        cache = last["cache"]
        same = all(r["sha256"] == r["stock"]["sha256"] for r in rows)
        lines.append(
            f"  {name:<16} {seconds_cell(publish, 9)} {finished:>10.2f} {stock:>8.2f} "
            f"{ratio_publish} {finished / stock:>11.2f}x  {cache.get('misses', 0):>8} "
            f"{cache.get('hits', 0):>6} {cache.get('rebased', 0):>7}  "
            f"{last['reused'] or '-':>12}  {'yes' if same else 'NO':>7}"
        )
    return "\n".join(lines)


def checks(bench: Bench) -> list[str]:
    found = []
    for key, name, _ in bench.workload.edits:
        rows = bench.rows[key]
        publish, finished, stock = save_medians(rows)
        shown, label = (publish, "first publishDiagnostics")
        if publish is None:
            shown, label = (finished, "no publishDiagnostics (none changed); buildFinished")
        if key == "comment":
            text = f"{name}: {label} {shown:.2f} s (goal <= {COMMENT_GOAL_SECONDS} s)"
            found.append((text, shown <= COMMENT_GOAL_SECONDS))
        else:
            text = (
                f"{name}: {label} {shown:.2f} s = {shown / stock:.2f}x stock's "
                f"{stock:.1f} s (goal <= {EDIT_GOAL_RATIO}x)"
            )
            found.append((text, shown / stock <= EDIT_GOAL_RATIO))
    rows = [r for key, _, _ in bench.workload.edits for r in bench.rows[key]]
    found.append(
        ("every build ended ok", all(r["status"] == "ok" for r in rows)),
    )
    found.append(
        (
            "lowerd's .pte equals stock's on every edited state",
            all(r["sha256"] == r["stock"]["sha256"] for r in rows),
        )
    )
    return verdicts(found)


def print_report(bench: Bench, revision: str) -> None:
    args = bench.args
    forward = (bench.initial.get("methods") or {}).get("forward") or {}
    note = f"medians of {args.repeat} rounds" if args.repeat > 1 else "one round"
    print(installed_line(revision, "lowerd serve"))
    print(
        f"transformer: {args.blocks} blocks, d={args.dim}, seq {args.seq}; "
        f"{len(forward.get('partitions') or [])} XNNPACK partitions, "
        f"{forward.get('ops_delegated')}/{forward.get('ops')} ops delegated; first build "
        f"{bench.initial.get('first_build_seconds', 0):.1f} s after the server started"
    )
    print(
        f"seconds from the save (file written, didSave sent) to the first publishDiagnostics "
        f"and to lowerd/buildFinished; stock = a fresh stock process, imports included ({note})"
    )
    print(format_table(bench))
    started = [r["started_seconds"] for key, _, _ in bench.workload.edits for r in bench.rows[key]]
    present = [s for s in started if s is not None]
    if present:
        print(
            f"  (didSave to lowerd/buildStarted: {min(present):.2f}-{max(present):.2f} s, the "
            f"scheduler's debounce included)"
        )
    print("\n".join(checks(bench)))


def real_table(bench: Bench) -> str:
    """Seconds from the save; ratios to stock's work after its imports (a warm session's)."""
    titles = [
        "scenario",
        "provisional s",
        "final s",
        "finished s",
        "stock proc s",
        "stock work s",
        "final/work",
        "finished/work",
        "preproc/reused/rebased",
        "= stock",
    ]
    rows = []
    for key, name, _ in bench.workload.edits:
        runs = bench.rows[key]
        provisional = median([r["provisional_seconds"] for r in runs])
        final = median([r["final_seconds"] for r in runs])
        finished = median([r["finished_seconds"] for r in runs])
        proc = median([r["stock"]["wall_seconds"] for r in runs])
        work = median([r["stock"]["seconds"] for r in runs])
        assert finished is not None and proc is not None and work is not None
        rows.append(
            [
                name,
                *(cell(value) for value in (provisional, final, finished, proc, work)),
                f"{final / work:.2f}x" if final is not None else "-",
                f"{finished / work:.2f}x",
                reuse(reuse_run(runs[-1])),
                "yes" if all(r["sha256"] == r["stock"]["sha256"] for r in runs) else "NO",
            ]
        )
    return render(titles, rows)


def timeline_table(bench: Bench) -> str:
    """When each thing happened after the save: the server's notifications, the build's stages
    ($/progress; a stage reported before the progress bar began is not seen: '-') and the
    diagnostics. `lower` is the stage lowerd calls "partition": edge generation, then the
    partitioner, whose report is `final`."""
    moments = [
        ("buildStarted", "started_seconds"),
        ("load", "load"),
        ("export", "export"),
        ("provisional", "provisional_seconds"),
        ("lower", "partition"),
        ("final", "final_seconds"),
        ("preprocess", "preprocess"),
        ("emit", "emit"),
        ("finished", "finished_seconds"),
    ]
    titles = ["scenario", *(title for title, _ in moments)]
    rows = []
    for key, name, _ in bench.workload.edits:
        runs = bench.rows[key]
        row = [name]
        for _, field_ in moments:
            if field_ in STAGES:
                values = [r["stages"].get(field_) for r in runs]
            else:
                values = [r[field_] for r in runs]
            row.append(cell(median(values), none="-"))
        rows.append(row)
    return render(titles, rows)


def cell(value: float | None, none: str = "none") -> str:
    return f"{value:.2f}" if value is not None else none


def real_checks(bench: Bench) -> list[str]:
    found = []
    for key, name, _ in bench.workload.edits:
        runs = bench.rows[key]
        firsts = [
            min(
                (s for s in (r["provisional_seconds"], r["final_seconds"]) if s is not None),
                default=None,
            )
            for r in runs
        ]
        first = median(firsts)
        label = "first diagnostics (provisional or final)"
        if first is None:
            first = median([r["finished_seconds"] for r in runs])
            label = "no publishDiagnostics (none changed); buildFinished"
        assert first is not None
        text = f"{name}: {label} {first:.2f} s (goal <= {PROVISIONAL_GOAL_SECONDS} s)"
        found.append((text, first <= PROVISIONAL_GOAL_SECONDS))
    rows = [r for key, _, _ in bench.workload.edits for r in bench.rows[key]]
    found.append(("every build ended ok", all(r["status"] == "ok" for r in rows)))
    found.append(
        (
            "every provisional report was replaced (none shown after buildFinished)",
            not any(r["provisional_left"] for r in rows),
        )
    )
    found.append(
        (
            "lowerd's .pte equals stock's on every edited state",
            all(r["sha256"] == r["stock"]["sha256"] for r in rows),
        )
    )
    found.append(
        (
            "lowerd's report names the sha256 of the file it left",
            all(r["sha256"] == r["reported_sha256"] for r in rows),
        )
    )
    return verdicts(found)


def print_real_report(bench: Bench, revision: str) -> None:
    args = bench.args
    model = bench.workload.real
    assert model is not None
    forward = (bench.initial.get("methods") or {}).get("forward") or {}
    note = f"medians of {args.repeat} rounds" if args.repeat > 1 else "one round"
    print(installed_line(revision, "lowerd serve"))
    if args.small:
        print("SMALL CONFIGS (--small): a smoke run of the script, not the benchmark's numbers")
    print(
        f"{model.target}: {model.small_title if args.small else model.title}\n"
        f"  {len(forward.get('partitions') or [])} XNNPACK partitions, "
        f"{forward.get('ops_delegated')}/{forward.get('ops')} ops delegated; first build "
        f"{bench.initial.get('first_build_seconds', 0):.1f} s after the server started"
    )
    print(
        "seconds from the save (file written, didSave sent) to the first provisional "
        "publishDiagnostics (the last build's report, marked), to the first after which the "
        "editor shows none provisional (final: the edited program's partitioned report or "
        "result; none = no diagnostic changed) and to lowerd/buildFinished; stock = a fresh "
        f"stock process: whole (proc) and after its imports (work) ({note})"
    )
    print(real_table(bench))
    if args.verify:
        print(verified_lines(bench))
    print(f"  timeline, s after the save:\n{timeline_table(bench)}")
    print("\n".join(real_checks(bench)))


def verified_lines(bench: Bench) -> str:
    """--verify: per scenario, the seconds from the build's final diagnostics (buildWritten)
    to the verified numbers (buildFinished), and the verdict."""
    lines = ["  verified s: from the build's final diagnostics to the verified numbers (median)"]
    for key, name, _ in bench.workload.edits:
        rows = bench.rows[key]
        verdicts = sorted({str(row.get("verdict")) for row in rows})
        lag = median([row.get("verified_seconds") for row in rows])
        lines.append(f"    {name:<14}{seconds_cell(lag, 6)}  {'/'.join(verdicts)}")
    return "\n".join(lines)
