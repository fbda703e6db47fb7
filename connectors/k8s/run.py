"""``gputriage connect k8s``: pods, nodes and Events from the Kubernetes API into the raw topics.

The watchers (pods, nodes, Events, the DRA kinds joined by one
:class:`~connectors.k8s.dra.DraJoin`) are one :class:`WatchSource`, published by the one
loop (:mod:`connectors.publish`): one chunk in flight, so order per key is watch order.
Nothing is committed (the checkpoint is the resourceVersion, in memory); a restart relists,
and unchanged objects give the same events, which the core skips.

Traps: the Events watcher starts once pods and nodes have synced, so the GPU filter knows
them first, and pods once claims and templates have (or a minute has passed); with
``--leader-election`` a leader that loses the Lease exits 1 and restarts as a candidate
(simpler than resuming in-process). Stopping: the watchers stop, the buffer drains for
``drain_timeout_seconds``, the producer flushes, the Lease is released.
In full: docs/connectors.md, design notes: connectors/k8s/run.py.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import replace
from typing import IO, Any, Final

from kubernetes_asyncio.client import ApiClient

from connectors.delivery import DELIVERY_BACKOFF
from connectors.k8s.dra import DraJoin
from connectors.k8s.gpu_filter import GpuFilter
from connectors.k8s.leader import LeadershipLost, LeaseElector, LeaseOptions
from connectors.k8s.metrics import ConnectorMetrics
from connectors.k8s.settings import K8sSettings, parse_monitor_selectors
from connectors.k8s.slim import SlimConfig
from connectors.k8s.watch import (
    DRA_RESOURCES,
    Derive,
    Derived,
    Emitted,
    Rejected,
    Resource,
    ResourceWatcher,
    Synced,
    WatchOptions,
    dead_letter,
)
from connectors.kafka.config import KafkaUnreachable
from connectors.kafka.producer import EventProducer, start_producer
from connectors.kube import kube_client
from connectors.publish import PublishOptions
from connectors.run import Served, run_source
from connectors.settings import required
from connectors.signals import stop_on_signals
from connectors.source import Batch
from schemas.topics import TopicLayout

log = logging.getLogger("gputriage.connect.k8s")

PUBLISH: Final = PublishOptions(chunk=500, backoff=DELIVERY_BACKOFF, drain_timeout_seconds=10.0)
"""The publish loop's chunk, delivery backoff and drain bound (capacity and heartbeat: the
settings')."""
DRA_CLAIM_SOURCES: Final[tuple[Resource, ...]] = ("resourceclaims", "resourceclaimtemplates")
DRA_SYNC_WAIT_SECONDS: Final = 60.0
"""The longest the pod (slice, node) watch waits for the claims and templates (rules,
slices) to be listed: an API server that fails them must not stop the rest."""
WATCH: Final = WatchOptions()
"""How to list and watch beyond the settings (which give the namespace and silence timeout)."""


def default_identity() -> str:
    """This replica's name for the Lease: the pod name ($HOSTNAME) plus the pid."""
    return f"{os.environ.get('HOSTNAME') or socket.gethostname()}_{os.getpid()}"


class WatchSource:
    """The watchers (pods, nodes, Events, DRA kinds) as one :class:`connectors.source.Source`.

    Each watcher runs in its own task (supervised: a crash of one is raised by
    the next :meth:`next_batch`), handing items over through a one-slot queue,
    so when the publish loop stops asking (its buffer is full) the watchers stop
    reading their streams: backpressure reaches the API server's TCP window.
    One watch item is one batch; ``progress`` is the event's time (a watch is
    not in event-time order: a hint, not a bound). Rejected items become dead
    letters with their resource and observed time (:func:`dead_letter`).

    Trap: the Events watcher starts only once pods and nodes are listed, so the
    GPU filter knows them before the Events about them arrive.
    """

    name = "kubernetes"
    key: bytes | None = None
    idle_seconds = 1.0
    """With every watch synced, an idle batch after this long without an item."""

    def __init__(
        self, watchers: Mapping[Resource, ResourceWatcher], synced: Mapping[Resource, asyncio.Event]
    ) -> None:
        self.watchers = watchers
        self.synced = synced
        self._handoff: asyncio.Queue[Emitted | Derived | Rejected] = asyncio.Queue(1)
        self._task: asyncio.Task[None] | None = None

    async def next_batch(self) -> Batch | None:
        """The next watch item as a batch; None if every watch ended (they do not, normally)."""
        if self._task is None:
            self._task = asyncio.create_task(self._watch_all(), name="k8s-watch")
        watching = self._task
        get = asyncio.ensure_future(self._handoff.get())
        try:
            while True:
                await asyncio.wait(
                    {get, watching}, timeout=self.idle_seconds, return_when=asyncio.FIRST_COMPLETED
                )
                if get.done() or watching.done():
                    break
                if all(event.is_set() for event in self.synced.values()):
                    # Listed and watching, nothing new: caught up (the publish loop's
                    # progress becomes the clock). Never while a (re)list is under way.
                    return Batch()
        finally:
            if not get.done():
                get.cancel()
        if get.done() and not get.cancelled():
            item = get.result()
            if isinstance(item, Emitted):
                events = [item.event, *item.also]
                return Batch(events=events, records=1, progress=item.event.time)
            if isinstance(item, Derived):
                return Batch(events=list(item.events), records=1, progress=item.events[0].time)
            return Batch(dead=[dead_letter(item)], records=1)
        watching.result()  # a crashed watcher ends the connector, loudly
        return None

    def commit(self, batch: Batch) -> None:
        """Nothing to save: a restarted connector relists (see ``connectors/k8s/watch.py``)."""

    async def close(self) -> None:
        """Stop the watchers."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _pump(self, resource: Resource) -> None:
        stream = self.watchers[resource].items()
        try:
            async for item in stream:
                if isinstance(item, Synced):
                    self.synced[resource].set()
                    continue
                await self._handoff.put(item)
        finally:
            await stream.aclose()

    async def _pump_after(self, first: tuple[Resource, ...], resource: Resource) -> None:
        """Pump ``resource`` once ``first`` are listed, or :data:`DRA_SYNC_WAIT_SECONDS` on.

        Trap: not ``asyncio.wait_for``, which on Python 3.11 can swallow a cancellation
        that comes as the wait ends, and the pump would then outlive its TaskGroup.
        """
        waits = asyncio.gather(*(self.synced[r].wait() for r in first if r in self.synced))
        try:
            await asyncio.wait({waits}, timeout=DRA_SYNC_WAIT_SECONDS)
        finally:
            waits.cancel()
        await self._pump(resource)

    async def _watch_all(self) -> None:
        async with asyncio.TaskGroup() as group:
            for resource in ("devicetaintrules", "resourceclaimtemplates", "resourceclaims"):
                if resource in self.watchers:
                    group.create_task(self._pump(resource))
            if "resourceslices" in self.watchers:
                # After the rules: a slice's first record carries their taints.
                group.create_task(self._pump_after(("devicetaintrules",), "resourceslices"))
            # After the slices: a DRA node that no label marks is a GPU node by its GPU
            # slice (the GPU filter and the router), so its first record is kept and copied.
            group.create_task(self._pump_after(("resourceslices",), "nodes"))
            # After the claims and templates: a pod holding GPUs by claim only is a GPU
            # pod once they are known.
            group.create_task(self._pump_after(DRA_CLAIM_SOURCES, "pods"))
            # Events after pods and nodes: the GPU filter must know them first.
            await self.synced["pods"].wait()
            await self.synced["nodes"].wait()
            group.create_task(self._pump("events"))


class Connector:
    """The watchers, as one :class:`WatchSource`; :meth:`run` publishes it through the
    connector runner (:func:`connectors.run.run_source`) until stopped."""

    def __init__(
        self,
        api: ApiClient,
        settings: K8sSettings,
        metrics: ConnectorMetrics | None = None,
        *,
        derive: Derive | None = None,
        watch: WatchOptions = WATCH,
        publish: PublishOptions = PUBLISH,
    ) -> None:
        """``derive``: more records from each Event, past the GPU filter (the CLI passes the
        autoscaler family's :func:`connectors.autoscaler.kube_events.derive`); ``watch`` and
        ``publish``: the tuning the settings do not hold (the publish loop's capacity and
        heartbeat are the settings', laid over)."""
        self.api = api
        self.settings = settings
        cluster = required(settings.cluster, "cluster")
        self.metrics = metrics or ConnectorMetrics()
        slim = SlimConfig(
            gpu_resources=settings.resources,
            gpu_prefixes=settings.resource_prefixes,
            gpu_drivers=settings.gpu_drivers,
            gpu_classes=settings.gpu_device_classes,
            monitors=parse_monitor_selectors(settings.monitor_selectors),
        )
        self.gpu_filter = None if settings.keep_all else GpuFilter(slim)
        keep = self.gpu_filter.keep if self.gpu_filter is not None else None
        place = self.gpu_filter.place if self.gpu_filter is not None else None
        self.join = DraJoin(slim)
        """One join for every watcher: pods, claims, templates, slices and rules meet here."""
        self.watchers: dict[Resource, ResourceWatcher] = {
            resource: ResourceWatcher(
                api,
                resource,
                settings,
                options=watch,
                config=slim,
                keep=keep,
                metrics=self.metrics,
                derive=derive if resource == "events" else None,
                join=self.join,
                place=place if resource == "events" else None,
            )
            for resource in ("pods", "nodes", "events", *DRA_RESOURCES)
        }
        self.synced: dict[Resource, asyncio.Event] = {r: asyncio.Event() for r in self.watchers}
        self.source = WatchSource(self.watchers, self.synced)
        self.publish = replace(
            publish, capacity=settings.buffer_size, heartbeat_seconds=settings.heartbeat_seconds
        )
        # The watch source has no key; the cluster makes its id distinct (two clusters'
        # connectors must not merge into one progress).
        self.source_id = f"{self.source.name}@{cluster}"

    async def run(
        self, producer: EventProducer, err: IO[str], stop: asyncio.Event | None = None
    ) -> int:
        """Watch and deliver until ``stop`` is set (or cancelled), then drain; the exit status.

        ``producer`` is the caller's, started: a standby replica is connected before it leads.
        """
        return await run_source(
            self.source,
            producer,
            name="connect k8s",
            served=Served(metrics=self.metrics.delivery, port=None),
            err=err,
            publish=self.publish,
            stop=stop or asyncio.Event(),
            source_id=self.source_id,
        )


async def run_connect(
    settings: K8sSettings,
    kafka_kwargs: Mapping[str, Any],
    layout: TopicLayout,
    *,
    lease: LeaseOptions | None = None,
    derive: Derive | None = None,
    watch: WatchOptions = WATCH,
    metrics_addr: str = "0.0.0.0",
    stop: asyncio.Event | None = None,
    metrics: ConnectorMetrics | None = None,
    err: IO[str] | None = None,
) -> int:
    """Create topics, connect, serve metrics, (elect,) watch and deliver; the exit status.

    ``lease``: the leader election's (its namespace and identity resolved by the caller);
    None runs without election (one replica only!). ``metrics``: the process's metrics
    and health (default: new ones), given by a caller that reads them while it runs.
    """

    metrics = metrics or ConnectorMetrics()
    if settings.metrics_port is not None:
        port = metrics.serve(settings.metrics_port, metrics_addr)
        log.info("metrics on http://%s:%d/metrics", metrics_addr, port)
    stop = stop or asyncio.Event()
    stop_on_signals(stop)
    api = await kube_client(
        in_cluster=settings.in_cluster, kubeconfig=settings.kubeconfig, context=settings.context
    )
    try:
        producer = await start_producer(kafka_kwargs, layout)
    except KafkaUnreachable:
        await api.close()
        raise
    # Connected (the producer fetched metadata): a standby replica, which never runs the
    # publish loop while another holds the Lease, must not read as "not connected".
    metrics.delivery.kafka.set(True)
    try:
        connector = Connector(api, settings, metrics, derive=derive, watch=watch)
        status = 0

        async def lead() -> None:
            nonlocal status
            status = await connector.run(producer, err or sys.stderr, stop)

        if lease is None:  # the only replica: always "the leader"
            metrics.leader.set(1)
            try:
                await lead()
            finally:
                metrics.leader.set(0)
            return status
        elector = LeaseElector(api, lease, metrics=metrics)
        candidate = asyncio.ensure_future(elector.run(lead))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({candidate, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if not candidate.done():  # stopped while still a candidate, or stopping the leader
            if elector.is_leader:
                await candidate  # the connector drains and returns, the lease is released
            else:
                candidate.cancel()
                await asyncio.gather(candidate, return_exceptions=True)
        stopping.cancel()
        try:
            candidate.result()
        except LeadershipLost as exc:
            log.error("lost the leader lease (%s); exiting so a candidate can take over", exc)
            return 1
        except asyncio.CancelledError:
            pass
        return status
    finally:
        await producer.stop()
        await api.close()


__all__ = [
    "Connector",
    "default_identity",
    "run_connect",
]
