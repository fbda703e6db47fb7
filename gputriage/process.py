"""``gputriage process``: run one processor worker until stopped.

Start as many as there are partitions to share: workers with the same
``processor.app_id`` split the raw partitions (a consumer group), and each restores its
keys' state from the state topic (:mod:`streams.app.worker`).

Traps: topics are created before subscribing (auto-creation makes one-partition topics);
SIGINT/SIGTERM finish the batch, flush, commit and leave the group, and a watchdog exits 1
after ``stop_timeout_seconds`` if that hangs (nothing lost: undelivered offsets were never
committed); ``--engine faust`` imports the optional faust extra only then; the gc
thresholds are raised and the start-up heap frozen, or every full collection walks the
core's state again. docs/operations.md, design notes: ``gputriage process``.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec
from aiokafka.errors import KafkaError

from connectors.kafka.admin import TopicError, check_copartitioned, ensure_topics
from connectors.kafka.config import KafkaUnreachable, client_kwargs
from connectors.prometheus import MetricsUnavailable
from connectors.signals import ignore_late_signals, stop_on_signals
from gputriage.errors import error
from gputriage.logs import configure_logging
from gputriage.settings import Settings, SettingsError
from schemas.topics import state_topic, topic_layout, validation_text
from streams.app.metrics import Metrics
from streams.app.settings import ProcessorSettings
from streams.app.worker import Worker

if TYPE_CHECKING:
    from streams.app.faust_engine import FaustWorker

log = logging.getLogger("gputriage.processor")

Engine = Literal["aiokafka", "faust"]
ENGINES: Final[tuple[Engine, ...]] = ("aiokafka", "faust")
"""``aiokafka``: the default :class:`~streams.app.worker.Worker`; ``faust``: the same
pipeline in a faust agent (:class:`~streams.app.faust_engine.FaustWorker`)."""


def processor_options(settings: Settings, **overrides: Any) -> ProcessorSettings:
    """``[processor]`` with the given options winning (``None`` is "not given").

    The CLI's options default to ``None`` so that the settings own every default. The
    settings were validated at load; the overrides are validated here, by the same
    struct, so a value out of range is refused whichever door it came through.
    """
    given = {k: v for k, v in overrides.items() if v is not None}
    if not given:
        return settings.processor
    try:
        return msgspec.convert(
            {**msgspec.structs.asdict(settings.processor), **given}, ProcessorSettings
        )
    except msgspec.ValidationError as exc:
        raise SettingsError(f"invalid option: {validation_text(exc, 'processor')}") from None


def run_worker(
    settings: Settings,
    options: ProcessorSettings,
    brokers: str | None = None,
    engine: Engine = "aiokafka",
) -> int:
    """Create missing topics, serve ``/metrics``, then run the worker until a signal.

    The exit status: 0 after a signal, 1 when Kafka failed (one line on stderr).
    """
    configure_logging(settings.log)
    if engine == "faust":
        try:
            import faust  # noqa: PLC0415 - optional: only this engine needs it

            from streams.app.faust_tuning import FAUST_VERSION  # noqa: PLC0415
        except ImportError:
            error("--engine faust needs faust-streaming: pip install 'gputriage[faust]'")
            return 1
        if faust.__version__ != FAUST_VERSION:  # the engine patches this release's code
            error(
                f"--engine faust needs faust-streaming {FAUST_VERSION}, not "
                f"{faust.__version__}: pip install 'gputriage[faust]'"
            )
            return 1
    try:
        status = asyncio.run(_run(settings, brokers, options, engine))
        ignore_late_signals()  # stopped: a parent's forwarded SIGTERM must not kill the exit
        return status
    except KafkaError as exc:
        # Unreachable at start, or failed past the producer's retries mid-run: nothing
        # undelivered was committed, so the restarted worker (its supervisor's job)
        # re-reads it. One line, not a traceback.
        log.error("Kafka: %s; exiting (uncommitted records will be re-read)", exc)
        error(f"Kafka: {exc}")
        return 1
    except (KafkaUnreachable, TopicError, MetricsUnavailable) as exc:
        error(str(exc))  # unreachable at start: one line naming the brokers, no log line
        return 1


async def _run(
    settings: Settings, brokers: str | None, options: ProcessorSettings, engine: Engine
) -> int:
    # Bound first: a port in use is found at once, not after Kafka answered.
    metrics = Metrics()
    if options.metrics_port is not None:
        port = metrics.serve(options.metrics_port, options.metrics_addr)  # MetricsUnavailable
        log.info("metrics on http://%s:%d/metrics", options.metrics_addr, port)
    kwargs = client_kwargs(settings.kafka_settings(), brokers)
    layout = topic_layout(settings.topics)
    state = state_topic(layout, options.app_id)
    created = await ensure_topics(kwargs, layout, extra=(state,))
    if created:
        log.info("created topics %s", ", ".join(created))
    await check_copartitioned(kwargs, (*layout.raw.values(), state))
    worker: Worker | FaustWorker
    if engine == "faust":
        from streams.app.faust_engine import FaustWorker, check_client_kwargs  # noqa: PLC0415

        refused = check_client_kwargs(kwargs)
        if refused is not None:
            error(refused)
            return 1
        worker = FaustWorker(settings.core_config(), kwargs, layout, state, options, metrics)
    else:
        worker = Worker(settings.core_config(), kwargs, layout, state, options, metrics)
    stop = asyncio.Event()
    stop_on_signals(stop, give_up_after_seconds=options.stop_timeout_seconds)
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 100)
    log.info("worker %s starting (engine %s, state in %s)", options.app_id, engine, state.name)
    await worker.run(stop)
    log.info("worker stopped")
    return 0
