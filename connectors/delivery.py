"""A bounded buffer between a source and the producer: backpressure, not loss, when Kafka is down.

One delivery task sends batches in order and awaits every acknowledgement; when the broker
is unreachable the *same* batch is retried with backoff, forever. The buffer fills, ``put``
blocks and the source stops reading, so memory stays bounded by ``capacity + batch_size``.
aiokafka cannot do this itself: on expiry it fails the records and forgets them.

Traps: order per key holds because one batch is in flight and a failed one is re-sent
whole (at-least-once); a full buffer is logged when it starts and ends, not per item;
cancelling :meth:`run` loses the buffer (:meth:`close` delivers it); only a transient
failure is retried (aiokafka's ``retriable`` flag is wrong both ways), anything else is
raised; a failure of ``after`` (the checkpoint) is fatal. In full: docs/connectors.md,
design notes: connectors/delivery.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

from aiokafka.errors import KafkaError, KafkaTimeoutError
from prometheus_client import CollectorRegistry, Counter, Gauge

from connectors.backoff import Backoff
from connectors.health import Health

log = logging.getLogger("gputriage.connect")

T = TypeVar("T")

DELIVERY_BACKOFF = Backoff(initial_seconds=0.2, max_seconds=10.0)
"""The retry delays of every connector's delivery (publish loop, k8s ``--delivery-backoff``
default): short enough that a broker back from a restart is used within seconds, capped so
that a long outage costs one attempt every few seconds. Frozen, so one instance is shared."""


def transient(exc: BaseException) -> bool:
    """Whether a failed send may succeed if the same batch is sent again later.

    aiokafka's errors carry ``retriable``; ``KafkaTimeoutError`` is the exception
    (see the module's traps). Socket-level failures (``OSError``, which covers
    ``ConnectionError`` and ``TimeoutError``) are the broker being unreachable.
    Everything else is a fault of the batch or of the code, not of the broker.
    """
    if isinstance(exc, KafkaTimeoutError):
        return True
    if isinstance(exc, KafkaError):
        return bool(exc.retriable)
    return isinstance(exc, (OSError, TimeoutError, ConnectionError))


class DeliveryMetrics:
    """The delivery metrics every connector exports (names shared with the dashboards).

    ============================================  =========================================
    ``gputriage_connector_events_out_total``      events acknowledged by the broker, by source
    ``gputriage_connector_buffered_events``       events waiting between source and producer
    ``gputriage_connector_backpressure_seconds``  time the source waited on a full buffer
    ``gputriage_connector_delivery_failures``     failed produce attempts (each retried)
    ============================================  =========================================

    One process runs one connector, so only ``events_out`` carries a label (the
    event's source schema family, :data:`schemas.topics.SCHEMA_SOURCES`): the
    others are per process, and the ``pod``/``job`` labels Prometheus adds tell
    the connectors apart.
    """

    def __init__(self, registry: CollectorRegistry, health: Health | None = None) -> None:
        self.registry = r = registry
        self.health = health or Health()
        """The process's ``/healthz`` and ``/readyz`` (served with the registry): the
        delivery keeps its ``kafka`` condition there."""
        self.kafka = self.health.condition("kafka", detail="not connected yet")
        """Holds while the last produce was acknowledged: set once the producer has
        connected (the publish loop's start; ``connect k8s`` as soon as its producer has,
        for a standby replica never runs the loop), then by the delivery on each failure
        and recovery. Readiness only (:mod:`connectors.health`)."""
        self.events_out = Counter(
            "gputriage_connector_events_out",
            "Events acknowledged by the broker, by source.",
            ["source"],
            registry=r,
        )
        self.buffered = Gauge(
            "gputriage_connector_buffered_events",
            "Items waiting in the bounded buffer between the source and the producer.",
            registry=r,
        )
        self.backpressure = Counter(
            "gputriage_connector_backpressure_seconds",
            "Seconds the source waited because the buffer was full (broker slow or down).",
            registry=r,
        )
        self.delivery_failures = Counter(
            "gputriage_connector_delivery_failures",
            "Produce attempts that failed; the batch is kept and retried.",
            registry=r,
        )


def _now() -> float:
    """The running loop's clock, which the backoff's sleeps follow too: a test's fake clock
    (looptime) moves outages, backpressure and retries alike."""
    return asyncio.get_running_loop().time()


def _one(item: object) -> int:
    return 1


class BoundedDelivery(Generic[T]):
    """An ``asyncio.Queue`` of ``capacity`` items, drained in batches by :meth:`run`."""

    def __init__(
        self,
        send: Callable[[Sequence[T]], Awaitable[None]],
        *,
        capacity: int = 10_000,
        batch_size: int = 500,
        backoff: Backoff | None = None,
        metrics: DeliveryMetrics | None = None,
        size: Callable[[T], int] = _one,
        after: Callable[[Sequence[T]], None] | None = None,
    ) -> None:
        if capacity < 1 or batch_size < 1:
            raise ValueError("capacity and batch_size must be at least 1")
        self._send = send
        self._size = size
        self._after = after
        self._weight = 0
        self._queue: asyncio.Queue[T] = asyncio.Queue(capacity)
        self.capacity = capacity
        self.batch_size = batch_size
        self.backoff = backoff or DELIVERY_BACKOFF
        self.metrics = metrics
        self.delivered = 0
        """Items (by ``size``: events) acknowledged so far."""
        self.failing_since: float | None = None
        """The loop's time (``loop.time()``) of the first failure of the current outage; None
        when healthy."""
        self._full_since: float | None = None
        self._closed = False

    def __len__(self) -> int:
        return self._queue.qsize()

    @property
    def closed(self) -> bool:
        """:meth:`close` was called: no more :meth:`put`, what is buffered is being drained."""
        return self._closed

    async def put(self, item: T) -> None:
        """Add an item; waits (backpressure) while the buffer is full."""
        if self._closed:
            raise RuntimeError("delivery is closed")
        queue = self._queue
        if not queue.full():
            queue.put_nowait(item)
            self._weight += self._size(item)
        else:
            started = _now()
            if self._full_since is None:
                self._full_since = started
                log.warning(
                    "delivery buffer full (%d items): the broker is slow or down; "
                    "the source waits, its checkpoint is kept",
                    self.capacity,
                )
            try:
                await queue.put(item)
                self._weight += self._size(item)
            finally:
                if self.metrics is not None:
                    self.metrics.backpressure.inc(_now() - started)
        self._gauge()

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.buffered.set(self._weight)

    async def _take(self) -> list[T]:
        batch = [await self._queue.get()]
        while len(batch) < self.batch_size and not self._queue.empty():
            batch.append(self._queue.get_nowait())
        self._weight -= sum(self._size(item) for item in batch)  # in flight, not buffered
        return batch

    async def run(self) -> None:
        """Deliver batches until cancelled (or until closed and empty).

        Raises what ``after`` raised, or a send failure that is not :func:`transient`.
        """
        while not (self._closed and self._queue.empty()):
            batch = await self._take()
            await self._deliver(batch)
            try:
                if self._after is not None:
                    self._after(batch)
            finally:
                for _ in batch:
                    self._queue.task_done()
            self._gauge()
            if self._full_since is not None and not self._queue.full():
                log.warning(
                    "delivery buffer has room again after %.1f s of backpressure",
                    _now() - self._full_since,
                )
                self._full_since = None

    async def _deliver(self, batch: list[T]) -> None:
        attempt = 0
        while True:
            try:
                await self._send(batch)
            except Exception as exc:
                if not transient(exc):
                    log.error(
                        "delivery failed with %r, which no retry can fix; stopping with %d "
                        "items undelivered (their checkpoints are not saved)",
                        exc,
                        len(batch) + self._queue.qsize(),
                    )
                    raise
                now = _now()
                if self.metrics is not None:
                    self.metrics.kafka.set(False, f"produce failed, retrying: {exc!r}")
                if self.failing_since is None:
                    self.failing_since = now
                    log.warning(
                        "delivery failed (%r); holding %d buffered items and retrying",
                        exc,
                        len(batch) + self._queue.qsize(),
                    )
                if self.metrics is not None:
                    self.metrics.delivery_failures.inc()
                delay = self.backoff.delay(attempt)
                attempt += 1
                await asyncio.sleep(delay)
                continue
            if self.failing_since is not None:
                log.warning("delivery recovered after %.1f s", _now() - self.failing_since)
                self.failing_since = None
            if self.metrics is not None:
                self.metrics.kafka.set(True)
            self.delivered += sum(self._size(item) for item in batch)
            return

    async def close(self, timeout: float | None) -> bool:
        """Stop accepting items and wait up to ``timeout`` s (None: no limit) for the buffer
        to drain. Only returns True while :meth:`run` is running; a caller that cannot be sure
        of that waits on both (see :class:`connectors.publish.Publisher`)."""
        self._closed = True
        try:
            await asyncio.wait_for(self._queue.join(), timeout)
        except TimeoutError:
            log.warning("%d buffered items not delivered at shutdown", self._queue.qsize())
            return False
        return True
