"""The one publish loop (connectors/publish.py) on a real broker (Tansu).

What every connector relies on: a broker outage is survived with the buffer
bounded and nothing lost; a checkpoint is committed only after the acks of its
batch (and of every batch before it), in order; dead lines become dead letters
named after their source; a commit that fails ends the loop instead of being
retried as if Kafka were down.
"""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from prometheus_client import CollectorRegistry

from connectors.backoff import Backoff
from connectors.delivery import DeliveryMetrics
from connectors.kafka.admin import ensure_topics
from connectors.kafka.producer import EventProducer
from connectors.publish import Publisher, PublishOptions
from connectors.source import Batch, DeadLine
from gputriage.demo.broker import EmbeddedBroker
from schemas.codec import AnyEvent, RecordError, decode_dead_letter, decode_event
from schemas.events import KubeEvent
from tests.kafka_helpers import (
    KafkaTestEnv,
    consume_all,
    consume_events,
    eventually,
    frozen,
    numbered_event,
)

PER_BATCH = 3


class Position(msgspec.Struct, frozen=True):
    batch: int


def event(n: int) -> KubeEvent:
    return numbered_event(n, prefix="test", nodes=4)


class ListSource:
    """``total`` batches of ``PER_BATCH`` events, then (unless ``endless``) the end.

    Each commit records how many records the producer had seen acknowledged at
    that moment, so the test can check that no checkpoint ran ahead of its acks.
    """

    name = "test-source"
    key: bytes | None = b"c1/gpu-0"

    def __init__(self, producer: EventProducer, total: int, *, fail_commit: bool = False) -> None:
        self.producer = producer
        self.total = total
        self.read = 0
        self.committed: list[tuple[int, int]] = []
        """(batch number, producer.sent at commit time)."""
        self.fail_commit = fail_commit
        self.closed = False

    async def next_batch(self) -> Batch | None:
        if self.read == self.total:
            return None
        n = self.read
        self.read += 1
        await asyncio.sleep(0)  # a real source awaits its input
        events: list[AnyEvent] = [event(n * PER_BATCH + i) for i in range(PER_BATCH)]
        return Batch(events=events, state=Position(n), records=PER_BATCH, progress=events[-1].time)

    def commit(self, batch: Batch) -> None:
        if self.fail_commit:
            raise OSError("read-only file system")
        assert isinstance(batch.state, Position)
        self.committed.append((batch.state.batch, self.producer.sent))

    async def close(self) -> None:
        self.closed = True


def assert_committed_after_acks(source: ListSource, batches: int) -> None:
    assert [n for n, _ in source.committed] == list(range(batches)), "every one, in order"
    for n, acked in source.committed:
        assert acked >= (n + 1) * PER_BATCH, f"batch {n} committed before its acks"


@pytest.mark.asyncio
async def test_a_broker_outage_is_survived_bounded_and_nothing_is_lost() -> None:
    async with EmbeddedBroker() as broker:  # our own: the outage must not hit other tests
        env = KafkaTestEnv(broker=broker, prefix="publish-outage")
        await ensure_topics(env.kwargs, env.layout)
        producer = EventProducer(
            env.kwargs, env.layout, linger_ms=0, request_timeout_ms=400, retry_backoff_ms=20
        )
        await producer.start()
        total, capacity, chunk = 40, 4, 2
        source = ListSource(producer, total)
        metrics = DeliveryMetrics(CollectorRegistry())
        publisher = Publisher(
            source,
            producer,
            options=PublishOptions(
                capacity=capacity,
                chunk=chunk,
                backoff=Backoff(initial_seconds=0.05, max_seconds=0.1),
                drain_timeout_seconds=20,
            ),
            metrics=metrics,
        )
        topic = env.layout.raw["k8s-events"].name
        try:
            await publisher.producer.send(event(10_000))  # warm up: metadata and connections
            with frozen(broker):  # the outage begins before the first batch
                running = asyncio.create_task(publisher.run(asyncio.Event()))
                await eventually(lambda: len(publisher.delivery) == capacity, what="a full buffer")
                await eventually(lambda: publisher.delivery.failing_since is not None)
                read_while_down = source.read
                # Bounded: the buffer, the chunk in flight, and the one batch waiting to be put.
                assert read_while_down <= capacity + chunk + 1, (source.committed, source.read)
                assert source.committed == [], "nothing is committed while nothing is acked"
                gauge = metrics.registry.get_sample_value("gputriage_connector_buffered_events")
                assert gauge == capacity * PER_BATCH, "the gauge counts events, not batches"
                assert not running.done()
            result = await asyncio.wait_for(running, 30)
        finally:
            await producer.stop()
        assert (result.ended, result.drained) == (True, True)
        assert result.delivered == total * PER_BATCH
        assert_committed_after_acks(source, total)
        records = await consume_events(broker.bootstrap, [topic], total * PER_BATCH + 1, timeout=20)
        ids = {decode_event(r.value).id for r in records}
        assert ids >= {f"test:{n}" for n in range(total * PER_BATCH)}, "nothing lost"
        failures = metrics.registry.get_sample_value("gputriage_connector_delivery_failures_total")
        assert (failures or 0) >= 1
        backpressure = metrics.registry.get_sample_value(
            "gputriage_connector_backpressure_seconds_total"
        )
        assert (backpressure or 0) > 0
        assert metrics.registry.get_sample_value(
            "gputriage_connector_events_out_total", {"source": "k8s-events"}
        ) == float(total * PER_BATCH)


@pytest.mark.asyncio
async def test_dead_lines_become_dead_letters_named_after_their_source(
    kafka: KafkaTestEnv,
) -> None:
    await kafka.acreate_topics()
    async with EventProducer(kafka.kwargs, kafka.layout, linger_ms=0) as producer:

        class OneBadLine(ListSource):
            async def next_batch(self) -> Batch | None:
                if self.read:
                    return None
                self.read = 1
                bad = DeadLine(b"6,7,8,-;garbage", RecordError("not an XID", "$.message"), 7)
                return Batch(dead=[bad], state=Position(0), records=1)

        source = OneBadLine(producer, 1)
        result = await Publisher(source, producer).run(asyncio.Event())
    assert (result.ended, result.drained, result.delivered) == (True, True, 1)
    assert source.committed == [(0, 1)], "committed once, after the dead letter's ack"
    [record] = await consume_all(kafka.bootstrap, [kafka.layout.dead_letters.name], 1)
    letter = decode_dead_letter(record.value)
    assert (letter.topic, letter.partition, letter.offset) == ("test-source", -1, 7)
    assert (letter.reason, letter.key, letter.value) == (
        "not an XID",
        b"c1/gpu-0",
        b"6,7,8,-;garbage",
    )
    assert record.key == b"c1/gpu-0"


@pytest.mark.asyncio
async def test_a_commit_that_fails_ends_the_loop_it_is_not_retried(kafka: KafkaTestEnv) -> None:
    await kafka.acreate_topics()
    async with EventProducer(kafka.kwargs, kafka.layout, linger_ms=0) as producer:
        source = ListSource(producer, 1_000_000, fail_commit=True)
        publisher = Publisher(source, producer, options=PublishOptions(capacity=2, chunk=1))
        with pytest.raises(OSError, match="read-only"):
            await asyncio.wait_for(publisher.run(asyncio.Event()), 20)
        assert source.read <= 2 + 1 + 1, "the source stopped being read"
        announced = len(publisher.used) * publisher.announcements  # ticks naming partitions
        assert producer.sent - announced == PER_BATCH, "the batch was sent once, not retried"


@pytest.mark.asyncio
async def test_a_stop_drains_what_is_buffered_and_commits_it(kafka: KafkaTestEnv) -> None:
    await kafka.acreate_topics()
    async with EventProducer(kafka.kwargs, kafka.layout, linger_ms=0) as producer:
        source = ListSource(producer, 1_000_000)
        publisher = Publisher(source, producer, options=PublishOptions(capacity=5, chunk=2))
        stop = asyncio.Event()
        running = asyncio.create_task(publisher.run(stop))
        await eventually(lambda: len(source.committed) >= 3, timeout=20, what="some commits")
        stop.set()
        result = await asyncio.wait_for(running, 20)
    assert (result.ended, result.drained) == (False, True)
    read = source.read
    # Everything read was either put and delivered, or dropped by the cancelled read.
    assert read - 1 <= len(source.committed) <= read
    assert_committed_after_acks(source, len(source.committed))
