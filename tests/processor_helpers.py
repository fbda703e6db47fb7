"""Running real ``gputriage process`` workers against the test broker, and reading results."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from connectors.kafka.producer import EventProducer
from connectors.publish import Publisher, PublishOptions
from connectors.source import Batch
from gputriage.demo.player import retime
from gputriage.simulate import StreamSpec, generate_events
from schemas.codec import AnyEvent, decode_dead_letter, decode_incident, encode
from schemas.dead_letters import DeadLetter
from schemas.events import Tick
from schemas.incidents import Incident
from schemas.keys import Router, correlation_key
from schemas.topics import topic_layout
from streams.app.pipeline import RawRecord
from streams.app.settings import ProcessorSettings
from streams.core import Correlator
from tests.core_helpers import config
from tests.kafka_helpers import KafkaTestEnv, wait_until

FAST_GROUP = {
    "GPUTRIAGE_PROCESSOR__SESSION_TIMEOUT_SECONDS": "2",
    "GPUTRIAGE_PROCESSOR__REBALANCE_TIMEOUT_SECONDS": "2",
    "GPUTRIAGE_PROCESSOR__METRICS_PORT": "0",
    "GPUTRIAGE_PROCESSOR__TICK_SECONDS": "0.1",
}
"""Settings every test worker starts with. Tansu completes a join after half the session
timeout and frees a killed member's partitions after the whole of it
(bench/faust/FINDINGS.md §5): 2 s keeps a start under ~1 s and a takeover after SIGKILL
under ~3 s (the default 10 s would cost 5 s per join, the suite's biggest wait)."""


_DEFAULTS = ProcessorSettings()
DEFAULT_GROUP = {
    "GPUTRIAGE_PROCESSOR__SESSION_TIMEOUT_SECONDS": str(_DEFAULTS.session_timeout_seconds),
    "GPUTRIAGE_PROCESSOR__REBALANCE_TIMEOUT_SECONDS": str(_DEFAULTS.rebalance_timeout_seconds),
}
"""The group timings a deployment runs with (over :data:`FAST_GROUP`): the kill tests use
them, so a killed member holds its partitions as long as it would in production."""


class Worker:
    """One ``python -m gputriage process`` subprocess, its log in ``log_path``."""

    def __init__(
        self,
        kafka: KafkaTestEnv,
        app_id: str,
        log_path: Path,
        extra_env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
    ) -> None:
        """``args``: more of ``gputriage process``'s options (``--engine faust``)."""
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("GPUTRIAGE_")},
            **kafka.env,
            **FAST_GROUP,
            "GPUTRIAGE_PROCESSOR__APP_ID": f'"{app_id}"',
            **(extra_env or {}),
        }
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "gputriage", "process", *args],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no chance to commit, flush or say goodbye."""
        self.process.kill()
        try:
            self.process.wait(10)
        finally:
            self._log.close()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit status."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        finally:
            self._log.close()


SLOW_STEPS = {
    "GPUTRIAGE_PROCESSOR__BATCH_MAX": "20",
    "GPUTRIAGE_PROCESSOR__SNAPSHOT_SECONDS": "0.01",
}
"""A worker that commits after nearly every small batch: it takes seconds over a
backlog of thousands, so a test can act while the backlog is half committed."""


def raw_partitions(kafka: KafkaTestEnv) -> list[TopicPartition]:
    """Every partition of every raw topic of the test's layout."""
    return [
        TopicPartition(topic, p)
        for topic in kafka.layout.raw_topics
        for p in range(kafka.settings.partitions)
    ]


def committed(kafka: KafkaTestEnv, group: str) -> int:
    """:func:`fetch_committed` for sync tests (polled by ``wait_until``): its own loop."""
    return asyncio.run(fetch_committed(kafka, group))


async def fetch_committed(kafka: KafkaTestEnv, group: str) -> int:
    """Records of the raw topics the consumer group ``group`` has committed, in all.

    Asked with OffsetFetch by a consumer of that group that never subscribes (so it
    never joins the group and causes no rebalance)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = raw_partitions(kafka)
        offsets = await asyncio.gather(*(consumer.committed(tp) for tp in tps))
        return sum(o for o in offsets if o)
    finally:
        await consumer.stop()


class GroupOffsets:
    """:func:`committed`, polled fast: one consumer of the group (never subscribed, so
    never a member), kept open on a loop of its own, asked again on every call."""

    def __init__(self, kafka: KafkaTestEnv, group: str) -> None:
        self.kafka = kafka
        self.group = group
        self._loop = asyncio.new_event_loop()
        self._consumer: AIOKafkaConsumer | None = None
        self._tps = raw_partitions(kafka)

    def __call__(self) -> int:
        return self._loop.run_until_complete(self._count())

    async def _count(self) -> int:
        if self._consumer is None:
            self._consumer = AIOKafkaConsumer(
                bootstrap_servers=self.kafka.bootstrap,
                group_id=self.group,
                enable_auto_commit=False,
            )
            await self._consumer.start()
        consumer = self._consumer
        offsets = await asyncio.gather(*(consumer.committed(tp) for tp in self._tps))
        return sum(o for o in offsets if o)

    def done(self, partitions: Iterable[int]) -> bool:
        """Has the group committed every raw topic's ``partitions`` to their end?"""
        return self._loop.run_until_complete(self._done(set(partitions)))

    async def _done(self, partitions: set[int]) -> bool:
        await self._count()  # started
        consumer = self._consumer
        assert consumer is not None
        tps = [tp for tp in self._tps if tp.partition in partitions]
        ends = await consumer.end_offsets(tps)
        offsets = await asyncio.gather(*(consumer.committed(tp) for tp in tps))
        return all((o or 0) >= ends[tp] for tp, o in zip(tps, offsets, strict=True))

    def close(self) -> None:
        if self._consumer is not None:
            self._loop.run_until_complete(self._consumer.stop())
        self._loop.close()


def restored_keys(log: str) -> int:
    """Keys a worker's log says it restored from the state topic, over all assignments."""
    total = 0
    for line in log.splitlines():
        if ": restored " in line:
            total += int(line.split(": restored ", 1)[1].split()[0])
    return total


def produce_events(kafka: KafkaTestEnv, events: Iterable[AnyEvent], *, route: bool = True) -> int:
    """:func:`send_events` for sync tests: its own event loop."""
    return asyncio.run(send_events(kafka, events, route=route))


async def send_events(
    kafka: KafkaTestEnv, events: Iterable[AnyEvent], *, route: bool = True
) -> int:
    """Produce ``events`` (ticks skipped: they have no topic) to their raw topics, with
    the copies for the cluster key unless ``route`` is false (events already routed)."""
    producer = EventProducer(kafka.kwargs, kafka.layout)
    await producer.start()
    try:
        chosen = (e for e in events if not isinstance(e, Tick))
        return await producer.send_many(chosen, route=route)
    finally:
        await producer.stop()


class ChunkedSource:
    """A recorded stream as a connector's :class:`connectors.source.Source`: ``chunks``
    batches, a pause of ``pause_s`` before each one after the first (the slowness being
    simulated, not synchronisation); each batch's progress is the newest event time it
    delivers, as a catching-up connector's is. ``held``: the batch at that index waits
    until the event is set, so a test can publish a second stage after acting on the first."""

    key: bytes | None = None

    def __init__(
        self,
        events: Sequence[AnyEvent],
        chunks: int,
        *,
        pause_s: float = 0.0,
        name: str = "rec",
        held: tuple[int, threading.Event] | None = None,
    ) -> None:
        size = -(-len(events) // chunks)
        self.name = name
        self.pause_s = pause_s
        self.held = held
        self.bursts = [events[i : i + size] for i in range(0, len(events), size)]
        self.sent = 0

    async def next_batch(self) -> Batch | None:
        if self.sent == len(self.bursts):
            return None
        if self.sent and self.pause_s:
            await asyncio.sleep(self.pause_s)
        if self.held is not None and self.sent == self.held[0]:
            await asyncio.to_thread(self.held[1].wait)
        burst = self.bursts[self.sent]
        self.sent += 1
        return Batch(events=list(burst), records=len(burst), progress=max(e.time for e in burst))

    def commit(self, batch: Batch) -> None:
        """Nothing to save."""

    async def close(self) -> None:
        """Nothing to close."""


async def publish(kafka: KafkaTestEnv, source: ChunkedSource, options: PublishOptions) -> Publisher:
    """Run the real publish loop over ``source`` to its end: records signed with the
    source's progress, announcements, heartbeats, and the final ``end``."""
    producer = EventProducer(kafka.kwargs, kafka.layout)
    await producer.start()
    try:
        publisher = Publisher(source, producer, options=options)
        result = await publisher.run(asyncio.Event())
        assert result.ended
        assert result.drained
        return publisher
    finally:
        await producer.stop()


def produce_signed(
    kafka: KafkaTestEnv,
    events: Sequence[AnyEvent],
    chunks: int = 60,
    *,
    held: tuple[int, threading.Event] | None = None,
) -> int:
    """:func:`produce_events` as a connector publishes: through the publish loop, in
    ``chunks`` batches signed with the source's progress, ended with ``end``; returns the
    records on the raw topics (copies, announcements and heartbeats included: a group
    that has read everything has committed that many). ``held``: as :class:`ChunkedSource`."""
    options = PublishOptions(chunk=1, idle_is_caught_up=False)
    asyncio.run(publish(kafka, ChunkedSource(events, chunks, held=held), options))
    return asyncio.run(raw_records(kafka))


async def raw_records(kafka: KafkaTestEnv) -> int:
    """The records on every raw topic (the sum of their end offsets)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        return sum((await consumer.end_offsets(raw_partitions(kafka))).values())
    finally:
        await consumer.stop()


def reference(events: Iterable[AnyEvent], *, route: bool = True) -> dict[str, Incident]:
    """The final revision of every incident an uninterrupted run reaches, with every
    window closed (live workers tick with the wall clock, far past the events).
    ``route``: as :func:`produce_events` was told."""
    correlator = Correlator(config())
    router = Router()
    last: dict[str, Incident] = {}
    for event in events:
        if isinstance(event, Tick):
            continue
        for copy in router.route(event) if route else (event,):  # as the producer routes it
            for inc in correlator.ingest(copy):
                last[inc.id] = inc
    for inc in [*correlator.flush(), *correlator.advance(time.time() + 365 * 86400)]:
        last[inc.id] = inc
    return last


class TopicReader:
    """Reads a topic from the beginning, incrementally, without a consumer group."""

    def __init__(self, kafka: KafkaTestEnv, topic: str, fetch_max_wait_ms: int = 500) -> None:
        self.kafka = kafka
        self.topic = topic
        self.fetch_max_wait_ms = fetch_max_wait_ms
        """How long the broker may hold a fetch (aiokafka's default, 500 ms; Tansu always
        waits it out): the reader fetches only while :meth:`poll` runs, so a smaller one
        sees new records sooner."""
        self.records: list[Any] = []
        self._loop = asyncio.new_event_loop()
        self._consumer: AIOKafkaConsumer | None = None

    def _run(self, coro: Any) -> Any:
        return self._loop.run_until_complete(coro)

    def poll(self) -> list[Any]:
        """Fetch what arrived since the last call (at most ~0.2 s of waiting)."""
        if self._consumer is None:
            self._consumer = self._run(self._start())
        batches = self._run(self._consumer.getmany(timeout_ms=200))
        new = [r for batch in batches.values() for r in batch]
        self.records += new
        return new

    async def _start(self) -> AIOKafkaConsumer:
        # aiokafka clients must be created inside a running loop.
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.kafka.bootstrap, fetch_max_wait_ms=self.fetch_max_wait_ms
        )
        await consumer.start()
        await consumer.topics()
        parts = consumer.partitions_for_topic(self.topic) or set()
        tps = [TopicPartition(self.topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        return consumer

    def incidents(self) -> list[Incident]:
        return [decode_incident(r.value) for r in self.records if r.value is not None]

    def dead_letters(self) -> list[DeadLetter]:
        return [decode_dead_letter(r.value) for r in self.records]

    def close(self) -> None:
        if self._consumer is not None:
            self._run(self._consumer.stop())
        self._loop.close()


def final(incidents: Iterable[Incident]) -> dict[str, Incident]:
    last: dict[str, Incident] = {}
    for inc in incidents:
        if inc.id not in last or inc.revision >= last[inc.id].revision:
            last[inc.id] = inc
    return last


def ending_days_ago(events: list[AnyEvent], days: float = 3.0) -> list[AnyEvent]:
    """The same events moved in time (every timestamp, nested ones too) to end ``days``
    ago: every window (24 h at most) has then closed by the live workers' clock, as it
    has in :func:`reference`, whatever day the test runs."""
    last = max(e.time for e in events)
    delta = datetime.now(tz=UTC) - timedelta(days=days) - last
    return [retime(e, lambda moment: moment + delta) for e in events]


def generated(events: int, nodes: int) -> list[AnyEvent]:
    """A bench stream of ``events`` over ``nodes`` nodes (one cluster, one hour), moved
    to end days ago (:func:`ending_days_ago`)."""
    spec = StreamSpec(events=events, nodes=nodes, clusters=1, hours=1)
    return ending_days_ago(list(generate_events(spec)))


def settled(reader: TopicReader, expected: dict[str, Incident]) -> bool:
    """Every expected incident has reached its final revision on the topic."""
    reader.poll()
    got = final(reader.incidents())
    return all(i in got and encode(got[i]) == encode(inc) for i, inc in expected.items())


def await_settled(reader: TopicReader, expected: dict[str, Incident], timeout: float) -> None:
    """Wait for :func:`settled`; on timeout, say what is missing or different."""
    try:
        wait_until(lambda: settled(reader, expected), timeout=timeout, what="all incidents")
    except AssertionError:
        got = final(reader.incidents())
        missing = [i for i in expected if i not in got]
        differ = [i for i in expected if i in got and encode(got[i]) != encode(expected[i])]
        extra = [i for i in got if i not in expected]
        detail = ""
        if differ:
            first = differ[0]
            detail = f"\n got {encode(got[first])!r}\nwant {encode(expected[first])!r}"
        raise AssertionError(
            f"{len(missing)} missing, {len(differ)} differ, {len(extra)} extra "
            f"of {len(expected)}{detail}"
        ) from None


def records(events: Sequence[AnyEvent], start: int = 0) -> list[RawRecord]:
    """The events as raw records of partition 0 of their raw topics (the default layout),
    offsets (and tokens) from ``start``: a pipeline's input without a broker."""
    layout = topic_layout()
    return [
        RawRecord(
            topic=layout.raw_topic(event),
            partition=0,
            offset=i,
            key=correlation_key(event).encode(),
            value=encode(event),
            token=i,
        )
        for i, event in enumerate(events, start=start)
    ]
