"""``gputriage demo``: the live pipeline on a simulated cluster (see :mod:`gputriage.demo.run`).

The options are generated from :class:`gputriage.demo.settings.DemoSettings`, which owns
the defaults, ranges and help. The demo module (aiokafka, the broker) is imported only
when run.
"""

from __future__ import annotations

import sys
from typing import IO, Any

import click
import msgspec

from connectors.kafka.config import split_brokers
from gputriage.cli.common import (
    CONTEXT,
    kafka_kwargs,
    settings_of,
)
from gputriage.cli.options import brokers_option, settings_options
from gputriage.demo.settings import DemoSettings


@click.command("demo", context_settings=CONTEXT)
@settings_options(DemoSettings)
@click.option(
    "--bridge",
    type=click.Choice(["slack-stub"]),
    help="slack-stub: print, for each revision, the Block Kit JSON the Slack bridge would send "
    "(chat.postMessage, chat.update, thread replies); nothing is sent. Implies -o json.",
)
@brokers_option
@click.pass_context
def demo_command(ctx: click.Context, /, **given: Any) -> int:
    """Run the live pipeline on a simulated cluster and print incidents as they are published.

    Starts the embedded Kafka-compatible broker (unless --brokers or kafka.brokers is set), creates
    the topics, starts a processor worker and plays the scenario into the raw topics.
    Ctrl-C stops everything.

    \b
    Examples:
      gputriage demo
      gputriage demo --speed 100 -o json | jq .type
      gputriage demo --scenario my-incident.jsonl --follow
      gputriage demo --bridge slack-stub
    """
    from gputriage.demo.run import run_demo  # noqa: PLC0415 - aiokafka

    brokers = given.pop("brokers")
    out: IO[bytes] = sys.stdout.buffer
    if given.pop("bridge") == "slack-stub":  # reads the incidents back from JSON lines
        from gputriage.demo.slack_stub import SlackStub  # noqa: PLC0415 - only when asked

        given["output"] = "json"
        out = SlackStub(out)
    settings = settings_of(ctx)
    if brokers is not None:  # checked (a usage error) and put where the demo looks
        kafka_kwargs(settings, brokers)
        kafka = msgspec.structs.replace(settings.kafka, brokers=tuple(split_brokers(brokers)))
        settings = msgspec.structs.replace(settings, kafka=kafka)
    options = DemoSettings(**{k: v for k, v in given.items() if v is not None})
    return run_demo(settings, options, out, sys.stderr)
