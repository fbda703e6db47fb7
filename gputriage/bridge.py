"""Starting one bridge process: the kind's module, its routes, Kafka, ``/metrics``, signals
(what :mod:`gputriage.process` is to the processor's worker).

:func:`prepare` does everything that can fail on a configuration mistake, before any
connection; :func:`serve` builds the endpoint, checks every route's target and secrets (a
missing secret stops the process with one line naming the variable or file, never a
value), creates the ledger topic and runs the runner until SIGINT/SIGTERM.

Traps: the routes' secret values are read here only to be scrubbed (a filter on every
handler masks them in any line); the HTTP session is shared by the routes and closed
after the runner. docs/bridges.md, design notes: starting a bridge.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from connectors.bridges.base import Route, SecretError
from connectors.bridges.registry import UnknownKind, load, settings_type
from connectors.bridges.scrub import Scrubber, route_secrets
from connectors.kafka.admin import ensure_topics
from connectors.signals import stop_on_signals
from schemas.topics import TopicLayout
from streams.bridges.ledger import ledger_topic
from streams.bridges.metrics import BridgeMetrics
from streams.bridges.runner import BridgeRunner
from streams.bridges.settings import (
    BridgeConfigError,
    BridgeSettings,
    group_id,
    kind_options,
    routes_of,
)

log = logging.getLogger("gputriage.bridge")


@dataclass(frozen=True)
class Prepared:
    """A bridge whose configuration holds together (nothing connected yet)."""

    kind: str
    module: ModuleType
    options: Any
    routes: tuple[Route, ...]
    settings: BridgeSettings
    group_id: str
    scrub: Scrubber


def prepare(
    kind: str,
    settings: BridgeSettings,
    app_id: str,
    environ: Mapping[str, str],
    group: str | None = None,
) -> Prepared:
    """The kind's module, options and routes; :class:`BridgeConfigError` naming the key."""
    try:
        module = load(kind, settings.modules)
    except UnknownKind as exc:
        raise BridgeConfigError(str(exc)) from None
    options = kind_options(settings, kind, settings_type(module))
    try:
        routes = tuple(r.route() for r in routes_of(settings, kind))
    except ValueError as exc:  # checked at load already; kept for settings built in code
        raise BridgeConfigError(f"bridge.{exc}") from None
    if not routes:
        raise BridgeConfigError(
            f"bridge.{kind}.routes: no routes configured (add [[bridge.{kind}.routes]] with a "
            "name and a target)"
        )
    scrub = Scrubber(route_secrets(routes, environ))
    return Prepared(
        kind, module, options, routes, settings, group or group_id(settings, app_id, kind), scrub
    )


def install_scrubber(scrub: Scrubber) -> None:
    """Mask the routes' secrets in every log line, whoever logs it."""
    for handler in logging.getLogger().handlers:
        handler.addFilter(scrub.filter)


async def serve(
    prepared: Prepared,
    client_kwargs: Mapping[str, Any],
    layout: TopicLayout,
    environ: Mapping[str, str],
    *,
    metrics_port: int | None,
    metrics_addr: str,
    stop: asyncio.Event | None = None,
) -> int:
    """Run the bridge until a signal (or ``stop``); the exit status."""
    import aiohttp  # noqa: PLC0415 - only where a bridge runs

    settings = prepared.settings
    timeout = aiohttp.ClientTimeout(total=settings.http_timeout_seconds)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        endpoint = prepared.module.build(prepared.options, http, environ)
        try:
            for index, route in enumerate(prepared.routes):
                try:
                    problem = endpoint.check_route(route)
                except (SecretError, ValueError) as exc:
                    problem = str(exc)
                if problem is not None:
                    problem = problem.removeprefix(f"route {route.name}: ")
                    raise BridgeConfigError(
                        f"bridge.{prepared.kind}.routes[{index}] ({route.name}): "
                        f"{prepared.scrub(problem)}"
                    )
        except BaseException:
            await endpoint.close()
            raise
        metrics = BridgeMetrics()
        ledger = ledger_topic(layout, prepared.group_id)
        try:
            if metrics_port is not None:  # bound before Kafka: a port in use is found at once
                port = metrics.serve(metrics_port, metrics_addr)  # MetricsUnavailable
                log.info("metrics on http://%s:%d/metrics", metrics_addr, port)
            created = await ensure_topics(client_kwargs, layout, extra=(ledger,))
        except BaseException:
            await endpoint.close()
            raise
        if created:
            log.info("created topics %s", ", ".join(created))
        runner = BridgeRunner(
            kind=prepared.kind,
            endpoint=endpoint,
            routes=prepared.routes,
            settings=settings,
            client_kwargs=client_kwargs,
            incident_topic=layout.incidents.name,
            dead_letter_topic=layout.dead_letters.name,
            ledger_topic=ledger.name,
            group_id=prepared.group_id,
            metrics=metrics,
            scrub=prepared.scrub,
        )
        stop = stop or asyncio.Event()
        stop_on_signals(stop, give_up_after_seconds=settings.stop_timeout_seconds + 5.0)
        log.info(
            "bridge %s starting: group %s, routes %s, ledger %s",
            prepared.kind,
            prepared.group_id,
            ", ".join(r.name for r in prepared.routes),
            ledger.name,
        )
        await runner.run(stop)
        log.info("bridge %s stopped", prepared.kind)
    return 0
