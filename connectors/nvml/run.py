"""``gputriage connect nvml``: publish the GPU map and NVML XID critical-error events.

The click definition lives in :mod:`gputriage.cli.connect`; this does the work
and returns the exit status (0 fine, 1 NVML or Kafka unavailable). NVML is
opened first, so a node without a driver fails in one line before anything
else is tried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import IO, Any

from connectors.kafka.producer import KafkaTarget, start_reported
from connectors.signals import stop_on_signals
from schemas.codec import AnyEvent, encode

PROG = "gputriage"


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
    from connectors.nvml.devices import Nvml, NvmlUnavailable  # noqa: PLC0415

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
    from connectors.nvml.devices import bindings, xid_event  # noqa: PLC0415

    stop = asyncio.Event()
    stop_on_signals(stop)
    producer = None
    if not command.print_only:
        if target is None:
            raise ValueError("a Kafka target is needed unless print_only")
        producer = await start_reported(target, err)
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
