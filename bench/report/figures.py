"""The report's PNG figures (matplotlib, the ``bench`` extra), each stamped with where it
comes from: the machine, the commit and the command, under the plot *and* in the PNG's
own text chunks (``Description``: that line; ``Source``: the bench command), so a figure
copied out of the report still says what made it.

Traps:

- No ``pyplot``: its global figure registry and backend selection are process state a
  report does not need; :class:`matplotlib.figure.Figure` renders with Agg by itself.
- Latency spans 0.5 s (a healthy worker, the core's grace) to tens of seconds (a worker
  that fell behind), and the loads 500 to 20,000 events/s: both axes are logarithmic.
- With several runs per load the curve is the median run, the bars the range: a single
  run on shared cores is an anecdote: figures are stated as a range over runs.
"""

from __future__ import annotations

import math
import statistics
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

WIDTH_IN = 9.0
CAPTION_CHARS = 150


def save(figure: Figure, path: Path, *, title: str, caption: str, source: str) -> Path:
    """Write ``figure`` as PNG with ``caption`` under it and in its metadata."""
    figure.text(
        0.0,
        -0.01,
        textwrap.fill(caption.replace("`", ""), CAPTION_CHARS),
        fontsize=6.5,
        va="top",
        ha="left",
        color="0.3",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(
        path,
        format="png",
        dpi=110,
        bbox_inches="tight",
        metadata={"Title": title, "Description": caption, "Source": source},
    )
    return path


def _plain_log_axis(axis: Any, ticks: Sequence[float] | None, unit: str = "") -> None:
    """A log axis labelled in plain numbers (``500``, ``2,000``, ``0.5 s``), not ``5x10^2``:
    at ``ticks`` when given (the measured points), else at 1-2-5 steps."""
    if ticks:
        axis.set_ticks(list(ticks), labels=[f"{t:,.0f}{unit}" for t in ticks])
    else:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}{unit}"))
    axis.set_minor_formatter(NullFormatter())


def _quantile_runs(
    phases: Sequence[Mapping[str, Any]], key: str
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Per offered rate: the median over runs of ``opened[key]``, and its min and max."""
    by_rate: dict[float, list[float]] = {}
    for phase in phases:
        value = phase["opened"].get(key)
        if value is not None and not math.isnan(value):  # NaN: a phase with no incident
            by_rate.setdefault(float(phase["rate"]), []).append(float(value))
    rates = sorted(by_rate)
    medians = [statistics.median(by_rate[r]) for r in rates]
    return rates, medians, [min(by_rate[r]) for r in rates], [max(by_rate[r]) for r in rates]


def latency(phases: Sequence[Mapping[str, Any]], bars: Mapping[int, float]) -> Figure:
    """p50 / p95 / p99 of the headline latency against the offered load."""
    figure = Figure(figsize=(WIDTH_IN, 4.8), layout="constrained")
    axes: Axes = figure.add_subplot()
    for key, label, style in (
        ("p50_s", "p50", "o-"),
        ("p95_s", "p95", "s-"),
        ("p99_s", "p99", "^-"),
    ):
        rates, medians, lows, highs = _quantile_runs(phases, key)
        if not rates:
            continue
        errors = [
            [m - lo for m, lo in zip(medians, lows, strict=True)],
            [hi - m for m, hi in zip(medians, highs, strict=True)],
        ]
        axes.errorbar(rates, medians, yerr=errors, fmt=style, capsize=3, label=label)
    for rate, limit in sorted(bars.items()):
        axes.plot([rate], [limit], "rx", markersize=10, markeredgewidth=2)
        axes.annotate(
            f"bar: p99 <= {limit:g} s", (rate, limit), textcoords="offset points", xytext=(6, -12)
        )
    axes.set_xscale("log")
    axes.set_yscale("log")
    _plain_log_axis(axes.xaxis, sorted({float(ph["rate"]) for ph in phases}))
    _plain_log_axis(axes.yaxis, None, " s")
    axes.set_xlabel("offered load, events/s (one worker)")
    axes.set_ylabel("completing event's ack -> incident arrival, s")
    axes.set_title("Incident latency against offered load (first revisions, event-opened)")
    axes.grid(True, which="both", alpha=0.3)
    axes.legend()
    return figure


def memory(rows: Sequence[Mapping[str, Any]], bar_bytes: float, target_bytes: float) -> Figure:
    """Left: megabytes of state against fleet size; right: bytes per tracked pod / GPU."""
    figure = Figure(figsize=(WIDTH_IN, 4.2), layout="constrained")
    left, right = figure.subplots(1, 2)
    nodes = [r["nodes"] for r in rows]
    per_node = sorted({round(r["events"] / r["nodes"]) for r in rows})
    left.plot(nodes, [r["retained_mb"] for r in rows], "o-", label="held (tracemalloc)")
    left.plot(nodes, [r["rss_growth_mb"] for r in rows], "s--", label="RSS growth")
    left.set_xlabel(f"nodes ({', '.join(map(str, per_node))} events each)")
    left.set_ylabel("MiB")
    left.set_title("Correlator state")
    left.grid(True, alpha=0.3)
    left.legend()

    def series(key: str) -> list[float]:
        return [float("nan") if r[key] is None else r[key] for r in rows]

    right.plot(nodes, series("bytes_per_pod"), "o-", label="per tracked pod (held)")
    right.plot(nodes, series("bytes_per_gpu"), "^-", label="per tracked GPU (held)")
    right.plot(nodes, series("rss_bytes_per_pod"), "s--", label="per tracked pod (RSS)")
    right.axhline(bar_bytes, color="r", linestyle=":", label=f"bar {bar_bytes:,.0f} B per pod")
    right.axhline(target_bytes, color="m", linestyle=":", label=f"target {target_bytes:,.0f} B")
    right.set_xscale("log")
    _plain_log_axis(right.xaxis, nodes)
    right.set_xlabel("nodes")
    right.set_ylabel("bytes (each divides the whole state)")
    right.set_title("State per tracked pod and GPU")
    right.set_ylim(bottom=0)
    right.grid(True, alpha=0.3)
    right.legend(fontsize=7)
    return figure


def pipeline(result: Mapping[str, Any], bar_ratio: float) -> Figure:
    """Records/s of the load, plain aiokafka, aiokafka + Pipeline, one worker, the group.

    Trap: a rate can be NaN (``pipeline_bench`` times a worker from its first commit, and
    at quick sizes that commit can cover the whole backlog: nothing left to time). Such a
    bar is drawn at zero and says so; the axis is scaled by the rates that were timed."""
    a = result["aiokafka"]["events_per_s"]
    rows: list[tuple[str, float]] = [
        ("produce (EventProducer)", result["produce"]["records_per_s"]),
        ("(a) plain aiokafka + decode", a),
        ("(a') aiokafka + Pipeline, no writes", result["plain_pipeline"]["events_per_s"]),
        ("(b) one gputriage process worker", result["processor"]["events_per_s"]),
    ]
    group = result.get("group") or {}
    if group:
        rows.append((f"(d) {group['workers']} workers, one group", group["events_per_s"]))
    figure = Figure(figsize=(WIDTH_IN, 3.6), layout="constrained")
    axes: Axes = figure.add_subplot()
    labels = [label for label, _ in rows][::-1]
    values = [value for _, value in rows][::-1]
    colours = [
        "C1" if x.startswith("(b)") else "C2" if x.startswith("(d)") else "C0" for x in labels
    ]
    timed = [value if math.isfinite(value) else 0.0 for value in values]
    axes.barh(labels, timed, color=colours)
    for y, (label, value) in enumerate(zip(labels, values, strict=True)):
        if not math.isfinite(value):
            said = " not timed (drained by its first commit)"
        else:
            ratio = "" if label.startswith("produce") else f" = {value / a:.2f} x (a)"
            said = f" {value:,.0f}/s{ratio}"
        axes.annotate(
            said, (0.0 if not math.isfinite(value) else value, y), va="center", fontsize=8
        )
    axes.axvline(bar_ratio * a, color="r", linestyle=":", label=f"bar: {bar_ratio:g} x (a)")
    axes.set_xlabel("records/s through the embedded broker (cluster-key copies included)")
    axes.set_title("One worker against plain aiokafka on the same topics, same run")
    axes.set_xlim(right=max(*timed, bar_ratio * a if math.isfinite(a) else 0.0, 1.0) * 1.45)
    axes.legend(loc="lower right")
    return figure
