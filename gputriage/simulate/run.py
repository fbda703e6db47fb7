"""``gputriage simulate``'s run function: write the event stream and its ground truth.

Kept free of click (:mod:`gputriage.cli.simulate` builds :class:`SimulateOptions`).
Stdout carries only what ``--out -`` asks for; the progress bar and the summary go
to stderr (as ``gputriage replay`` does: tqdm, drawn only on a terminal for long
runs, never on stdout).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any, TextIO

from gputriage.simulate.spec import StreamSpec
from gputriage.simulate.stream import Simulation, open_output, write_lines
from schemas.codec import encode

PROGRESS_MIN_EVENTS = 200_000
"""Runs shorter than this finish before a progress bar would be worth drawing."""
_PROGRESS_EVERY = 10_000

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(?:(\d+(?:\.\d+)?)([smhd]))")


def parse_duration(text: str) -> float:
    """``6h``, ``90m``, ``1h30m``, ``45s``, ``2d`` in seconds; ``ValueError`` (quoting
    ``text``) otherwise. A bare number is refused: minutes or hours are both plausible."""
    value = text.strip().lower()
    parts = _DURATION.findall(value)
    if not value or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"{text!r} is not a duration such as 6h, 90m, 1h30m or 45s")
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not 0 < seconds <= 30 * 86400:
        raise ValueError(f"{text!r} is not a duration from 1 s to 30 days")
    return seconds


@dataclass(frozen=True, kw_only=True)
class SimulateOptions:
    """What one ``gputriage simulate`` writes."""

    nodes: int = 50
    duration_seconds: float = 6 * 3600.0
    events: int | None = None
    """Size the stream by an exact event count over ``duration_seconds`` (the benchmarks' mode)
    instead of by the fleet's realistic density."""
    seed: int = 1
    clusters: int = 1
    start: datetime = datetime(2025, 3, 3, 8, 0, tzinfo=UTC)
    fault_rate: float = 1.0
    noise_only: bool = False
    storm: float = 1.0
    """Healthy churn this many times as often for 15 min from the middle (no fault)."""
    rates: dict[str, float] = field(default_factory=dict)
    dra_nodes: int = 0
    """Nodes of a DRA node pool beside the device-plugin nodes (:mod:`gputriage.simulate.dra`)."""
    out: str = "-"
    truth: str | None = None
    progress: bool | None = None

    def spec(self) -> StreamSpec:
        fault_rate = 0.0 if self.noise_only else self.fault_rate
        common: dict[str, Any] = {
            "nodes": self.nodes,
            "seed": self.seed,
            "clusters": self.clusters,
            "start": self.start,
            "fault_rate": fault_rate,
            "storm": self.storm,
            "rates": dict(self.rates),
            "dra_nodes": self.dra_nodes,
        }
        if self.events is not None:
            return StreamSpec(events=self.events, hours=self.duration_seconds / 3600.0, **common)
        return StreamSpec.for_duration(seconds=self.duration_seconds, **common)


def run_simulate(options: SimulateOptions, stderr: TextIO = sys.stderr) -> int:
    """Write the stream (and the truth); return the exit status."""
    spec = options.spec()
    sim = Simulation(spec)
    out = open_output(options.out)
    try:
        with _Progress(spec.events, options.progress, stderr) as bar:
            write_lines(bar.track(sim.lines()), out)
    finally:
        _close(out)
    if options.truth is not None:
        truth_out = open_output(options.truth)
        try:
            write_lines(iter([encode(t) for t in sim.truth]), truth_out)
        finally:
            _close(truth_out)
    by_type: dict[str, int] = {}
    optional = 0
    for expected in sim.truth:
        if expected.optional:  # due where the stream ends: neither expected nor forbidden
            optional += 1
            continue
        by_type[expected.type] = by_type.get(expected.type, 0) + 1
    summary = ", ".join(f"{k} {v}" for k, v in sorted(by_type.items())) or "none"
    if optional:
        summary += f" (and {optional} optional, due where the stream ends)"
    print(
        f"gputriage: simulated {sum(sim.counts.values())} events, {spec.nodes} nodes"
        f"{f' and {spec.dra_nodes} DRA nodes' if spec.dra_nodes else ''}, "
        f"{spec.hours:g} h; expected incidents: {summary}",
        file=stderr,
    )
    return 0


def _close(out: IO[bytes]) -> None:
    if out is sys.stdout.buffer:
        out.flush()
    else:
        out.close()


class _Progress:
    """A tqdm bar over events on stderr, or a no-op (the approach of ``gputriage replay``)."""

    def __init__(self, total: int, force: bool | None, stderr: TextIO) -> None:
        show = stderr.isatty() and total >= PROGRESS_MIN_EVENTS if force is None else force
        self._bar: Any = None
        if show:
            from tqdm import tqdm  # noqa: PLC0415 - ~15 ms, only where a bar is shown

            self._bar = tqdm(
                total=total,
                unit="ev",
                unit_scale=True,
                file=stderr,
                leave=False,
                dynamic_ncols=True,
            )

    def track(self, lines: Iterator[bytes]) -> Iterator[bytes]:
        if self._bar is None:
            yield from lines
            return
        count = 0
        for count, line in enumerate(lines, start=1):
            if count % _PROGRESS_EVERY == 0:
                self._bar.update(_PROGRESS_EVERY)
            yield line
        self._bar.update(count % _PROGRESS_EVERY)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
