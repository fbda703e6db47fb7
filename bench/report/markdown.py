"""``bench/REPORT.md`` from the steps' JSON results: one section per benchmark, always.

Trap: every section is written whether or not its step ran: one not run or failed says so,
with the command to run it (and a failure's log tail), so a reader never mistakes a
missing figure for a good one. Figures are drawn here too, each with its provenance.

"Detection quality" is a seam: every ``*.json`` under ``bench/out/quality/`` becomes a
subsection (``title``, ``command``, optional ``markdown`` and ``metrics``), in file-name
order. bench/README.md, design notes: report/markdown.py.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from bench.core_bench import BAR_BYTES_PER_POD, BAR_EVENTS_PER_S
from bench.kmsg_bench import BAR_LINES_PER_S as BAR_KMSG_LINES_PER_S
from bench.latency import BARS_P99_S
from bench.pipeline_bench import BAR_EVENTS_PER_S as BAR_WORKER_RECORDS_PER_S
from bench.pipeline_bench import BAR_PRODUCE_EVENTS_PER_S, BAR_RATIO
from bench.replay_bench import BAR_X_REAL_TIME
from bench.report.provenance import ROOT, Provenance
from bench.report.steps import BY_NAME, Outcome

if TYPE_CHECKING:
    from matplotlib.figure import Figure

DESIGN_CORE_EVENTS_PER_S = 200_000
DESIGN_BYTES_PER_POD = 500
"""The design's targets, where they are stricter than the benches' own bars."""
SLIM_BAR_PODS_PER_S = 10_000
"""bench/slim_bench.py's bar; not imported: that module imports
kubernetes-asyncio, which the report needs for nothing else."""

SECTIONS = (
    "Summary",
    "Core: events/s on one core",
    "Replay: events/s and speed against real time",
    "Pipeline: one worker through the broker against plain aiokafka",
    "Incident latency against offered load",
    "Connectors: parsing and slimming",
    "Memory as the cluster grows",
    "Worker memory over a lagging backlog",
    "Detection quality",
    "Regenerating this report",
)
"""Every ``##`` heading of the report, in order (the test checks each is there)."""


@dataclass
class Context:
    provenance: Provenance
    outcomes: Mapping[str, Outcome]
    report_path: Path
    figures_dir: Path
    quality_dir: Path
    raw_dir: Path
    elapsed_s: float | None
    load_end: float | None
    figures: list[Path]
    """The PNGs drawn so far (for the runner's summary line)."""


# ------------------------------------------------------------------------------ helpers


def _n(value: float | None, digits: int = 0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.{digits}f}"


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds * 1000:,.0f} ms"


def _range(values: Iterable[float], digits: int = 0, unit: str = "") -> str:
    items = sorted(values)
    if not items:
        return "-"
    if len(items) == 1 or _n(items[0], digits) == _n(items[-1], digits):
        return f"{_n(items[0], digits)}{unit}"
    return f"{_n(items[0], digits)}-{_n(items[-1], digits)}{unit}"


def _verdict(met: bool) -> str:
    return "met" if met else "**not met**"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _relative(path: Path, start: Path) -> str:
    return Path(os.path.relpath(path, start)).as_posix()


def _ran(outcome: Outcome) -> list[str]:
    beside = (
        f"; beside {', '.join(f'`{name}`' for name in outcome.beside)} on the other core "
        "(no figure of either depends on wall time)"
        if outcome.beside
        else ""
    )
    return [f"Command: `{outcome.command}` ({outcome.seconds:.0f} s{beside})."]


def _absent(ctx: Context, name: str) -> list[str] | None:
    """The body of a section whose step has no result, or None if it has one."""
    outcome = ctx.outcomes[name]
    if outcome.status == "ok":
        return None
    if outcome.status == "not run":
        return [
            f"*Not run* in this report. To run it: `{BY_NAME[name].command('default')}` "
            f"(or `make bench`)."
        ]
    return [
        f"*Failed*: `{outcome.command}` after {outcome.seconds:.0f} s: "
        f"{outcome.error.splitlines()[0] if outcome.error else 'no result'}. "
        f"Its log: `{outcome.log}`; the last lines:",
        "",
        "```",
        *outcome.error.splitlines()[1:],
        "```",
    ]


def _figure(
    ctx: Context, name: str, title: str, made_from: str, draw: Callable[[ModuleType], Figure]
) -> list[str]:
    """Draw one figure (``draw`` is given :mod:`bench.report.figures`, imported here so that
    a report without matplotlib still renders, saying why a figure is missing)."""
    caption = ctx.provenance.caption(made_from)
    try:
        from bench.report import figures  # noqa: PLC0415 - matplotlib is optional
    except ImportError as exc:  # matplotlib is the `bench` extra
        return [f"*(Figure not drawn: {exc}; `pip install -e '.[bench]'`.)*"]
    path = ctx.figures_dir / f"{name}.png"
    figures.save(draw(figures), path, title=title, caption=caption, source=made_from)
    ctx.figures.append(path)
    return [f"![{title}]({_relative(path, ctx.report_path.parent)})", "", f"*{caption}*"]


# ------------------------------------------------------------------------------ sections


def header(ctx: Context) -> list[str]:
    p = ctx.provenance
    cores = p.machine.cores

    def load(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    noisy = [v for v in (p.load_start, ctx.load_end) if v is not None and v > cores / 2]
    elapsed = (
        "-"
        if ctx.elapsed_s is None
        else f"{ctx.elapsed_s // 60:.0f} min {ctx.elapsed_s % 60:.0f} s"
    )
    return [
        "# gputriage benchmark report",
        "",
        f"Generated by `{p.command}`, started {p.started}, in {elapsed}, at "
        + (
            "**quick sizes (`--quick`): these figures mean nothing**."
            if p.mode == "quick"
            else "the default sizes."
        ),
        "",
        f"- Machine: {p.machine.line()}",
        f"- Commit: `{p.commit.line()}`"
        + (
            " (tracked files differed from it: the figures may not be that commit's)"
            if p.commit.dirty
            else ""
        ),
        f"- Load average (1 min): {load(p.load_start)} at the start, {load(ctx.load_end)} at "
        f"the end, on {cores} cores"
        + (": **something else was running; read the figures as a lower bound**" if noisy else ""),
        "- The broker (the embedded Tansu), the workers and the benches share these cores: "
        "read ranges, not decimals. Raw results: "
        f"`{_relative(ctx.raw_dir, ROOT)}/*.json` (git-ignored), each bench's log beside it.",
        "",
    ]


def summary(ctx: Context) -> list[str]:
    rows: list[list[str]] = []
    o = ctx.outcomes
    if o["core"].status == "ok":
        t = o["core"].result["timing"]
        rows.append(
            [
                "core, decode included, one core",
                f"{_n(t['events_per_s'])} events/s",
                f">= {BAR_EVENTS_PER_S:,} (DESIGN §6: {DESIGN_CORE_EVENTS_PER_S:,})",
                _verdict(t["events_per_s"] >= BAR_EVENTS_PER_S),
            ]
        )
    if o["replay"].status == "ok":
        r = o["replay"].result
        rows.append(
            [
                "gputriage replay",
                f"{_n(r['events_per_s'])} events/s, {_n(r['x_real_time'])}x real time",
                f">= {BAR_X_REAL_TIME:,}x",
                _verdict(r["met"]),
            ]
        )
    if o["pipeline"].status == "ok":
        r = o["pipeline"].result
        ratio = r["processor"]["events_per_s"] / r["aiokafka"]["events_per_s"]
        rows.append(
            [
                "one worker / plain aiokafka, same run",
                f"{ratio:.2f} ({_n(r['processor']['events_per_s'])} records/s)",
                f">= {BAR_RATIO:g}",
                _verdict(ratio >= BAR_RATIO),
            ]
        )
        if r.get("group"):
            g = r["group"]
            rows.append(
                [
                    f"{g['workers']} workers, one group",
                    f"{_n(g['events_per_s'])} records/s "
                    f"({g['events_per_s'] / r['processor']['events_per_s']:.2f}x one worker)",
                    "reported",
                    "",
                ]
            )
    if o["latency"].status == "ok":
        for rate, bar in sorted(BARS_P99_S.items()):
            p99 = [ph["opened"]["p99_s"] for ph in o["latency"].result if ph["rate"] == rate]
            if p99:
                rows.append(
                    [
                        f"incident latency p99 at {rate:,} events/s",
                        _range(p99, 2, " s"),
                        f"<= {bar:g} s",
                        _verdict(max(p99) <= bar),
                    ]
                )
    if o["memory"].status == "ok":
        largest = max(o["memory"].result["rows"], key=lambda r: r["nodes"])
        per_pod = largest["bytes_per_pod"] or float("nan")
        rows.append(
            [
                f"state per tracked pod, {largest['nodes']:,} nodes",
                f"{_n(per_pod)} B",
                f"<= {BAR_BYTES_PER_POD:,} (DESIGN §6: {DESIGN_BYTES_PER_POD})",
                _verdict(per_pod <= BAR_BYTES_PER_POD),
            ]
        )
    lines = ["## Summary", ""]
    if not rows:
        return [*lines, "*No benchmark ran.*", ""]
    lines += table(["measure", "result", "bar", ""], rows)
    not_ok = [name for name, outcome in o.items() if outcome.status != "ok"]
    if not_ok:
        lines += ["", "Not in this report (not run or failed): " + ", ".join(not_ok) + "."]
    return [*lines, ""]


def core(ctx: Context) -> list[str]:
    lines = ["## Core: events/s on one core", ""]
    absent = _absent(ctx, "core")
    if absent is not None:
        return [*lines, *absent, ""]
    outcome = ctx.outcomes["core"]
    r = outcome.result
    s, t, c = r["stream"], r["timing"], r["core"]
    n = s["events"]
    lines += [
        "`bench/core_bench.py`: `decode_event` + `Correlator.ingest` (each line routed as the "
        "producer and the replay route it: GPU pods, nodes and bindings are copied to the "
        "cluster key) on every line of a generated stream held in memory, then `flush()`; "
        f"{r['machine']['cpu']}, core {r['machine']['core']}, best of {t['repeat']} "
        "(interleaved with the decode-only pass).",
        "",
        f"Stream: {n:,} events over {s['nodes']:,} nodes ({s['clusters']} clusters, seed "
        f"{s['seed']}, {s['hours']:g} h of event time, {s['mb']:.0f} MB of JSON).",
        "",
    ]
    decode_runs = [n / x for x in t["decode_runs_s"]]
    core_runs = [n / x for x in t["core_runs_s"]]
    lines += table(
        ["pass", "events/s (best)", "all runs, events/s", "us/event"],
        [
            [
                "decode only",
                _n(t["decode_events_per_s"]),
                _range(decode_runs),
                f"{1e6 * t['decode_s'] / n:.2f}",
            ],
            [
                "**decode + core**",
                f"**{_n(t['events_per_s'])}**",
                _range(core_runs),
                f"{1e6 * t['core_s'] / n:.2f}",
            ],
            [
                "core alone (the difference)",
                _n(t["core_only_events_per_s"]),
                "",
                f"{1e6 * t['core_only_s'] / n:.2f}",
            ],
        ],
    )
    revisions = sum(c["revisions"].values())
    incidents = sum(c["incidents"].values())
    lines += [
        "",
        f"{c['stats'].get('events', 0):,} events reached the engine (the copies included); "
        f"{incidents:,} incidents in {revisions:,} revisions; {c['tracked_pods']:,} tracked pods "
        f"at the end; the cyclic GC took {c['gc_seconds']:.2f} s of the best run.",
        "",
        f"Bar: >= {BAR_EVENTS_PER_S:,} events/s: {_verdict(t['events_per_s'] >= BAR_EVENTS_PER_S)}"
        f" (DESIGN §6's target: {DESIGN_CORE_EVENTS_PER_S:,}). The state this stream leaves "
        "is the 5,000-node row of *Memory as the cluster grows*.",
        "",
        *_ran(outcome),
        "",
    ]
    return lines


def replay(ctx: Context) -> list[str]:
    lines = ["## Replay: events/s and speed against real time", ""]
    absent = _absent(ctx, "replay")
    if absent is not None:
        return [*lines, *absent, ""]
    outcome = ctx.outcomes["replay"]
    r = outcome.result
    s = r["stream"]
    lines += [
        "`bench/replay_bench.py`: `python -m gputriage replay -o json --no-progress FILE`, "
        "wall clock from start to exit (start-up, reading, decoding, the core and encoding "
        f"every revision), {r['machine']['cpu']}, core {r['machine']['core']}. FILE is the "
        f"core bench's stream: {s['events']:,} events over {s['nodes']:,} nodes, "
        f"{s['hours']:g} h of event time, {s['mb']:.0f} MB.",
        "",
    ]
    lines += table(
        ["runs, s", "best, s", "events/s", "x real time (all runs)", "revisions"],
        [
            [
                ", ".join(f"{x:.2f}" for x in r["runs_s"]),
                f"{r['seconds']:.2f}",
                _n(r["events_per_s"]),
                f"**{_n(r['x_real_time'])}** ({_range(r['x_real_time_runs'])})",
                _n(r["incident_revisions"]),
            ]
        ],
    )
    lines += [
        "",
        f"Bar: >= {BAR_X_REAL_TIME:,}x real time on the 5,000-node stream: "
        f"{_verdict(r['met'])}" + ("" if s["nodes"] >= 5_000 else " (a smaller stream here)") + ".",
        "",
        *_ran(outcome),
        "",
    ]
    return lines


def pipeline(ctx: Context) -> list[str]:
    lines = ["## Pipeline: one worker through the broker against plain aiokafka", ""]
    absent = _absent(ctx, "pipeline")
    if absent is not None:
        return [*lines, *absent, ""]
    outcome = ctx.outcomes["pipeline"]
    r = outcome.result
    args, a, b = r["args"], r["aiokafka"], r["processor"]
    base = a["events_per_s"]
    lines += [
        "`bench/pipeline_bench.py`: the embedded broker, "
        f"{args['events']:,} generated events over {args['nodes']:,} nodes produced to "
        f"{args['partitions']} partitions x 6 raw topics, then in the same run (a) a plain "
        "aiokafka consumer (no group, `getmany` + `decode_event`), (a') the same feeding the "
        "`Pipeline` with nothing written back, (b) one `gputriage process` worker from its "
        "first commit to every record committed (start-up and group join excluded), and (d) "
        "a group of workers on the same backlog. Rates are records/s: every GPU pod, node "
        "and binding event is also copied to the cluster key (~1.95 records per event).",
        "",
    ]
    rows = [
        [
            f"produce (EventProducer, {args['produce_batch_kb']} KB batches)",
            f"{_n(r['produce']['records_per_s'])} ({_n(r['produce']['events_per_s'])} events/s)",
            "",
            f">= {BAR_PRODUCE_EVENTS_PER_S:,} events/s: "
            + _verdict(r["produce"]["events_per_s"] >= BAR_PRODUCE_EVENTS_PER_S),
        ],
        ["(a) plain aiokafka + decode", _n(base), "1.00", "the baseline"],
        [
            "(a') aiokafka + Pipeline, no writes",
            _n(r["plain_pipeline"]["events_per_s"]),
            f"{r['plain_pipeline']['events_per_s'] / base:.2f}",
            "",
        ],
        [
            "**(b) one worker**",
            f"**{_n(b['events_per_s'])}**",
            f"**{b['events_per_s'] / base:.2f}**",
            f">= {BAR_RATIO:g} x (a): {_verdict(b['events_per_s'] / base >= BAR_RATIO)}; "
            f">= {BAR_WORKER_RECORDS_PER_S:,}/s: "
            + _verdict(b["events_per_s"] >= BAR_WORKER_RECORDS_PER_S),
        ],
    ]
    group = r.get("group") or {}
    if group:
        rows.append(
            [
                f"(d) {group['workers']} workers, one group",
                _n(group["events_per_s"]),
                f"{group['events_per_s'] / base:.2f}",
                f"{group['events_per_s'] / b['events_per_s']:.2f} x one worker (reported)",
            ]
        )
    lines += table(["", "records/s", "x (a)", "bar"], rows)
    if "us_per_record" in b:
        lines += [
            "",
            f"Per record, (b): {b['us_per_record']:.1f} us = the Pipeline (decode, checks, the "
            f"core) {b['pipeline_us_per_record']:.1f} us + the worker's own "
            f"{b['overhead_us_per_record']:.1f} us (fetch, produce, commit, idle); start-up and "
            f"group join {b['startup_s']:.1f} s (excluded).",
        ]
    lines += [
        "",
        *_figure(
            ctx,
            "pipeline",
            "One worker against plain aiokafka",
            outcome.command,
            lambda figures: figures.pipeline(r, BAR_RATIO),
        ),
        "",
        *_ran(outcome),
        "",
    ]
    return lines


def latency(ctx: Context) -> list[str]:
    lines = ["## Incident latency against offered load", ""]
    absent = _absent(ctx, "latency")
    if absent is not None:
        return [*lines, *absent, ""]
    outcome = ctx.outcomes["latency"]
    phases: list[dict[str, Any]] = outcome.result
    runs = max((ph["run"] for ph in phases), default=0)
    lines += [
        "`bench/latency.py`: for each offered load, fresh topics and one fresh worker, "
        f"{phases[0]['seconds']:g} s of live events published through the connectors' own "
        "publish loop (signed, heartbeats); the latency of each first revision of an "
        "event-opened incident, from its completing event's ack (on Kafka) to its arrival "
        f"on the incident topic. {runs} run(s) per load: the curve is the median run, the "
        "bars the range.",
        "",
    ]
    rows = []
    for rate in sorted({ph["rate"] for ph in phases}):
        mine = [ph for ph in phases if ph["rate"] == rate]
        bar = BARS_P99_S.get(int(rate))

        def spread(key: str, group: list[dict[str, Any]] = mine) -> str:
            return _range([ph["opened"][key] * 1000 for ph in group], 0, " ms")

        p99 = [ph["opened"]["p99_s"] for ph in mine]
        rows.append(
            [
                f"{rate:,.0f}",
                _range([ph["opened"]["n"] for ph in mine]),
                spread("p50_s"),
                spread("p95_s"),
                f"**{spread('p99_s')}**",
                _range([100 * ph.get("pipeline_share", 0.0) for ph in mine], 0, "%"),
                _range([ph["ack_lag_p99_s"] * 1000 for ph in mine], 0, " ms"),
                "" if bar is None else f"<= {bar:g} s: {_verdict(max(p99) <= bar)}",
            ]
        )
    lines += table(
        ["events/s", "incidents", "p50", "p95", "p99", "worker core%", "load lag p99", "bar"], rows
    )
    lines += [
        "",
        "*worker core%*: the worker's time in the Pipeline per second of the phase (near 100% "
        "it cannot keep up); *load lag p99*: from an event's time to its ack (above a few "
        "hundred ms the load generator itself, on the same cores, is not offering the load). "
        "Incidents are counted until the core's grace + 2 s after the last event: where the "
        "worker falls behind, the later ones are not counted, so the quantiles there "
        "understate the latency (compare *incidents* across loads).",
        "",
        *_figure(
            ctx,
            "latency",
            "Incident latency against offered load",
            outcome.command,
            lambda figures: figures.latency(phases, BARS_P99_S),
        ),
        "",
        *_ran(outcome),
        "",
    ]
    return lines


def connectors(ctx: Context) -> list[str]:
    lines = [
        "## Connectors: parsing and slimming",
        "",
        "On one core, best of each bench's runs, from in-memory input (no I/O but the kmsg "
        "reader's file):",
        "",
    ]
    rows: list[list[str]] = []
    notes: list[str] = []
    for name in ("slim", "kmsg", "autoscaler"):
        absent = _absent(ctx, name)
        if absent is not None:
            notes += [f"`{name}`: " + absent[0], *absent[1:], ""]
    o = ctx.outcomes
    if o["slim"].status == "ok":
        r = o["slim"].result
        rates = r["pods_per_s"]
        slim_rate = rates.get("parse + slim", 0.0)
        for label, rate in rates.items():
            bar = ""
            if label == "parse + slim":
                bar = f">= {SLIM_BAR_PODS_PER_S:,}: {_verdict(slim_rate >= SLIM_BAR_PODS_PER_S)}"
            rows.append(
                [
                    f"k8s pod slimming ({r['pod_bytes'] / 1024:.1f} KiB pods)",
                    label,
                    f"{_n(rate)} pods/s",
                    bar,
                ]
            )
    if o["kmsg"].status == "ok":
        r = o["kmsg"].result
        labels = {
            "floor": "fast-path check alone",
            "dmesg": "parse_line, dmesg lines",
            "kmsg_lines": "parse_line, kmsg records",
            "kmsg_reader": "KmsgReader over a file",
        }
        for key, rate in r["lines_per_s"].items():
            bar = ""
            if key == "kmsg_reader":
                bar = f">= {BAR_KMSG_LINES_PER_S:,} (slowest pass): {_verdict(r['met'])}"
            rows.append(
                [
                    f"XID kernel log ({r['xid_share']:.0%} XID lines)",
                    labels.get(key, key),
                    f"{_n(rate)} lines/s",
                    bar,
                ]
            )
    if o["autoscaler"].status == "ok":
        r = o["autoscaler"].result
        best = r["best_lines_per_s"]
        rows.append(
            [
                f"autoscaler logs ({r['noise_share']:.0%} noise)",
                f"parse_line (runs {_range(r['lines_per_s'])})",
                f"{_n(best)} lines/s",
                f">= {r['bar_lines_per_s']:,}: {_verdict(best >= r['bar_lines_per_s'])}",
            ]
        )
    if rows:
        lines += table(["connector", "pass", "throughput", "bar"], rows)
        lines.append("")
    lines += notes
    for name in ("slim", "kmsg", "autoscaler"):
        if o[name].status == "ok":
            lines.append(f"- `{name}`: " + _ran(o[name])[0])
    return [*lines, ""]


def memory(ctx: Context) -> list[str]:
    lines = ["## Memory as the cluster grows", ""]
    absent = _absent(ctx, "memory")
    if absent is not None:
        return [*lines, *absent, ""]
    outcome = ctx.outcomes["memory"]
    rows: list[dict[str, Any]] = outcome.result["rows"]
    per_node = sorted({round(r["events"] / r["nodes"]) for r in rows})
    density = (
        " (the core bench's density: its 1M-event stream is the 5,000-node row)"
        if per_node == [200]
        else ""
    )
    lines += [
        "`bench/memory_scale.py`: for each fleet size, a generated stream of "
        f"{', '.join(map(str, per_node))} events per node{density} ingested "
        "by one Correlator, each size in a fresh process. *Held*: tracemalloc's bytes still "
        "allocated after the run, divided by the tracked pods and by the tracked GPUs (each "
        "an upper bound: both divide the whole state, node, incident and cluster-key state "
        "included). *RSS*: the resident set's growth over the loaded input.",
        "",
    ]
    lines += table(
        [
            "nodes",
            "events",
            "tracked pods",
            "tracked GPUs",
            "held MiB",
            "RSS growth MiB",
            "B per pod (held)",
            "B per GPU (held)",
            "B per pod (RSS)",
        ],
        [
            [
                _n(r["nodes"]),
                _n(r["events"]),
                _n(r["tracked_pods"]),
                _n(r["tracked_gpus"]),
                _n(r["retained_mb"], 1),
                _n(r["rss_growth_mb"], 1),
                _n(r["bytes_per_pod"]),
                _n(r["bytes_per_gpu"]),
                _n(r["rss_bytes_per_pod"]),
            ]
            for r in rows
        ],
    )
    largest = max(rows, key=lambda r: r["nodes"])
    pods = max(largest["tracked_pods"], 1)
    walked = sum(largest["by_field"].values())
    fields = [
        f"{name} {size / pods:,.0f}"
        for name, size in largest["by_field"].items()
        if size >= walked / 20
    ]
    per_pod = largest["bytes_per_pod"] or float("nan")
    lines += [
        "",
        f"Bar: <= {BAR_BYTES_PER_POD:,} B per tracked pod: {_verdict(per_pod <= BAR_BYTES_PER_POD)}"
        f" at {largest['nodes']:,} nodes (DESIGN §6's target: {DESIGN_BYTES_PER_POD} B). Where "
        f"it goes at {largest['nodes']:,} nodes (deep `getsizeof` by state field, bytes per "
        "tracked pod, fields over 5%): " + "; ".join(fields) + ".",
        "",
        *_figure(
            ctx,
            "memory",
            "Memory as the cluster grows",
            outcome.command,
            lambda figures: figures.memory(rows, BAR_BYTES_PER_POD, DESIGN_BYTES_PER_POD),
        ),
        "",
        *_ran(outcome),
        "",
    ]
    return lines


def backlog(ctx: Context) -> list[str]:
    lines = ["## Worker memory over a lagging backlog", ""]
    absent = _absent(ctx, "backlog")
    if absent is not None:
        return [*lines, *absent, ""]
    outcome = ctx.outcomes["backlog"]
    r = outcome.result
    a = r["args"]
    lines += [
        "`bench/backlog_memory.py`: a backlog of "
        f"{a['events']:,} events over {a['nodes']:,} nodes on {a['partitions']} partitions, "
        f"partition 0 moved {a['lag_hours']:g} h behind the others, drained by one fresh "
        "`gputriage process` worker per cap on buffered events "
        "(`processor.max_buffered_events`); its peak RSS is `VmHWM`.",
        "",
    ]
    lines += table(
        ["cap", "peak RSS", "peak buffered", "pauses", "drain", "records/s"],
        [
            [
                _n(run["cap"]) if run["cap"] else "none",
                f"{_n(run['peak_rss_mb'])} MB",
                _n(run["peak_buffered"]),
                _n(run["pauses"]),
                f"{run['seconds']:.1f} s",
                _n(run["events_per_s"]),
            ]
            for run in r["runs"]
        ],
    )
    return [*lines, "", *_ran(outcome), ""]


def quality(ctx: Context) -> list[str]:
    lines = ["## Detection quality", ""]
    files = sorted(ctx.quality_dir.glob("*.json")) if ctx.quality_dir.is_dir() else []
    where = _relative(ctx.quality_dir, ROOT)
    outcome = ctx.outcomes["quality"]
    if outcome.status == "ok":  # the quality step's own sections (bench/quality.py) first
        lines += [
            "`bench/quality.py`: `gputriage simulate` writes a stream and its ground truth "
            "(`truth.v1`: what the domain's rules say each injected fault must give), "
            "`gputriage score` matches our incidents against it, and `bench.promql` runs "
            "the reference document's PromQL alerts on a real Prometheus over the same "
            "stream.",
            "",
            *_ran(outcome),
            "",
        ]
        for section in outcome.result["sections"]:
            lines += [f"### {section['title']}", "", f"Command: `{section['command']}`.", ""]
            lines += [str(section["markdown"]).rstrip(), ""]
    elif outcome.status == "failed":
        lines += [*(_absent(ctx, "quality") or []), ""]
    if not files and outcome.status == "ok":
        return lines
    if not files:
        return [
            *lines,
            f"*Not run*: no results under `{where}/`. `gputriage score` (incidents against a "
            "simulated stream's ground truth, `truth.v1`) and the PromQL + Alertmanager "
            "baseline on the same stream write theirs there, one JSON file each "
            "(`bench/report/markdown.py` says the shape); the next `make bench` includes them.",
            "",
        ]
    for path in files:
        try:
            data = json.loads(path.read_text())
            title, command = str(data["title"]), str(data["command"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            lines += [f"*Unreadable*: `{_relative(path, ROOT)}`: {type(exc).__name__}: {exc}", ""]
            continue
        lines += [f"### {title}", "", f"Command: `{command}` (`{_relative(path, ROOT)}`).", ""]
        if data.get("markdown"):
            lines += [str(data["markdown"]).rstrip(), ""]
        metrics = data.get("metrics")
        if isinstance(metrics, dict) and metrics:
            lines += table(["metric", "value"], [[str(k), str(v)] for k, v in metrics.items()])
            lines.append("")
    return lines


def regenerate(ctx: Context) -> list[str]:
    mode = ctx.provenance.mode
    lines = [
        "## Regenerating this report",
        "",
        "`make bench` runs every benchmark at the default sizes and rewrites this file and "
        "`bench/figures/*.png` (`make bench-quick`: the quick sizes, under a minute). "
        f"The steps one at a time, at this report's ({mode}) sizes:",
        "",
        "```sh",
    ]
    lines += [f".venv/bin/{step.command(mode)}" for step in BY_NAME.values()]
    lines += [
        "```",
        "",
        "`python -m bench.report --render-only` redraws the report from the last run's raw "
        "results without measuring again; `--only NAME,...` / `--skip NAME,...` choose "
        f"steps ({', '.join(BY_NAME)}).",
        "",
    ]
    return lines


def render(ctx: Context) -> str:
    parts = [
        header(ctx),
        summary(ctx),
        core(ctx),
        replay(ctx),
        pipeline(ctx),
        latency(ctx),
        connectors(ctx),
        memory(ctx),
        backlog(ctx),
        quality(ctx),
        regenerate(ctx),
    ]
    text = "\n".join(line for part in parts for line in part)
    return text.rstrip() + "\n"
