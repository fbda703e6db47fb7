"""allocation_mismatch's truth, counted from what blind nodes' pods hold (the rule)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gputriage.simulate.mismatch_truth import MismatchTruth

T0 = datetime(2025, 3, 3, 8, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _outage(truth: MismatchTruth, node: str, fault: str, held: list[tuple[float, int]]) -> None:
    track = truth.blind(cluster="c1", node=node, fault=fault)
    for t, gpus in held[:-1]:
        track.held(at(t), gpus)
    track.back(at(held[-1][0]))


def test_an_outage_that_begins_before_the_first_ends_joins_its_ticket() -> None:
    truth = MismatchTruth(timedelta(seconds=2))
    _outage(truth, "a", "exporter_outage-1", [(0, 8), (900, 0)])
    _outage(truth, "b", "exporter_outage-2", [(800, 8), (2000, 0)])
    (one,) = truth.expected(at(10_000))
    assert (one.id, one.start) == ("exporter_outage-1/allocation_mismatch", at(0))


def test_one_that_begins_after_it_ended_is_a_ticket_of_its_own() -> None:
    truth = MismatchTruth(timedelta(seconds=2))
    _outage(truth, "a", "exporter_outage-1", [(0, 8), (900, 0)])
    _outage(truth, "b", "exporter_outage-2", [(950, 8), (2000, 0)])
    assert [e.start for e in truth.expected(at(10_000))] == [at(0), at(950)]


def test_a_pod_that_ends_on_the_blind_node_ends_its_disagreement() -> None:
    """Node a's only pod ends at 600 and its successor runs at 640: the counts agreed
    (0 and 0) for 40 s, so the successor's disagreement needs its own 5 min, and b,
    blind from 650, is not the first ticket's (it resolved at 900)."""
    truth = MismatchTruth(timedelta(seconds=2))
    _outage(truth, "a", "exporter_outage-1", [(0, 8), (600, 0), (640, 8), (1000, 0)])
    _outage(truth, "b", "exporter_outage-2", [(650, 8), (2000, 0)])
    assert [e.start for e in truth.expected(at(10_000))] == [at(0), at(640)]


def test_short_or_small_is_nothing_and_a_dip_is_not_a_new_ticket() -> None:
    truth = MismatchTruth(timedelta(seconds=2))
    _outage(truth, "a", "exporter_outage-1", [(0, 8), (200, 0)])  # under 5 min
    _outage(truth, "b", "exporter_outage-2", [(1000, 4), (3000, 0)])  # 4 GPUs: not > 5
    _outage(truth, "c", "exporter_outage-3", [(5000, 8), (5600, 4), (5640, 8), (6000, 0)])
    assert [e.start for e in truth.expected(at(10_000))] == [at(5000)]
    assert truth.expected(at(5200)) == []  # opens at 5300: after the stream's end
