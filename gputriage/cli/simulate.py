"""``gputriage simulate``: a seeded GPU-cluster event stream and its ground truth.

Options default to ``None`` ("not given"): :class:`gputriage.simulate.run.SimulateOptions`
owns the defaults, and ``--help`` shows them from there.
"""

from __future__ import annotations

import sys
from dataclasses import fields
from typing import Any

import click

from gputriage.cli.common import CONTEXT, FiniteRange, StructDefault, TimeType
from gputriage.simulate.catalogue import CLUSTERS
from gputriage.simulate.run import SimulateOptions, parse_duration, run_simulate

_DEFAULTS = SimulateOptions()


class DurationType(click.ParamType):
    """``DURATION``: ``6h``, ``90m``, ``1h30m``; a bad one is a one-line usage error."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, float):
            return value
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.command("simulate", context_settings=CONTEXT)
@click.option(
    "--nodes",
    type=click.IntRange(min=1, max=20_000),
    cls=StructDefault,
    show_default=str(_DEFAULTS.nodes),
    help="GPU nodes (8 GPUs each: H100, A100, H200), spread over the clusters.",
)
@click.option(
    "--duration",
    "duration_seconds",
    type=DurationType(),
    cls=StructDefault,
    show_default="6h",
    help="Cluster time covered (6h, 90m, 1h30m).",
)
@click.option(
    "--events",
    type=click.IntRange(min=1),
    default=None,
    help="An exact event count over --duration (the benchmarks' mode) instead of the "
    "fleet's realistic density.",
)
@click.option("--seed", type=int, cls=StructDefault, show_default=str(_DEFAULTS.seed))
@click.option(
    "--clusters",
    type=click.IntRange(min=1, max=len(CLUSTERS)),
    cls=StructDefault,
    show_default=str(_DEFAULTS.clusters),
)
@click.option(
    "--start",
    type=TimeType(),
    cls=StructDefault,
    show_default=_DEFAULTS.start.isoformat(),
    help="Event time of the stream's start (RFC 3339).",
)
@click.option(
    "--fault-rate",
    type=FiniteRange(min=0.0, max=1000.0),
    cls=StructDefault,
    show_default=str(_DEFAULTS.fault_rate),
    help="Multiplier on every fault's default rate (0: noise only).",
)
@click.option(
    "--noise-only",
    is_flag=True,
    default=None,
    help="No faults: a stream that must give no incident (its truth file is empty).",
)
@click.option(
    "--storm",
    type=FiniteRange(min=1.0, max=100.0),
    cls=StructDefault,
    show_default=str(_DEFAULTS.storm),
    help="Healthy churn (pod updates, restarts, evictions, relists...) this many times as "
    "often for 15 min from the middle of the stream: a storm that must raise nothing.",
)
@click.option(
    "--dra-nodes",
    type=click.IntRange(min=0, max=2_000),
    cls=StructDefault,
    show_default=str(_DEFAULTS.dra_nodes),
    help="Nodes of a DRA node pool in the first cluster, beside the device-plugin nodes: "
    "GPUs held through ResourceClaims, with faults and noise of their own.",
)
@click.option(
    "--out",
    metavar="FILE",
    cls=StructDefault,
    show_default=_DEFAULTS.out,
    help="Events (JSON lines; .gz: gzip); - for stdout.",
)
@click.option(
    "--truth",
    metavar="FILE",
    default=None,
    help="Ground truth: one truth.v1 line per expected incident (see schemas/truth.py).",
)
@click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar on stderr. Default: only when stderr is a terminal and the run is long.",
)
def simulate_command(**given: Any) -> int:
    """Write a simulated GPU cluster's event stream and the incidents it must give.

    The same options give byte-identical files. Replay the events with
    'gputriage replay' and compare the incidents with the truth.

    \b
    Examples:
      gputriage simulate --nodes 50 --duration 2h --out events.jsonl --truth truth.jsonl
      gputriage simulate --nodes 500 --duration 6h --fault-rate 5 --out ev.jsonl.gz
      gputriage simulate --noise-only --duration 1h --out - | gputriage replay -
    """
    if given.get("truth") == "-" and given.get("out", "-") in {"-", None}:
        raise click.BadParameter("events and truth cannot both go to stdout", param_hint="--truth")
    names = {f.name for f in fields(SimulateOptions)}
    options = SimulateOptions(**{k: v for k, v in given.items() if k in names and v is not None})
    return run_simulate(options, sys.stderr)
