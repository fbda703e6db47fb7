"""``gputriage process``: one processor worker (see :mod:`gputriage.process`).

Every ``[processor]`` setting is an option, generated from
:class:`~streams.app.settings.ProcessorSettings` (:mod:`gputriage.cli.options`): the
struct owns the defaults, the ranges and the help; the options default to unset, so the
file and the environment fill what was not given. The worker module (and aiokafka with
it) is imported only when run. ``--engine`` and ``--brokers`` are command-line choices,
not ``[processor]`` keys.
"""

from __future__ import annotations

from typing import Any

import click

from gputriage.cli.common import CONTEXT, kafka_kwargs, settings_of
from gputriage.cli.options import brokers_option, settings_options
from gputriage.settings import check_app_id
from schemas.topics import TopicConfigError
from streams.app.settings import ProcessorSettings


@click.command("process", context_settings=CONTEXT)
@brokers_option
@settings_options(ProcessorSettings)
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
    ctx: click.Context, /, *, brokers: str | None, engine: str, **given: Any
) -> int:
    """Run a processor worker: raw topics in, incidents out, until Ctrl-C or SIGTERM.

    Creates missing topics first. Several workers with the same app id split the
    partitions between them; each keeps its keys' state in a compacted state topic.

    \b
    Examples:
      gputriage process --brokers kafka-0:9092
      GPUTRIAGE_PROCESSOR__APP_ID=prod gputriage --config /etc/gputriage.toml process
      gputriage process --app-id canary --metrics-port 0
      gputriage process --engine faust --brokers kafka-0:9092 --snapshot-seconds 5
    """
    from gputriage.process import processor_options, run_worker  # noqa: PLC0415 - aiokafka

    settings = settings_of(ctx)
    kafka_kwargs(settings, brokers)  # a configuration mistake is a usage error, before start
    app_id = given.get("app_id")
    if app_id is not None:
        try:
            check_app_id(app_id, settings.topics, "--app-id")
        except TopicConfigError as exc:
            raise click.BadParameter(
                str(exc).removeprefix("--app-id: "), param_hint="'--app-id'"
            ) from None
    options = processor_options(settings, **given)
    return run_worker(settings, options, brokers, "faust" if engine == "faust" else "aiokafka")
