"""``python -m bench.report`` (``make bench``): run every benchmark, write the report.

Runs the steps of :mod:`bench.report.steps` (never a timed step beside another; the
untimed ones together, ``steps.batches``), keeps each JSON under ``--raw-dir``, then
writes ``--report`` and its figures, with a progress bar on stderr. Exit status: 0 when
every step gave a result, 1 when one failed (the report is written anyway), 2 for a usage
mistake.

Traps: a run first deletes the last run's raw results (a report mixing two runs would
caption figures wrongly; ``--render-only`` redraws instead); the default sizes aim well
under 15 minutes on a quiet 2-core machine, and a longer default run says so.
bench/README.md, design notes: report/runner.py.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

from tqdm import tqdm

from bench.report import markdown, provenance
from bench.report.provenance import ROOT, Provenance
from bench.report.steps import (
    BY_NAME,
    STEPS,
    Outcome,
    Step,
    batch_estimate,
    batches,
    load,
    run_step,
    save,
)

BUDGET_S = 15 * 60
"""What ``make bench`` at the default sizes must stay under (2-core machine)."""


def _names(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in BY_NAME]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown step(s) {', '.join(unknown)}; the steps: {', '.join(BY_NAME)}"
        )
    return names


def _shown(argv: list[str] | None) -> list[str]:
    """The arguments as the report states them: without ``--via X`` (said separately)."""
    given = list(sys.argv[1:] if argv is None else argv)
    shown: list[str] = []
    skip = False
    for arg in given:
        if skip:
            skip = False
        elif arg == "--via":
            skip = True
        elif not arg.startswith("--via="):
            shown.append(arg)
    return shown


def _log(message: str) -> None:
    tqdm.write(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr)


def _headline(outcome: Outcome) -> str:
    """One line per finished step, for the terminal."""
    if outcome.status != "ok":
        return f"FAILED ({outcome.error.splitlines()[0] if outcome.error else 'no result'})"
    r = outcome.result
    try:
        if outcome.name == "core":
            return f"{r['timing']['events_per_s']:,.0f} events/s"
        if outcome.name == "replay":
            return f"{r['x_real_time']:,.0f}x real time"
        if outcome.name == "pipeline":
            ratio = r["processor"]["events_per_s"] / r["aiokafka"]["events_per_s"]
            return f"one worker {r['processor']['events_per_s']:,.0f} records/s, {ratio:.2f}x"
        if outcome.name == "latency":
            return ", ".join(
                f"{ph['rate']:,.0f}/s p99 {ph['opened']['p99_s']:.2f} s" for ph in r[:4]
            ) + (" ..." if len(r) > 4 else "")
        if outcome.name == "slim":
            return f"parse + slim {r['pods_per_s']['parse + slim']:,.0f} pods/s"
        if outcome.name == "kmsg":
            return f"kmsg reader {r['lines_per_s']['kmsg_reader']:,.0f} lines/s"
        if outcome.name == "autoscaler":
            return f"{r['best_lines_per_s']:,.0f} lines/s"
        if outcome.name == "backlog":
            return ", ".join(
                f"cap {run['cap'] or 'none'}: {run['peak_rss_mb']:,.0f} MB" for run in r["runs"]
            )
        if outcome.name == "memory":
            last = r["rows"][-1]
            return f"{last['nodes']:,} nodes: {last['bytes_per_pod'] or 0:,.0f} B per pod"
    except (KeyError, TypeError, IndexError, ZeroDivisionError):
        return "done (unexpected result shape)"
    return "done"


def _tick(bar: tqdm, stop: threading.Event, began: float, base: float, share: float) -> None:
    """Advance ``bar`` with the running step's time, never past its ``share``."""
    while not stop.wait(0.5):
        bar.n = round(base + min(time.perf_counter() - began, 0.98 * share))
        bar.refresh()


def run_all(steps: list[Step], mode: str, raw_dir: Path) -> dict[str, Outcome]:
    """Each batch (:func:`~bench.report.steps.batches`) in turn under one progress bar
    scaled in estimated seconds; the steps of a batch at once, a thread each."""
    plan = batches(steps)
    total = sum(batch_estimate(batch, mode) for batch in plan)
    outcomes: dict[str, Outcome] = {}
    bar = tqdm(
        total=round(total),
        unit="s",
        file=sys.stderr,
        disable=None,
        bar_format="{l_bar}{bar}| {elapsed} (estimate {total}s) {postfix}",
    )
    done_estimate = 0.0
    number = 0
    try:
        for batch in plan:
            names = [step.name for step in batch]
            first = number + 1
            number += len(batch)
            shown = f"{first}/{len(steps)}" if len(batch) == 1 else f"{first}-{number}/{len(steps)}"
            bar.set_description(f"{shown} {' + '.join(names)}")
            began = time.perf_counter()
            estimate = batch_estimate(batch, mode)
            stop = threading.Event()
            ticker = threading.Thread(
                target=_tick, args=(bar, stop, began, done_estimate, estimate), daemon=True
            )
            ticker.start()
            try:
                ran = _run_batch(batch, mode, raw_dir, bar)
            finally:
                stop.set()
                ticker.join()
            for outcome in ran:
                outcome.beside = [name for name in names if name != outcome.name]
                save(outcome, raw_dir)
                outcomes[outcome.name] = outcome
                with_others = f", beside {', '.join(outcome.beside)}" if outcome.beside else ""
                _log(f"{outcome.name}: {_headline(outcome)} ({outcome.seconds:.0f} s{with_others})")
            done_estimate += estimate
            bar.n = round(done_estimate)
            bar.set_postfix_str("")
            bar.refresh()
    finally:
        bar.close()
    return outcomes


def _run_batch(batch: list[Step], mode: str, raw_dir: Path, bar: tqdm) -> list[Outcome]:
    """Run the batch's steps, at once when there are several; their outcomes in order.
    A step that raises (it should not: :func:`run_step` turns failures into outcomes)
    still lets the others finish before the error propagates."""

    def show(name: str, several: bool) -> Callable[[str], None]:
        def line(text: str) -> None:
            bar.set_postfix_str(((f"{name}: " if several else "") + text)[:70], refresh=False)

        return line

    if len(batch) == 1:
        return [run_step(batch[0], mode, raw_dir, show(batch[0].name, False))]
    with ThreadPoolExecutor(max_workers=len(batch)) as pool:
        futures = [pool.submit(run_step, s, mode, raw_dir, show(s.name, True)) for s in batch]
        return [future.result() for future in futures]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.report", description=(__doc__ or "").split("\n", 1)[0]
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes (seconds): for development and tests"
    )
    parser.add_argument("--only", type=_names, default=None, metavar="NAME,...")
    parser.add_argument("--skip", type=_names, default=[], metavar="NAME,...")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="measure nothing: redraw the report from the last run's raw results",
    )
    parser.add_argument(
        "--report", type=Path, default=ROOT / "bench" / "REPORT.md", help="the Markdown file"
    )
    parser.add_argument(
        "--figures-dir", type=Path, default=None, help="default: figures/ beside the report"
    )
    parser.add_argument("--raw-dir", type=Path, default=ROOT / "bench" / "out" / "report")
    parser.add_argument(
        "--quality-dir",
        type=Path,
        default=ROOT / "bench" / "out" / "quality",
        help="detection-quality results to include (*.json; see bench/report/markdown.py)",
    )
    parser.add_argument(
        "--via", default="", metavar="COMMAND", help="how it was started (make bench)"
    )
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "default"
    report: Path = args.report.resolve()
    figures_dir: Path = (args.figures_dir or report.parent / "figures").resolve()
    raw_dir: Path = args.raw_dir.resolve()
    raw_dir.mkdir(parents=True, exist_ok=True)
    run_file = raw_dir / "run.json"
    began = time.perf_counter()

    if args.render_only:
        if not run_file.exists():
            print(
                f"--render-only: no run recorded in {raw_dir} (run without it first)",
                file=sys.stderr,
            )
            return 2
        recorded = json.loads(run_file.read_text())
        prov = Provenance.from_json(recorded["provenance"])
        elapsed, load_end = recorded.get("elapsed_s"), recorded.get("load_end")
        outcomes = {name: load(name, raw_dir, prov.mode) for name in BY_NAME}
    else:
        chosen = [s for s in STEPS if (args.only is None or s.name in args.only)]
        chosen = [s for s in chosen if s.name not in args.skip]
        own = shlex.join(["python", "-m", "bench.report", *_shown(argv)])
        prov = Provenance(
            machine=provenance.machine(),
            commit=provenance.commit(),
            command=f"{args.via} ({own})" if args.via else own,
            started=datetime.now(tz=UTC).strftime("%Y-%m-%d %H:%M UTC"),
            mode=mode,
            load_start=provenance.load_average(),
        )
        for stale in [run_file, *raw_dir.glob("*.json"), *raw_dir.glob("*.log")]:
            stale.unlink(missing_ok=True)
        estimate = sum(batch_estimate(batch, mode) for batch in batches(chosen))
        _log(
            f"{len(chosen)} steps ({', '.join(s.name for s in chosen)}), {mode} sizes, "
            f"~{estimate / 60:.0f} min estimated; commit {prov.commit.line()}; "
            f"load average {'-' if prov.load_start is None else f'{prov.load_start:.2f}'}"
        )
        ran = run_all(chosen, mode, raw_dir)
        outcomes = {name: ran.get(name) or load(name, raw_dir, mode) for name in BY_NAME}
        elapsed = time.perf_counter() - began
        load_end = provenance.load_average()
        run_file.write_text(
            json.dumps(
                {"provenance": prov.to_json(), "elapsed_s": elapsed, "load_end": load_end},
                indent=2,
            )
        )

    ctx = markdown.Context(
        provenance=prov,
        outcomes=outcomes,
        report_path=report,
        figures_dir=figures_dir,
        quality_dir=args.quality_dir.resolve(),
        raw_dir=raw_dir,
        elapsed_s=elapsed,
        load_end=load_end,
        figures=[],
    )
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(markdown.render(ctx))
    failed = [name for name, outcome in outcomes.items() if outcome.status == "failed"]
    total = time.perf_counter() - began
    _log(
        f"wrote {report} and {len(ctx.figures)} figure(s) in {figures_dir}; "
        f"elapsed {total // 60:.0f} min {total % 60:.0f} s"
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
    )
    if mode == "default" and not args.render_only and total > BUDGET_S:
        _log(f"over the {BUDGET_S // 60} min budget of make bench: shrink the default sizes")
    return 1 if failed else 0
