"""``gputriage process``: run one processor worker (faust) until stopped.

Start as many as there are partitions to share: workers with the same
``processor.app_id`` split the raw topics' partitions between them (faust's
consumer group), and each restores the state of the keys it is given from the
changelog table.

Traps:

* Topics are created (``ensure_topics``) *before* faust starts: a broker's
  auto-creation would make one-partition topics, and faust would use them.
* faust's worker owns the event loop and the signal handlers (SIGINT/SIGTERM
  stop it cleanly); nothing here may run its own loop around it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, NoReturn

import msgspec

from connectors.kafka_config import client_kwargs, split_brokers
from connectors.topics import ensure_topics, topic_layout
from gputriage.settings import Settings, SettingsError
from streams.app.metrics import Metrics


def processor_options(settings: Settings, **overrides: Any) -> Any:
    """The ``[processor]`` table as :class:`~streams.app.faust_app.ProcessorOptions`."""
    from streams.app.faust_app import ProcessorOptions  # noqa: PLC0415 - faust is heavy

    values = {
        **settings.section("processor"),
        **{k: v for k, v in overrides.items() if v is not None},
    }
    try:
        return msgspec.convert(values, ProcessorOptions, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(
            f"invalid configuration: {str(exc).replace('$.', 'processor.')}"
        ) from None


def run_worker(settings: Settings, brokers: str | None = None, **overrides: Any) -> NoReturn:
    """Create missing topics, serve ``/metrics``, then run the faust worker (blocks)."""
    import faust  # noqa: PLC0415 - heavy; only this command needs it

    from streams.app.faust_app import create_app  # noqa: PLC0415

    core = settings.core_config()
    kafka = settings.kafka_settings()
    layout = topic_layout(settings.topic_settings())
    options = processor_options(settings, **overrides)
    kwargs = client_kwargs(kafka, brokers)
    servers = split_brokers(brokers) if brokers is not None else list(kafka.brokers)
    created = asyncio.run(ensure_topics(kwargs, layout))
    log = logging.getLogger("gputriage.processor")
    if created:
        log.info("created topics: %s", ", ".join(created))
    metrics = Metrics()
    if options.metrics_port is not None:
        port = metrics.serve(options.metrics_port, options.metrics_addr)
        log.info("metrics on http://%s:%d/metrics", options.metrics_addr, port)
    app, _processor = create_app(core, kafka, servers, layout, options, metrics)
    worker = faust.Worker(app, loglevel="INFO", quiet=True, redirect_stdouts=False)
    worker.execute_from_commandline()  # exits the process when the worker stops
