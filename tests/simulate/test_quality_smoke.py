"""The quality smoke test CI runs: ``gputriage simulate | gputriage score`` against the bars.

A small simulated fleet (100 nodes, 6 h, default fault rates, three seeds: ~30k events
each, a few seconds in all) replayed through the core and scored against its ground
truth, and a noise-only stream that must give no incident at all.

The bars: precision and recall >= 0.99 for every type (:data:`BAR`).
On these seeds every type scores 1.000 / 1.000 (2026-12-02), so any false page or miss
the core or the simulator's faults start making fails CI here. Everything is seeded,
so the figures are the same on every run. Real commands, subprocesses, the shipped
CLI. ``make bench``
runs the full-size version (a 1,000-node day) into ``bench/REPORT.md``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_helpers import gputriage

BAR = (0.99, 0.99)
"""Precision, recall per type that no change may go below."""
BARS = ("--min-precision", str(BAR[0]), "--min-recall", str(BAR[1]))


def _simulate(tmp_path: Path, seed: int, *extra: str) -> tuple[Path, Path]:
    events, truth = tmp_path / f"events-{seed}.jsonl", tmp_path / f"truth-{seed}.jsonl"
    done = gputriage(
        "simulate",
        "--nodes",
        "100",
        "--duration",
        "6h",
        "--seed",
        str(seed),
        *extra,
        "--out",
        str(events),
        "--truth",
        str(truth),
    )
    assert done.returncode == 0, done.stderr
    return events, truth


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_simulated_fleet_meets_the_bar_for_every_type(tmp_path: Path, seed: int) -> None:
    events, truth = _simulate(tmp_path, seed)
    assert truth.read_bytes(), "a fleet with default fault rates has faults to find"
    scored = gputriage("score", str(events), str(truth), "-o", "json", *BARS)
    result = json.loads(scored.stdout)
    below = {
        kind: (t["precision"], t["recall"], t["fp"], t["fn"])
        for kind, t in result["types"].items()
        if (t["precision"] is not None and t["precision"] < BAR[0])
        or (t["recall"] is not None and t["recall"] < BAR[1])
    }
    assert scored.returncode == 0, (below, scored.stderr)
    assert not below
    assert sum(t["tp"] for t in result["types"].values()) >= 50  # not a vacuous pass


def test_noise_alone_gives_no_incident(tmp_path: Path) -> None:
    events, truth = _simulate(tmp_path, 1, "--noise-only")
    assert truth.read_bytes() == b""
    replayed = gputriage("replay", str(events), "-o", "json")
    assert replayed.returncode == 0, replayed.stderr
    incidents = [json.loads(line) for line in replayed.stdout.splitlines()]
    assert incidents == [], sorted({(i["type"], i["node"]) for i in incidents})
    assert events.stat().st_size > 1_000_000  # there was noise to resist
