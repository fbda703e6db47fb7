"""``gputriage process``: one processor worker (see :mod:`gputriage.process`).

``--app-id``/``--metrics-port`` default to ``None``: ``[processor]``
(:class:`~streams.app.settings.ProcessorSettings`) owns the defaults, the ranges and
the help; the worker module (and aiokafka with it) is imported only when run.
``--engine`` is a command-line choice only, not a ``[processor]`` key.
"""

from __future__ import annotations

import click

from gputriage.cli.common import (
    CONTEXT,
    StructDefault,
    brokers_option,
    kafka_kwargs,
    metrics_port_option,
    settings_of,
    shown,
)
from gputriage.settings import check_app_id
from schemas.topics import TopicConfigError
from streams.app.settings import ProcessorSettings


@click.command("process", context_settings=CONTEXT)
@brokers_option
@click.option(
    "--app-id",
    cls=StructDefault,
    show_default=shown(ProcessorSettings, "app_id"),
    help="Consumer group / app id; workers with the same id share work.",
)
@metrics_port_option(ProcessorSettings)
@click.option(
    "--engine",
    type=click.Choice(["aiokafka", "faust"]),
    default="aiokafka",
    show_default=True,
    help="aiokafka: the plain consumer group (fastest); faust: the same pipeline as a "
    "faust-streaming app, state in a faust table (needs the faust extra).",
)
@click.pass_context
def process_command(
    ctx: click.Context,
    *,
    brokers: str | None,
    app_id: str | None,
    metrics_port: int | None,
    engine: str,
) -> int:
    """Run a processor worker: raw topics in, incidents out, until Ctrl-C or SIGTERM.

    Creates missing topics first. Several workers with the same app id split the
    partitions between them; each keeps its keys' state in a compacted state topic.

    \b
    Examples:
      gputriage process --brokers kafka-0:9092
      GPUTRIAGE_PROCESSOR__APP_ID=prod gputriage --config /etc/gputriage.toml process
      gputriage process --app-id canary --metrics-port 0
      gputriage process --engine faust --brokers kafka-0:9092
    """
    from gputriage.process import processor_options, run_worker  # noqa: PLC0415 - aiokafka

    settings = settings_of(ctx)
    kafka_kwargs(settings, brokers)  # a configuration mistake is a usage error, before start
    if app_id is not None:
        try:
            check_app_id(app_id, settings.topics, "--app-id")
        except TopicConfigError as exc:
            raise click.BadParameter(
                str(exc).removeprefix("--app-id: "), param_hint="'--app-id'"
            ) from None
    options = processor_options(settings, app_id=app_id, metrics_port=metrics_port)
    return run_worker(settings, options, brokers, "faust" if engine == "faust" else "aiokafka")
