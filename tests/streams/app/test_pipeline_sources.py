"""The pipeline's source table: the watermark follows the sources' progress.

Every record a connector publishes carries its source id and the event time it
has delivered up to (schemas/progress.py), and quiet connectors heartbeat with a
``tick.v1``. These tests drive :class:`streams.app.pipeline.Pipeline` with explicit
wall-clock ``now`` values: no clock is read, so ageing is exact.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from datetime import datetime

from schemas import progress as wire
from schemas.codec import AnyEvent, encode
from schemas.events import Tick
from schemas.keys import correlation_key
from schemas.topics import topic_layout
from streams.app.pipeline import Pipeline, RawRecord
from tests.core_helpers import config
from tests.factories import Cluster, at, term

LAYOUT = topic_layout()
PODS = LAYOUT.raw["pods"].name
NODES = LAYOUT.raw["nodes"].name
NOW = 2_000_000_000.0
"""The wall clock, far past every event time: a watermark near it is the clock's."""
IDLE = 60.0
GRACE = 5.0


def pipeline() -> Pipeline:
    return Pipeline(config(grace_seconds=GRACE), LAYOUT, source_idle_seconds=IDLE)


def signed(
    events: Sequence[AnyEvent],
    source: str | None,
    progress: datetime | None,
    *,
    partition: int = 0,
    start: int = 0,
) -> list[RawRecord]:
    """Records as the publish loop sends them: ``source`` None means header-less."""
    headers: list[tuple[str, bytes]] = []
    if source is not None:
        headers = [(wire.SOURCE_HEADER, source.encode())]
        if progress is not None:
            headers.append((wire.PROGRESS_HEADER, wire.encode_progress(progress)))
    return [
        RawRecord(
            topic=LAYOUT.raw_topic(event),
            partition=partition,
            offset=i,
            key=correlation_key(event).encode(),
            value=encode(event),
            token=(partition, i),
            headers=headers,
        )
        for i, event in enumerate(events, start=start)
    ]


def heartbeat(
    source: str, progress: datetime, *, topic: str = PODS, partition: int = 0, offset: int = 999
) -> RawRecord:
    """A connector's heartbeat: a tick.v1 with the progress headers, explicit partition."""
    tick = Tick(id=f"heartbeat:{source}", cluster="c1", time=progress)
    return RawRecord(
        topic=topic,
        partition=partition,
        offset=offset,
        key=None,
        value=encode(tick),
        token=("hb", offset),
        headers=wire.headers(source, progress),
    )


def oom() -> Cluster:
    c = Cluster()
    c.node("n", 0)
    c.pod("n", "p", 1)
    c.pod("n", "p", 60, restarts=1, last=term(59, "OOMKilled", 137))
    return c


def test_the_clock_does_not_move_the_watermark_past_a_live_source() -> None:
    """The bug: a caught-up worker's tick used to take ``now - grace``, days past the
    events, so the next (old, slowly delivered) event was late."""
    p = pipeline()
    c = oom()
    p.process(signed(c.events, "a", at(0)), busy=[], now=NOW)
    assert p.lanes.watermark == at(0).timestamp() - GRACE, "the records vouch for at(0)"
    assert p.tick(NOW + 1).incidents == []
    assert p.lanes.watermark == at(0).timestamp() - GRACE, "the clock did not move it"
    nodes = LAYOUT.raw["nodes"].name
    half = p.process([heartbeat("a", at(120))], busy=[], now=NOW + 2)
    assert half.incidents == [], "its progress on the nodes partition is still at(0)"
    done = p.process([heartbeat("a", at(120), topic=nodes)], busy=[], now=NOW + 2)
    assert [i.type for i in done.incidents] == ["host_oom_kill"]
    assert p.lanes.watermark == at(120).timestamp() - GRACE
    assert p.lanes.stats.late == 0


def test_the_watermark_is_the_least_progress_over_the_sources() -> None:
    p = pipeline()
    p.process([heartbeat("a", at(100)), heartbeat("b", at(40), topic=NODES)], now=NOW)
    p.tick(NOW)
    assert p.lanes.watermark == at(40).timestamp() - GRACE
    p.process([heartbeat("b", at(300), topic=NODES, offset=1000)], now=NOW)
    assert p.lanes.watermark == at(100).timestamp() - GRACE


def test_progress_is_kept_per_partition_of_a_source() -> None:
    """A record vouches only for what precedes it on its own partition: a source fast on
    one partition and behind on another is as far as the slower one."""
    p = pipeline()
    p.process([heartbeat("k8s", at(500)), heartbeat("k8s", at(50), topic=NODES)], now=NOW)
    p.tick(NOW)
    assert p.lanes.watermark == at(50).timestamp() - GRACE


def test_a_silent_source_ages_out_and_with_every_source_gone_the_clock_drives() -> None:
    p = pipeline()
    p.process([heartbeat("a", at(100)), heartbeat("b", at(40), topic=NODES)], now=NOW)
    p.process([heartbeat("a", at(200), offset=1000)], now=NOW + IDLE)
    p.tick(NOW + IDLE)
    assert p.lanes.watermark == at(40).timestamp() - GRACE, "b: heard exactly IDLE ago"
    assert p.sources(NOW + IDLE) == (2, 0)
    p.tick(NOW + IDLE + 0.5)
    assert p.lanes.watermark == at(200).timestamp() - GRACE, "b aged out, a holds"
    assert p.sources(NOW + IDLE + 0.5) == (1, 1)
    p.tick(NOW + 2 * IDLE + 1)
    assert p.clock_limit == NOW + 2 * IDLE + 1 - GRACE, "all gone: the clock drives"
    assert p.lanes.watermark == at(200).timestamp() - GRACE, "with nothing to fire"
    assert p.sources(NOW + 2 * IDLE + 1) == (0, 2)


def test_the_clock_is_a_limit_a_worker_on_empty_topics_declares_no_past_closed() -> None:
    """The flaky live-vs-replay test: a worker ticking on empty topics took
    "now minus grace", and the backfill it was then given was late from its first event,
    applied in arrival order. Now it is correlated in event order, as replay does."""
    p = pipeline()
    for second in range(5):
        p.tick(NOW + second)
    assert p.lanes.watermark == -math.inf
    assert p.clock_limit == -math.inf, "no lane yet: nothing for the clock to close"
    c = oom()
    p.process(signed(c.events, "a", None), busy=[], now=NOW + 5)
    out = p.process(
        [heartbeat("a", at(120)), heartbeat("a", at(120), topic=LAYOUT.raw["nodes"].name)],
        now=NOW + 6,
    )
    assert p.lanes.stats.late == 0
    assert [i.type for i in out.incidents] == ["host_oom_kill"]


def test_with_every_source_gone_the_clock_releases_and_fires_what_is_due() -> None:
    p = pipeline()
    c = oom()
    p.process(signed(c.events, "a", None), busy=[], now=NOW)
    assert p.lanes.pending() == len(c.events), "held: a has vouched for nothing"
    out = p.tick(NOW + IDLE + 1)
    assert {i.type for i in out.incidents} == {"host_oom_kill"}
    assert p.lanes.pending() == 0
    last = max(e.time for e in c.events).timestamp()
    assert last <= p.lanes.watermark < p.clock_limit, "as far as what fired, no further"
    assert p.lanes.stats.late == 0


def test_a_source_on_a_partition_with_records_left_to_read_does_not_age() -> None:
    """Its newer records may be right there in the backlog: silence is not idleness."""
    p = pipeline()
    p.process([heartbeat("a", at(100))], now=NOW)
    p.tick(NOW + 10 * IDLE, busy=[(PODS, 0)])
    assert p.lanes.watermark == at(100).timestamp() - GRACE
    assert p.sources(NOW + 10 * IDLE, busy=[(PODS, 0)]) == (1, 0)


def test_a_source_with_no_progress_yet_holds_the_watermark() -> None:
    p = pipeline()
    c = oom()
    out = p.process(signed(c.events, "a", None), busy=[], now=NOW)
    p.tick(NOW)
    assert p.lanes.watermark == -math.inf
    assert out.released == []


def test_header_less_records_keep_the_partition_rule() -> None:
    """An older connector release, or a test producing raw records directly."""
    p = pipeline()
    c = oom()
    recs = signed(c.events, None, None)
    p.process(recs, busy=[(PODS, 0)], now=NOW)
    assert p.tick(NOW, busy=[(PODS, 0)]).incidents == [], "a busy partition holds it"
    assert {i.type for i in p.tick(NOW, busy=[]).incidents} == {"host_oom_kill"}
    assert p.clock_limit == NOW - GRACE, "caught up: the clock drives, as before"
    assert p.lanes.watermark < NOW - GRACE, "as far as what it fired"
    assert p.sources(NOW) == (0, 0)


def test_with_both_kinds_the_watermark_is_the_least_of_both_rules() -> None:
    p = pipeline()
    c = oom()
    old = signed(c.events[:2], None, None)  # header-less, on a partition with a backlog
    p.process(old, busy=[(PODS, 0)], now=NOW)
    p.process([heartbeat("a", at(500), topic=NODES)], busy=[(PODS, 0)], now=NOW)
    p.tick(NOW, busy=[(PODS, 0)])
    assert p.lanes.watermark == at(1).timestamp() - GRACE, "the busy partition's newest"
    p.tick(NOW, busy=[])
    assert p.lanes.watermark == at(500).timestamp() - GRACE, "then the source's progress"


def test_a_malformed_header_is_counted_and_the_record_is_header_less() -> None:
    p = pipeline()
    c = oom()
    recs = [
        RawRecord(
            topic=r.topic,
            partition=r.partition,
            offset=r.offset,
            key=r.key,
            value=r.value,
            token=r.token,
            headers=[(wire.SOURCE_HEADER, b"a"), (wire.PROGRESS_HEADER, b"soon")],
        )
        for r in signed(c.events, None, None)
    ]
    out = p.process(recs, now=NOW)
    assert p.malformed_headers == len(recs)
    assert out.dead_letters == [], "the record itself is fine"
    assert out.events_by_source == {"nodes": 1, "pods": 2}
    assert p.sources(NOW) == (0, 0)
    assert {i.type for i in p.tick(NOW).incidents} == {"host_oom_kill"}, "header-less: clock"


def test_a_heartbeat_is_progress_only_never_an_event_nor_a_dead_letter() -> None:
    p = pipeline()
    beat = heartbeat("a", at(100))
    out = p.process([beat], now=NOW)
    assert out.dead_letters == []
    assert out.released == [beat.token], "done at once: nothing waits for it"
    assert out.events_by_source == {}
    assert p.lanes.stats.events == 0
    assert p.lanes.pending() == 0
    assert p.lanes.watermark == at(100).timestamp() - GRACE


def test_a_tick_without_progress_headers_on_a_raw_topic_is_a_dead_letter() -> None:
    """It says nothing about anyone's progress (and is no event): refuse it loudly."""
    p = pipeline()
    beat = heartbeat("a", at(100))
    bare = RawRecord(
        topic=beat.topic, partition=0, offset=5, key=None, value=beat.value, token="bare"
    )
    out = p.process([bare], now=NOW)
    [dead] = out.dead_letters
    assert "tick.v1" in dead.reason
    assert "progress" in dead.reason
    assert out.released == ["bare"]
    assert p.lanes.stats.events == 0


def test_the_watermark_never_goes_back_when_a_slower_source_joins() -> None:
    p = pipeline()
    p.process([heartbeat("a", at(100))], now=NOW)
    p.process([heartbeat("late-joiner", at(10), topic=NODES)], now=NOW)
    p.tick(NOW)
    assert p.lanes.watermark == at(100).timestamp() - GRACE


def test_revoked_partitions_forget_their_sources() -> None:
    p = pipeline()
    p.process([heartbeat("a", at(100)), heartbeat("b", at(10), topic=NODES)], now=NOW)
    p.retain([(PODS, 0)])
    assert p.sources(NOW) == (1, 0)
    p.process([heartbeat("a", at(200), offset=1000)], now=NOW)
    assert p.lanes.watermark == at(200).timestamp() - GRACE, "b no longer holds it"


def test_without_a_clock_nothing_ages() -> None:
    """A caller feeding one finite batch (as most tests do) passes no ``now``."""
    p = pipeline()
    p.process([heartbeat("a", at(100)), heartbeat("b", at(40), topic=NODES)])
    assert p.lanes.watermark == at(40).timestamp() - GRACE


def ended(source: str, *, topic: str = PODS, partition: int = 0, offset: int = 2000) -> RawRecord:
    beat = heartbeat(source, at(0), topic=topic, partition=partition, offset=offset)
    headers = [(wire.SOURCE_HEADER, source.encode()), (wire.PROGRESS_HEADER, wire.END)]
    return RawRecord(
        topic=beat.topic,
        partition=partition,
        offset=offset,
        key=None,
        value=beat.value,
        token=beat.token,
        headers=headers,
    )


def test_a_source_that_ended_holds_nothing_until_it_publishes_again() -> None:
    """``--once`` read everything: waiting for it until it ages out would only delay."""
    p = pipeline()
    p.process([heartbeat("a", at(100)), heartbeat("once", at(10), topic=NODES)], now=NOW)
    p.process([ended("once", topic=NODES)], now=NOW)
    assert p.lanes.watermark == at(100).timestamp() - GRACE
    assert p.sources(NOW) == (1, 1), "an ended source is not alive"
    p.process([heartbeat("once", at(50), topic=NODES, offset=3000)], now=NOW)
    assert p.sources(NOW) == (2, 0), "restarted: it counts again"
    p.process([heartbeat("a", at(300), offset=3001)], now=NOW)
    assert p.lanes.watermark == at(100).timestamp() - GRACE, "held by the restarted run"


def test_one_pair_of_headers_signing_several_partitions_is_heard_on_each() -> None:
    """A chunk's pair is heard once per run of a partition, not once per batch: the same
    source and progress on another partition in the same batch still moves that one."""
    p = pipeline()
    p.process([heartbeat("a", at(100)), heartbeat("a", at(40), topic=NODES)], now=NOW)
    p.tick(NOW)
    assert p.lanes.watermark == at(40).timestamp() - GRACE
    pods, nodes = heartbeat("a", at(120), offset=1000), heartbeat("a", at(120), topic=NODES)
    assert pods.headers == nodes.headers
    p.process([pods, dataclasses.replace(pods, offset=1001), nodes], now=NOW)
    assert p.lanes.watermark == at(120).timestamp() - GRACE


def test_the_header_cache_never_lets_a_malformed_pair_through() -> None:
    """The hot path caches progress values and source ids already checked: a bad id with
    a cached progress, or a cached id with a bad progress, must still be malformed."""
    p = pipeline()
    good = heartbeat("a", at(100))
    p.process([good], now=NOW)
    [(_, source), (_, value)] = good.headers

    def beat(headers: list[tuple[str, bytes]], offset: int) -> RawRecord:
        return RawRecord(
            topic=PODS, partition=0, offset=offset, key=None, value=good.value, headers=headers
        )

    bad_id = beat([(wire.SOURCE_HEADER, b"\xff"), (wire.PROGRESS_HEADER, value)], 1)
    bad_progress = beat([(wire.SOURCE_HEADER, source), (wire.PROGRESS_HEADER, b"x1")], 2)
    out = p.process([bad_id, bad_progress], now=NOW)
    assert p.malformed_headers == 2
    assert len(out.dead_letters) == 2, "a tick without (good) progress headers is refused"
    assert p.sources(NOW) == (1, 0)


XIDS = LAYOUT.raw["xids"].name


def updates_at(
    topic: str,
    *seconds: int,
    partition: int = 0,
    source: str | None = None,
    progress: int = 0,
) -> list[RawRecord]:
    """Updates of one node at those seconds on one raw topic's partition (signed by
    ``source``): pods, nodes or XIDs."""
    c = Cluster()
    node = f"n{partition}"
    for s in seconds:
        if topic == PODS:
            c.pod(node, "p", s)
        elif topic == NODES:
            c.node(node, s)
        else:
            c.xid(node, s, 13)
    return signed(c.events, source, at(progress) if source else None, partition=partition)


def test_the_partitions_ahead_of_the_watermark_are_those_past_the_slowest() -> None:
    """What the worker pauses while its buffer is full: in a lane, the partitions past the
    one that holds it."""
    p = pipeline()
    p.process(updates_at(PODS, 10) + updates_at(NODES, 500) + updates_at(XIDS, 500))
    busy = [(PODS, 0), (NODES, 0), (XIDS, 0)]
    assert p.ahead(busy, NOW) == {(NODES, 0), (XIDS, 0)}
    assert p.ahead(busy[1:], NOW) == set(), "the two tie: both hold it, neither is paused"
    assert p.ahead([], NOW) == set()
    unread = (LAYOUT.raw["k8s-events"].name, 0)
    assert p.ahead([*busy, unread], NOW) == set(busy), "a partition not read yet holds it"


def test_each_lane_has_its_own_holder_and_a_slow_lane_pauses_no_other() -> None:
    p = pipeline()
    p.process(updates_at(PODS, 10) + updates_at(NODES, 500))
    p.process(updates_at(PODS, 900, partition=1) + updates_at(NODES, 700, partition=1))
    busy = [(PODS, 0), (NODES, 0), (PODS, 1), (NODES, 1)]
    assert p.ahead(busy, NOW) == {(NODES, 0), (PODS, 1)}, "lane 1 is held by its own nodes"


def test_a_partition_a_slow_source_signs_holds_the_watermark_however_new_its_records() -> None:
    p = pipeline()
    p.process(updates_at(PODS, 100))
    p.process(updates_at(NODES, 500, source="slow", progress=20), now=NOW)
    assert p.ahead([(PODS, 0), (NODES, 0)], NOW) == {(PODS, 0)}


def test_a_source_holding_the_watermark_from_a_partition_read_to_its_end_pauses_the_rest() -> None:
    """Reading the others cannot move the watermark; the source's next heartbeat will."""
    p = pipeline()
    p.process([heartbeat("quiet", at(5), topic=XIDS)], now=NOW)
    p.process(updates_at(PODS, 100) + updates_at(NODES, 200))
    assert p.ahead([(PODS, 0), (NODES, 0)], NOW) == {(PODS, 0), (NODES, 0)}
    assert p.ahead([(PODS, 0), (NODES, 0)], NOW + IDLE + 1) == {(NODES, 0)}, "once it aged out"


def announcement(
    source: str,
    progress: datetime,
    partitions: Sequence[tuple[str, int]],
    *,
    topic: str = PODS,
    partition: int = 0,
) -> RawRecord:
    """The publish loop's announcement: a heartbeat naming every partition used so far."""
    record = heartbeat(source, progress, topic=topic, partition=partition, offset=998)
    named = (wire.PARTITIONS_HEADER, wire.encode_partitions(partitions))
    return dataclasses.replace(record, headers=[*record.headers, named])


def racing(with_announcement: bool) -> tuple[Pipeline, list[RawRecord], list[RawRecord]]:
    """The race the announcement closes: source ``a`` publishes the node's OOM to the
    nodes topic (partition 0, new to it) after the pods; the worker reads ``a``'s later
    progress on the pods partition before that record."""
    p = pipeline()
    nodes = LAYOUT.raw["nodes"].name
    p.retain([(PODS, 0), (nodes, 0)])
    c = oom()
    pods = [e for e in c.events if LAYOUT.raw_topic(e) == PODS]
    node = [e for e in c.events if LAYOUT.raw_topic(e) == nodes]
    first = signed(pods, "a", None)
    said = [heartbeat("a", at(0))]
    if with_announcement:
        said = [announcement("a", at(0), [(PODS, 0), (nodes, 0)])]
    later = [*said, heartbeat("a", at(300))]  # the progress covering the node's record
    assert node, "the scenario has a record on the second topic"
    return p, first + later, signed(node, "a", at(0))


def test_a_progress_read_before_a_new_partitions_first_record_makes_it_late() -> None:
    """The bug without the announcement (the flaky live-vs-replay test): the pods
    partition's progress lets the watermark pass the node record not read yet."""
    p, early, late = racing(with_announcement=False)
    p.process(early, busy=[], now=NOW)
    p.process(late, busy=[], now=NOW + 1)
    assert p.lanes.stats.late > 0


def test_an_announced_partition_holds_the_watermark_until_the_source_is_heard_there() -> None:
    p, early, late = racing(with_announcement=True)
    p.process(early, busy=[], now=NOW)
    assert p.lanes.watermark == -math.inf, "held for the announced nodes partition"
    assert p.announced() == {(LAYOUT.raw["nodes"].name, 0): NOW}
    out = p.process(late, busy=[], now=NOW + 1)
    assert p.lanes.stats.late == 0
    assert not p.has_announced, "heard there: an ordinary entry now"
    done = p.process([heartbeat("a", at(300), topic=LAYOUT.raw["nodes"].name)], now=NOW + 2)
    assert [i.type for i in out.incidents + done.incidents] == ["host_oom_kill"]


def test_a_settled_announcement_holds_nothing() -> None:
    """Read to an end fetched after it, the announced partition has nothing of the source."""
    p, early, _ = racing(with_announcement=True)
    p.process(early, busy=[], now=NOW)
    p.settle([(LAYOUT.raw["nodes"].name, 0)])
    assert not p.has_announced
    p.tick(NOW + 1)
    assert p.lanes.watermark == at(300).timestamp() - GRACE


def test_announcements_of_partitions_not_owned_or_without_an_assignment_are_ignored() -> None:
    nodes = LAYOUT.raw["nodes"].name
    owned = pipeline()
    owned.retain([(PODS, 0)])
    owned.process([announcement("a", at(10), [(PODS, 0), (nodes, 3)])], now=NOW)
    assert not owned.has_announced, "nodes[3] is another worker's"
    unassigned = pipeline()
    unassigned.process([announcement("a", at(10), [(PODS, 0), (nodes, 0)])], now=NOW)
    assert not unassigned.has_announced, "nothing would settle it"
    assert unassigned.lanes.watermark == at(10).timestamp() - GRACE
