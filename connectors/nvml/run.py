"""``gputriage connect nvml``: publish the GPU map and NVML XID critical-error events.

Returns the exit status (0 fine, 1 NVML or Kafka unavailable). NVML is opened first, so a
node without a driver fails in one line. Publishing is the one publish loop over
:class:`NvmlSource`: while Kafka is down events wait in its bounded buffer; a stop that
leaves some undelivered exits 1.

Trap: it keeps the same :class:`connectors.delivery.DeliveryMetrics` as every connector,
but nothing serves that registry yet (no ``/metrics`` port), so the connector alerts do not
see nvml: a broker outage shows only in its log.
In full: docs/connectors.md, design notes: connectors/nvml/run.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Any

from prometheus_client import CollectorRegistry

from connectors.delivery import DeliveryMetrics
from connectors.kafka.producer import KafkaTarget
from connectors.nvml.settings import NvmlSettings
from connectors.publish import PublishOptions
from connectors.run import Served, run_source
from connectors.settings import required
from connectors.signals import stop_on_signals
from connectors.source import Batch
from schemas.codec import AnyEvent, encode
from schemas.keys import key_of

PROG = "gputriage"


def connect_nvml(
    settings: NvmlSettings,
    target: Callable[[], KafkaTarget],
    out: IO[bytes],
    err: IO[str],
    lib: Any = None,
    metrics: DeliveryMetrics | None = None,
) -> int:
    """Publish (or print) the GPU map, then NVML XID events until SIGINT/SIGTERM.

    NVML is opened first, so a node without a driver fails in one line before
    anything else (the Kafka settings: ``target``) is tried. ``lib`` is the
    pynvml module (tests pass a fake of it); ``metrics`` the delivery metrics
    (default: on a registry of their own, unserved: see the module).
    """
    from connectors.nvml.devices import Nvml, NvmlUnavailable  # noqa: PLC0415

    try:
        nvml = Nvml(lib).open()
    except NvmlUnavailable as exc:
        print(f"{PROG}: error: {exc}", file=err)
        return 1
    try:
        kafka = None if settings.print_only else target()
        metrics = metrics or DeliveryMetrics(CollectorRegistry())
        return asyncio.run(_connect_nvml(nvml, settings, kafka, out, err, metrics))
    except NvmlUnavailable as exc:
        print(f"{PROG}: error: {exc}", file=err)
        return 1
    finally:
        nvml.close()


class NvmlSource:
    """NVML as a :class:`connectors.source.Source`: the GPU map first, then XIDs as they come.

    The map (``bindings``) is one batch; with ``once`` the source ends after
    it. XIDs are waited for in a thread (``nvmlEventSetWait`` blocks), one
    bounded wait per :meth:`next_batch`, so a stop is seen within
    :data:`connectors.nvml.devices.WAIT_MS`. Nothing is checkpointed: NVML
    delivers only events that happen while it is watched, so there is nothing to
    resume. ``progress`` is the clock when the event was read (NVML gives no event time).
    """

    name = "nvml"

    def __init__(self, nvml: Any, settings: NvmlSettings) -> None:
        self.nvml = nvml
        self.settings = settings
        self.cluster = required(settings.cluster, "cluster")
        self.node = required(settings.node, "node")
        self.key: bytes | None = key_of(self.cluster, self.node).encode()
        self._started = False
        self._watching = False
        self._serial = 0
        self._read_at: datetime | None = None
        self.family = "nvml"
        """Its heartbeats' ``Tick.source`` (see :meth:`read_at`)."""

    def read_at(self) -> datetime | None:
        """When NVML last answered: the GPU map read, or an XID wait that returned (an event
        or its timeout); None before either. A wait that raises ends the source."""
        return self._read_at

    async def next_batch(self) -> Batch | None:
        from connectors.nvml.devices import bindings, xid_event  # noqa: PLC0415

        if not self._started:
            self._started = True
            if self.settings.bindings:
                now = datetime.now(UTC)
                devices = self.nvml.devices()
                events: list[AnyEvent] = list(
                    bindings(devices, cluster=self.cluster, node=self.node, time=now)
                )
                self._read_at = now
                return Batch(events=events, records=len(events), progress=now)
        if self.settings.once:
            return None
        if not self._watching:
            self.nvml.watch_xids()
            self._watching = True
        raw = await asyncio.to_thread(self.nvml.wait_xid)
        now = datetime.now(UTC)
        self._read_at = now
        if raw is None:
            return Batch()
        self._serial += 1
        event = xid_event(raw, cluster=self.cluster, node=self.node, time=now, serial=self._serial)
        return Batch(events=[event], records=1, progress=now)

    def commit(self, batch: Batch) -> None:
        """Nothing to save (see the class)."""

    async def close(self) -> None:
        """NVML itself is closed by :func:`connect_nvml`, which opened it."""


async def _connect_nvml(
    nvml: Any,
    settings: NvmlSettings,
    target: KafkaTarget | None,
    out: IO[bytes],
    err: IO[str],
    metrics: DeliveryMetrics,
) -> int:
    stop = asyncio.Event()
    stop_on_signals(stop)
    devices = nvml.devices()
    gpus = sum(1 for d in devices if not d.parent_uuid)
    print(
        f"{PROG} connect nvml: driver {nvml.driver_version()}, {gpus} GPU(s), "
        f"{len(devices) - gpus} MIG device(s)",
        file=err,
    )
    source = NvmlSource(nvml, settings)
    if target is None:  # --print-only: the offline form, JSON lines on ``out``
        while not stop.is_set() and (batch := await source.next_batch()) is not None:
            for event in batch.events:
                out.write(encode(event) + b"\n")
            out.flush()
        return 0
    return await run_source(
        source,
        target,
        name="connect nvml",
        served=Served(metrics=metrics, port=None),
        err=err,
        publish=PublishOptions(heartbeat_seconds=settings.heartbeat_seconds),
        stop=stop,
    )
