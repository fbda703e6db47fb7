"""A generic JSON-POST bridge endpoint and a scriptable receiver, for the runner's tests.

The endpoint (kind ``jsonpost``) is a real endpoint module as the registry loads them
(``Settings`` + ``build``): ``[bridge] modules = {jsonpost = "tests.bridge_helpers"}``
serves it from a ``gputriage bridge jsonpost`` subprocess too. It POSTs each revision
as JSON to its route's ``target.url`` with ``Authorization: Bearer <token>`` (the token
from ``target.token_env`` / ``token_file``), and maps the answer onto the outcomes:
2xx accepted, 429 and 5xx retried (``Retry-After`` honoured), other 4xx rejected with
the receiver's body as the detail.

The :class:`Receiver` is an ``aiohttp.web`` server on 127.0.0.1 that records every
request (arrival time, body, token), checks the token and the body's shape (a bad
one is answered 400 and recorded as a violation, so a test fails), and answers from a
script: a queue of ``(status, headers, body)`` to give before answering 200.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
from aiohttp import web

from connectors.backoff import retry_after_seconds
from connectors.bridges.base import (
    Accepted,
    Delivered,
    Outcome,
    Rejected,
    Retry,
    Route,
    read_secret,
)
from connectors.bridges.scrub import Scrubber, route_secrets
from connectors.kafka.admin import ensure_topics
from schemas.codec import encode
from schemas.incidents import Evidence, Incident, PodInfo
from streams.bridges.ledger import Ledger, ledger_topic
from streams.bridges.metrics import BridgeMetrics
from streams.bridges.runner import BridgeRunner
from streams.bridges.settings import BridgeSettings
from tests.cli_helpers import clean_env
from tests.kafka_helpers import KafkaTestEnv, produce
from tests.paths import ROOT

KIND = "jsonpost"
T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[bridge.jsonpost]``: nothing a test needs but one knob to prove conversion."""

    user_agent: str = "gputriage-test"


class JsonPostEndpoint:
    """POST each revision as JSON; errors as values (see the module)."""

    kind = KIND

    def __init__(
        self, options: Settings, http: aiohttp.ClientSession, environ: Mapping[str, str] | None
    ) -> None:
        self.options = options
        self.http = http
        self.environ = environ
        self.closed = False

    def check_route(self, route: Route) -> str | None:
        if not route.target.get("url"):
            return "target.url is required"
        read_secret(route.target, "token", self.environ)  # SecretError: the runner says it
        return None

    async def deliver(
        self, incident: Incident, previous: Delivered | None, route: Route
    ) -> Outcome:
        token = read_secret(route.target, "token", self.environ)
        body = {
            "id": incident.id,
            "revision": incident.revision,
            "status": incident.status,
            "severity": incident.severity,
            "type": incident.type,
            "pods": [f"{p.namespace}/{p.name}" for p in incident.pods],
            "previous": previous.revision if previous is not None else 0,
            "attributes": incident.attributes,
        }
        headers = {
            "Authorization": f"Bearer {token.reveal()}",
            "User-Agent": self.options.user_agent,
        }
        try:
            async with self.http.post(route.target["url"], json=body, headers=headers) as answer:
                text = (await answer.text())[:500]
                if 200 <= answer.status < 300:
                    return Accepted(memo={"seen": str(incident.revision)})
                if answer.status == 429 or answer.status >= 500:
                    return Retry(f"HTTP {answer.status}", retry_after_seconds(answer.headers))
                return Rejected(f"HTTP {answer.status}", detail=text)
        except (aiohttp.ClientError, TimeoutError) as exc:
            return Retry(f"{exc.__class__.__name__}")

    async def close(self) -> None:
        self.closed = True


def build(
    options: Settings, http: aiohttp.ClientSession, environ: Mapping[str, str] | None = None
) -> JsonPostEndpoint:
    return JsonPostEndpoint(options, http, environ)


# -- the receiver ------------------------------------------------------------------------
@dataclass(frozen=True)
class Received:
    at: float
    """The event loop's clock on arrival (looptime's fake clock under looptime)."""
    body: dict[str, Any]
    token: str
    status: int
    """What the receiver answered."""

    @property
    def key(self) -> tuple[str, int]:
        return (self.body["id"], self.body["revision"])


REQUIRED = {"id": str, "revision": int, "status": str, "pods": list, "previous": int}


@dataclass
class Receiver:
    """The vendor stand-in (see the module); ``url`` once started."""

    token: str = "test-token"
    script: deque[tuple[int, dict[str, str], str]] = field(default_factory=deque)
    got: list[Received] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    url: str = ""
    delay: float = 0.0
    """Seconds each answer takes (a slow vendor: the request is recorded on arrival)."""
    failing: set[str] = field(default_factory=set)
    """Incident ids answered 503 for as long as they are in it."""
    held: int = 0
    """Requests recorded and not yet answered (inside :attr:`delay`): a kill while this
    is above zero lands with a delivery in flight."""

    def answer(self, *answers: tuple[int, dict[str, str], str]) -> None:
        """Queue answers given before the receiver goes back to 200."""
        self.script.extend(answers)

    async def _handle(self, request: web.Request) -> web.Response:
        at = asyncio.get_running_loop().time()
        token = request.headers.get("Authorization", "").removeprefix("Bearer ")
        try:
            body = await request.json()
        except ValueError:
            body = None
        problem = None
        if token != self.token:
            problem = "wrong or missing token"
        elif not isinstance(body, dict):
            problem = "body is not a JSON object"
        else:
            for name, kind in REQUIRED.items():
                if not isinstance(body.get(name), kind):
                    problem = f"{name} missing or not {kind.__name__}"
        if problem is not None:
            self.violations.append(problem)
            self.got.append(Received(at, body if isinstance(body, dict) else {}, token, 400))
            return web.Response(status=400, text=problem)
        assert isinstance(body, dict)
        answer: tuple[int, dict[str, str], str] = (200, {}, "ok")
        if body["id"] in self.failing:
            answer = (503, {}, "down for this one")
        elif self.script:
            answer = self.script.popleft()
        status, headers, text = answer
        self.got.append(Received(at, body, token, status))
        if self.delay:
            self.held += 1
            try:
                await asyncio.sleep(self.delay)  # a slow vendor, not a synchronisation
            finally:
                self.held -= 1
        return web.Response(status=status, headers=headers, text=text)

    def accepted(self) -> list[Received]:
        return [r for r in self.got if 200 <= r.status < 300]

    def accepted_keys(self) -> list[tuple[str, int]]:
        return [r.key for r in self.accepted()]


@contextlib.asynccontextmanager
async def receiving(receiver: Receiver | None = None) -> AsyncIterator[Receiver]:
    """A started :class:`Receiver` on a free loopback port."""
    receiver = receiver or Receiver()
    app = web.Application()
    app.router.add_post("/{tail:.*}", receiver._handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    receiver.url = f"http://127.0.0.1:{port}/deliver"
    try:
        yield receiver
    finally:
        await runner.cleanup()


# -- incidents and the bridge ------------------------------------------------------------
def incident(
    id: str,
    revision: int,
    status: str = "",
    *,
    severity: str = "page",
    type: str = "device_unhealthy_eviction",
    cluster: str = "c1",
    node: str = "",
    pods: Sequence[tuple[str, str]] = (("ns", "trainer-0"),),
) -> Incident:
    """A valid incident revision (``status`` defaults from the revision: open at 1). Each
    incident is on a node of its own unless ``node`` is given: incidents of one node are
    one storm group (:mod:`streams.bridges.storms`), and fold past three pages."""
    status = status or ("open" if revision == 1 else "updated")
    node = node or f"node-{id}"
    t = T0 + timedelta(seconds=revision)
    return Incident(
        id=id,
        type=type,
        status=status,  # type: ignore[arg-type]
        revision=revision,
        severity=severity,  # type: ignore[arg-type]
        cluster=cluster,
        node=node,
        pods=tuple(PodInfo(namespace=ns, name=name, role="evicted") for ns, name in pods),
        first_seen=T0,
        last_seen=t,
        resolved_at=t if status == "resolved" else None,
        summary=f"{type} on {node}",
        evidence=(Evidence(event_id=f"e{revision}", schema="xid.v1", time=t, text="XID 79"),),
    )


async def publish(kafka: KafkaTestEnv, incidents: Sequence[Incident]) -> None:
    """Put incident revisions on the incident topic, keyed by id (as the processor does)."""
    await produce(
        kafka.bootstrap,
        kafka.layout.incidents.name,
        [(inc.id.encode(), encode(inc)) for inc in incidents],
    )


def route(name: str, receiver: Receiver, **filters: Any) -> Route:
    target = {"url": receiver.url, "token_env": "TEST_BRIDGE_TOKEN"}
    return Route(name=name, target=target, **{k: frozenset(v) for k, v in filters.items()})


FAST = BridgeSettings(
    min_update_seconds=0,
    retry_initial_seconds=0.05,
    retry_max_seconds=0.2,
    commit_seconds=0.2,
    session_timeout_seconds=2,
    stop_timeout_seconds=5,
)
"""Settings for in-process runs: no update interval, short backoff, frequent commits."""


@dataclass
class Bridge:
    """A running in-process bridge (:func:`bridging`)."""

    runner: BridgeRunner
    metrics: BridgeMetrics
    task: asyncio.Task[None]
    stop: asyncio.Event

    def count(self, outcome: str, route: str = "r") -> float:
        value = self.metrics.registry.get_sample_value(
            "gputriage_bridge_deliveries_total",
            {"bridge": KIND, "route": route, "outcome": outcome},
        )
        return value or 0.0

    def sample(self, name: str, **labels: str) -> float:
        return self.metrics.registry.get_sample_value(name, {"bridge": KIND, **labels}) or 0.0


@contextlib.asynccontextmanager
async def bridging(
    kafka: KafkaTestEnv,
    routes: Sequence[Route],
    settings: BridgeSettings = FAST,
    *,
    group: str = "bridge-test",
    token: str = "test-token",
    wrap: Callable[[Any], Any] | None = None,
) -> AsyncIterator[Bridge]:
    """The real runner with the JSON-POST endpoint, in this loop, on this test's topics."""
    environ = {"TEST_BRIDGE_TOKEN": token}
    layout = kafka.layout
    ledger = ledger_topic(layout, group)
    await ensure_topics(kafka.kwargs, layout, extra=(ledger,))
    metrics = BridgeMetrics()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        runner = BridgeRunner(
            kind=KIND,
            endpoint=(wrap or _same)(build(Settings(), http, environ)),
            routes=routes,
            settings=settings,
            client_kwargs=kafka.kwargs,
            incident_topic=layout.incidents.name,
            dead_letter_topic=layout.dead_letters.name,
            ledger_topic=ledger.name,
            group_id=group,
            metrics=metrics,
            scrub=Scrubber(route_secrets(routes, environ)),
        )
        stop = asyncio.Event()
        task = asyncio.create_task(runner.run(stop))
        bridge = Bridge(runner, metrics, task, stop)
        try:
            yield bridge
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)


def _same(endpoint: Any) -> Any:
    return endpoint


async def read_ledger(kafka: KafkaTestEnv, group: str = "bridge-test") -> Ledger:
    """The ledger as a restarted bridge would read it."""
    ledger = Ledger(kafka.kwargs, ledger_topic(kafka.layout, group).name)
    await ledger.restore(30)
    return ledger


# -- the CLI in a subprocess -------------------------------------------------------------
def bridge_env(
    kafka: KafkaTestEnv,
    receiver: Receiver | Any,
    *,
    token_env: str = "TEST_BRIDGE_TOKEN",
    **common: Any,
) -> dict[str, str]:
    """Environment for ``gputriage bridge jsonpost`` on this test's topics and receiver:
    the kind from ``tests.bridge_helpers``, one route ``r``, the token in ``token_env``
    (set it yourself), fast settings, ``common`` over them."""
    values = {
        "min_update_seconds": 0,
        "retry_initial_seconds": 0.05,
        "retry_max_seconds": 0.2,
        "commit_seconds": 0.2,
        "session_timeout_seconds": 2,
        **common,
    }
    env = dict(kafka.env)
    env["GPUTRIAGE_BRIDGE__MODULES"] = '{jsonpost = "tests.bridge_helpers"}'
    env["GPUTRIAGE_BRIDGE__JSONPOST__ROUTES"] = (
        f'[{{name = "r", target = {{url = "{receiver.url}", token_env = "{token_env}"}}}}]'
    )
    for key, value in values.items():
        env[f"GPUTRIAGE_BRIDGE__{key.upper()}"] = str(value)
    return env


async def start_bridge(
    env: Mapping[str, str], out: Path, *args: str, kind: str = KIND
) -> asyncio.subprocess.Process:
    """``python -m gputriage bridge KIND ARGS`` (``jsonpost`` unless told) with ``env`` (over
    a clean environment); stdout and stderr go to ``out.stdout`` / ``out.stderr`` (appended)."""
    stdout = open(out.with_suffix(".stdout"), "ab")  # noqa: SIM115 - the child owns it
    stderr = open(out.with_suffix(".stderr"), "ab")  # noqa: SIM115
    try:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "gputriage",
            "bridge",
            kind,
            "--metrics-port",
            "0",
            *args,
            env=clean_env(env),
            stdout=stdout,
            stderr=stderr,
            cwd=ROOT,
        )
    finally:
        stdout.close()
        stderr.close()
