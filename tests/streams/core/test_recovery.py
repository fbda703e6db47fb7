"""The engine's contract with an at-least-once processor: tokens, snapshots, redelivery.

A processor acknowledges (commits) only the tokens the engine released, writes
the states it names dirty to a changelog, and after a crash restores those
snapshots and re-reads from the last commit. The incidents must be those of an
uninterrupted run: no incident lost, no incident id the uninterrupted run would
not have.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.codec import AnyEvent, encode
from schemas.incidents import Incident
from streams.core import Correlator
from streams.core.snapshot import decode_state, encode_state
from tests.core_helpers import config, final, route_all, run
from tests.episodes import GRACE, build, episodes
from tests.factories import Cluster, term


class Worker:
    """A minimal at-least-once worker around the engine, with a dict as the changelog."""

    def __init__(self, changelog: dict[str, bytes], events: list[AnyEvent]) -> None:
        self.changelog = changelog
        self.events = events
        self.correlator = Correlator(config(grace_seconds=GRACE), track_dirty=True)
        for data in changelog.values():
            self.correlator.restore(decode_state(data))
        self.done: set[int] = set()
        self.out: list[Incident] = []

    def consume(self, offset: int) -> None:
        self.out += self.correlator.ingest(self.events[offset], token=offset)

    def commit(self, start: int) -> int:
        """Write dirty state, mark released offsets done; return the committable offset."""
        for key, state in self.correlator.take_dirty():
            self.changelog[key] = encode_state(state)
        self.done.update(self.correlator.take_released())
        committed = start
        while committed in self.done:
            committed += 1
        return committed


def crash_and_resume(events: list[AnyEvent], crash_at: int, commit_every: int) -> list[Incident]:
    changelog: dict[str, bytes] = {}
    first = Worker(changelog, events)
    committed = 0
    for offset in range(crash_at):
        first.consume(offset)
        if offset % commit_every == commit_every - 1:
            committed = first.commit(committed)
    # SIGKILL: the buffer, uncommitted progress and unwritten state are gone.
    second = Worker(changelog, events)
    for offset in range(committed, len(events)):
        second.consume(offset)
    second.out += second.correlator.flush()
    return first.out + second.out


@settings(max_examples=80, deadline=None)
@given(
    plan=episodes,
    crash=st.floats(0.05, 0.95),
    commit_every=st.integers(1, 25),
)
def test_a_crash_and_resume_loses_nothing_and_invents_nothing(
    plan: list[tuple[str, int, int]], crash: float, commit_every: int
) -> None:
    events = build(plan)
    reference = run(events, config(grace_seconds=GRACE))
    log = route_all(events)  # the records, as published
    resumed = crash_and_resume(log, int(len(log) * crash), commit_every)
    assert {r.id for r in resumed} <= {r.id for r in reference}
    assert {i: encode(r) for i, r in final(resumed).items()} == {
        i: encode(r) for i, r in final(reference).items()
    }


def test_tokens_are_released_only_once_applied() -> None:
    c = Cluster()
    c.node("n", 0)
    c.pod("n", "p", 10)
    c.pod("n", "p", 20)
    correlator = Correlator(config(grace_seconds=5))
    correlator.ingest(c.events[0], token="a")
    correlator.ingest(c.events[1], token="b")
    assert correlator.take_released() == ["a"], "b waits for the watermark"
    assert correlator.pending() == 1
    correlator.ingest(c.events[2], token="c")
    assert correlator.take_released() == ["b"]
    correlator.flush()
    assert correlator.take_released() == ["c"]


def test_a_redelivered_event_is_stale_and_changes_nothing() -> None:
    c = Cluster()
    c.node("n", 0)
    c.pod("n", "p", 1)
    oom = c.pod("n", "p", 60, restarts=1, last=term(59, "OOMKilled", 137))
    correlator = Correlator(config(grace_seconds=0))
    first = [r for e in c.events for r in correlator.ingest(e)]
    # Grace is inclusive: the newest event waits for time to move past its instant.
    first += correlator.advance(oom.time.timestamp() + 1)
    assert [r.status for r in first] == ["open"]
    again = correlator.ingest(oom)
    assert again == []
    assert correlator.stats.stale == 1


def test_snapshots_round_trip_the_whole_state() -> None:
    c = Cluster()
    c.node("n", 0)
    c.pod("n", "p", 1)
    c.xid("n", 30, 79, uuid="GPU-6f1c2a9e-79aa-4c1e-9d3b-000000000001")
    c.pod("n", "p", 40, phase="Failed", reason="Evicted")
    correlator = Correlator(config(grace_seconds=0), track_dirty=True)
    for event in c.events:
        correlator.ingest(event)
    dirty = correlator.take_dirty()
    assert [key for key, _ in dirty] == ["c1/n"]
    for _, state in dirty:
        assert decode_state(encode_state(state)) == state
