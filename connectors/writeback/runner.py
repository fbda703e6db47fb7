"""The write-back loop: read the compacted incident topic to its end, converge, then follow it.

Why no consumer group: what Kubernetes should show is a function of the latest revision
of every incident, which the compacted topic holds, so each start (and each new leader)
reads it from the beginning, converges once, then follows live (docs/writeback.md).

Traps: a revision at or below the one seen is a duplicate and writes nothing; a tombstone
deletes the incident's pod Events and marks; only the Lease holder reads and writes
(:meth:`connectors.k8s.leader.LeaseElector.run`); marks are reconciled from a fresh node
list when the marking incidents change, every ``resync_seconds`` and, after a failed
write, sooner with backoff; a mark or Event no incident in the topic explains (aged out of
a time-retained topic) is kept: absent is not resolved.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any, TextIO

from kubernetes_asyncio.client import ApiClient

from connectors.backoff import Backoff
from connectors.health import Health
from connectors.k8s.leader import LeadershipLost, LeaseElector, LeaseOptions
from connectors.kafka.config import start_client
from connectors.kafka.reading import assign_from_beginning
from connectors.kube import kube_client
from connectors.prometheus import serve_metrics
from connectors.signals import stop_on_signals
from connectors.writeback.api import ApiError, Gate, Kube
from connectors.writeback.events import EventWriter
from connectors.writeback.marks import NodeMarker
from connectors.writeback.metrics import WritebackMetrics
from connectors.writeback.plan import (
    INCIDENT_ANNOTATION,
    condition_reason,
    desired_marks,
    marking,
    node_event,
    pod_events,
)
from connectors.writeback.settings import WritebackSettings
from schemas.codec import RecordError, decode_incident
from schemas.incidents import Incident

log = logging.getLogger("gputriage.writeback")


class Writeback:
    """The state (latest revision of each incident) and what each revision writes."""

    def __init__(
        self,
        settings: WritebackSettings,
        events: EventWriter,
        marker: NodeMarker,
        metrics: WritebackMetrics,
    ) -> None:
        self.settings = settings
        self.events = events
        self.marker = marker
        self.metrics = metrics
        self.latest: dict[str, Incident] = {}
        self.written: dict[str, float] = {}
        """Incident id -> loop time its Events were last written live."""
        self.gone: dict[str, str] = {}
        """Tombstoned incident id -> its node: a mark there is explained (and cleared)."""
        self.failing = False
        """The last reconciliation had a write fail (or meet a conflict): retry soon."""
        self._failed = asyncio.Event()
        self._marking = asyncio.Lock()
        self.backoff = Backoff(initial_seconds=1.0, max_seconds=settings.resync_seconds)

    def wanted(self, incident: Incident) -> bool:
        return not self.settings.cluster or incident.cluster == self.settings.cluster

    def remember(self, incident: Incident) -> Incident | None:
        """Keep ``incident`` if newer; answers the previous revision (None: first), or raises
        :class:`_Stale` for a duplicate."""
        previous = self.latest.get(incident.id)
        if previous is not None and previous.revision >= incident.revision:
            raise _Stale
        self.latest[incident.id] = incident
        self.metrics.incidents.inc()
        return previous

    def desired(self) -> dict[str, list[Incident]]:
        return desired_marks(self.latest.values(), self.settings.hardware_types)

    def explained(self) -> set[str]:
        """Nodes where an incident we know (any status, or tombstoned) could have put our
        mark: only there is a mark without an open incident cleared."""
        kinds = set(self.settings.hardware_types)
        known = {i.node for i in self.latest.values() if i.type in kinds and i.node}
        return known | set(self.gone.values())

    # -- start: converge ------------------------------------------------------------------
    async def converge(self) -> None:
        """Make Kubernetes match :attr:`latest` once: Events of open incidents, leftovers of
        resolved (or tombstoned) ones, and the node marks. What an unknown incident left
        is kept: absent from the topic is not resolved."""
        for incident in sorted(self.latest.values(), key=lambda i: (i.first_seen, i.id)):
            if incident.status != "resolved":
                await self._open(incident)
        try:
            leftovers = await self.events.leftovers()
        except ApiError as exc:
            log.warning("%s", exc)
            leftovers = []
        for event in leftovers:
            meta = event.get("metadata") or {}
            owner_id = str((meta.get("annotations") or {}).get(INCIDENT_ANNOTATION))
            owner = self.latest.get(owner_id)
            if owner is None and owner_id not in self.gone:
                continue  # unknown: aged out of the topic, not resolved; kept
            if owner is not None and owner.status != "resolved":
                continue
            kind = (event.get("regarding") or {}).get("kind")
            if kind == "Pod" and not self.settings.keep_events:
                await self.events.delete_named(str(meta.get("namespace")), str(meta.get("name")))
            elif kind == "Node" and owner is not None:
                await self._node_event(owner)
        await self._reconcile()

    # -- live ---------------------------------------------------------------------------
    async def handle(self, incident: Incident) -> None:
        """One revision read live."""
        if not self.wanted(incident):
            return
        try:
            previous = self.remember(incident)
        except _Stale:
            return
        if incident.status == "resolved":
            self.written.pop(incident.id, None)
            await self._resolved(incident, previous)
        elif self._events_due(previous, incident):
            await self._open(incident)
            self.written[incident.id] = asyncio.get_running_loop().time()
        if self._marks_changed(previous, incident):
            await self._reconcile()

    async def forget(self, incident_id: str) -> None:
        """A tombstone: the incident is deleted (its pod Events and its marks go too)."""
        previous = self.latest.pop(incident_id, None)
        self.written.pop(incident_id, None)
        if previous is None:
            return
        if previous.node:
            self.gone[incident_id] = previous.node
        if self.settings.pod_events and not self.settings.keep_events:
            for write in pod_events(previous):
                await self.events.delete(write)
        if marking(previous, self.settings.hardware_types):
            await self._reconcile()

    def _events_due(self, previous: Incident | None, incident: Incident) -> bool:
        """Whether a live open revision writes its Events: new words or pods always; the
        same ones (a repeat XID, a new last_seen) only every ``event_refresh_seconds``, as
        each bump costs a pod read, a create, an Event read and a patch per pod."""
        if previous is None or previous.status == "resolved":
            return True
        if _words(previous) != _words(incident):
            return True
        last = self.written.get(incident.id)
        now = asyncio.get_running_loop().time()
        return last is None or now - last >= self.settings.event_refresh_seconds

    def _marks_changed(self, previous: Incident | None, incident: Incident) -> bool:
        kinds = self.settings.hardware_types
        was = previous is not None and marking(previous, kinds)
        now = marking(incident, kinds)
        if was != now:
            return True
        return now and (
            previous is None or condition_reason([previous]) != condition_reason([incident])
        )

    async def _open(self, incident: Incident) -> None:
        if self.settings.pod_events:
            for write in pod_events(incident):
                await self.events.apply(write)
        await self._node_event(incident)

    async def _node_event(self, incident: Incident) -> None:
        if self.settings.node_events:
            write = node_event(incident)
            if write is not None:
                await self.events.apply(write)

    async def _resolved(self, incident: Incident, previous: Incident | None) -> None:
        if self.settings.pod_events and not self.settings.keep_events:
            writes = {w.name: w for w in pod_events(incident)}
            if previous is not None:
                writes.update({w.name: w for w in pod_events(previous)})
            for write in writes.values():
                await self.events.delete(write)
        await self._node_event(incident)

    async def _reconcile(self) -> None:
        if not self.settings.mark_nodes:
            return
        async with self._marking:  # the resync and a live revision never interleave
            try:
                explained = self.explained()
                await self.marker.reconcile(self.desired(), explained.__contains__)
            except ApiError as exc:
                log.warning("node marks not reconciled: %s", exc)
                failed = True
            else:
                failed = self.marker.failures > 0
        self.failing = failed
        self.metrics.resyncs.labels("failed" if failed else "ok").inc()
        if failed:
            self._failed.set()

    async def keep_marks(self) -> None:
        """Reconcile the marks every ``resync_seconds``, and after a failed pass again with
        backoff (on the loop's clock) until one succeeds; runs until cancelled."""
        attempt = 0
        while True:
            if self.failing:
                await asyncio.sleep(self.backoff.delay(attempt))
                attempt += 1
            else:
                attempt = 0
                self._failed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.settings.resync_seconds):
                        await self._failed.wait()  # a live pass failed: back off, then retry
                if self._failed.is_set():
                    continue
            await self._reconcile()


def _words(incident: Incident) -> set[tuple[str, str, str]]:
    """What an incident's Events say, and on which objects (not its revision)."""
    writes = [*pod_events(incident), node_event(incident)]
    return {(w.name, w.reason, w.note) for w in writes if w is not None}


class _Stale(Exception):
    """A revision at or below the one already handled."""


CAUGHT_UP: Any = (None, None)
"""What :func:`read_topic` yields once: every record present at the start has been read."""


async def read_topic(
    client_kwargs: Mapping[str, Any], topic: str
) -> AsyncIterator[tuple[bytes | None, bytes | None]]:
    """Every record of ``topic`` from the beginning as (key, value), :data:`CAUGHT_UP` once
    the records there at the start were all yielded, then the new ones as they come."""
    from aiokafka import AIOKafkaConsumer  # noqa: PLC0415 - heavy import

    consumer = AIOKafkaConsumer(
        **client_kwargs, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await start_client(consumer, client_kwargs)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        while not partitions:
            await consumer.topics()  # refresh the metadata: the processor may create it later
            partitions = consumer.partitions_for_topic(topic) or set()
            if not partitions:
                await asyncio.sleep(1.0)
        ends = await assign_from_beginning(consumer, topic)
        behind = set(ends)
        caught_up = not behind
        if caught_up:
            yield CAUGHT_UP
        while True:
            batches = await consumer.getmany(timeout_ms=500, max_records=500)
            for records in batches.values():
                for record in records:
                    yield record.key, record.value
            if not caught_up:
                behind = {tp for tp in behind if await consumer.position(tp) < ends[tp]}
                if not behind:
                    caught_up = True
                    yield CAUGHT_UP
    finally:
        await consumer.stop()


async def follow(writeback: Writeback, client_kwargs: Mapping[str, Any], topic: str) -> None:
    """Read to the end, converge, then handle each new revision until cancelled (and, when
    marking, keep the node marks in step meanwhile: :meth:`Writeback.keep_marks`)."""
    live = False
    resync: asyncio.Task[None] | None = None
    try:
        async for key, value in read_topic(client_kwargs, topic):
            if key is None and value is None:
                live = True
                await writeback.converge()
                marking_live = writeback.settings.mark_nodes and not writeback.settings.dry_run
                if marking_live and resync is None:  # a dry run prints each write once
                    resync = asyncio.create_task(writeback.keep_marks())
                continue
            if value is None:
                if key is not None:
                    await _tombstone(writeback, key, live)
                continue
            try:
                incident = decode_incident(value)
            except RecordError as exc:
                log.warning("undecodable incident record skipped: %s", exc)
                continue
            if live:
                await writeback.handle(incident)
            elif writeback.wanted(incident):
                with contextlib.suppress(_Stale):
                    writeback.remember(incident)
    finally:
        if resync is not None:
            resync.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await resync


async def _tombstone(writeback: Writeback, key: bytes, live: bool) -> None:
    incident_id = key.decode(errors="replace")
    if live:
        await writeback.forget(incident_id)
    else:
        previous = writeback.latest.pop(incident_id, None)
        if previous is not None and previous.node:
            writeback.gone[incident_id] = previous.node


def build(
    settings: WritebackSettings,
    api: ApiClient,
    *,
    identity: str,
    metrics: WritebackMetrics | None = None,
    out: TextIO | None = None,
) -> Writeback:
    """The write-back on ``api``: its gate (rate, dry run), Event writer and node marker."""
    metrics = metrics or WritebackMetrics()
    kube = Kube(api, timeout_seconds=settings.request_timeout_seconds)
    gate = Gate(
        writes_per_second=settings.writes_per_second,
        burst=settings.write_burst,
        dry_run=settings.dry_run,
        metrics=metrics,
        out=out,
    )
    events = EventWriter(kube, gate, metrics, identity=identity)
    marker = NodeMarker(kube, gate, metrics, settings)
    return Writeback(settings, events, marker, metrics)


async def serve(
    settings: WritebackSettings,
    client_kwargs: Mapping[str, Any],
    topic: str,
    *,
    identity: str,
    lease: LeaseOptions | None,
    out: TextIO | None = None,
) -> int:
    """Run until SIGINT/SIGTERM: converge, then follow the incident topic (as the Lease's
    holder when ``lease`` is given; a follower waits for it). Answers the exit status."""
    metrics = WritebackMetrics()
    health = Health()  # /healthz: the loop answers; a standby replica is ready too
    health.watch_loop()
    if settings.metrics_port is not None:
        serve_metrics(metrics.registry, settings.metrics_port, settings.metrics_addr, health)
    api = await kube_client(
        in_cluster=settings.in_cluster, kubeconfig=settings.kubeconfig, context=settings.context
    )
    stop = asyncio.Event()
    stop_on_signals(stop, give_up_after_seconds=30.0)
    async with api:
        writeback = build(settings, api, identity=identity, metrics=metrics, out=out)

        async def work() -> None:
            metrics.leader.set(1)
            try:
                await follow(writeback, client_kwargs, topic)
            finally:
                metrics.leader.set(0)

        running: asyncio.Future[None]
        if lease is None:
            running = asyncio.ensure_future(work())
        else:
            running = asyncio.ensure_future(LeaseElector(api, lease).run(work))
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({running, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            running.cancel()
            stopping.cancel()
            results = await asyncio.gather(running, stopping, return_exceptions=True)
        failure = results[0]
        if isinstance(failure, LeadershipLost):
            log.error("lost the lease: %s; exiting", failure)
            return 1
        if isinstance(failure, BaseException) and not isinstance(failure, asyncio.CancelledError):
            raise failure
    return 0
