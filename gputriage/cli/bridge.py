"""``gputriage bridge <kind>``: deliver the incident topic to people (one vendor per process).

The kind's module (``connectors.bridges.<kind>``) is imported only when it runs; its
options and routes come from ``[bridge]`` and ``[bridge.<kind>]``
(:mod:`streams.bridges.settings`). No option takes a secret: routing keys, tokens,
webhook URLs and HMAC keys are named by ``*_env`` / ``*_file`` keys of a route's
``target`` and read from the environment or a file.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import click

from gputriage.cli.common import (
    CONTEXT,
    kafka_kwargs,
    settings_of,
    start_logging,
)
from gputriage.cli.options import brokers_option, lay_over, settings_options
from gputriage.errors import error
from gputriage.settings import SettingsError
from schemas.topics import topic_layout
from streams.bridges.settings import BridgeConfigError, BridgeSettings

log = logging.getLogger("gputriage.bridge")

FILE_ONLY = ("modules", "kinds")
"""``[bridge]`` keys that are tables (extra kinds, each kind's routes): file only."""


@click.command("bridge", context_settings=CONTEXT)
@click.argument("kind", metavar="KIND")
@brokers_option
@settings_options(BridgeSettings, exclude=FILE_ONLY)
@click.pass_context
def bridge_command(ctx: click.Context, /, *, kind: str, brokers: str | None, **given: Any) -> int:
    """Deliver incidents to one kind of endpoint until Ctrl-C or SIGTERM.

    KIND is one of: pagerduty, slack, alertmanager, webhook (or a kind of
    bridge.modules). Each revision is delivered once per matching route, in order;
    what was delivered is kept in a compacted ledger topic, so after a restart only
    a revision whose delivery was never confirmed is sent again, with the same dedup
    key (see docs/bridges.md).

    \b
    Examples:
      gputriage --config /etc/gputriage.toml bridge pagerduty
      PD_ROUTING_KEY=... gputriage bridge pagerduty --metrics-port 0
    """
    from gputriage.bridge import install_scrubber, prepare, serve  # noqa: PLC0415

    settings = settings_of(ctx)
    bridge = lay_over(settings.bridge, given, where="bridge")
    where = f" in {settings.origin}" if settings.origin else ""
    environ = dict(os.environ)
    try:
        prepared = prepare(kind, bridge, settings.processor.app_id, environ)
    except BridgeConfigError as exc:
        raise SettingsError(f"invalid configuration{where}: {exc}") from None
    kwargs = kafka_kwargs(settings, brokers)
    start_logging(settings)
    install_scrubber(prepared.scrub)
    try:
        return asyncio.run(
            serve(
                prepared,
                kwargs,
                topic_layout(settings.topics),
                environ,
                metrics_port=bridge.metrics_port,
                metrics_addr=bridge.metrics_addr,
            )
        )
    except BridgeConfigError as exc:
        raise SettingsError(f"invalid configuration{where}: {exc}") from None
    except Exception as exc:
        from aiokafka.errors import KafkaError  # noqa: PLC0415

        from connectors.kafka.admin import TopicError  # noqa: PLC0415

        if isinstance(exc, KafkaError | TopicError | OSError):
            message = prepared.scrub(f"Kafka: {exc}" if isinstance(exc, KafkaError) else str(exc))
            log.error("%s; exiting (undelivered incidents are re-read)", message)
            error(message)
            return 1
        raise
