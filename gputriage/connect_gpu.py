"""The GPU source commands: ``ingest dcgm``, ``connect dcgm`` and ``connect nvml``.

The click definitions live in :mod:`gputriage.cli_ingest` and
:mod:`gputriage.cli_connect`; these functions do the work and return the exit
status. They are imported lazily (aiohttp, aiokafka and pynvml are not needed
for ``gputriage --help``).

Exit statuses follow the CLI's rule: 0 fine, 1 ran but found a problem (a bad
scrape file, Kafka or NVML unavailable), 130 interrupted.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from connectors.dcgm.diff import DcgmState, diff
from connectors.dcgm.exposition import parse_exposition
from connectors.files import STDIN, FileSource
from gputriage.signals import stop_on_signals
from schemas.codec import AnyEvent, RecordError, encode

PROG = "gputriage"


# -- ingest dcgm ---------------------------------------------------------------------
def _read(path: str) -> tuple[bytes, datetime]:
    """A scrape file's bytes (gunzipped when gzip) and its time: the file's mtime, so the
    same file always gives the same event times and ids; stdin: now."""
    with FileSource(path) as source:
        data = source.read()
    if path == STDIN:
        return data, datetime.now(UTC)
    return data, datetime.fromtimestamp(Path(path).stat().st_mtime, UTC)


def ingest_dcgm(
    paths: Sequence[str], *, cluster: str, node: str, out: IO[bytes], err: IO[str]
) -> int:
    """Diff successive scrape files (one file = one scrape, in the order given) and print
    the events as JSON lines. A bad file is reported on stderr and skipped (status 1)."""
    state: DcgmState | None = None
    bad = baseline = 0
    for path in paths:
        try:
            data, when = _read(path)
        except (OSError, EOFError, zlib.error) as exc:
            print(f"{path}: cannot read: {exc}", file=err)
            bad += 1
            continue
        scrape = parse_exposition(data.decode("utf-8", errors="replace"))
        if isinstance(scrape, RecordError):
            print(f"{path}: {scrape}", file=err)
            bad += 1
            continue
        result = diff(state, scrape, cluster=cluster, node=node, time=scrape.time or when)
        state = result.state
        baseline += result.baseline
        for event in result.events:
            out.write(encode(event) + b"\n")
    out.flush()
    if baseline:
        print(
            f"{PROG}: {baseline} non-zero XID value(s) in a GPU's first scrape not reported "
            "(a baseline: the gauge may be hours old)",
            file=err,
        )
    if bad:
        plural = "" if bad == 1 else "s"
        print(f"{PROG}: {bad} bad scrape file{plural} of {len(paths)} skipped", file=err)
    return 1 if bad else 0


# -- live connectors -----------------------------------------------------------------
@dataclass(frozen=True)
class KafkaTarget:
    client_kwargs: dict[str, Any]
    topic_settings: Any
    """A :class:`schemas.topics.TopicSettings`."""


async def _producer(target: KafkaTarget, err: IO[str]) -> Any:
    """A started EventProducer on existing (or just created) topics, or None (reported)."""
    from connectors.kafka.producer import KafkaUnreachable, start_producer  # noqa: PLC0415
    from schemas.topics import topic_layout  # noqa: PLC0415

    try:
        return await start_producer(target.client_kwargs, topic_layout(target.topic_settings))
    except KafkaUnreachable as exc:
        print(f"{PROG}: error: {exc}", file=err)
        return None


@dataclass(frozen=True)
class DcgmCommand:
    url: str
    cluster: str
    node: str
    interval_s: float
    timeout_s: float
    state_path: Path | None
    metrics_port: int | None


def connect_dcgm(command: DcgmCommand, target: KafkaTarget, err: IO[str]) -> int:
    """Scrape dcgm-exporter and publish until SIGINT/SIGTERM."""
    return asyncio.run(_connect_dcgm(command, target, err))


async def _connect_dcgm(command: DcgmCommand, target: KafkaTarget, err: IO[str]) -> int:
    from connectors.dcgm import scrape  # noqa: PLC0415

    stop = asyncio.Event()
    stop_on_signals(stop)
    producer = await _producer(target, err)
    if producer is None:
        return 1
    metrics = scrape.DcgmMetrics()
    if command.metrics_port is not None:
        from connectors.prometheus import serve_metrics  # noqa: PLC0415

        port = serve_metrics(metrics.registry, command.metrics_port)
        print(f"{PROG} connect dcgm: metrics on http://0.0.0.0:{port}/metrics", file=err)
    options = scrape.PollOptions(
        url=command.url,
        cluster=command.cluster,
        node=command.node,
        interval_s=command.interval_s,
        timeout_s=command.timeout_s,
        state_path=command.state_path,
    )
    print(f"{PROG} connect dcgm: scraping {command.url} every {command.interval_s:g} s", file=err)
    try:
        await scrape.DcgmPoller(options, producer, metrics).run(stop)
    finally:
        await producer.stop()
    return 0


@dataclass(frozen=True)
class NvmlCommand:
    cluster: str
    node: str
    once: bool
    bindings: bool
    print_only: bool


def connect_nvml(
    command: NvmlCommand,
    target: Callable[[], KafkaTarget],
    out: IO[bytes],
    err: IO[str],
    lib: Any = None,
) -> int:
    """Publish (or print) the GPU map, then NVML XID events until SIGINT/SIGTERM.

    NVML is opened first, so a node without a driver fails in one line before
    anything else (the Kafka settings: ``target``) is tried. ``lib`` is the
    pynvml module (tests pass a fake of it).
    """
    from connectors.nvml import Nvml, NvmlUnavailable  # noqa: PLC0415

    try:
        nvml = Nvml(lib).open()
    except NvmlUnavailable as exc:
        print(f"{PROG}: error: {exc}", file=err)
        return 1
    try:
        kafka = None if command.print_only else target()
        return asyncio.run(_connect_nvml(nvml, command, kafka, out, err))
    except NvmlUnavailable as exc:
        print(f"{PROG}: error: {exc}", file=err)
        return 1
    finally:
        nvml.close()


async def _connect_nvml(
    nvml: Any, command: NvmlCommand, target: KafkaTarget | None, out: IO[bytes], err: IO[str]
) -> int:
    from connectors.nvml import bindings, xid_event  # noqa: PLC0415

    stop = asyncio.Event()
    stop_on_signals(stop)
    producer = None
    if not command.print_only:
        if target is None:
            raise ValueError("a Kafka target is needed unless print_only")
        producer = await _producer(target, err)
        if producer is None:
            return 1

    async def emit(events: Sequence[AnyEvent]) -> None:
        if producer is None:
            for event in events:
                out.write(encode(event) + b"\n")
            out.flush()
        else:
            await producer.send_many(events)

    try:
        devices = nvml.devices()
        gpus = sum(1 for d in devices if not d.parent_uuid)
        print(
            f"{PROG} connect nvml: driver {nvml.driver_version()}, {gpus} GPU(s), "
            f"{len(devices) - gpus} MIG device(s)",
            file=err,
        )
        if command.bindings:
            now = datetime.now(UTC)
            await emit(bindings(devices, cluster=command.cluster, node=command.node, time=now))
        if command.once:
            return 0
        nvml.watch_xids()
        serial = 0
        while not stop.is_set():
            raw = await asyncio.to_thread(nvml.wait_xid)
            if raw is None:
                continue
            serial += 1
            now = datetime.now(UTC)
            event = xid_event(
                raw, cluster=command.cluster, node=command.node, time=now, serial=serial
            )
            await emit([event])
    finally:
        if producer is not None:
            await producer.stop()
    return 0
