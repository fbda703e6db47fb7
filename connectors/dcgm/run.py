"""``gputriage connect dcgm``: scrape dcgm-exporter and publish XID and GPU binding events.

The click definition lives in :mod:`gputriage.cli.connect`; this does the work
and returns the exit status (0 fine); Kafka unreachable at start is a
:class:`~connectors.kafka.config.KafkaUnreachable` for the CLI to report. The poller
itself is :class:`connectors.dcgm.scrape.DcgmPoller`; it publishes through the
one publish loop (:mod:`connectors.publish`), so a broker outage later on is
waited out (bounded buffer, retries), not fatal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from connectors.kafka.producer import start_producer
from connectors.publish import HEARTBEAT_SECONDS
from connectors.signals import stop_on_signals
from connectors.state import StateLock
from schemas.topics import TopicLayout

PROG = "gputriage"


@dataclass(frozen=True)
class DcgmCommand:
    url: str
    cluster: str
    node: str
    interval_s: float
    timeout_s: float
    state_path: Path | None
    metrics_port: int | None
    heartbeat_seconds: float = HEARTBEAT_SECONDS


def connect_dcgm(
    command: DcgmCommand, client_kwargs: Mapping[str, Any], layout: TopicLayout, err: IO[str]
) -> int:
    """Scrape dcgm-exporter and publish until SIGINT/SIGTERM."""
    return asyncio.run(_connect_dcgm(command, client_kwargs, layout, err))


async def _connect_dcgm(
    command: DcgmCommand, client_kwargs: Mapping[str, Any], layout: TopicLayout, err: IO[str]
) -> int:
    # One poller per state file (StateInUse, before anything starts): two would move
    # each other's diff base and publish every change twice.
    lock = StateLock(command.state_path) if command.state_path else None
    try:
        return await _poll(command, client_kwargs, layout, err)
    finally:
        if lock is not None:
            lock.close()


async def _poll(
    command: DcgmCommand, client_kwargs: Mapping[str, Any], layout: TopicLayout, err: IO[str]
) -> int:
    from connectors.dcgm import scrape  # noqa: PLC0415

    stop = asyncio.Event()
    stop_on_signals(stop)
    producer = await start_producer(client_kwargs, layout)
    metrics = scrape.DcgmMetrics()
    if command.metrics_port is not None:
        from connectors.prometheus import serve_metrics  # noqa: PLC0415

        port = serve_metrics(metrics.registry, command.metrics_port, health=metrics.delivery.health)
        print(f"{PROG} connect dcgm: metrics on http://0.0.0.0:{port}/metrics", file=err)
    options = scrape.PollOptions(
        url=command.url,
        cluster=command.cluster,
        node=command.node,
        interval_s=command.interval_s,
        timeout_s=command.timeout_s,
        state_path=command.state_path,
        heartbeat_seconds=command.heartbeat_seconds,
    )
    print(f"{PROG} connect dcgm: scraping {command.url} every {command.interval_s:g} s", file=err)
    try:
        await scrape.DcgmPoller(options, producer, metrics).run(stop)
    finally:
        await producer.stop()
    return 0
