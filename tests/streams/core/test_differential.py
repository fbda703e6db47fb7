"""Differential tests of the core's shortcuts (issue 14.1): the same incidents, byte for byte.

A shortcut on the hot path (skipping work a rule would find to change nothing) must
never change a result. Each test runs the same stream twice, once with the shortcut and
once with it switched off, which is the engine as it was, and compares every revision's
encoded bytes, in order. The streams are the bench's generator (seeded: thousands of
nodes' worth of pod churn, XIDs, bindings, autoscaler records, routed to the cluster
key as the producer routes them) and the example scenario (every incident type).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from bench.generate import StreamSpec, generate_lines
from schemas.codec import decode_event, encode
from schemas.keys import routed
from streams.config import default_core_config
from streams.core import Correlator
from streams.core import cluster as cluster_rules
from tests.paths import EXAMPLES


def incidents(lines: Iterable[bytes]) -> list[bytes]:
    correlator = Correlator(default_core_config())
    out: list[bytes] = []
    for line in lines:
        for event in routed(decode_event(line)):
            out.extend(encode(i) for i in correlator.ingest(event))
    out.extend(encode(i) for i in correlator.flush())
    return out


STREAMS = {
    "generated, 200 nodes, 2 clusters": lambda: list(
        generate_lines(StreamSpec(events=40_000, nodes=200, seed=3))
    ),
    "generated, 50 nodes, 1 cluster": lambda: list(
        generate_lines(StreamSpec(events=40_000, nodes=50, seed=11, clusters=1))
    ),
    "the example scenario": lambda: (EXAMPLES / "scenario.jsonl").read_bytes().splitlines(),
}


@pytest.mark.parametrize("name", STREAMS)
def test_routine_copies_skipped_at_the_cluster_key_change_no_incident(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = STREAMS[name]()
    fast = incidents(lines)
    skipped = 0
    routine = cluster_rules._routine

    def counting(*args: object) -> bool:
        nonlocal skipped
        hit = routine(*args)  # type: ignore[arg-type]
        skipped += hit
        return hit

    monkeypatch.setattr(cluster_rules, "_routine", counting)
    assert incidents(lines) == fast
    if name != "the example scenario":
        assert skipped > 1000, "the shortcut is taken on this stream"
    monkeypatch.setattr(cluster_rules, "_routine", lambda *args: False)  # the full path
    reference = incidents(lines)
    assert reference == fast
    assert len(fast) > 0
