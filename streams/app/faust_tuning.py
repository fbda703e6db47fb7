"""The faust-streaming tuning for ``--engine faust`` (the default engine is plain aiokafka).

Out of the box a faust agent read ~4k of our records/s where aiokafka reads >300k/s; where
the time goes is in ``bench/faust/FINDINGS.md``. Installed here: :class:`NoopMonitor` (no
per-message counters), :func:`quiet_spinner` (faust's spinner sets the root logger to
DEBUG), :func:`install_batch_drain` (one race per fetched batch, not four tasks per record)
and :func:`install_fetch_max_wait` (faust hard-codes a 1.5 s fetch wait).

Trap: every patch of a faust private names the version it was written against
(:data:`FAUST_VERSION`); on another version it is not installed: bench/faust runs faust as
shipped, ``gputriage process --engine faust`` refuses to start (the batch drain also keeps
faust from committing past skipped records). Re-check, then bump the constant.
docs/operations.md, design notes: the faust tuning.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, Final, cast

import faust
from faust.sensors import Monitor
from faust.transport.consumer import Consumer
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.types import TP, EventT, Message, StreamT
from mode import Service, ServiceT

log = logging.getLogger("gputriage.processor")

FAUST_VERSION: Final = "0.15.3"
"""The faust-streaming release whose private code the patches below replace."""

_INSTALLED: dict[str, Any] = {}


def faust_version_ok(what: str) -> bool:
    """True on :data:`FAUST_VERSION`; otherwise log that ``what`` is not installed."""
    if faust.__version__ == FAUST_VERSION:
        return True
    log.warning(
        "faust-streaming %s is not %s: %s not installed (slower, still correct); "
        "re-check streams/app/faust_tuning.py against this version",
        faust.__version__,
        FAUST_VERSION,
        what,
    )
    return False


def install(fetch_max_wait_ms: int | None) -> list[str]:
    """Install every private patch this faust version allows; returns their names."""
    done = []
    if install_batch_drain():
        done.append("batch drain")
    if fetch_max_wait_ms is not None and install_fetch_max_wait(fetch_max_wait_ms):
        done.append(f"fetch_max_wait_ms={fetch_max_wait_ms}")
    return done


# -- the batch drain ---------------------------------------------------------------------


async def _batch_drain_messages(self: Consumer, fetcher: ServiceT) -> None:  # pragma: no cover
    """faust 0.15.3's ``Consumer._drain_messages`` with one ``wait_first`` per batch.

    The loop is faust's, line for line (read offsets, commit every N acks, a yield
    every 100 records), except two things. Gaps are not recorded (see the comment in
    ``deliver``: the faust engine depends on it, and refuses to run without this drain).
    And the hand-over: faust races *each*
    ``callback(message)`` against ``suspend_flow`` (four tasks per record); here
    the delivery of the whole ``getmany`` batch is one coroutine raced against
    it once. A rebalance that sets ``suspend_flow`` mid-batch still stops the
    delivery at the record it has reached: that record and the rest of the
    batch are not marked read (faust's loop marks a record read even when the
    race dropped it; the fetcher seeks to the committed offsets after a
    rebalance anyway).
    """
    callback = self.callback
    getmany = self.getmany
    consumer_should_stop = cast(Service, self)._stopped.is_set
    fetcher_should_stop = cast(Service, fetcher)._stopped.is_set
    get_read_offset = self._read_offset.__getitem__
    set_read_offset = self._read_offset.__setitem__
    commit_every = self._commit_every
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
                # faust records a jump in offsets as a "gap" (compaction, transaction
                # markers) and its commit then walks through it as if acked. gputriage's
                # raw topics have no such gaps: a jump is records faust skipped, which the
                # engine reads again (faust_engine.FaustWorker._reread); committing through
                # them would lose them at the next crash. So no gap is recorded here.
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


def install_batch_drain() -> bool:
    """Replace ``Consumer._drain_messages`` (idempotent); False when the version differs.

    Why: see :func:`_batch_drain_messages`. Private API of faust-streaming
    :data:`FAUST_VERSION`.
    """
    if "drain" in _INSTALLED:
        return True
    if not faust_version_ok("the batch drain (one wait_first per fetched batch)"):
        return False
    _INSTALLED["drain"] = Consumer._drain_messages
    Consumer._drain_messages = _batch_drain_messages  # type: ignore[method-assign]
    return True


# -- fetch_max_wait_ms -------------------------------------------------------------------


def install_fetch_max_wait(ms: int) -> bool:
    """Override the ``fetch_max_wait_ms=1500`` faust's aiokafka driver hard-codes.

    Why: a broker holds a Fetch for up to ``fetch_max_wait_ms`` while it has less
    than ``fetch_min_bytes`` (1 byte) to return; Tansu holds it that long even with
    records waiting. So at a steady low rate every batch waits up to 1.5 s: most
    of the processor's latency. faust has no setting for it, so this wraps the
    private ``AIOKafkaConsumerThread._create_worker_consumer`` and sets the
    created consumer's ``_fetch_max_wait_ms`` (an aiokafka private, read by its
    fetcher on every request). Private API of faust-streaming :data:`FAUST_VERSION`.
    The last call's ``ms`` wins.
    """
    _INSTALLED["wait_ms"] = int(ms)
    if "create" in _INSTALLED:
        return True
    if not faust_version_ok(f"fetch_max_wait_ms={ms} (faust hard-codes 1500)"):
        return False
    orig = AIOKafkaConsumerThread._create_worker_consumer
    _INSTALLED["create"] = orig

    def create(self: AIOKafkaConsumerThread, transport: Any) -> Any:
        consumer = orig(self, transport)
        if hasattr(consumer, "_fetch_max_wait_ms"):
            consumer._fetch_max_wait_ms = int(_INSTALLED["wait_ms"])
        else:  # pragma: no cover - another aiokafka
            log.warning("aiokafka consumer has no _fetch_max_wait_ms: left at 1500 ms")
        return consumer

    AIOKafkaConsumerThread._create_worker_consumer = create  # type: ignore[method-assign]
    return True


# -- the worker's spinner ----------------------------------------------------------------


def quiet_spinner(worker: faust.Worker) -> None:
    """Drop the worker's terminal spinner before it starts (call before ``execute_*``).

    Why: at a log level of WARN or above, ``faust.Worker`` keeps a spinner and
    ``_setup_spinner_handler`` sets the *root* logger to DEBUG so the spinner sees
    every record; every ``log.debug`` call in faust and aiokafka (one per produced
    record) then builds a ``LogRecord``. ``spinner`` is a public attribute that
    faust itself sets to None below WARN, so this is safe on any version.
    """
    worker.spinner = None


# -- the monitor ------------------------------------------------------------------------


class NoopMonitor(Monitor):
    """``conf.Monitor`` without the per-message and per-event bookkeeping.

    Why: the default ``Monitor`` sensor updates per-partition counters, deques of
    latencies and a dict per event on every record, for ``faust``'s own web
    statistics, which the processor does not serve (it has its own Prometheus
    metrics). Only public ``Sensor`` hooks are overridden.
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
        self, producer: Any, topic: str, message: Any, keysize: int, valsize: int
    ) -> Any:
        return None

    def on_send_completed(self, producer: Any, state: Any, metadata: Any) -> None:
        return None

    def on_table_set(self, table: Any, key: Any, value: Any) -> None:
        return None
