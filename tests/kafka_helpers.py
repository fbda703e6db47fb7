"""Helpers for tests against the real embedded broker: topics, clients, waiting on conditions.

Synchronisation is always "wait until a condition holds, or fail at a
deadline", never a fixed sleep: a sleep is either too short on a loaded CI
machine or wasted time everywhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from connectors.kafka.admin import ensure_topics
from gputriage.demo.broker import EmbeddedBroker
from schemas.events import KubeEvent, ObjectRef
from schemas.topics import TopicLayout, TopicSettings, topic_layout

T = TypeVar("T")

PARTITIONS = 3
"""Fewer than the default 6: enough to exercise several partitions, fewer round trips."""


@dataclass(frozen=True)
class KafkaTestEnv:
    """The session broker plus a topic prefix that belongs to one test."""

    broker: EmbeddedBroker
    prefix: str
    partitions: int = PARTITIONS
    """Partitions of every topic (``dataclasses.replace`` for a test that needs more)."""

    @property
    def bootstrap(self) -> str:
        """``host:port`` of the broker."""
        return self.broker.bootstrap

    @property
    def kwargs(self) -> dict[str, Any]:
        """aiokafka client keyword arguments for the broker (PLAINTEXT)."""
        return {"bootstrap_servers": self.bootstrap}

    @property
    def settings(self) -> TopicSettings:
        """Topic settings with this test's prefix."""
        return TopicSettings(prefix=self.prefix, partitions=self.partitions)

    @property
    def layout(self) -> TopicLayout:
        """This test's topic layout."""
        return topic_layout(self.settings)

    @property
    def env(self) -> dict[str, str]:
        """Environment for a ``gputriage`` subprocess that should use these topics."""
        return {
            "GPUTRIAGE_KAFKA__BROKERS": f'"{self.bootstrap}"',
            "GPUTRIAGE_TOPICS__PREFIX": f'"{self.prefix}"',
            "GPUTRIAGE_TOPICS__PARTITIONS": str(self.partitions),
        }

    def create_topics(self) -> list[str]:
        """Create this test's topics; returns the names created. For sync tests: it runs
        its own event loop (an async test awaits :meth:`acreate_topics` instead)."""
        return asyncio.run(self.acreate_topics())

    async def acreate_topics(self) -> list[str]:
        """Create this test's topics on the running loop; returns the names created."""
        return await ensure_topics(self.kwargs, self.layout)


def wait_until(condition: Callable[[], T], *, timeout: float = 10.0, what: str = "") -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or condition}")
        time.sleep(0.01)


async def produce(
    bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]
) -> list[Any]:
    """Produce ``(key, value)`` records with a plain aiokafka producer; returns the metadata."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        futures = [await producer.send(topic, value, key=key) for key, value in records]
        return list(await asyncio.gather(*futures))
    finally:
        await producer.stop()


async def consume_all(
    bootstrap: str, topics: list[str], count: int, *, timeout: float = 10.0
) -> list[Any]:
    """Read ``count`` records from the beginning of ``topics`` (no consumer group)."""
    try:
        return await consume_until(
            bootstrap, topics, lambda records: len(records) >= count, timeout=timeout
        )
    except TimedOut as late:
        raise AssertionError(
            f"only {len(late.records)} of {count} records within {timeout} s"
        ) from None


class TimedOut(AssertionError):
    """:func:`consume_until` gave up; ``records`` is what it had read by then."""

    def __init__(self, message: str, records: list[Any]) -> None:
        super().__init__(message)
        self.records = records


async def consume_until(
    bootstrap: str,
    topics: list[str],
    done: Callable[[list[Any]], object],
    *,
    timeout: float = 10.0,
    what: str = "",
) -> list[Any]:
    """Read ``topics`` from the beginning (no consumer group) until ``done(records)``, the
    records read so far, is truthy; returns them. Fails (:class:`TimedOut`) after ``timeout`` s."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        await consumer.topics()  # refresh metadata for the partition lists below
        tps = [
            TopicPartition(topic, partition)
            for topic in topics
            for partition in sorted(consumer.partitions_for_topic(topic) or ())
        ]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records: list[Any] = []
        deadline = time.monotonic() + timeout
        while not done(records):
            if time.monotonic() > deadline:
                raise TimedOut(
                    f"timed out after {timeout:g} s waiting for {what or done} "
                    f"({len(records)} records read)",
                    records,
                )
            batches = await consumer.getmany(timeout_ms=200)
            for batch in batches.values():
                records.extend(batch)
        return records
    finally:
        await consumer.stop()


async def with_consumer(
    bootstrap: str, use: Callable[[AIOKafkaConsumer], Awaitable[T]], **options: Any
) -> T:
    """Run ``use`` with a started consumer (no group), always stopping it."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, **options)
    await consumer.start()
    try:
        return await use(consumer)
    finally:
        await consumer.stop()


def as_mapping(entries: Any) -> Mapping[str, str]:
    """DescribeConfigs entries ``(name, value, ...)`` as ``{name: value}``."""
    return {entry[0]: entry[1] for entry in entries}


async def eventually(condition: Callable[[], T], *, timeout: float = 5.0, what: str = "") -> T:
    """Poll ``condition`` until truthy; fail after ``timeout`` seconds (never a bare sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or condition}")
        await asyncio.sleep(0.01)


def _stopped(pid: int) -> bool:
    """Every thread of ``pid`` is in the stopped state (``T`` in ``/proc/PID/task/*/stat``)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return False
    states = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat", encoding="ascii") as stat:
                states.append(stat.read().rsplit(") ", 1)[1][0])
        except FileNotFoundError:
            continue  # a thread that just exited
    return bool(states) and all(state in "Tt" for state in states)


@contextlib.contextmanager
def frozen(broker: EmbeddedBroker) -> Iterator[None]:
    """A broker outage: the broker process is stopped (SIGSTOP) until the block ends.

    Trap: ``kill`` returns once the signal is queued, not once every thread of the
    broker has stopped; a request sent in that moment can still be answered, and a
    test that counts what was read "while down" is then off by a batch. So this
    waits (bounded) until ``/proc`` shows every thread stopped.
    """
    pid = broker.pid or 0
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_until(lambda: _stopped(pid), timeout=5, what="the broker's threads stopped")
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def without_heartbeats(records: list[Any]) -> list[Any]:
    """The records that are not a connector's heartbeat (a ``tick.v1`` to an explicit
    partition with no key, see :class:`connectors.publish.Publisher`): raw topics carry
    both, and a test counting events wants the events."""
    return [r for r in records if r.key is not None]


async def consume_events(
    bootstrap: str, topics: list[str], count: int, *, timeout: float = 10.0
) -> list[Any]:
    """:func:`consume_all` counting only records that are not heartbeats, and returning them."""
    try:
        records = await consume_until(
            bootstrap,
            topics,
            lambda records: len(without_heartbeats(records)) >= count,
            timeout=timeout,
        )
    except TimedOut as late:
        raise AssertionError(
            f"only {len(without_heartbeats(late.records))} of {count} records within {timeout} s"
        ) from None
    return without_heartbeats(records)


NUMBERED_T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def numbered_event(n: int, *, prefix: str = "test", nodes: int = 4) -> KubeEvent:
    """The ``n``-th of a stream of small, valid, distinct events over ``nodes`` nodes, one
    second apart: what publish-loop tests push through the broker."""
    node = f"gpu-{n % nodes}"
    return KubeEvent(
        id=f"{prefix}:{n}",
        cluster="c1",
        time=NUMBERED_T0 + timedelta(seconds=n),
        node=node,
        reason="Test",
        message=f"event {n}",
        type="Normal",
        involved=ObjectRef(kind="Node", name=node),
        source="test",
    )
