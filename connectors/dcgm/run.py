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
from pathlib import Path
from typing import IO, Any

from connectors.dcgm.settings import DcgmSettings
from connectors.kafka.producer import start_producer
from connectors.signals import stop_on_signals
from connectors.state import StateLock
from schemas.topics import TopicLayout

PROG = "gputriage"


def connect_dcgm(
    settings: DcgmSettings, client_kwargs: Mapping[str, Any], layout: TopicLayout, err: IO[str]
) -> int:
    """Scrape dcgm-exporter and publish until SIGINT/SIGTERM."""
    return asyncio.run(_connect_dcgm(settings, client_kwargs, layout, err))


async def _connect_dcgm(
    settings: DcgmSettings, client_kwargs: Mapping[str, Any], layout: TopicLayout, err: IO[str]
) -> int:
    # One poller per state file (StateInUse, before anything starts): two would move
    # each other's diff base and publish every change twice.
    lock = StateLock(Path(settings.state_path)) if settings.state_path else None
    try:
        return await _poll(settings, client_kwargs, layout, err)
    finally:
        if lock is not None:
            lock.close()


async def _poll(
    settings: DcgmSettings, client_kwargs: Mapping[str, Any], layout: TopicLayout, err: IO[str]
) -> int:
    from connectors.dcgm import scrape  # noqa: PLC0415

    stop = asyncio.Event()
    stop_on_signals(stop)
    producer = await start_producer(client_kwargs, layout)
    metrics = scrape.DcgmMetrics()
    if settings.metrics_port is not None:
        from connectors.prometheus import serve_metrics  # noqa: PLC0415

        port = serve_metrics(
            metrics.registry, settings.metrics_port, health=metrics.delivery.health
        )
        print(f"{PROG} connect dcgm: metrics on http://0.0.0.0:{port}/metrics", file=err)
    every = settings.interval_seconds
    print(f"{PROG} connect dcgm: scraping {settings.url} every {every:g} s", file=err)
    try:
        await scrape.DcgmPoller(settings, producer, metrics).run(stop)
    finally:
        await producer.stop()
    return 0
