"""Noise: what a healthy cluster's connectors also deliver. None of it writes truth, and
the core raises nothing on it (a small noise-only stream replayed end to end)."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta
from functools import cache
from pathlib import Path

import pytest

from gputriage.cli import run
from gputriage.simulate import FAULTS, Simulation, StreamSpec
from schemas.codec import AnyEvent
from schemas.events import GpuBindingEvent, NodeEvent, PodEvent
from schemas.truth import ExpectedIncident


@cache
def _noise(
    storm: float = 1.0, seed: int = 5
) -> tuple[tuple[AnyEvent, ...], tuple[ExpectedIncident, ...]]:
    spec = StreamSpec.for_duration(
        seconds=2 * 3600.0, nodes=40, seed=seed, fault_rate=0.0, storm=storm
    )
    sim = Simulation(spec)
    return tuple(sim.events()), tuple(sim.truth)


def test_noise_only_writes_no_truth_even_in_a_storm() -> None:
    for storm in (1.0, 10.0):
        events, truth = _noise(storm)
        assert len(events) > 3000
        assert truth == ()


def test_a_storm_multiplies_the_rate_in_its_window_only() -> None:
    calm, _ = _noise(1.0)
    stormy, _ = _noise(10.0)
    start = calm[0].time
    spec = StreamSpec.for_duration(seconds=2 * 3600.0, nodes=40, storm=10.0)
    low, high = (start + timedelta(seconds=s) for s in spec.storm_window())

    def rate(events: tuple[AnyEvent, ...], a: datetime, b: datetime) -> float:
        return sum(1 for e in events if a <= e.time < b) / (b - a).total_seconds()

    assert rate(stormy, low, high) > 6 * rate(calm, low, high)
    before = start + timedelta(minutes=10), low - timedelta(minutes=5)
    assert rate(stormy, *before) < 1.3 * rate(calm, *before)


def test_the_noise_kinds_are_there() -> None:
    events, _ = _noise()
    ids = [e.id for e in events]
    duplicates = sum(1 for a, b in itertools.pairwise(events) if a == b)
    assert duplicates > 3  # at-least-once: one record twice in a row
    seen: dict[str, datetime] = {}
    relisted = late = 0
    newest = events[0].time
    for e in events:
        if e.id in seen and e.time == seen[e.id] and newest - e.time > timedelta(seconds=60):
            relisted += 1  # the same record again, with its own old time
        seen[e.id] = e.time
        if timedelta(seconds=0.05) < newest - e.time < timedelta(seconds=0.5):
            late += 1
        newest = max(newest, e.time)
    assert relisted > 0
    assert late > 3  # out of order, within the core's grace
    assert len(set(ids)) < len(ids)
    cpu = [e for e in events if isinstance(e, PodEvent) and not e.gpu_requests]
    assert cpu  # CPU-only pods (the connector's --keep-all)
    blips = 0
    zero: dict[str, datetime] = {}
    for e in events:
        if isinstance(e, NodeEvent):
            if e.allocatable.get("nvidia.com/gpu") == 0:
                zero[e.node] = e.time
            elif e.node in zero and e.time - zero.pop(e.node) < timedelta(seconds=11):
                blips += 1
    assert blips > 0  # device plugin re-registration: 8 -> 0 -> 8 in seconds


def test_an_exporter_outage_truth_is_a_full_node_reported_without_pods() -> None:
    rates = dict.fromkeys(FAULTS, 0.0) | {"exporter_outage": 60.0}
    spec = StreamSpec.for_duration(seconds=3 * 3600.0, nodes=40, seed=3, rates=rates)
    sim = Simulation(spec)
    events = list(sim.events())
    truths = [t for t in sim.truth if t.type == "allocation_mismatch"]
    assert truths
    for t in truths:
        at_start = [e for e in events if isinstance(e, GpuBindingEvent) and e.time == t.start]
        assert len(at_start) == 8, t  # one scrape of the whole node
        assert all(not e.pods for e in at_start)
        assert len({e.node for e in at_start}) == 1


def test_noise_only_replays_to_no_incident(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = tmp_path / "noise.jsonl"
    args = ["--nodes", "30", "--duration", "2h", "--seed", "2", "--noise-only", "--storm", "5"]
    assert run(["simulate", *args, "--out", str(stream)]) == 0
    capsys.readouterr()
    assert run(["replay", "-o", "json", "--no-progress", str(stream)]) == 0
    out = capsys.readouterr().out
    incidents = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert incidents == [], [(i["type"], i["summary"]) for i in incidents]
