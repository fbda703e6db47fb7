"""One connector runner: a ``connect`` verb builds its source, then calls :func:`run_source`.

What every connector did for itself lives here once: signals, the ``/metrics`` server,
the producer's start-up, the publish loop with its bounded drain, the one summary line and
the exit status (0: everything read was delivered; 1: something was left at the stop).

Traps: the metrics server starts before the producer, so a port already taken is the one
line printed, not hidden behind a broker timeout; a caller passing its own ``stop`` gets
no signal handlers, and a passed started producer is neither started nor stopped here;
Kafka unreachable at start is :class:`~connectors.kafka.config.KafkaUnreachable`, raised
for the CLI, and the source is closed either way.
In full: docs/connectors.md, design notes: connectors/run.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import IO, Final

from connectors.delivery import DeliveryMetrics
from connectors.kafka.producer import EventProducer, KafkaTarget, start_producer
from connectors.prometheus import serve_metrics
from connectors.publish import Enrich, Publisher, PublishOptions, PublishResult
from connectors.signals import stop_on_signals
from connectors.source import Source
from schemas.codec import AnyEvent

log = logging.getLogger("gputriage.connect")

PROG: Final = "gputriage"


@dataclass(frozen=True, kw_only=True)
class Served:
    """Where and what a connector serves on ``/metrics`` (``port`` None: nothing)."""

    metrics: DeliveryMetrics
    """The delivery metrics; their registry (and the family's counters on it) is served."""
    port: int | None
    addr: str = "0.0.0.0"


async def run_source(
    source: Source,
    target: KafkaTarget | EventProducer,
    *,
    name: str,
    served: Served,
    err: IO[str],
    publish: PublishOptions | None = None,
    stop: asyncio.Event | None = None,
    enrich: Enrich[AnyEvent] | None = None,
    source_id: str | None = None,
    summary: Callable[[PublishResult], str] | None = None,
    verdict: Callable[[PublishResult], int] | None = None,
    started: Callable[[], Awaitable[None]] | None = None,
) -> int:
    """Publish ``source`` until it ends or a stop; the exit status (see the module).

    ``name`` prefixes the lines (``connect dcgm``); ``summary`` makes the one line said
    at the end, from the run's result; ``verdict`` the exit status of a run that
    delivered everything (a source whose end is a failure: a follower's child died);
    ``started`` is awaited once the producer is up (a child to start, a line to say).
    """
    if stop is None:
        stop = asyncio.Event()
        stop_on_signals(stop)
    try:
        if served.port is not None:
            metrics = served.metrics
            port = serve_metrics(metrics.registry, served.port, served.addr, metrics.health)
            log.info("%s: metrics on http://%s:%d/metrics", name, served.addr, port)
        own = not isinstance(target, EventProducer)
        producer = await start_producer(*target) if isinstance(target, KafkaTarget) else target
        try:
            if started is not None:
                await started()
            publisher = Publisher(
                source,
                producer,
                options=publish,
                metrics=served.metrics,
                enrich=enrich,
                source_id=source_id,
            )
            result = await publisher.run(stop)
        finally:
            if own:
                await producer.stop()
    finally:
        await source.close()
    if summary is not None:
        print(f"{PROG} {name}: {summary(result)}", file=err)
    if not result.drained:
        log.error(
            "%s: %d buffered batches not delivered at the stop", name, len(publisher.delivery)
        )
        return 1
    return verdict(result) if verdict is not None else 0
