"""Faults of the publish loop (connectors/publish.py, connectors/delivery.py) found in review.

Each test pins one fault down: a cancel during the drain must be raised, not
turned into a normal result; ``--once`` must not drain forever with Kafka down;
a send that no retry can fix must end the loop instead of wedging it; enrichment
runs once, when a batch is read; the nvml connector keeps the delivery metrics.

Where the fault is the loop's own logic (what it does while a send is held, or
fails in a given way) the producer is a small fake (:class:`FakeProducer`) that
never reaches a broker; where Kafka is involved the broker is the real one.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    NotLeaderForPartitionError,
    ProducerClosed,
    RequestTimedOutError,
)
from prometheus_client import CollectorRegistry

import connectors.publish
import connectors.xid.run
from connectors.backoff import Backoff
from connectors.delivery import DELIVERY_BACKOFF, BoundedDelivery, DeliveryMetrics, transient
from connectors.k8s.run import PUBLISH as K8S_PUBLISH
from connectors.kafka.producer import EventProducer
from connectors.publish import Publisher, PublishOptions
from connectors.source import Batch
from connectors.xid.run import PUBLISH as KMSG_PUBLISH
from connectors.xid.run import run_kmsg
from connectors.xid.settings import KmsgSettings
from gputriage.demo.broker import EmbeddedBroker
from schemas.codec import AnyEvent, decode_event
from schemas.dead_letters import DeadLetter
from schemas.events import GpuBindingEvent, KubeEvent, ObjectRef, Tick, XidEvent
from schemas.topics import SCHEMA_SOURCES, TopicSettings, topic_layout
from tests.kafka_helpers import KafkaTestEnv, consume_until, eventually

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
FAST = Backoff(initial_seconds=0.001, max_seconds=0.005)
"""Retries without noticeable waits (the delay is a wait, not a synchronisation)."""


class Position(msgspec.Struct, frozen=True):
    batch: int


def event(n: int) -> KubeEvent:
    return KubeEvent(
        id=f"fault:{n}",
        cluster="c1",
        time=T0 + timedelta(seconds=n),
        node="gpu-0",
        reason="Test",
        message=f"event {n}",
        type="Normal",
        involved=ObjectRef(kind="Node", name="gpu-0"),
        source="test",
    )


class Batches:
    """A :class:`connectors.source.Source` of given batches; then the end, or (``quiet``) a
    wait for more that only a cancel ends, as a live source's idle wait does.

    Records its commits, and whether its read was cancelled: the publish loop cancels
    the read only when it winds down, so that is how a test knows the drain is next.
    """

    name = "faults"
    key: bytes | None = b"c1/gpu-0"

    def __init__(self, batches: Iterable[list[AnyEvent]], *, quiet: bool = False) -> None:
        self.batches = [
            Batch(events=events, state=Position(n), records=len(events))
            for n, events in enumerate(batches)
        ]
        self.quiet = quiet
        self.read = 0
        self.committed: list[int] = []
        self.read_cancelled = False

    async def next_batch(self) -> Batch | None:
        if self.read < len(self.batches):
            self.read += 1
            await asyncio.sleep(0)  # a real source awaits its input
            return self.batches[self.read - 1]
        if not self.quiet:
            return None
        try:
            await asyncio.Event().wait()  # nothing more, ever
        except asyncio.CancelledError:
            self.read_cancelled = True
            raise
        raise AssertionError("unreachable")

    def commit(self, batch: Batch) -> None:
        assert isinstance(batch.state, Position)
        self.committed.append(batch.state.batch)

    async def close(self) -> None:
        pass


class FakeProducer(EventProducer):
    """Stands in for the broker where the fault is the loop's logic, not Kafka's.

    ``failures`` are raised by the first sends, one each; while ``gate`` is not set
    every send waits on it (a broker that does not answer yet). ``sent_events`` is
    what was "acknowledged".
    """

    def __init__(
        self, *, failures: Iterable[Exception] = (), gate: asyncio.Event | None = None
    ) -> None:
        super().__init__({}, topic_layout(TopicSettings(prefix="faults")))
        self.failures = list(failures)
        self.gate = gate
        self.calls = 0
        self.waiting = False
        self.sent_events: list[AnyEvent] = []

    async def send_many(self, events: Iterable[AnyEvent], **options: Any) -> int:
        events = list(events)
        self.calls += 1
        if self.gate is not None:
            self.waiting = True
            try:
                await self.gate.wait()
            finally:
                self.waiting = False
        if self.failures:
            raise self.failures.pop(0)
        for e in events:
            self.route(e)  # a tick fails here, as on the real producer
        self.sent_events += events
        self.sent += len(events)
        return len(events)

    async def send_dead_letters(self, letters: Iterable[DeadLetter]) -> int:
        raise AssertionError("these tests send no dead letters")


def failures(metrics: DeliveryMetrics) -> float:
    value = metrics.registry.get_sample_value("gputriage_connector_delivery_failures_total")
    return value or 0.0


# --- 1. A cancel during the drain -----------------------------------------------------------


@pytest.mark.asyncio
async def test_a_cancel_during_the_drain_finishes_the_drain_then_is_raised() -> None:
    """The Lease elector cancels the connector on lost leadership: it must see "cancelled"
    (not a normal result it would take for "finished"), and only after the bounded drain."""
    gate = asyncio.Event()
    producer = FakeProducer(gate=gate)
    source = Batches([[event(n)] for n in range(3)], quiet=True)
    publisher = Publisher(
        source, producer, options=PublishOptions(capacity=10, chunk=1, drain_timeout_seconds=30)
    )
    stop = asyncio.Event()
    running = asyncio.create_task(publisher.run(stop))
    await eventually(lambda: source.read == 3 and producer.waiting, what="a send held")
    stop.set()
    await eventually(lambda: source.read_cancelled, what="the loop winding down")
    running.cancel()  # while it drains (or is about to)
    gate.set()  # the broker answers: the drain can complete
    await asyncio.wait({running}, timeout=20)
    assert running.done(), "the drain is bounded and the broker answers: run() ends"
    assert running.cancelled(), "the cancel is raised, not swallowed into a PublishResult"
    assert source.committed == [0, 1, 2], "the drain ran to its end before the cancel"


@pytest.mark.asyncio
async def test_a_cancel_while_running_still_drains_and_is_raised() -> None:
    """The other moment a cancel can come: before any stop, while a send is held."""
    gate = asyncio.Event()
    producer = FakeProducer(gate=gate)
    source = Batches([[event(n)] for n in range(2)], quiet=True)
    publisher = Publisher(source, producer, options=PublishOptions(capacity=10, chunk=1))
    running = asyncio.create_task(publisher.run(asyncio.Event()))
    await eventually(lambda: source.read == 2 and producer.waiting, what="a send held")
    running.cancel()
    await eventually(lambda: source.read_cancelled, what="the loop winding down")
    running.cancel()  # a second cancel while draining is absorbed into the first
    gate.set()
    await asyncio.wait({running}, timeout=20)
    assert running.done()
    assert running.cancelled()
    assert source.committed == [0, 1]


# --- 2. --once has a finite drain -------------------------------------------------------------


def xid_line(n: int) -> str:
    """A syslog kern.log line carrying XID 79."""
    return (
        f"Dec  1 01:02:{n % 60:02d} gpu-node-01 kernel: [{1000 + n}.000000] NVRM: Xid "
        f"(PCI:0000:9b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    )


@pytest.mark.asyncio
async def test_once_with_kafka_down_exits_1_after_its_drain_bound(tmp_path: Path) -> None:
    """A backfill whose broker goes away must exit 1 (and be re-run), not wait forever."""
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    log.write_text("".join(xid_line(n) for n in range(3)))
    async with EmbeddedBroker() as broker:  # our own: the outage must not hit other tests
        env = KafkaTestEnv(broker=broker, prefix="once-down")
        stopped: list[bool] = []

        def outage_on_first_xid(xid: XidEvent) -> XidEvent:
            # The producer is started and the topics exist; the broker stops answering now.
            if not stopped:
                os.kill(broker.pid or 0, signal.SIGSTOP)
                stopped.append(True)
            return xid

        settings = KmsgSettings(
            node="gpu-node-01",
            cluster="c",
            log_file=str(log),
            state_path=str(state),
            year=2026,
            once=True,
            metrics_port=None,
        )
        kwargs = {**env.kwargs, "request_timeout_ms": 500, "retry_backoff_ms": 20}
        running = asyncio.create_task(
            run_kmsg(
                settings,
                kwargs,
                env.layout,
                io.StringIO(),
                enrich=outage_on_first_xid,
                publish=PublishOptions(capacity=50, backoff=FAST),
                once_drain_timeout_seconds=1.0,
            )
        )
        try:
            # Not wait_for: its cancel on timeout is what this must not need to end.
            await asyncio.wait({running}, timeout=20)
            ended_by_itself = running.done()
        finally:
            os.kill(broker.pid or 0, signal.SIGCONT)
            if not running.done():
                running.cancel()
            await asyncio.wait({running})
    assert stopped, "the outage happened"
    assert ended_by_itself, "--once ends by itself within its drain bound, Kafka down or not"
    assert running.result() == 1, "something stayed undelivered: exit 1"
    assert not state.exists(), "nothing was acknowledged, so no checkpoint was saved"


# --- 3. Only transient send failures are retried ---------------------------------------------


@pytest.mark.parametrize(
    ("error", "retried"),
    [
        (KafkaConnectionError(), True),
        (RequestTimedOutError(), True),
        (NotLeaderForPartitionError(), True),
        (KafkaTimeoutError(), True),  # says retriable=False, yet it is what an outage looks like
        (ConnectionResetError(), True),
        (TimeoutError(), True),
        (OSError("network unreachable"), True),
        (TypeError("Tick records have no raw topic"), False),
        (msgspec.EncodeError("cannot encode"), False),
        (ValueError("bad value"), False),
        (MessageSizeTooLargeError(), False),
        (ProducerClosed(), False),
    ],
)
def test_what_counts_as_transient(error: Exception, retried: bool) -> None:
    assert transient(error) is retried


@pytest.mark.asyncio
async def test_a_send_no_retry_can_fix_ends_the_loop(kafka: KafkaTestEnv) -> None:
    """A tick has no raw topic: routing it raises TypeError on every try. Retrying it as if
    Kafka were down would wedge the connector behind it, silently; it must end run()."""
    await kafka.acreate_topics()
    tick = Tick(id="tick:1", cluster="c1", time=T0, node="gpu-0")
    metrics = DeliveryMetrics(CollectorRegistry())
    async with EventProducer(kafka.kwargs, kafka.layout, linger_ms=0) as producer:
        source = Batches([[event(0)], [tick], [event(2)]], quiet=True)
        publisher = Publisher(
            source,
            producer,
            options=PublishOptions(capacity=5, chunk=1, backoff=FAST),
            metrics=metrics,
        )
        with pytest.raises(TypeError, match="no raw topic"):
            await asyncio.wait_for(publisher.run(asyncio.Event()), 10)
    assert source.committed == [0], "the tick's batch and those after it are not committed"
    assert failures(metrics) == 0, "not counted as a retried delivery failure"


@pytest.mark.asyncio
async def test_transient_failures_are_still_retried_until_delivered() -> None:
    """The other side of the line: what an outage raises keeps the batch and retries it."""
    producer = FakeProducer(
        failures=[KafkaTimeoutError(), KafkaConnectionError(), ConnectionRefusedError()]
    )
    metrics = DeliveryMetrics(CollectorRegistry())
    source = Batches([[event(0)], [event(1)]])
    publisher = Publisher(
        source, producer, options=PublishOptions(chunk=1, backoff=FAST), metrics=metrics
    )
    result = await asyncio.wait_for(publisher.run(asyncio.Event()), 10)
    assert (result.ended, result.drained, result.delivered) == (True, True, 2)
    assert source.committed == [0, 1]
    assert failures(metrics) == 3


# --- 4. Enrichment runs once, when read ------------------------------------------------------


@pytest.mark.asyncio
async def test_enrich_runs_once_per_event_even_when_the_send_is_retried() -> None:
    calls: dict[str, int] = {}

    def enrich(e: AnyEvent) -> AnyEvent:
        calls[e.id] = calls.get(e.id, 0) + 1
        return msgspec.structs.replace(e, message="enriched") if isinstance(e, KubeEvent) else e

    producer = FakeProducer(failures=[KafkaConnectionError(), KafkaConnectionError()])
    source = Batches([[event(0), event(1)]])
    publisher = Publisher(source, producer, options=PublishOptions(backoff=FAST), enrich=enrich)
    result = await asyncio.wait_for(publisher.run(asyncio.Event()), 10)
    assert result.drained
    assert producer.calls == 3, "sent three times (two failures)"
    assert calls == {"fault:0": 1, "fault:1": 1}, "enriched once each, not once per attempt"
    assert [e.message for e in producer.sent_events if isinstance(e, KubeEvent)] == [
        "enriched",
        "enriched",
    ]


@pytest.mark.asyncio
async def test_an_enrich_that_raises_ends_the_loop_and_is_not_retried() -> None:
    def enrich(e: AnyEvent) -> AnyEvent:
        raise LookupError(f"no GPU for {e.id}")

    producer = FakeProducer()
    metrics = DeliveryMetrics(CollectorRegistry())
    source = Batches([[event(0)]], quiet=True)
    publisher = Publisher(
        source, producer, options=PublishOptions(backoff=FAST), metrics=metrics, enrich=enrich
    )
    with pytest.raises(LookupError, match="no GPU"):
        await asyncio.wait_for(publisher.run(asyncio.Event()), 10)
    assert producer.calls == 0, "the failure is the source's: nothing was sent"
    assert failures(metrics) == 0, "and it is not a delivery failure"
    assert source.committed == []


# --- 5, 6. One definition each ---------------------------------------------------------------


def test_enrich_is_defined_once() -> None:
    assert vars(connectors.xid.run)["Enrich"] is connectors.publish.Enrich, (
        "imported, not redefined"
    )


def test_one_delivery_backoff_default_for_every_connector() -> None:
    async def send(items: object) -> None:
        pass

    assert PublishOptions().backoff is DELIVERY_BACKOFF
    assert BoundedDelivery(send).backoff is DELIVERY_BACKOFF
    assert K8S_PUBLISH.backoff is DELIVERY_BACKOFF
    assert KMSG_PUBLISH.backoff is DELIVERY_BACKOFF


def test_a_drain_without_a_bound_is_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        PublishOptions(drain_timeout_seconds=float("inf"))


# --- 7. nvml keeps the delivery metrics ------------------------------------------------------


def test_connect_nvml_keeps_the_delivery_metrics(kafka: KafkaTestEnv) -> None:
    # Imported here: connectors.kafka.producer's KafkaTarget is being moved (settings work);
    # the rest of this module must not depend on where it lands.
    from connectors.kafka.producer import KafkaTarget  # noqa: PLC0415
    from connectors.nvml.run import connect_nvml  # noqa: PLC0415
    from connectors.nvml.settings import NvmlSettings  # noqa: PLC0415
    from tests.connectors.nvml.test_nvml import FakeNvml  # noqa: PLC0415

    command = NvmlSettings(cluster="c", node="n1", once=True, bindings=True, print_only=False)
    metrics = DeliveryMetrics(CollectorRegistry())
    target = KafkaTarget(client_kwargs=kafka.kwargs, layout=kafka.layout)
    err = io.StringIO()
    status = connect_nvml(
        command, lambda: target, io.BytesIO(), err, lib=FakeNvml(), metrics=metrics
    )
    assert status == 0, err.getvalue()
    family = SCHEMA_SOURCES[GpuBindingEvent]
    out = metrics.registry.get_sample_value(
        "gputriage_connector_events_out_total", {"source": family}
    )
    assert out is not None
    assert out > 0

    def bindings(records: list[Any]) -> list[Any]:
        # The publish loop's heartbeats (tick.v1, see connectors.publish) share the topic.
        return [r for r in records if not isinstance(decode_event(r.value), Tick)]

    records = asyncio.run(
        consume_until(
            kafka.bootstrap,
            [kafka.layout.raw[family].name],
            lambda rs: len(bindings(rs)) >= int(out),
        )
    )
    assert all(isinstance(decode_event(r.value), GpuBindingEvent) for r in bindings(records))
