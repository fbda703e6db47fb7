"""``gputriage connect kmsg``: one kernel-log reader per GPU node, publishing XIDs to Kafka.

The click definition lives in :mod:`gputriage.cli.connect`. The source is ``/dev/kmsg``,
the journal (``--journal``) or a followed log file (``--log-file``), all under the one
publish loop (:class:`connectors.publish.Publisher`): the state file is saved only after
Kafka acknowledged, so a crash re-sends a batch (same ids) and loses nothing.

Traps: while Kafka is down the source is no longer read once the buffer is full (the
kernel's ring keeps records meanwhile; an overflow shows as ``skipped``); the drain on
stop is bounded even with ``--once`` (an unbounded one never exited, not even on Ctrl-C),
and a reader that could not deliver everything exits 1; dead letters from this source are
not Kafka records (``partition`` -1, ``offset`` the kmsg sequence number). Metrics and the
dead-letter fields: docs/connectors.md, design notes: connectors/xid/run.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TextIO
from zoneinfo import ZoneInfo

from prometheus_client import CollectorRegistry, Counter

from connectors.delivery import DeliveryMetrics
from connectors.kafka.producer import KafkaTarget
from connectors.prometheus import serve_metrics
from connectors.publish import Enrich, PublishOptions, PublishResult
from connectors.run import Served, run_source
from connectors.settings import required
from connectors.signals import stop_on_signals
from connectors.source import Batch
from connectors.xid.journal import JournalReader
from connectors.xid.kmsg import KmsgReader, ReadStats, read_boot_id, read_boot_time
from connectors.xid.settings import KmsgSettings
from connectors.xid.textlog import TextLogReader
from schemas.codec import AnyEvent
from schemas.events import XidEvent
from schemas.keys import key_of
from schemas.topics import TopicLayout

log = logging.getLogger("gputriage.kmsg")

ONCE_DRAIN_TIMEOUT_SECONDS = 60.0
"""How long ``--once`` waits for what it read to be acknowledged once the source is read."""
BATCH = 1000
"""Records read per batch at most."""
PUBLISH = PublishOptions(capacity=50)
"""The buffer (in batches of up to :data:`BATCH` records), retry backoff and drain timeout."""


class KmsgMetrics:
    """The reader's counters, on their own registry, labelled by source (kmsg, journal, file)."""

    def __init__(self, source: str = "kmsg", registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        specs = {
            "records": ("gputriage_kmsg_records", "Kernel log records read."),
            "xids": ("gputriage_kmsg_xids", "XID/SXid events published."),
            "bad": ("gputriage_kmsg_bad_lines", "Lines sent to the dead-letter topic."),
            "skipped": (
                "gputriage_kmsg_skipped_records",
                "Records lost to the ring buffer before they were read (sequence gaps).",
            ),
            "overwritten": (
                "gputriage_kmsg_overwritten",
                "Reads that failed with EPIPE: the ring buffer overwrote unread records.",
            ),
            "replayed": (
                "gputriage_kmsg_replayed_records",
                "Records already handled before a restart, skipped.",
            ),
            "reboots": ("gputriage_kmsg_reboots", "Reboots detected (a new boot id)."),
        }
        self.counters = {
            key: Counter(name, doc, ["source"], registry=r).labels(source=source)
            for key, (name, doc) in specs.items()
        }
        self.delivery = DeliveryMetrics(r)
        """The ``gputriage_connector_*`` delivery metrics every connector exports."""
        self._seen = ReadStats()

    def update(self, stats: ReadStats) -> None:
        """Advance every counter to ``stats`` (counters only go up)."""
        for name, counter in self.counters.items():
            delta = getattr(stats, name) - getattr(self._seen, name)
            if delta > 0:
                counter.inc(delta)
        self._seen = ReadStats(**vars(stats))

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Expose ``/metrics`` on ``port`` (0 picks a free one); the port."""
        return serve_metrics(self.registry, port, addr, self.delivery.health)


Reader = KmsgReader | TextLogReader | JournalReader
"""The three kernel-log readers. Two are polled (``poll``: synchronous, never blocks, an idle
read is an idle batch); the journal is awaited (``next_batch(wait_seconds)``: it waits itself, and
returns None once ``journalctl`` has exited). They share ``stats``, ``context``, ``name`` and
``commit``; :class:`XidSource` is the one place that knows the difference."""


class XidSource:
    """A kernel-log :data:`Reader` as a :class:`connectors.source.Source`: the only adapter.

    Adds what the publish loop needs and the readers do not know: the idle wait
    of a polled reader (on ``stop``, so a stop is not delayed by the poll interval), the
    end of ``--once`` (a polled reader is idle: everything there was is read),
    the dead letters' key, and this family's ``gputriage_kmsg_*`` counters,
    advanced to the reader's ``stats`` after every read (only reads move them;
    a commit saves the state file and counts nothing).

    Trap: the idle wait is ``wait_for(stop.wait())``, which on Python 3.11 can
    swallow a cancel; the publish loop checks ``stop`` itself for that reason.
    """

    def __init__(
        self,
        reader: Reader,
        *,
        settings: KmsgSettings,
        stop: asyncio.Event,
        metrics: KmsgMetrics,
        batch: int = BATCH,
    ) -> None:
        self.reader = reader
        self.name = reader.name
        self.key: bytes | None = key_of(reader.context.cluster, reader.context.node).encode()
        self.family = "journal" if isinstance(reader, JournalReader) else "kmsg"
        """Its heartbeats' ``Tick.source``: a kernel-log file is the kernel log too. No
        ``read_at``: a reader blocked on a quiet node is reading (its heartbeat's time)."""
        self._poll_seconds, self._limit = settings.poll_interval_seconds, batch
        self._once = settings.once
        self._stop = stop
        self._metrics = metrics

    async def next_batch(self) -> Batch | None:
        reader = self.reader
        if isinstance(reader, JournalReader):
            batch = await reader.next_batch(self._poll_seconds)
        else:
            batch = reader.poll(self._limit)
            if batch.idle and self._once:
                batch = None
            elif batch.idle:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stop.wait(), self._poll_seconds)
        self._metrics.update(reader.stats)
        return batch

    def commit(self, batch: Batch) -> None:
        self.reader.commit(batch)

    async def close(self) -> None:
        if isinstance(self.reader, JournalReader):
            await self.reader.close()
        else:
            self.reader.close()


def _on_xids(enrich: Enrich[XidEvent] | None) -> Enrich[AnyEvent] | None:
    """``enrich`` applied to XIDs only (the reboot events pass as they are)."""
    if enrich is None:
        return None
    complete = enrich

    def on_xids(event: AnyEvent) -> AnyEvent:
        return complete(event) if isinstance(event, XidEvent) else event

    return on_xids


def open_reader(settings: KmsgSettings) -> Reader:
    """The source the settings name; a missing device or boot id file is an ``OSError`` here."""
    node, cluster = required(settings.node, "node"), required(settings.cluster, "cluster")
    state_path = settings.state_path
    boot_time = settings.boot_datetime()
    if settings.log_file:
        text = TextLogReader(
            path=settings.log_file,
            node=node,
            cluster=cluster,
            state_path=state_path,
            boot_time=boot_time,
            tz=None if settings.tz == "UTC" else ZoneInfo(settings.tz),
            year=settings.year,
        )
        if text.state_error is not None:
            log.warning("%s; starting at the beginning of %s", text.state_error, settings.log_file)
        return text
    boot_id = read_boot_id(settings.boot_id_file)
    if settings.journal:
        journal = JournalReader(
            node=node,
            cluster=cluster,
            state_path=state_path,
            boot_id=boot_id,
            executable=settings.journalctl,
            directory=settings.journal_dir,
            follow=not settings.once,
        )
        if journal.state_error is not None:
            log.warning("%s; starting at the current boot", journal.state_error)
        return journal
    source = KmsgReader(
        node=node,
        cluster=cluster,
        state_path=state_path,
        boot_id=boot_id,
        boot_time=boot_time or read_boot_time(settings.proc_stat),
        device=settings.device,
    )
    if source.state_error is not None:
        log.warning("%s; starting from the oldest record", source.state_error)
    if source.previous_boot:
        log.warning("reboot detected: boot id %s (was %s)", boot_id, source.previous_boot)
    return source


async def run_kmsg(
    settings: KmsgSettings,
    client_kwargs: Mapping[str, Any],
    layout: TopicLayout,
    stderr: TextIO,
    *,
    stop: asyncio.Event | None = None,
    metrics: KmsgMetrics | None = None,
    enrich: Enrich[XidEvent] | None = None,
    publish: PublishOptions = PUBLISH,
    once_drain_timeout_seconds: float = ONCE_DRAIN_TIMEOUT_SECONDS,
) -> int:
    """Run the reader until ``stop`` is set, or once with ``settings.once``; 1 if the source died.

    Without a ``stop`` event of the caller's, SIGINT and SIGTERM stop it (after
    what is buffered is acknowledged and committed, for up to
    ``publish.drain_timeout_seconds``, or ``once_drain_timeout_seconds`` with ``once``;
    1 if something was left). ``enrich`` completes each XID as it is read (the
    caller's: the xid family knows nothing of NVML); if it raises, so does this.
    """
    own_stop = stop is None
    stop = stop or asyncio.Event()
    reader = open_reader(settings)  # a missing device or boot id fails here, first
    metrics = metrics or KmsgMetrics(settings.kind)
    if own_stop and not settings.once:
        stop_on_signals(stop)
    source = XidSource(reader, settings=settings, stop=stop, metrics=metrics)
    publish = replace(publish, heartbeat_seconds=settings.heartbeat_seconds)
    if settings.once:  # a backfill wants everything delivered: a longer, still finite, drain
        publish = replace(publish, drain_timeout_seconds=once_drain_timeout_seconds)

    async def started() -> None:
        if isinstance(reader, JournalReader):
            await reader.start()
        log.info("reading %s for node %s", reader.name, settings.node)

    def summary(_: PublishResult) -> str:
        stats = reader.stats
        return (
            f"{reader.name}: {stats.records} records, {stats.xids} XIDs, {stats.bad} bad, "
            f"{stats.skipped} lost to the ring buffer, {stats.replayed} already handled"
        )

    def verdict(result: PublishResult) -> int:
        if reader.stats.skipped:
            skipped = reader.stats.skipped
            log.warning("%d kmsg records were overwritten before they were read", skipped)
        if (
            result.ended
            and isinstance(reader, JournalReader)
            and (reader.exit_status or not settings.once)
        ):
            # Following never ends by itself: journalctl died. Exit so the pod restarts.
            log.error("journalctl exited with status %s", reader.exit_status)
            return 1
        return 0

    return await run_source(
        source,
        KafkaTarget(client_kwargs, layout),
        name="connect kmsg",
        served=Served(metrics=metrics.delivery, port=settings.metrics_port),
        err=stderr,
        publish=publish,
        stop=stop,
        enrich=_on_xids(enrich),
        summary=summary,
        verdict=verdict,
        started=started,
    )
