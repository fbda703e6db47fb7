"""The publish loop signs what it sends with the source's progress, and heartbeats (10.3).

The processor's watermark is made of this (schemas/progress.py): every raw record
carries the source id and the event time the source has delivered up to, and a
quiet source sends a ``tick.v1`` heartbeat to every partition it has published to.
The traps tested here: a record carries the progress acknowledged *before* its
chunk (never its own batch's), a heartbeat never overtakes an unacknowledged batch,
a source with no progress yet sends no heartbeat.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from itertools import pairwise
from typing import Any

import pytest

from connectors.backoff import Backoff
from connectors.kafka.producer import EventProducer, partition_of
from connectors.publish import Publisher, PublishOptions
from connectors.source import Batch
from schemas import progress as wire
from schemas.codec import AnyEvent, decode_event
from schemas.events import KubeEvent, Tick
from schemas.progress import Headers
from schemas.topics import TopicSettings, topic_layout
from tests.kafka_helpers import KafkaTestEnv, consume_until, eventually, numbered_event


def event(n: int) -> KubeEvent:
    return numbered_event(n, prefix="progress", nodes=5)


class Script:
    """A source of given batches, then idle batches forever (a live source's idle polls),
    each after ``idle_seconds`` (the source's own poll interval, not synchronisation)."""

    name = "test-source"
    key: bytes | None = b"c1/gpu-0"

    def __init__(self, batches: Iterable[Batch], idle_seconds: float = 0.01) -> None:
        self.batches = list(batches)
        self.idle_seconds = idle_seconds
        self.read = 0
        self.idle_polls = 0

    async def next_batch(self) -> Batch | None:
        if self.read < len(self.batches):
            self.read += 1
            await asyncio.sleep(0)
            return self.batches[self.read - 1]
        await asyncio.sleep(self.idle_seconds)
        self.idle_polls += 1
        return Batch()

    def commit(self, batch: Batch) -> None:
        pass

    async def close(self) -> None:
        pass


def batch(numbers: Sequence[int], progress: bool = True) -> Batch:
    events: list[AnyEvent] = [event(n) for n in numbers]
    return Batch(
        events=events,
        records=len(events),
        progress=max(e.time for e in events) if progress else None,
    )


class Recorder(EventProducer):
    """No broker: records what is sent, in order; ``gate`` holds every event send."""

    def __init__(self, gate: asyncio.Event | None = None) -> None:
        super().__init__({}, topic_layout(TopicSettings(prefix="progress")))
        self.gate = gate
        self.log: list[tuple[str, Any]] = []
        self.waiting = False

    async def send_many(
        self,
        events: Iterable[AnyEvent],
        *,
        headers: Headers | None = None,
        used: set[tuple[str, int]] | None = None,
        route: bool = True,
    ) -> int:
        events = list(events)
        if self.gate is not None:
            self.waiting = True
            try:
                await self.gate.wait()
            finally:
                self.waiting = False
        self.log.append(("events", (wire.read(headers or []), [e.id for e in events])))
        if used is not None:
            used.update((self.route(e)[0], i % 3) for i, e in enumerate(events))
        return len(events)

    async def send_heartbeats(
        self, tick: Tick, partitions: Iterable[tuple[str, int]], headers: Headers
    ) -> int:
        targets = sorted(partitions)
        named = wire.read_partitions(headers)
        if named:
            self.log.append(("announce", (wire.read(headers), targets, sorted(named))))
        else:
            self.log.append(("heartbeat", (tick.time, wire.read(headers), targets)))
        return len(targets)

    async def partitions_of(self, key: bytes, topics: Iterable[str]) -> set[tuple[str, int]]:
        """As three partitions would give them (no broker to ask)."""
        return {(topic, partition_of(key, 3)) for topic in topics}

    def heartbeats(self) -> list[Any]:
        return [what for kind, what in self.log if kind == "heartbeat"]


async def running(publisher: Publisher) -> asyncio.Task[Any]:
    return asyncio.create_task(publisher.run(asyncio.Event()))


async def stop(task: asyncio.Task[Any]) -> None:
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.mark.asyncio
async def test_every_record_carries_the_source_id_and_the_progress_acked_before_it(
    kafka: KafkaTestEnv,
) -> None:
    """Real broker: the headers as a consumer sees them."""
    await kafka.acreate_topics()
    async with EventProducer(kafka.kwargs, kafka.layout) as producer:
        source = Script([batch([0, 1, 2]), batch([3, 4, 5]), batch([6, 7, 8])])
        publisher = Publisher(
            source,
            producer,
            options=PublishOptions(chunk=1, heartbeat_seconds=None, idle_is_caught_up=False),
        )
        task = await running(publisher)
        try:
            records = await consume_until(
                kafka.bootstrap,
                [kafka.layout.raw["k8s-events"].name],
                # Events only: the partition announcements (keyless) share the topic, and
                # counting them stopped the wait before the last batch under load.
                lambda rs: sum(1 for r in rs if r.key) >= 9,
                what="nine events",
            )
        finally:
            await stop(task)
    assert publisher.source_id == "test-source@c1/gpu-0"
    signed = {decode_event(r.value).id: wire.read(r.headers) for r in records if r.key}
    sid = b"test-source@c1/gpu-0"
    want = {
        **{f"progress:{n}": (sid, float("-inf")) for n in (0, 1, 2)},  # none acked yet
        **{f"progress:{n}": (sid, event(2).time.timestamp()) for n in (3, 4, 5)},
        **{f"progress:{n}": (sid, event(5).time.timestamp()) for n in (6, 7, 8)},
    }
    assert signed == want, "each batch vouches for the ones before it, never for itself"


@pytest.mark.asyncio
async def test_a_quiet_source_heartbeats_to_every_partition_it_used_after_the_interval(
    kafka: KafkaTestEnv,
) -> None:
    await kafka.acreate_topics()
    beat_s = 0.3
    async with EventProducer(kafka.kwargs, kafka.layout) as producer:
        source = Script([batch(range(10))])
        publisher = Publisher(
            source,
            producer,
            options=PublishOptions(heartbeat_seconds=beat_s, idle_is_caught_up=False),
        )
        task = await running(publisher)
        try:
            await eventually(lambda: publisher.heartbeats >= 1, timeout=10, what="a heartbeat")
        finally:
            await stop(task)
        used = set(publisher.used)
    assert len(used) > 1, "five nodes: more than one partition"
    records = await consume_until(
        kafka.bootstrap,
        [kafka.layout.raw["k8s-events"].name],
        lambda rs: (
            sum(r.key is None and not wire.read_partitions(r.headers) for r in rs) >= len(used)
        ),
        what="a heartbeat on every partition used",
    )
    ticks = [r for r in records if r.key is None and not wire.read_partitions(r.headers)]
    assert {(r.topic, r.partition) for r in ticks} >= used
    last_event = max(r.timestamp for r in records if r.key is not None)
    for r in ticks:
        tick = decode_event(r.value)
        assert isinstance(tick, Tick)
        assert tick.time == event(9).time
        assert wire.read(r.headers) == (b"test-source@c1/gpu-0", event(9).time.timestamp())
        # Kafka timestamps are the producer's clock (ms): not before the interval passed.
        assert r.timestamp - last_event >= beat_s * 1000 - 50


@pytest.mark.asyncio
async def test_a_heartbeat_never_overtakes_an_unacked_batch() -> None:
    gate = asyncio.Event()
    producer = Recorder(gate)
    source = Script([batch([0, 1]), batch([2, 3])])
    publisher = Publisher(
        source,
        producer,
        options=PublishOptions(chunk=1, heartbeat_seconds=0.02, idle_is_caught_up=False),
    )
    task = await running(publisher)
    try:
        await eventually(lambda: producer.waiting, what="the first batch in flight")
        # The source has delivered both batches to the buffer and idled for many intervals.
        await eventually(lambda: source.idle_polls >= 20, what="a long quiet")
        assert producer.log == [], "nothing may pass the batch in flight"
        gate.set()
        await eventually(producer.heartbeats, what="the heartbeat")
    finally:
        await stop(task)
    kinds = [kind for kind, _ in producer.log]
    assert kinds[:4] == ["events", "announce", "events", "heartbeat"]
    [(when, signed, _), *_] = producer.heartbeats()
    assert when == event(3).time, "the progress of everything acknowledged before it"
    assert signed == (b"test-source@c1/gpu-0", event(3).time.timestamp())


@pytest.mark.asyncio
async def test_a_source_with_no_progress_yet_sends_no_heartbeat() -> None:
    producer = Recorder()
    source = Script([batch([0, 1], progress=False)])
    publisher = Publisher(
        source,
        producer,
        options=PublishOptions(heartbeat_seconds=0.01, idle_is_caught_up=False),
    )
    task = await running(publisher)
    try:
        await eventually(lambda: source.idle_polls >= 30, what="many heartbeat intervals")
    finally:
        await stop(task)
    assert producer.heartbeats() == []
    [(kind, (signed, ids)), announced] = producer.log
    assert (kind, signed, ids) == (
        "events",
        (b"test-source@c1/gpu-0", float("-inf")),
        ["progress:0", "progress:1"],
    )
    assert announced[0] == "announce", "new partitions are named even before any progress"


@pytest.mark.asyncio
async def test_a_live_source_caught_up_heartbeats_the_present_at_once() -> None:
    """An idle poll of a live source means it has read everything: its progress is now.
    After publishing, the closing heartbeat goes out without waiting the interval, so
    the processor's watermark passes the new events promptly."""
    producer = Recorder()
    source = Script([batch([0, 1])])
    publisher = Publisher(source, producer, options=PublishOptions(heartbeat_seconds=3600))
    before = datetime.now(UTC)
    started = time.monotonic()
    task = await running(publisher)
    try:
        await eventually(producer.heartbeats, what="the closing heartbeat")
    finally:
        await stop(task)
    assert time.monotonic() - started < 3600
    [(when, signed, targets)] = producer.heartbeats()
    assert when >= before
    assert when > event(1).time
    assert signed == (b"test-source@c1/gpu-0", wire.read(wire.headers("x", when))[1])  # type: ignore[index]
    assert targets


@pytest.mark.asyncio
async def test_a_source_that_ends_says_so_last() -> None:
    producer = Recorder()

    class Once(Script):
        async def next_batch(self) -> Batch | None:
            if self.read < len(self.batches):
                return await super().next_batch()
            return None

    publisher = Publisher(Once([batch([0, 1]), batch([2])]), producer)
    result = await publisher.run(asyncio.Event())
    assert result.ended
    assert result.drained
    kinds = [kind for kind, _ in producer.log]
    assert kinds[-1] == "heartbeat", "after every batch"
    assert set(kinds[:-1]) == {"events", "announce"}
    [(_, signed, targets)] = producer.heartbeats()
    assert signed == (b"test-source@c1/gpu-0", float("inf"))
    assert targets


@pytest.mark.asyncio
async def test_an_announcement_precedes_every_progress_that_covers_a_new_partition() -> None:
    """The order a worker relies on: a chunk that reveals new partitions is followed by an
    announcement naming all of them, at the progress of *before* the chunk, and only then
    does the progress rise."""

    class Spread(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.chunks = 0

        async def send_many(self, events: Iterable[AnyEvent], **kwargs: Any) -> int:
            self.chunks += 1
            used = kwargs.get("used")
            sent = await super().send_many(events, **{**kwargs, "used": None})
            if used is not None:  # chunk n reaches partition n: a new one each time
                used.add(("progress.raw.k8s-events", self.chunks))
            return sent

    producer = Spread()
    source = Script([batch([0]), batch([1]), batch([2])])
    publisher = Publisher(
        source,
        producer,
        options=PublishOptions(chunk=1, heartbeat_seconds=None, idle_is_caught_up=False),
    )
    task = await running(publisher)
    try:
        await eventually(lambda: publisher.announcements >= 3, what="three announcements")
    finally:
        await stop(task)
    sid = b"test-source@c1/gpu-0"
    topic = "progress.raw.k8s-events"
    assert producer.log[:6] == [
        ("events", ((sid, float("-inf")), ["progress:0"])),
        ("announce", ((sid, float("-inf")), [(topic, 1)], [(topic, 1)])),
        ("events", ((sid, event(0).time.timestamp()), ["progress:1"])),
        (
            "announce",
            ((sid, event(0).time.timestamp()), [(topic, 1), (topic, 2)], [(topic, 1), (topic, 2)]),
        ),
        ("events", ((sid, event(1).time.timestamp()), ["progress:2"])),
        (
            "announce",
            (
                (sid, event(1).time.timestamp()),
                [(topic, p) for p in (1, 2, 3)],
                [(topic, p) for p in (1, 2, 3)],
            ),
        ),
    ]


@pytest.mark.asyncio
async def test_a_chunk_retried_after_a_failed_announcement_still_announces_first() -> None:
    """The chunk's records were acked (``used`` grew), its announcement was not: the retry
    sends the chunk again and must announce again before the progress rises."""

    class FailsOnce(Recorder):
        failed = False

        async def send_heartbeats(
            self, tick: Tick, partitions: Iterable[tuple[str, int]], headers: Headers
        ) -> int:
            if wire.read_partitions(headers) and not self.failed:
                self.failed = True
                raise ConnectionError("broker went away")
            return await super().send_heartbeats(tick, partitions, headers)

    producer = FailsOnce()
    source = Script([batch([0]), batch([1])])
    publisher = Publisher(
        source,
        producer,
        options=PublishOptions(
            chunk=1,
            heartbeat_seconds=None,
            idle_is_caught_up=False,
            backoff=Backoff(initial_seconds=0.01, max_seconds=0.02),
        ),
    )
    task = await running(publisher)
    try:
        await eventually(lambda: source.read == 2 and len(producer.log) >= 4, what="both chunks")
    finally:
        await stop(task)
    kinds = [kind for kind, _ in producer.log]
    assert producer.failed
    assert kinds[:3] == ["events", "events", "announce"], "sent again, then announced"
    sid = b"test-source@c1/gpu-0"
    assert producer.log[2][1][0] == (sid, float("-inf")), "at the progress of before"
    assert producer.log[3] == ("events", ((sid, event(0).time.timestamp()), ["progress:1"]))


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_quiet_source_heartbeats_every_interval_of_the_loops_clock() -> None:
    """A minute of quiet on the loop's fake clock (looptime): no broker, no socket, so
    nothing is on its way while the clock jumps. The heartbeat's timer is the loop's
    clock, so a heartbeat goes out every ``heartbeat_seconds`` of it, and none sooner."""
    loop = asyncio.get_running_loop()

    class Timed(Recorder):
        def __init__(self) -> None:
            super().__init__()
            self.beats_at: list[float] = []

        async def send_heartbeats(
            self, tick: Tick, partitions: Iterable[tuple[str, int]], headers: Headers
        ) -> int:
            if not wire.read_partitions(headers):
                self.beats_at.append(loop.time())
            return await super().send_heartbeats(tick, partitions, headers)

    producer = Timed()
    source = Script([batch([0, 1, 2])], idle_seconds=1.0)  # then an idle poll every second
    publisher = Publisher(
        source,
        producer,
        options=PublishOptions(heartbeat_seconds=5.0, idle_is_caught_up=False),
    )
    started = loop.time()
    task = await running(publisher)
    try:
        await asyncio.sleep(61.0)  # the loop's clock: instant here
    finally:
        await stop(task)
    gaps = [b - a for a, b in pairwise([started, *producer.beats_at])]
    assert len(producer.beats_at) == 12, producer.beats_at
    assert all(5.0 <= gap < 5.1 for gap in gaps), gaps
    assert publisher.heartbeats == 12
    assert source.idle_polls >= 60, "the source went on being read meanwhile"
