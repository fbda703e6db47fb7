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
import gc
import logging
import os
import sys
import threading
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
    from streams.app.faust_app import create_app  # noqa: PLC0415 - faust is heavy
    from streams.app.faust_tuning import quiet_spinner  # noqa: PLC0415 - faust is heavy

    core = settings.core_config()
    kafka = settings.kafka_settings()
    layout = topic_layout(settings.topic_settings())
    options = processor_options(settings, **overrides)
    kwargs = client_kwargs(kafka, brokers)
    servers = split_brokers(brokers) if brokers is not None else list(kafka.brokers)
    created = asyncio.run(ensure_topics(kwargs, layout))
    # faust configures logging only when its worker starts: until then, say it on stderr.
    if created:
        print(f"gputriage process: created topics {', '.join(created)}", file=sys.stderr)
    metrics = Metrics()
    if options.metrics_port is not None:
        port = metrics.serve(options.metrics_port, options.metrics_addr)
        print(
            f"gputriage process: metrics on http://{options.metrics_addr}:{port}/metrics",
            file=sys.stderr,
            flush=True,
        )
    app, _processor = create_app(core, kafka, servers, layout, options, metrics)
    # Fewer, cheaper collections: the worker holds many long-lived objects (faust's
    # machinery, the core's state), which every full collection would walk again.
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    worker = _bounded_stop_worker(
        app,
        stop_timeout_s=options.stop_timeout_seconds,
        loglevel="INFO",
        quiet=True,
        redirect_stdouts=False,
    )
    quiet_spinner(worker)  # or faust sets the root logger to DEBUG at WARN and above
    worker.execute_from_commandline()  # exits the process when the worker stops
    raise SystemExit(0)  # pragma: no cover - execute_from_commandline never returns


def _bounded_stop_worker_class() -> Any:
    import faust  # noqa: PLC0415

    class BoundedStopWorker(faust.Worker):
        """A faust worker whose stop on SIGINT/SIGTERM cannot hang forever.

        faust 0.15's fetcher sometimes never finishes stopping when a signal lands
        while a batch is being delivered (seen here against Tansu). Nothing is
        lost by giving up: offsets of undelivered records were never committed,
        so the next worker reads them again. After ``stop_timeout_s`` the process
        exits with status 1 and says so.
        """

        def __init__(self, *args: Any, stop_timeout_s: float, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._stop_timeout_s = stop_timeout_s
            self._watchdog: threading.Timer | None = None

        def _arm(self) -> None:
            if self._watchdog is None:
                self._watchdog = threading.Timer(
                    self._stop_timeout_s, _give_up, [self._stop_timeout_s]
                )
                self._watchdog.daemon = True
                self._watchdog.start()

        def _on_sigint(self) -> None:
            self._arm()
            super()._on_sigint()

        def _on_sigterm(self) -> None:
            self._arm()
            super()._on_sigterm()

    return BoundedStopWorker


def _give_up(seconds: float) -> None:
    logging.getLogger("gputriage.processor").error(
        "the worker did not stop within %g s; exiting (uncommitted records will be re-read)",
        seconds,
    )
    logging.shutdown()
    os._exit(1)


def _bounded_stop_worker(app: Any, **kwargs: Any) -> Any:
    return _bounded_stop_worker_class()(app, **kwargs)
