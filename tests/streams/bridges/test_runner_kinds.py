"""Every shipped kind plugs into the runner: loaded by name from the registry, its options
converted from an empty table, its routes checked, then an incident's open, update and
resolve delivered end to end through the real runner on the real broker.

The vendors' formats are each kind's own tests' business (their receivers validate the
published schemas); the stand-in here only answers each vendor's success, so that what
this checks is the seam: the module interface, outcomes as values, the ledger's memo
(Slack's channel and ts) carried from one revision to the next, and ``Periodic``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web

from connectors.bridges.base import Endpoint, Periodic, Route
from connectors.bridges.registry import KINDS, load, settings_type
from connectors.bridges.scrub import Scrubber, route_secrets
from connectors.kafka.admin import ensure_topics
from streams.bridges.ledger import ledger_topic
from streams.bridges.metrics import BridgeMetrics
from streams.bridges.runner import BridgeRunner
from streams.bridges.settings import kind_options
from tests.bridge_helpers import FAST, incident, publish
from tests.kafka_helpers import KafkaTestEnv, eventually

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(90)]

SECRET = "k1nd7e5t5ecret0123456789abcdef01"  # 32 characters: a PagerDuty integration key


@dataclass
class StandIn:
    """Answers every vendor's success; records (path, JSON body) of each request."""

    got: list[tuple[str, Any]] = field(default_factory=list)
    url: str = ""

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else None
        self.got.append((request.path, body))
        if request.path.startswith("/slack/"):
            ts = f"1700000000.{len(self.got):06d}"
            return web.json_response({"ok": True, "channel": "C0123ABCD", "ts": ts})
        if request.path == "/pagerduty":
            key = body.get("dedup_key", "") if isinstance(body, dict) else ""
            return web.json_response(
                {"status": "success", "message": "Event processed", "dedup_key": key},
                status=202,
            )
        return web.Response(status=200)


@contextlib.asynccontextmanager
async def standing_in() -> AsyncIterator[StandIn]:
    stand_in = StandIn()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", stand_in.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    stand_in.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"  # type: ignore[attr-defined]
    try:
        yield stand_in
    finally:
        await runner.cleanup()


def setup_of(kind: str, base: str) -> tuple[dict[str, Any], dict[str, str]]:
    """``[bridge.<kind>]`` (without routes) and the route target pointing at the stand-in."""
    if kind == "pagerduty":
        return {"url": f"{base}/pagerduty"}, {"routing_key_env": "KIND_SECRET"}
    if kind == "slack":
        return {"api_url": f"{base}/slack/", "channel_interval_seconds": 0}, {
            "channel": "C0123ABCD",
            "token_env": "KIND_SECRET",
        }
    if kind == "alertmanager":
        return {"urls": [base], "resend_interval_seconds": 0.2}, {"bearer_token_env": "KIND_SECRET"}
    assert kind == "webhook"
    return {}, {"url": f"{base}/hook", "token_env": "KIND_SECRET"}


@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_a_shipped_kind_runs_under_the_runner(kafka: KafkaTestEnv, kind: str) -> None:
    environ: Mapping[str, str] = {"KIND_SECRET": SECRET}
    module = load(kind)
    async with standing_in() as stand_in:
        table, target = setup_of(kind, stand_in.url)
        settings = msgspec.structs.replace(FAST, kinds={kind: table})
        options = kind_options(settings, kind, settings_type(module))
        route = Route(name="r", target=target)
        layout = kafka.layout
        ledger = ledger_topic(layout, f"kinds-{kind}")
        await ensure_topics(kafka.kwargs, layout, extra=(ledger,))
        metrics = BridgeMetrics()
        async with aiohttp.ClientSession() as http:
            endpoint = module.build(options, http, environ)
            assert isinstance(endpoint, Endpoint)
            assert endpoint.kind == kind
            assert endpoint.check_route(route) is None
            assert endpoint.check_route(Route(name="bad", target={"unknown_key": "x"})) is not None
            runner = BridgeRunner(
                kind=kind,
                endpoint=endpoint,
                routes=[route],
                settings=settings,
                client_kwargs=kafka.kwargs,
                incident_topic=layout.incidents.name,
                dead_letter_topic=layout.dead_letters.name,
                ledger_topic=ledger.name,
                group_id=f"kinds-{kind}",
                metrics=metrics,
                scrub=Scrubber(route_secrets([route], environ)),
            )
            import asyncio  # noqa: PLC0415

            stop = asyncio.Event()
            task = asyncio.create_task(runner.run(stop))
            try:
                for revision in (
                    incident("inc-k", 1),
                    incident("inc-k", 2, pods=[("ns", "trainer-0"), ("ns", "trainer-1")]),
                    incident("inc-k", 3, "resolved"),
                ):
                    await publish(kafka, [revision])
                    await eventually(
                        partial(_delivered, runner, revision.revision),
                        timeout=30,
                        what=f"{kind} revision {revision.revision}",
                    )
                if isinstance(endpoint, Periodic):
                    seen = len(stand_in.got)
                    await eventually(
                        lambda: len(stand_in.got) > seen, timeout=10, what="a periodic re-send"
                    )
            finally:
                stop.set()
                await asyncio.wait_for(task, 30)
    entry = runner.ledger.get("r", "inc-k")
    assert entry is not None
    assert (entry.revision, entry.status, entry.state) == (3, "resolved", "delivered")
    assert entry.outcome in {"accepted", "skipped"}
    retries = metrics.registry.get_sample_value(
        "gputriage_bridge_retries_total", {"bridge": kind, "route": "r"}
    )
    assert not retries, f"{kind} retried against a stand-in that always succeeds"
    assert stand_in.got, "nothing reached the stand-in"
    if kind == "slack":
        assert entry.memo.get("channel") == "C0123ABCD"
        assert entry.memo.get("ts"), "the parent message's ts is kept for the next revision"
        assert any(path.endswith("chat.update") for path, _ in stand_in.got)
    for _, body in stand_in.got:
        assert SECRET not in str(body) or kind == "pagerduty", "a secret in a body"


def _delivered(runner: BridgeRunner, revision: int) -> bool:
    entry = runner.ledger.get("r", "inc-k")
    return entry is not None and entry.revision >= revision and entry.state == "delivered"
