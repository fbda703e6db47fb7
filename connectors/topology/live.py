"""``gputriage connect topo``: the node's GPU topology, published at start and on change only.

Topology changes with reboots and link failures, not per scrape: the source polls and
publishes a snapshot only when it differs (and once at start; the same snapshot has the
same id). It reads NVML where a driver is, else ``nvidia-smi topo -m``, else ``topo -mp``;
neither: one line, exit 1. Progress is the clock of each read; an idle poll is caught up.

Traps: each nvidia-smi run is a subprocess under a timeout (a hung driver hangs
nvidia-smi, and the agent must not); a run that fails or prints no readable matrix is a
dead letter with its output as evidence, and the poll goes on.
In full: docs/connectors.md, design notes: connectors/topology/live.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from collections.abc import Callable
from datetime import UTC, datetime
from typing import IO, Any, Final

from prometheus_client import CollectorRegistry

from connectors.delivery import DeliveryMetrics
from connectors.kafka.producer import KafkaTarget
from connectors.publish import PublishOptions
from connectors.run import Served, run_source
from connectors.settings import required
from connectors.signals import stop_on_signals
from connectors.source import Batch, DeadLine
from connectors.topology.events import topology_event
from connectors.topology.matrix import Topology, parse_topology
from connectors.topology.settings import TopoSettings
from schemas.codec import AnyEvent, RecordError, encode
from schemas.events import GpuTopologyEvent
from schemas.keys import key_of

log = logging.getLogger("gputriage.topology")

PROG: Final = "gputriage"
DEAD_LETTER_BODY: Final = 16_384
"""Bytes of a bad nvidia-smi output kept as evidence."""


class Unavailable(RuntimeError):
    """Neither NVML nor nvidia-smi can be used here; the message is one line."""


class NvmlReader:
    """Reads through an open :class:`connectors.nvml.devices.Nvml` (it closes NVML)."""

    source = "nvml"

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml

    async def read(self) -> Topology | RecordError:
        from connectors.topology.nvml import read_topology  # noqa: PLC0415

        lib = self.nvml.lib
        try:
            return await asyncio.to_thread(read_topology, lib)
        except lib.NVMLError as exc:
            return RecordError(f"NVML: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        self.nvml.close()


class SmiReader:
    """Runs ``nvidia-smi topo -m`` (NVLinks) or, failing that, ``topo -mp`` (PCIe paths)."""

    source = "nvidia-smi"

    def __init__(self, binary: str, timeout: float) -> None:
        self.binary = binary
        self.timeout = timeout
        self.last_output = b""

    async def _run(self, flag: str) -> bytes | RecordError:
        try:
            proc = await asyncio.create_subprocess_exec(
                self.binary,
                "topo",
                flag,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            return RecordError(f"cannot run {self.binary}: {exc}")
        try:
            out, err = await asyncio.wait_for(proc.communicate(), self.timeout)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return RecordError(f"{self.binary} topo {flag} did not answer in {self.timeout:g}s")
        if proc.returncode != 0:
            why = (err or out).decode(errors="replace").strip().splitlines()
            return RecordError(
                f"{self.binary} topo {flag} exited {proc.returncode}: {why[0] if why else ''}"
            )
        return out

    async def read(self) -> Topology | RecordError:
        result: Topology | RecordError = RecordError("no output")
        for flag in ("-m", "-mp"):
            out = await self._run(flag)
            if isinstance(out, RecordError):
                result = out
                continue
            self.last_output = out
            result = parse_topology(out.decode(errors="replace"))
            if isinstance(result, Topology):
                return result
        return result

    def close(self) -> None:
        """Nothing held between runs."""


Reader = NvmlReader | SmiReader


OpenNvml = Callable[[], Any]
"""Opens NVML: an open :class:`connectors.nvml.devices.Nvml` (``.lib``, ``.close()``), or the
reason it could not, as a string. The CLI builds it from :mod:`connectors.nvml` (source
families must not import each other: the CLI composes them)."""


def open_reader(settings: TopoSettings, open_nvml: OpenNvml | None = None) -> Reader:
    """NVML where it initialises, else nvidia-smi where it exists; raises :class:`Unavailable`."""
    why = "NVML not used (--no-nvml)" if not settings.nvml else "no NVML given"
    if settings.nvml and open_nvml is not None:
        opened = open_nvml()
        if not isinstance(opened, str):
            return NvmlReader(opened)
        why = opened
    if shutil.which(settings.nvidia_smi) is not None:
        log.info("%s; reading the topology with %s", why, settings.nvidia_smi)
        return SmiReader(settings.nvidia_smi, settings.timeout_seconds)
    raise Unavailable(f"{why}, and no {settings.nvidia_smi} to run: no GPU topology to read")


class TopologySource:
    """The reader as a :class:`connectors.source.Source`: a snapshot at start, then on change.

    Nothing is checkpointed: the first read after a restart is published again (same
    topology, same id). ``clock`` stamps reads (tests pass a fixed one).
    """

    name = "topology"

    def __init__(
        self,
        reader: Reader,
        settings: TopoSettings,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.reader = reader
        self.settings = settings
        self.cluster = required(settings.cluster, "cluster")
        self.node = required(settings.node, "node")
        self.clock = clock
        self.key: bytes | None = key_of(self.cluster, self.node).encode()
        self.last: GpuTopologyEvent | None = None
        self.polls = 0
        self.published = 0

    async def next_batch(self) -> Batch | None:
        if self.polls and self.settings.once:
            return None
        if self.polls:
            await asyncio.sleep(self.settings.interval_seconds)
        self.polls += 1
        result = await self.reader.read()
        now = self.clock()
        if isinstance(result, RecordError):
            log.warning("GPU topology not read: %s", result)
            raw = getattr(self.reader, "last_output", b"")[:DEAD_LETTER_BODY]
            return Batch(dead=[DeadLine(raw=raw, error=result, seq=self.polls)], records=1)
        event = topology_event(
            result, cluster=self.cluster, node=self.node, time=now, source=self.reader.source
        )
        if self.last is not None and self.last.id == event.id:
            return Batch(progress=now)  # unchanged: nothing to publish
        self.last = event
        self.published += 1
        events: list[AnyEvent] = [event]
        return Batch(events=events, records=1, progress=now)

    def commit(self, batch: Batch) -> None:
        """Nothing to save (see the class)."""

    async def close(self) -> None:
        """The reader is closed by :func:`connect_topo`, which opened it."""


def connect_topo(
    settings: TopoSettings,
    target: Callable[[], KafkaTarget],
    out: IO[bytes],
    err: IO[str],
    open_nvml: OpenNvml | None = None,
    metrics: DeliveryMetrics | None = None,
) -> int:
    """Publish (or print) the topology at start and on change, until SIGINT/SIGTERM.

    The reader is opened first, so a node with neither NVML nor nvidia-smi fails in one
    line before Kafka is tried. Status: 0, or 1 (no reader; undelivered at stop).
    """
    try:
        reader = open_reader(settings, open_nvml)
    except Unavailable as exc:
        print(f"{PROG}: error: {exc}", file=err)
        return 1
    try:
        kafka = None if settings.print_only else target()
        metrics = metrics or DeliveryMetrics(CollectorRegistry())
        return asyncio.run(_connect(reader, settings, kafka, out, err, metrics))
    finally:
        reader.close()


async def _connect(
    reader: Reader,
    settings: TopoSettings,
    target: KafkaTarget | None,
    out: IO[bytes],
    err: IO[str],
    metrics: DeliveryMetrics,
) -> int:
    stop = asyncio.Event()
    stop_on_signals(stop)
    print(f"{PROG} connect topo: reading the GPU topology from {reader.source}", file=err)
    source = TopologySource(reader, settings)
    if target is None:  # --print-only: the offline form, JSON lines on ``out``
        while not stop.is_set():
            reading = asyncio.ensure_future(source.next_batch())
            stopping = asyncio.ensure_future(stop.wait())
            await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
            stopping.cancel()
            if not reading.done():
                reading.cancel()
                break
            batch = reading.result()
            if batch is None:
                break
            for event in batch.events:
                out.write(encode(event) + b"\n")
            for dead in batch.dead:
                if isinstance(dead, DeadLine):
                    print(f"{PROG}: warning: {dead.error}", file=err)
            out.flush()
        return 0
    return await run_source(
        source,
        target,
        name="connect topo",
        served=Served(metrics=metrics, port=settings.metrics_port),
        err=err,
        publish=PublishOptions(heartbeat_seconds=settings.heartbeat_seconds),
        stop=stop,
    )
