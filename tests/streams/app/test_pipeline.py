"""The processor's transport-free glue: dead letters, release discipline, snapshots."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from aiokafka import ConsumerRecord, TopicPartition

from schemas.topics import topic_layout
from streams.app.pipeline import Pipeline, RawRecord
from streams.core.snapshot import decode_state
from tests.core_helpers import config
from tests.factories import Cluster, term
from tests.processor_helpers import records

LAYOUT = topic_layout()
PODS_TOPIC = LAYOUT.raw["pods"].name


def oom_scenario() -> Cluster:
    c = Cluster()
    c.node("n", 0)
    c.pod("n", "p", 1)
    c.pod("n", "p", 60, restarts=1, last=term(59, "OOMKilled", 137))
    return c


def test_good_records_become_incidents_and_are_released_after_the_watermark() -> None:
    pipeline = Pipeline(config(grace_seconds=5), LAYOUT)
    c = oom_scenario()
    outcome = pipeline.process(records(c.events))
    assert outcome.released == [0, 1], "the last pod update waits for the watermark"
    assert outcome.incidents == []
    assert outcome.events_by_source == {"nodes": 1, "pods": 2}
    later = pipeline.tick(c.events[-1].time.timestamp() + 10)
    assert later.released == [2]
    assert [i.type for i in later.incidents] == ["host_oom_kill"]
    snapshots = pipeline.snapshots()
    assert [(key, lane) for key, _, lane in snapshots] == [("c1/n", 0)]
    assert decode_state(snapshots[0][1]) == pipeline.lanes.keys["c1/n"]
    assert pipeline.snapshots() == [], "each change is written once"


def test_garbage_is_a_dead_letter_with_its_bytes_and_processing_goes_on() -> None:
    pipeline = Pipeline(config(grace_seconds=0), LAYOUT)
    c = oom_scenario()
    good = records(c.events)
    garbage = RawRecord(
        topic=good[0].topic, partition=3, offset=99, key=b"c1/n", value=b"\xff not json", token="g"
    )
    outcome = pipeline.process([good[0], garbage, *good[1:]])
    [dead] = outcome.dead_letters
    assert (dead.topic, dead.partition, dead.offset) == (good[0].topic, 3, 99)
    assert dead.value == b"\xff not json"
    assert "g" in outcome.released
    # Grace is inclusive: even at grace 0 the newest event waits for time to pass it.
    later = pipeline.tick(c.events[-1].time.timestamp() + 1)
    assert [i.type for i in outcome.incidents + later.incidents] == ["host_oom_kill"]


def test_a_run_of_dead_letters_alone_starts_no_lane() -> None:
    """A lane starts with the first record it ingests (or a heartbeat): one started by
    records that all went to the dead-letter topic would take a watermark from the clock,
    and a good record of that partition read next would be late. (Found by review when the
    loop began taking its lane once a run of a partition.)"""
    pipeline = Pipeline(config(grace_seconds=0), LAYOUT)
    good = records(oom_scenario().events)
    garbage = [
        RawRecord(topic=good[0].topic, partition=3, offset=i, key=b"c1/n", value=b"{", token=i)
        for i in range(3)
    ]
    outcome = pipeline.process(garbage, busy=[])
    assert len(outcome.dead_letters) == 3
    assert 3 not in pipeline.lanes
    pipeline.tick(2_000_000_000.0)
    assert 3 not in pipeline.lanes


def _fetched(raw: Sequence[RawRecord]) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
    """The same records as aiokafka's ``getmany`` would give them."""
    out: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]] = {}
    for r in raw:
        record = ConsumerRecord(
            topic=r.topic,
            partition=r.partition,
            offset=r.offset,
            timestamp=r.timestamp_ms or 0,
            timestamp_type=0,
            key=r.key,
            value=r.value,
            checksum=None,
            serialized_key_size=len(r.key or b""),
            serialized_value_size=len(r.value or b""),
            headers=list(r.headers),
        )
        out.setdefault(TopicPartition(r.topic, r.partition), []).append(record)
    return out


def test_fetched_records_make_the_same_outcome_as_raw_records() -> None:
    """``process_fetched`` (the worker's path) is ``process`` without the RawRecords: the
    same incidents, dead letters (timestamp included) and releases, tokens ``(tp, offset)``."""
    c = oom_scenario()
    good = records(c.events)
    garbage = RawRecord(
        topic=good[0].topic, partition=0, offset=99, key=b"c1/n", value=b"\xff", timestamp_ms=7
    )
    raw = [
        RawRecord(
            topic=r.topic,
            partition=r.partition,
            offset=r.offset,
            key=r.key,
            value=r.value,
            timestamp_ms=r.timestamp_ms if r.timestamp_ms is not None else 1000 + r.offset,
            token=(TopicPartition(r.topic, r.partition), r.offset),
        )
        for r in (*good, garbage)
    ]
    raw_pipeline = Pipeline(config(grace_seconds=0), LAYOUT)
    fetch_pipeline = Pipeline(config(grace_seconds=0), LAYOUT)
    by_raw = raw_pipeline.process(raw)
    by_fetch = fetch_pipeline.process_fetched(_fetched(raw))
    now = c.events[-1].time.timestamp() + 1
    by_raw.incidents += raw_pipeline.tick(now).incidents
    by_fetch.incidents += fetch_pipeline.tick(now).incidents
    assert by_fetch.incidents == by_raw.incidents
    assert [i.type for i in by_fetch.incidents] == ["host_oom_kill"]
    assert by_fetch.dead_letters == by_raw.dead_letters
    assert by_fetch.dead_letters[0].timestamp_ms == 7
    assert sorted(by_fetch.released) == sorted(by_raw.released)
    assert by_fetch.events_by_source == by_raw.events_by_source


def test_wrong_schema_for_the_topic_is_a_dead_letter() -> None:
    pipeline = Pipeline(config(), LAYOUT)
    c = oom_scenario()
    [node_record] = records(c.events[:1])
    misplaced = RawRecord(
        topic=LAYOUT.raw["pods"].name,
        partition=0,
        offset=0,
        key=node_record.key,
        value=node_record.value,
    )
    [dead] = pipeline.process([misplaced]).dead_letters
    assert "node.v1" in dead.reason
    assert "pod.v1" in dead.reason


def test_a_key_that_is_not_the_correlation_key_is_a_dead_letter() -> None:
    pipeline = Pipeline(config(), LAYOUT)
    [record] = records(oom_scenario().events[:1])
    wrong = RawRecord(topic=record.topic, partition=0, offset=0, key=b"other", value=record.value)
    [dead] = pipeline.process([wrong]).dead_letters
    assert "correlation key" in dead.reason


def test_a_restored_worker_skips_what_it_had_applied() -> None:
    c = oom_scenario()
    first = Pipeline(config(grace_seconds=0), LAYOUT)
    now = c.events[-1].time.timestamp() + 1  # past the newest event: released at grace 0
    outcome = first.process(records(c.events))
    outcome.incidents += first.tick(now).incidents
    assert [i.status for i in outcome.incidents] == ["open"]
    second = Pipeline(config(grace_seconds=0), LAYOUT)
    second.restore((decode_state(data) for _, data, _ in first.snapshots()), 0)
    again = second.process(records(c.events))
    ticked = second.tick(now)
    assert again.incidents + ticked.incidents == []
    assert second.lanes.stats.stale == len(c.events)
    assert again.released + ticked.released == [0, 1, 2]


def chain() -> Cluster:
    """An XID 79 and the eviction it causes: one device_unhealthy_eviction page."""
    c = Cluster()
    c.node("m", 0)
    c.pod("m", "t", 1)
    c.xid("m", 300, 79)
    c.pod("m", "t", 320, phase="Failed", reason="Evicted")
    c.node("m", 900)
    return c


def test_a_partition_with_a_backlog_holds_the_watermark() -> None:
    """The fastest partition must not make a slower one's events late (then stale)."""
    node0, pod1, xid, pod2, node2 = records(chain().events)
    pipeline = Pipeline(config(grace_seconds=1), LAYOUT)
    xids = (xid.topic, 0)
    first = pipeline.process([node0, pod1, pod2, node2], busy=[xids])
    assert first.released == [], "the xids partition has not been read yet"
    second = pipeline.process([xid], busy=[])
    assert pipeline.lanes.stats.late == 0
    assert pipeline.lanes.stats.stale == 0
    assert sorted(second.released) == [0, 1, 2, 3]
    assert [i.type for i in second.incidents] == ["device_unhealthy_eviction"]


def test_ticks_drive_the_watermark_only_when_nothing_is_left_to_read() -> None:
    c = oom_scenario()
    pipeline = Pipeline(config(grace_seconds=5), LAYOUT)
    recs = records(c.events)
    pipeline.process(recs, busy=[(recs[0].topic, 0)])
    later = c.events[-1].time.timestamp() + 60
    assert pipeline.tick(later, busy=[(recs[0].topic, 0)]).incidents == []
    assert [i.type for i in pipeline.tick(later, busy=[]).incidents] == ["host_oom_kill"]


def test_snapshot_partitions_match_the_producers_partitioner() -> None:
    """A key's state must land on the partition number of its raw records, or a worker
    would restore state for keys it does not own (and miss its own)."""
    from aiokafka.partitioner import DefaultPartitioner  # noqa: PLC0415

    from streams.app.changelog import partition_for  # noqa: PLC0415

    partitioner = DefaultPartitioner()
    for n in (1, 3, 6, 12):
        parts = list(range(n))
        for i in range(200):
            key = f"cluster-{i % 3}/ip-10-0-{i}-{i * 7}.ec2.internal"
            assert partition_for(key, n) == partitioner(key.encode(), parts, parts)


def test_an_event_far_ahead_of_the_clock_is_a_dead_letter_and_released() -> None:
    """A record dated 9999 held the watermark (and its partition's commit)
    forever. Past ``max_future_seconds`` ahead of the worker's clock it is a dead letter
    naming the field, and its token is released so the partition commits past it; one
    a little ahead (clock skew between nodes) is still an event."""
    pipeline = Pipeline(config(grace_seconds=0), LAYOUT, max_future_seconds=600)
    c = oom_scenario()
    now = c.events[-1].time.timestamp()
    near = msgspec.structs.replace(c.events[1], id="near", time=c.events[1].time.replace(minute=9))
    far = msgspec.structs.replace(c.events[1], id="far", time=c.events[1].time.replace(year=9999))
    batch = records([*c.events, near, far])
    outcome = pipeline.process(batch, now=now)
    [dead] = outcome.dead_letters
    assert dead.field == "$.time"
    assert "ahead of the present (max_future_seconds = 600)" in dead.reason
    assert len(batch) - 1 in outcome.released, "the far record's token is released"
    assert outcome.events_by_source == {"nodes": 1, "pods": 3}


def on(partition: int, recs: Sequence[RawRecord]) -> list[RawRecord]:
    return [
        RawRecord(r.topic, partition, r.offset, r.key, r.value, token=(partition, r.offset))
        for r in recs
    ]


def test_a_gained_partitions_backlog_is_applied_in_order_however_far_the_kept_ones_are() -> None:
    """A survivor taking over a dead member's partition had moved its one watermark on
    with the partitions it kept, days past the gained partition's backlog: the backlog was
    late, applied in arrival order, and across the raw topics that is not event order (the
    XID after the pod updates: skipped as stale, the page lost). Each partition number is
    a lane with its own watermark: a gained one starts with none."""
    pipeline = Pipeline(config(grace_seconds=1), LAYOUT)
    kept = {(topic, 0) for topic in LAYOUT.raw_topics}
    pipeline.retain(kept)
    live = oom_scenario()
    later = [
        msgspec.structs.replace(e, time=e.time.replace(year=e.time.year + 1)) for e in live.events
    ]
    assert [i.type for i in pipeline.process(on(0, records(later))).incidents] == []
    assert pipeline.lanes.watermark > chain().events[-1].time.timestamp() + 86400

    gained = {(topic, 1) for topic in LAYOUT.raw_topics}
    assert pipeline.retain(kept | gained) == 0
    node0, pod1, xid, pod2, node2 = on(1, records(chain().events))
    xids = (xid.topic, 1)
    first = pipeline.process([node0, pod1, pod2, node2], busy=[xids])
    assert first.incidents == []
    second = pipeline.process([xid], busy=[])
    assert pipeline.lanes.stats.late == 0
    assert pipeline.lanes.stats.stale == 0
    assert [i.type for i in second.incidents] == ["device_unhealthy_eviction"]
    assert sorted(second.released) == [(1, 0), (1, 1), (1, 2), (1, 3)]


def test_a_lost_lane_is_dropped_with_what_it_buffered_and_its_newest_times() -> None:
    """Its events are never released (the new owner reads them again), and if it comes
    back its backlog holds it again: what this worker read there before counts no more."""
    pipeline = Pipeline(config(grace_seconds=5), LAYOUT)
    both = {(topic, p) for topic in LAYOUT.raw_topics for p in (0, 1)}
    pipeline.retain(both)
    outcome = pipeline.process(on(1, records(oom_scenario().events)))
    assert outcome.released == [(1, 0), (1, 1)], "the last pod update waits"
    assert pipeline.retain({w for w in both if w[1] == 0}) == 1, "the held update is dropped"
    assert 1 not in pipeline.lanes
    pipeline.retain(both)
    again = pipeline.process(on(1, records(oom_scenario().events[:1])), busy=[(PODS_TOPIC, 1)])
    assert again.released == [], "held by the pods partition's backlog, not its old newest"
