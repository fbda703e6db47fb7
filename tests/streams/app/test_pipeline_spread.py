"""A source's progress counts on its partitions read to an end since (Pipeline.spread).

Latency: a busy source signs every chunk with the progress it had acknowledged
before it, on the partitions that chunk went to; a partition it writes rarely (one
node's XIDs) kept the progress of its last record there, and held every incident of the
worker that long (a busy source never heartbeats: it is never quiet). ``spread`` lends a
source's progress to its partitions the worker has read to an end fetched after that
progress was read (the moment comes from the worker's fetch receipts:
``tests/streams/app/test_announced.py``). Explicit ``now`` values, no clock.
"""

from __future__ import annotations

import math

from schemas import progress as wire
from schemas.events import PodEvent
from streams.app.pipeline import RawRecord
from tests.factories import at
from tests.streams.app.test_pipeline_sources import (
    GRACE,
    NOW,
    PODS,
    heartbeat,
    oom,
    pipeline,
    signed,
)

RARE = (PODS, 2)
"""The partition the source writes rarely."""


def tick(source: str, offset: int, partition: int, *progress: tuple[str, bytes]) -> RawRecord:
    """A heartbeat with hand-made progress headers (none: a source with no progress yet)."""
    return RawRecord(
        topic=PODS,
        partition=partition,
        offset=offset,
        key=None,
        value=heartbeat(source, at(0)).value,
        token=("hb", offset),
        headers=[(wire.SOURCE_HEADER, source.encode()), *progress],
    )


END = (wire.PROGRESS_HEADER, wire.END)


def first_pod() -> PodEvent:
    return next(e for e in oom().events if isinstance(e, PodEvent))


def test_progress_read_on_one_partition_counts_on_another_read_to_an_end_after_it() -> None:
    p = pipeline()
    p.process([heartbeat("k8s", at(50), partition=2)], now=NOW)
    p.process([heartbeat("k8s", at(500), offset=1)], now=NOW + 1)
    p.tick(NOW + 2)
    assert p.lanes.watermark == at(50).timestamp() - GRACE, "the rare partition holds it"
    p.spread({RARE: NOW + 0.5})
    p.tick(NOW + 2)
    assert p.lanes.watermark == at(50).timestamp() - GRACE, (
        "read to an end fetched before at(500) was read: its records may still be on the way"
    )
    p.spread({RARE: NOW + 1.5})
    p.tick(NOW + 2)
    assert p.lanes.watermark == at(500).timestamp() - GRACE


def test_only_the_progress_read_before_the_moment_is_lent() -> None:
    p = pipeline()
    p.process([heartbeat("k8s", at(50), partition=2)], now=NOW)
    p.process([heartbeat("k8s", at(100), offset=1)], now=NOW + 1)
    p.process([heartbeat("k8s", at(200), offset=2)], now=NOW + 3)
    p.spread({RARE: NOW + 2})
    p.tick(NOW + 4)
    assert p.lanes.watermark == at(100).timestamp() - GRACE


def test_another_sources_progress_is_never_lent() -> None:
    p = pipeline()
    p.process([heartbeat("kmsg@c1/n7", at(50), partition=2)], now=NOW)
    p.process([heartbeat("k8s", at(500), offset=1)], now=NOW + 1)
    p.spread({RARE: NOW + 2})
    p.tick(NOW + 3)
    assert p.lanes.watermark == at(50).timestamp() - GRACE, "kmsg vouches for itself only"


def test_an_end_is_not_lent_and_nothing_goes_back() -> None:
    p = pipeline()
    p.process([heartbeat("k8s", at(50), partition=2)], now=NOW)
    p.process([tick("k8s", 5, 0, END)], now=NOW + 1)
    p.spread({RARE: NOW + 2})
    p.tick(NOW + 3)
    rare = p.lanes.lane(RARE[1])
    assert rare.watermark == at(50).timestamp() - GRACE, "an end is said everywhere"
    p.process([heartbeat("k8s", at(90), partition=2, offset=1000)], now=NOW + 4)
    p.spread({RARE: NOW + 5})
    p.tick(NOW + 6)
    assert rare.watermark == at(90).timestamp() - GRACE


def test_a_busy_partition_still_holds_the_watermark_at_its_newest_event() -> None:
    """Nothing is lent to the busy rule: records left to read may be the first of a
    source not heard here yet, which nothing vouches for (found in review)."""
    p = pipeline()
    pod = first_pod()
    p.process(signed([pod], "k8s", at(0), partition=2), busy=[], now=NOW)
    p.process([heartbeat("k8s", at(500), offset=1)], now=NOW + 1)
    p.spread({RARE: NOW + 2})
    p.tick(NOW + 3, busy=[RARE])
    assert p.lanes.watermark == pod.time.timestamp() - GRACE
    assert p.ahead([RARE], NOW + 3) == set(), "the holder is never paused"
    p.tick(NOW + 4, busy=[])
    assert p.lanes.watermark == at(500).timestamp() - GRACE


def test_a_run_after_an_end_is_not_lent_the_old_runs_progress() -> None:
    """A source that ended (``--once``) and runs again starts from nothing: what the old
    run had vouched for says nothing of the new one's records (found in review)."""
    p = pipeline()
    p.process([heartbeat("other", at(10), partition=1)], now=NOW)
    p.process([heartbeat("kmsg", at(400), offset=1)], now=NOW)

    p.process([tick("kmsg", 2, 0, END)], now=NOW + 1)
    p.process([tick("kmsg", 3, 2)], now=NOW + 2)  # the new run, on another partition: no progress
    p.spread({RARE: NOW + 5, (PODS, 0): NOW + 5})
    p.process([heartbeat("other", at(1000), partition=1, offset=1000)], now=NOW + 6)
    p.tick(NOW + 7)
    assert RARE[1] in p.lanes, "the lane exists: its watermark is held, not absent"
    assert p.lanes.lane(RARE[1]).watermark == -math.inf, "the new run holds it"
    assert p.lanes.lane(1).watermark == at(1000).timestamp() - GRACE, "not another lane"
