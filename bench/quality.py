"""Detection quality: our incidents against a simulated stream's ground truth, and the
PromQL baseline on the same stream (``make bench`` runs it as its "quality" step).

Three runs through the shipped commands (subprocesses, so the report shows what to re-run):
the day (``simulate`` then ``score -o json`` against the 0.99 bars), noise only (every
incident is a false positive), and side by side on a smaller stream with
``python -m bench.promql --truth`` (a real Prometheus; needs ``make tools``, else the
section says so). ``--json`` prints the report's quality-seam sections
(:mod:`bench.report.markdown`).

Trap: the two delays differ by construction, and the report says so: ours is the stream's
clock at the first revision (grace included), the baseline's the first evaluation at which
the alert fires (``for:`` included), both minus the fault's first event.
bench/README.md, design notes: quality.py.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.report.markdown import table

ROOT = Path(__file__).resolve().parent.parent
BAR_PRECISION = 0.99
BAR_RECALL = 0.99


def _log(message: str) -> None:
    print(f"quality: {message}", file=sys.stderr, flush=True)


def _run(args: list[str], what: str) -> subprocess.CompletedProcess[bytes]:
    """Run one command from the repository root; its stderr is relayed (progress lines)."""
    _log(f"{what}: {shlex.join(args)}")
    began = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, stdout=subprocess.PIPE, check=False)
    _log(f"{what}: exit {done.returncode} in {time.perf_counter() - began:.1f} s")
    return done


def _gputriage(*args: str) -> list[str]:
    return [sys.executable, "-m", "gputriage", *args]


def _shown(args: list[str]) -> str:
    """A command as a user would type it (``gputriage ...``, ``python -m bench...``)."""
    if args[1:3] == ["-m", "gputriage"]:
        return shlex.join(["gputriage", *args[3:]])
    return shlex.join(["python", *args[1:]])


def simulate(out: Path, nodes: int, hours: float, seed: int, *extra: str) -> tuple[Path, Path, str]:
    events, truth = out / "events.jsonl", out / "truth.jsonl"
    (ROOT / out).mkdir(parents=True, exist_ok=True)  # relative paths are the root's (_run)
    args = _gputriage(
        "simulate",
        "--nodes",
        str(nodes),
        "--duration",
        f"{hours:g}h",
        "--seed",
        str(seed),
        *extra,
        "--out",
        str(events),
        "--truth",
        str(truth),
    )
    done = _run(args, f"simulate {out.name}")
    if done.returncode != 0:
        raise SystemExit(f"quality: simulate failed (exit {done.returncode})")
    return events, truth, _shown(args)


def score(events: Path, truth: Path) -> tuple[dict[str, Any], str]:
    args = _gputriage("score", str(events), str(truth), "-o", "json")
    done = _run(args, "score")
    if done.returncode not in (0, 1):  # 1: bad event lines, reported; 2: bad truth
        raise SystemExit(f"quality: score failed (exit {done.returncode})")
    return json.loads(done.stdout), _shown(args)


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _table(header: list[str], rows: list[list[str]]) -> str:
    """The report's own Markdown table (:func:`bench.report.markdown.table`), as one string."""
    return "\n".join(table(header, rows))


def ours_section(result: dict[str, Any], command: str, title: str) -> dict[str, Any]:
    """Per type: tp/fp/fn, precision and recall against the bars, delays; the misses."""
    rows, below = [], []
    for kind, t in sorted(result["types"].items()):
        ok_p = t["precision"] is None or t["precision"] >= BAR_PRECISION
        ok_r = t["recall"] is None or t["recall"] >= BAR_RECALL
        if not (ok_p and ok_r):
            below.append(kind)
        rows.append(
            [
                f"`{kind}`",
                str(t["tp"]),
                str(t["fp"]),
                str(t["fn"]),
                _f(t["precision"]) + ("" if ok_p else " **below**"),
                _f(t["recall"]) + ("" if ok_r else " **below**"),
                _s(t["delay_p50_s"]),
                _s(t["delay_p95_s"]),
            ]
        )
    header = ["type", "tp", "fp", "fn", "precision", "recall", "delay p50", "delay p95"]
    verdict = f"Bars (precision ≥ {BAR_PRECISION}, recall ≥ {BAR_RECALL} per type): " + (
        "**met** for every type." if not below else f"**not met** for {', '.join(below)}."
    )
    confusion = [
        [f"`{truth_type}`", f"`{reported}`", str(count)]
        for truth_type, row in sorted(result["confusion"].items())
        for reported, count in sorted(row.items())
        if reported != truth_type
    ]
    parts = [_table(header, rows), "", verdict]
    if confusion:
        parts += ["", "Confusion (off the diagonal: truth reported as another type, or none):"]
        parts += ["", _table(["truth", "reported as", "count"], confusion)]
    return {
        "title": title,
        "command": command,
        "markdown": "\n".join(parts),
        "below": below,
    }


def noise_section(result: dict[str, Any], command: str) -> dict[str, Any]:
    false_positives = sum(t["fp"] for t in result["types"].values())
    by_type = {k: t["fp"] for k, t in sorted(result["types"].items()) if t["fp"]}
    text = f"Incidents on a stream with no fault in it: **{false_positives}** (bar: 0, " + (
        "**met**)." if false_positives == 0 else f"**not met**: {by_type})."
    )
    return {
        "title": "Noise only: no fault, no incident",
        "command": command,
        "markdown": text,
        "false_positives": false_positives,
    }


def side_by_side(
    ours: dict[str, Any], promql: dict[str, Any] | None, command: str, why_not: str
) -> dict[str, Any]:
    """Per type: our recall and delay next to what the PromQL alerts caught, and when."""
    theirs = {t["type"]: t for t in promql["types"]} if promql else {}
    rows = []
    for kind in sorted(set(ours["types"]) | set(theirs)):
        o, p = ours["types"].get(kind), theirs.get(kind)
        rows.append(
            [
                f"`{kind}`",
                str((o["tp"] + o["fn"]) if o else (p["expected"] if p else 0)),
                _f(o["recall"]) if o else "-",
                _s(o["delay_p50_s"]) if o else "-",
                str(o["fp"]) if o else "-",
                (_f(p["recall"]) if p else "-"),
                (_s(p["delay_median_s"]) if p else "-"),
                (", ".join(p["alerts"]) or "(none)") if p else "-",
                (p.get("limits") or "") if p else "",
            ]
        )
    header = [
        "type",
        "expected",
        "our recall",
        "our delay p50",
        "our false",
        "PromQL recall",
        "PromQL delay p50",
        "alerts",
        "why PromQL misses",
    ]
    parts = [_table(header, rows)]
    if promql:
        alerts = [
            [
                f"`{a['alert']}`",
                str(a["firings"]),
                str(a["true"]),
                str(a["false"]),
                ", ".join(f"{k}: {v}" for k, v in sorted(a["confused_with"].items())) or "-",
            ]
            for a in promql["alerts"]
        ]
        parts += [
            "",
            "The baseline's alerts (firings that match a truth of their type, and the rest):",
            "",
            _table(["alert", "firings", "true", "false", "on faults of"], alerts),
            "",
            "Delays: ours from the fault's first event to the first revision on the stream "
            "(grace included); PromQL's to the first rule evaluation at which the alert "
            "fires (its `for:` and the 30 s scrape / 1 m evaluation included).",
        ]
    else:
        parts += ["", f"*PromQL baseline not run*: {why_not}"]
    return {
        "title": "Side by side with the PromQL baseline",
        "command": command,
        "markdown": "\n".join(parts),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--noise-hours", type=float, default=6.0)
    parser.add_argument("--promql-nodes", type=int, default=100)
    parser.add_argument("--promql-hours", type=float, default=6.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "out" / "quality-run")
    parser.add_argument("--json", action="store_true", help="print the sections as JSON")
    args = parser.parse_args(argv)
    out: Path = args.out_dir.resolve()
    if out.is_relative_to(ROOT):
        # The commands run from the root, so the report shows the paths a reader of any
        # clone would type, not this checkout's absolute ones.
        out = out.relative_to(ROOT)

    events, truth, made = simulate(out / "day", args.nodes, args.hours, args.seed)
    day, scored = score(events, truth)
    first = ours_section(
        day, f"{made} && {scored}", f"A simulated {args.nodes}-node, {args.hours:g} h day"
    )
    events, truth, made = simulate(
        out / "noise", args.nodes, args.noise_hours, args.seed, "--noise-only"
    )
    noise, scored = score(events, truth)
    second = noise_section(noise, f"{made} && {scored}")
    events, truth, made = simulate(out / "side", args.promql_nodes, args.promql_hours, args.seed)
    ours, _ = score(events, truth)
    promql_args = [
        sys.executable,
        "-m",
        "bench.promql",
        str(events),
        "--truth",
        str(truth),
        "-o",
        "json",
    ]
    promql, why_not = None, ""
    if shutil.which("promtool") and shutil.which("prometheus"):
        done = _run(promql_args, "promql")
        if done.returncode == 0:
            promql = json.loads(done.stdout)
        else:
            why_not = f"`bench.promql` exited {done.returncode} (its log is above, on stderr)"
    else:
        why_not = "no `prometheus`/`promtool` on this machine (`make tools` installs them)"
    third = side_by_side(ours, promql, f"{made} && {_shown(promql_args)}", why_not)

    sections: list[dict[str, Any]] = [first, second, third]
    result: dict[str, Any] = {
        "sections": sections,
        "bars": {
            "precision": BAR_PRECISION,
            "recall": BAR_RECALL,
            "types_below": first["below"],
            "noise_false_positives": second["false_positives"],
            "promql": promql is not None,
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for section in sections:
            print(f"## {section['title']}\n\n{section['command']}\n\n{section['markdown']}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
