"""``gputriage connect podresources``: poll the kubelet's pod-resources API, publish GPU bindings.

Each round: ``List`` (and the allocatable set) over the kubelet's socket, resolved and
diffed into ``gpu_binding.v1`` records with ``source="pod-resources"``; then wait
``interval_seconds``. A kubelet out of reach is a value: logged, counted, shown on the
``kubelet-pod-resources`` health condition and retried after a jittered backoff; Kafka
down is the publish loop's.

Traps: no state file, on purpose (bindings are absolute state, and the first poll after a
start binds every GPU again); between polls the source says it is caught up (idle
batches), else its progress would hold back every worker's watermark.
In full: docs/connectors.md, design notes: connectors/podresources/run.py.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Final, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge

from connectors.backoff import Backoff
from connectors.delivery import DeliveryMetrics
from connectors.kafka.producer import KafkaTarget
from connectors.podresources._proto import api_pb2
from connectors.podresources.client import (
    Client,
    Filter,
    PollFailed,
    allocatable_devices,
    holdings,
)
from connectors.podresources.devices import (
    GpuMap,
    PodResourcesState,
    diff,
    snapshot,
)
from connectors.podresources.settings import PodResourcesSettings
from connectors.publish import PublishOptions
from connectors.run import Served, run_source
from connectors.settings import required
from connectors.source import Batch
from schemas.codec import encode
from schemas.keys import key_of

log = logging.getLogger("gputriage.podresources")
PROG: Final = "gputriage"
CLAIM_EVERY_SECONDS: Final = 1.0
"""How often the source, waiting for its next poll, says it is caught up."""


class Lister(Protocol):
    """What the poller needs of :class:`~connectors.podresources.client.Client`."""

    async def list(self) -> api_pb2.ListPodResourcesResponse: ...

    async def allocatable(self) -> api_pb2.AllocatableResourcesResponse | None: ...


BACKOFF: Final = Backoff(initial_seconds=1.0, max_seconds=60.0)
"""Between failed polls: a kubelet that is restarting is asked again soon, a gone one rarely."""


class PodResourcesMetrics:
    """The poller's Prometheus metrics and health condition, on their own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.polls = Counter(
            "gputriage_podresources_polls",
            "Polls of the kubelet's pod-resources API, by outcome (ok, unreachable, timeout, "
            "error, internal_error).",
            ["outcome"],
            registry=r,
        )
        self.unresolved = Gauge(
            "gputriage_podresources_unresolved_devices",
            "GPU device ids of the last poll that name no GPU this source can tell "
            "(connectors.podresources.devices: an index without NVML, GKE minors).",
            registry=r,
        )
        self.delivery = DeliveryMetrics(r)
        self.kubelet = self.delivery.health.condition(
            "kubelet-pod-resources", detail="no poll yet", affects="none"
        )
        """Holds while the last poll answered; reported, failing no probe: a kubelet that is
        restarting is not fixed by restarting us, and an unready agent on every such node
        would stall the DaemonSet's rollouts (the dcgm-exporter condition's reasoning)."""


def _now() -> datetime:
    return datetime.now(UTC)


class PodResourcesSource:
    """The poller as a :class:`connectors.source.Source`: one poll per batch (see the module)."""

    name = "pod-resources"

    def __init__(
        self,
        settings: PodResourcesSettings,
        lister: Lister,
        gpus: GpuMap,
        metrics: PodResourcesMetrics | None = None,
        *,
        backoff: Backoff = BACKOFF,
        clock: Callable[[], datetime] = _now,
        draw: Callable[[], float] = random.random,
        claim_every_seconds: float = CLAIM_EVERY_SECONDS,
    ) -> None:
        self.settings = settings
        self.cluster = required(settings.cluster, "cluster")
        self.node = required(settings.node, "node")
        self.gpu = Filter(
            resources=settings.resources, resource_prefixes=settings.resource_prefixes
        )
        self.backoff = backoff
        self.lister = lister
        self.gpus = gpus
        self.metrics = metrics or PodResourcesMetrics()
        self.clock = clock
        self.draw = draw
        self.claim_every_seconds = claim_every_seconds
        self.key: bytes | None = key_of(self.cluster, self.node).encode()
        self.state: PodResourcesState | None = None
        """The last poll diffed (not the last acknowledged: every change is sent once)."""
        self.failures = 0
        """Consecutive failed polls: the backoff's exponent."""
        self._polled = False
        self._due: float | None = None
        self._allocatable = True
        """False once the kubelet said it has no GetAllocatableResources."""
        self._read_at: datetime | None = None
        self.family = "pod-resources"
        """Its heartbeats' ``Tick.source`` (see :meth:`read_at`)."""

    def read_at(self) -> datetime | None:
        """When the kubelet last answered a whole poll (None: never yet). A failed poll is an
        idle batch, so the heartbeats' time advances while the kubelet refuses: this does not."""
        return self._read_at

    def _delay(self) -> float:
        if self.failures == 0:
            return self.settings.interval_seconds
        return self.backoff.delay(self.failures - 1, self.draw)

    async def next_batch(self) -> Batch | None:
        if self._polled:
            loop_time = asyncio.get_running_loop().time  # the sleeps' own clock (looptime in tests)
            if self._due is None:
                self._due = loop_time() + self._delay()
            wait = self._due - loop_time()
            if wait > 0:
                await asyncio.sleep(min(wait, self.claim_every_seconds))
                if self._due - loop_time() > 0:
                    return Batch()  # idle: caught up until the next poll
            self._due = None
        self._polled = True
        try:
            batch = await self.poll()
            outcome = "ok"
        except PollFailed as exc:
            outcome, batch = exc.outcome, Batch()
            log.warning(
                "pod-resources %s: poll failed (%s): %s", self.settings.socket, outcome, exc
            )
            self.metrics.kubelet.set(False, f"{outcome}: {exc}")
        except Exception:  # a bug must not end the node's only kubelet witness: log, retry
            log.exception("pod-resources %s: poll failed", self.node)
            outcome, batch = "internal_error", Batch()
            self.metrics.kubelet.set(False, "internal error (see the log)")
        self.metrics.polls.labels(outcome).inc()
        self.failures = 0 if outcome == "ok" else self.failures + 1
        return batch

    async def poll(self) -> Batch:
        """One round: ask, resolve, diff; raises :class:`PollFailed`."""
        response = await self.lister.list()
        allocatable = None
        if self._allocatable:
            allocatable = await self.lister.allocatable()
            if allocatable is None:
                self._allocatable = False
                log.info("pod-resources: the kubelet has no GetAllocatableResources: List only")
        gpu = self.gpu
        devices = allocatable_devices(allocatable.devices, gpu) if allocatable else []
        snap = snapshot(holdings(response, gpu), devices, self.gpus)
        when = self.clock()
        self._read_at = when
        result = diff(self.state, snap, cluster=self.cluster, node=self.node, time=when)
        self.state = result.state
        self.metrics.unresolved.set(result.unresolved)
        self.metrics.kubelet.set(True, f"{len(snap.gpus)} GPUs, {len(response.pod_resources)} pods")
        if not result.events:
            # Trap: a batch with a record but nothing to send or commit is dropped by the
            # publish loop, its progress with it; at an interval under CLAIM_EVERY_SECONDS no idle
            # batch would ever say "caught up", and every watermark that hears this source
            # would stay at its last change (the e2e test caught exactly that). A poll that
            # changed nothing is caught up: idle.
            return Batch()
        return Batch(events=list(result.events), records=1, progress=when)

    def commit(self, batch: Batch) -> None:
        """Nothing to save (the module: no state file)."""

    async def close(self) -> None:
        """The client belongs to whoever made it (:func:`connect_podresources`)."""


def connect_podresources(
    settings: PodResourcesSettings, target: KafkaTarget, gpus: GpuMap, err: IO[str]
) -> int:
    """Poll and publish until SIGINT/SIGTERM (0), or 1 when some events were not delivered."""
    return asyncio.run(_connect(settings, target, gpus, err))


async def _connect(
    settings: PodResourcesSettings, target: KafkaTarget, gpus: GpuMap, err: IO[str]
) -> int:
    async def started() -> None:
        every, known = settings.interval_seconds, len(gpus.by_uuid)
        print(
            f"{PROG} connect podresources: polling {settings.socket} every {every:g} s"
            f" ({known} NVML devices known)",
            file=err,
        )

    client = Client(settings.socket, timeout_seconds=settings.timeout_seconds)
    try:
        metrics = PodResourcesMetrics()
        return await run_source(
            PodResourcesSource(settings, client, gpus, metrics),
            target,
            name="connect podresources",
            served=Served(metrics=metrics.delivery, port=settings.metrics_port),
            err=err,
            publish=PublishOptions(heartbeat_seconds=settings.heartbeat_seconds),
            started=started,
        )
    finally:
        await client.close()


def print_saved_list(
    text: str,
    settings: PodResourcesSettings,
    *,
    gpus: GpuMap,
    time: datetime,
    out: IO[bytes],
    err: IO[str],
) -> int:
    """The offline form: a saved ``List`` answer (JSON) -> its bindings as JSON lines on ``out``.

    One snapshot, so every GPU it names is bound (a first poll). A file that is not a ``List``
    answer is one line on ``err`` and exit 1.
    """
    from connectors.podresources.client import parse_list_json  # noqa: PLC0415

    try:
        response = parse_list_json(text)
    except ValueError as exc:
        print(f"{PROG}: error: not a pod-resources List answer: {exc}", file=err)
        return 1
    gpu = Filter(resources=settings.resources, resource_prefixes=settings.resource_prefixes)
    snap = snapshot(holdings(response, gpu), (), gpus)
    cluster, node = required(settings.cluster, "cluster"), required(settings.node, "node")
    result = diff(None, snap, cluster=cluster, node=node, time=time)
    for event in result.events:
        out.write(encode(event) + b"\n")
    out.flush()
    if result.unresolved:
        print(
            f"{PROG} connect podresources: {result.unresolved} device id(s) name no GPU "
            "this source can tell (no binding; see connectors.podresources.devices)",
            file=err,
        )
    return 0
