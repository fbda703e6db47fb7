"""``gputriage tail``: follow the incident topic (see :mod:`gputriage.tail`).

Options default to ``None``: :class:`gputriage.tail.TailOptions` owns the defaults.
"""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

import click

from connectors.kafka.config import KafkaSettings
from gputriage.cli.common import (
    CONTEXT,
    StructDefault,
    kafka_kwargs,
    settings_of,
)
from gputriage.cli.options import brokers_option, settings_options
from gputriage.cli.output import evidence_option, options_of, output_option
from gputriage.replay import OUTPUTS
from gputriage.tail import StartAt, TailOptions, parse_start, run_tail
from schemas.topics import topic_layout

_DEFAULTS = TailOptions()


class StartType(click.ParamType):
    """``--from``: ``now``, ``beginning``, an offset, or a TIME (the CLI's one time parser)."""

    name = "now|beginning|TIME|OFFSET"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> StartAt:
        if isinstance(value, datetime | int):  # already converted (a default, a test)
            return value
        try:
            return parse_start(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


@click.command("tail", context_settings=CONTEXT)
@click.option(
    "--from",
    "start",
    metavar="now|beginning|TIME|OFFSET",
    type=StartType(),
    cls=StructDefault,
    show_default=str(_DEFAULTS.start),
    help="Where to start: the end, the oldest record, an RFC 3339 time "
    "(2026-11-30T10:00:00Z), or an offset in every partition.",
)
@output_option(
    OUTPUTS,
    _DEFAULTS.output,
    "table/wide: one row per incident revision; json: each revision as a JSON line.",
)
@evidence_option(
    _DEFAULTS.evidence, "table/wide: list each revision's evidence chain under its row."
)
@brokers_option
@settings_options(KafkaSettings, only=("connect_timeout_seconds",))
@click.pass_context
def tail_command(ctx: click.Context, /, *, brokers: str | None, **given: Any) -> int:
    """Follow the incident topic and print each incident revision as it arrives.

    Reads every partition without a consumer group (nothing is committed) until
    Ctrl-C, which ends it with status 0. A record that does not decode is
    reported on stderr with its partition and offset and skipped; the exit
    status is then 1. An unreachable broker or a missing topic is one line on
    stderr and status 1.

    \b
    Examples:
      gputriage tail
      gputriage tail --from beginning -o wide --evidence
      gputriage tail --from 2026-11-30T10:00:00Z -o json | jq .severity
      gputriage tail --brokers kafka-0:9092 --from 42
    """
    settings = settings_of(ctx)
    kwargs = kafka_kwargs(settings, brokers)
    options = options_of(TailOptions, given)
    topic = topic_layout(settings.topics).incidents.name
    return run_tail(kwargs, topic, options, sys.stdout.buffer, sys.stderr)
