"""A node source's heartbeat reaches the core, once per resolution bucket.

The publish loop signs a node agent's heartbeat with its node and source family
(``Tick.node``, ``Tick.source``, ``Tick.read_at``); the pipeline notes its progress as for
any heartbeat and hands it to the lane's correlator, which keeps when each monitoring source
of a node was last heard (``monitoring_gap``). What reaches the core is read from the
correlators' own count of ingested records (:meth:`Lanes.stats`).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas import progress as wire
from schemas.codec import encode
from schemas.events import Tick
from schemas.topics import topic_layout
from streams.app.pipeline import Pipeline, RawRecord
from tests.core_helpers import config

LAYOUT = topic_layout()
XIDS = LAYOUT.raw["xids"].name
T0 = datetime(2026, 12, 1, 8, 0, 0, tzinfo=UTC)
SOURCE = "kmsg:/dev/kmsg@c1/gpu-1"


def beat(
    offset: int,
    time: datetime,
    *,
    node: str = "gpu-1",
    family: str = "kmsg",
    read_at: datetime | None = None,
    partition: int = 0,
) -> RawRecord:
    """A heartbeat as :class:`connectors.publish.Publisher` sends it: keyless, signed."""
    tick = Tick(
        id=f"heartbeat:{SOURCE}",
        cluster="c1",
        time=time,
        node=node,
        source=family,
        read_at=read_at,
    )
    return RawRecord(
        topic=XIDS,
        partition=partition,
        offset=offset,
        key=None,
        value=encode(tick),
        token=("hb", partition, offset),
        headers=wire.headers(SOURCE, time),
    )


def ingested(pipeline: Pipeline) -> int:
    return pipeline.lanes.stats.events


def test_a_node_sources_heartbeat_reaches_the_core_once_per_bucket() -> None:
    pipeline = Pipeline(config(), LAYOUT)
    step = timedelta(seconds=0.5)
    records = [beat(n, T0 + n * step) for n in range(40)]  # 20 s of heartbeats
    outcome = pipeline.process(records[:1])
    assert ingested(pipeline) == 1, "the first heartbeat is news"
    assert outcome.released == [("hb", 0, 0)], "and is done, as every heartbeat"
    outcome = pipeline.process(records[1:])
    assert sorted(outcome.released) == sorted(r.token for r in records[1:])
    # 08:00:00 .. 08:00:19.5 spans two 10 s buckets (from 08:00:00, from 08:00:10).
    assert ingested(pipeline) == 2


def test_read_at_not_time_decides_the_bucket() -> None:
    """A dcgm source whose exporter refuses: time advances, the last good read does not."""
    pipeline = Pipeline(config(), LAYOUT)
    stale = T0 - timedelta(minutes=5)
    records = [
        beat(n, T0 + timedelta(seconds=15 * n), family="dcgm", read_at=stale) for n in range(8)
    ]
    pipeline.process(records)
    assert ingested(pipeline) == 1, "the same read, whatever the ticks' time"
    pipeline.process([beat(8, T0 + timedelta(minutes=3), family="dcgm", read_at=T0)])
    assert ingested(pipeline) == 2, "a newer read is news"


def test_each_lane_and_each_family_is_its_own_subject() -> None:
    pipeline = Pipeline(config(), LAYOUT)
    pipeline.process(
        [
            beat(0, T0),
            beat(1, T0, family="dcgm"),
            beat(2, T0, node="gpu-2"),
            beat(0, T0, partition=3),  # the same source's heartbeat on another partition
        ]
    )
    assert ingested(pipeline) == 4


def test_a_progress_only_heartbeat_is_not_handed_to_the_core() -> None:
    """Every tick before node sources said who they are, and a source that never read."""
    pipeline = Pipeline(config(), LAYOUT)
    outcome = pipeline.process(
        [beat(0, T0, node="", family=""), beat(1, T0, family=""), beat(2, T0, node="")]
    )
    assert ingested(pipeline) == 0
    assert len(outcome.released) == 3
    assert not outcome.dead_letters


def test_a_heard_time_past_the_present_is_not_forwarded() -> None:
    """A node whose clock went wrong must not hide its source's silence for years."""
    pipeline = Pipeline(config(), LAYOUT, max_future_seconds=600)
    now = T0.timestamp()
    far = T0 + timedelta(days=365)
    pipeline.process([beat(0, T0, read_at=None)], now=now)
    pipeline.process([beat(1, far)], now=now)
    assert ingested(pipeline) == 1
