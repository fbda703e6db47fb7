"""``gputriage demo``: the live pipeline on a simulated cluster (see :mod:`gputriage.demo.run`).

Options default to ``None``: :class:`gputriage.demo.run.DemoOptions` owns the
defaults. The demo module (aiokafka, the broker) is imported only when run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, Any

import click
import msgspec

from connectors.kafka.config import split_brokers
from gputriage.cli.common import (
    CONTEXT,
    FiniteRange,
    StructDefault,
    kafka_kwargs,
    settings_of,
)
from gputriage.cli.options import brokers_option

# The defaults, repeated for --help only (importing DemoOptions would import aiokafka);
# tests/cli/test_cli.py holds them equal to DemoOptions'.
HELP_DEFAULTS = {"speed": 30.0, "output": "lines", "linger_s": 10.0}


@click.command("demo", context_settings=CONTEXT)
@click.option(
    "--scenario",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Recorded events to play (default: the packaged scenario, as in examples/scenario.jsonl).",
)
@click.option(
    "--speed",
    type=FiniteRange(min=1.0, max=1000.0),
    cls=StructDefault,
    show_default=str(HELP_DEFAULTS["speed"]),
    help="Play the scenario this many times faster than real time (windows scale with it).",
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["lines", "json"]),
    cls=StructDefault,
    show_default=str(HELP_DEFAULTS["output"]),
    help="lines: one readable line per incident revision; json: JSON lines.",
)
@click.option(
    "--linger",
    "linger_s",
    type=FiniteRange(min=0.0, max=86400.0),
    cls=StructDefault,
    show_default=str(HELP_DEFAULTS["linger_s"]),
    help="After the scenario, stop once no incident arrived for this many seconds.",
)
@click.option(
    "--follow", is_flag=True, default=None, help="Keep running after the scenario, until Ctrl-C."
)
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
    from gputriage.demo.run import DemoOptions, run_demo  # noqa: PLC0415 - aiokafka

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
    options = DemoOptions(**{k: v for k, v in given.items() if v is not None})
    return run_demo(settings, options, out, sys.stderr)
