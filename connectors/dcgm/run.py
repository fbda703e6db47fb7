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
from pathlib import Path
from typing import IO

from connectors.dcgm.settings import DcgmSettings
from connectors.kafka.producer import KafkaTarget
from connectors.state import StateLock


def connect_dcgm(settings: DcgmSettings, target: KafkaTarget, err: IO[str]) -> int:
    """Scrape dcgm-exporter and publish until SIGINT/SIGTERM; the exit status."""
    return asyncio.run(_connect_dcgm(settings, target, err))


async def _connect_dcgm(settings: DcgmSettings, target: KafkaTarget, err: IO[str]) -> int:
    from connectors.dcgm.scrape import DcgmPoller  # noqa: PLC0415

    # One poller per state file (StateInUse, before anything starts): two would move
    # each other's diff base and publish every change twice.
    lock = StateLock(Path(settings.state_path)) if settings.state_path else None
    try:
        return await DcgmPoller(settings).run(target, err)
    finally:
        if lock is not None:
            lock.close()
