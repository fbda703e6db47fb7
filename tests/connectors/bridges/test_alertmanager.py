"""The Alertmanager endpoint against a real Alertmanager, and against a recording receiver.

The real one (Debian's ``prometheus-alertmanager``, :mod:`tests.alertmanager_helpers`)
is read back through ``GET /api/v2/alerts``: what it stores is the test. The recording
receiver (an ``aiohttp.web`` server) checks every POST against the ``postableAlerts``
shape of Alertmanager's OpenAPI spec, answers as scripted (400, 422, 429, 503) and keeps
what it got: the resend timing is read there, driven by ``tick(now)`` with explicit
times, never by waiting for an interval.

The incidents are real: scenarios run through the core (:mod:`tests.core_helpers`).
"""

from __future__ import annotations

import asyncio
import base64
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import msgspec
import pytest
import pytest_asyncio
from aiohttp import web

from connectors.bridges.alertmanager import AlertmanagerEndpoint, Settings, alertname, build
from connectors.bridges.base import (
    Accepted,
    Delivered,
    Endpoint,
    Periodic,
    Rejected,
    Retry,
    Route,
    Skipped,
)
from gputriage.demo.broker import free_port
from schemas.codec import RecordError, convert_as, dumps, loads
from schemas.incidents import Evidence, Incident, PodInfo
from tests import alertmanager_helpers
from tests.alertmanager_helpers import RunningAlertmanager
from tests.core_helpers import run
from tests.factories import Cluster, term
from tests.kafka_helpers import eventually
from tests.tools import skip_missing_tool

MIN = 60.0
ROUTE = Route(name="am")
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


# -- incidents through the core --------------------------------------------------------
def oom_lifecycle() -> list[Incident]:
    """host_oom_kill: open, updated (a second kill), resolved (quiet)."""
    c = Cluster()
    c.node("n2", 0)
    c.pod("n2", "srv", 1)
    c.pod("n2", "srv", 2 * MIN, restarts=1, last=term(2 * MIN - 1, "OOMKilled", 137))
    c.pod("n2", "srv", 4 * MIN, restarts=2, last=term(4 * MIN - 1, "OOMKilled", 137))
    c.tick(60 * MIN)
    revisions = [r for r in run(c.events) if r.type == "host_oom_kill"]
    assert [r.status for r in revisions] == ["open", "updated", "resolved"]
    return revisions


def app_fault_escalation() -> list[Incident]:
    """gpu_app_fault: info for two episodes, ticket at the third, then resolved."""
    c = Cluster()
    c.node("n1", 0)
    c.pod("n1", "a", 1)
    c.bind("n1", 2, "GPU-1", "0000:9b:00.0", ["a"])
    for k in range(3):
        c.xid("n1", (10 + 20 * k) * MIN, 13)
    c.tick(200 * MIN)
    revisions = [r for r in run(c.events) if r.type == "gpu_app_fault"]
    assert [r.severity for r in revisions] == ["info", "info", "ticket", "ticket"]
    return revisions


def delivered(incident: Incident, outcome: object) -> Delivered:
    """What the runner's ledger keeps after an accepted revision."""
    assert isinstance(outcome, Accepted), outcome
    assert outcome.memo is not None
    return Delivered(revision=incident.revision, status=incident.status, memo=outcome.memo)


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# -- fixtures ------------------------------------------------------------------------------
@pytest.fixture
def am_exe() -> str:
    exe = alertmanager_helpers.binary()
    if exe is None:
        skip_missing_tool(alertmanager_helpers.MISSING)
    return exe


@pytest.fixture
def alertmanager(am_exe: str, tmp_path: Path) -> Iterator[RunningAlertmanager]:
    running = alertmanager_helpers.start(tmp_path, am_exe)
    try:
        yield running
    finally:
        running.stop()


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


@dataclass
class Receiver:
    """A stand-in Alertmanager that validates ``POST /api/v2/alerts`` and records it."""

    url: str = ""
    batches: list[list[dict[str, Any]]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    script: list[tuple[int, bytes, dict[str, str]]] = field(default_factory=list)
    """Answers to give, in order (then 200)."""

    gate: asyncio.Event | None = None
    """When set, the next request waits for it before it is taken (a POST still on its way:
    Alertmanager applies what it receives last)."""
    held: int = 0

    async def handle(self, request: web.Request) -> web.Response:
        gate, self.gate = self.gate, None
        if gate is not None:
            self.held += 1
            await gate.wait()
        self.headers.append(dict(request.headers))
        problems = []
        if request.content_type != "application/json":
            problems.append(f"Content-Type {request.content_type}")
        try:
            body = loads(await request.read())
        except RecordError as exc:
            body, problems = None, [*problems, str(exc)]
        if not isinstance(body, list):
            problems.append("the body is not a JSON array")
        else:
            for n, alert in enumerate(body):
                problems += [f"{n}: {p}" for p in _postable_alert_problems(alert)]
            self.batches.append(body)
        if problems:
            self.violations += problems
            return web.Response(status=400, text=dumps("; ".join(problems)).decode())
        if self.script:
            status, text, headers = self.script.pop(0)
            return web.Response(status=status, body=text, headers=headers)
        return web.Response(status=200)

    def last(self) -> list[dict[str, Any]]:
        assert self.batches, "nothing was posted"
        return self.batches[-1]


def _postable_alert_problems(alert: object) -> list[str]:
    """The ``postableAlert`` definition of ``api/v2/openapi.yaml``, and Alertmanager's own
    checks (``types.Alert.Validate``): labels required, valid names, a start before the end."""
    if not isinstance(alert, dict):
        return ["not an object"]
    problems = [f"unknown field {k}" for k in alert if k not in _FIELDS]
    labels = alert.get("labels")
    if not isinstance(labels, dict) or not labels:
        return [*problems, "labels is required and must not be empty"]
    problems += [f"label name {k!r}" for k in labels if not LABEL_NAME.match(k)]
    problems += [f"label {k} is not a non-empty string" for k, v in labels.items() if not v]
    if "alertname" not in labels:
        problems.append("no alertname label")
    notes = alert.get("annotations", {})
    if not isinstance(notes, dict) or not all(isinstance(v, str) for v in notes.values()):
        problems.append("annotations must map to strings")
    times = {}
    for key in ("startsAt", "endsAt"):
        if key in alert:
            try:
                times[key] = parse_time(alert[key])
            except (TypeError, ValueError):
                problems.append(f"{key} is not RFC 3339: {alert[key]!r}")
            else:
                if times[key].tzinfo is None:
                    problems.append(f"{key} has no offset")
    if len(times) == 2 and times["endsAt"] < times["startsAt"]:
        problems.append("start time must be before end time")
    generator = alert.get("generatorURL", "")
    if generator and not urlsplit(generator).scheme:
        problems.append(f"generatorURL must be of type uri: {generator!r}")
    return problems


_FIELDS = frozenset({"labels", "annotations", "startsAt", "endsAt", "generatorURL"})


@pytest_asyncio.fixture
async def receivers() -> AsyncIterator[list[Receiver]]:
    """Two recording replicas (``receivers[0]``, ``receivers[1]``); no violation allowed."""
    made: list[Receiver] = []
    runners: list[web.AppRunner] = []
    for _ in range(2):
        receiver = Receiver()
        app = web.Application()
        app.router.add_post("/api/v2/alerts", receiver.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        receiver.url = f"http://127.0.0.1:{port}"
        made.append(receiver)
        runners.append(runner)
    try:
        yield made
    finally:
        for runner in runners:
            await runner.cleanup()
    for receiver in made:
        assert receiver.violations == [], receiver.violations


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def endpoint(
    http: aiohttp.ClientSession, *urls: str, clock: Clock | None = None, **options: Any
) -> AlertmanagerEndpoint:
    opts = Settings(urls=urls, **options)
    ep = build(opts, http)
    assert isinstance(ep, AlertmanagerEndpoint)
    if clock is not None:
        return AlertmanagerEndpoint(opts, http, clock=clock)
    return ep


def the_alert(am: RunningAlertmanager) -> dict[str, Any]:
    alerts = am.alerts()
    assert len(alerts) == 1, alerts
    return alerts[0]


# -- a real Alertmanager -------------------------------------------------------------------
@pytest.mark.asyncio
async def test_open_update_resolve_reach_a_real_alertmanager_as_one_alert(
    alertmanager: RunningAlertmanager, http: aiohttp.ClientSession
) -> None:
    opened, updated, resolved = oom_lifecycle()
    ep = endpoint(http, alertmanager.url)
    assert isinstance(ep, Endpoint)
    assert isinstance(ep, Periodic)
    assert ep.check_route(ROUTE) is None

    first = await ep.deliver(opened, None, ROUTE)
    alert = the_alert(alertmanager)
    fixed = {
        "alertname": "HostOomKill",
        "severity": "warning",
        "cluster": "c1",
        "node": "n2",
        "namespace": "ns",
        "incident_id": opened.id,
    }
    assert alert["labels"] == fixed
    assert alert["annotations"]["summary"] == opened.summary
    assert alert["annotations"]["incident_type"] == "host_oom_kill"
    assert "pod ns/srv (oom_killed" in alert["annotations"]["description"]
    assert alert["generatorURL"] == f"urn:gputriage:incident:{opened.id}"
    assert parse_time(alert["startsAt"]) == opened.first_seen
    ahead = parse_time(alert["endsAt"]) - datetime.now(UTC)
    assert timedelta(minutes=3) < ahead <= timedelta(minutes=4), "4 intervals of 60 s ahead"

    second = await ep.deliver(updated, delivered(opened, first), ROUTE)
    again = the_alert(alertmanager)
    assert again["labels"] == fixed, "labels never change"
    assert again["fingerprint"] == alert["fingerprint"]
    assert again["annotations"]["summary"] == updated.summary != opened.summary
    assert again["annotations"]["evidence"].count("\n") == 1, "two evidence lines now"

    third = await ep.deliver(resolved, delivered(updated, second), ROUTE)
    assert isinstance(third, Accepted)
    assert alertmanager.alerts() == [], "resolved: endsAt passed, no longer active"
    assert third.memo is not None
    assert "resend_until" in third.memo


@pytest.mark.asyncio
async def test_ticks_push_endsat_ahead_so_a_stalled_bridge_never_resolves_falsely(
    alertmanager: RunningAlertmanager, http: aiohttp.ClientSession
) -> None:
    opened = oom_lifecycle()[0]
    ep = endpoint(http, alertmanager.url)
    await ep.deliver(opened, None, ROUTE)
    before = parse_time(the_alert(alertmanager)["endsAt"])
    now = float(int(datetime.now(UTC).timestamp()))  # Alertmanager keeps milliseconds
    await ep.tick(now + 120)  # two intervals later, as the runner's clock says
    alert = the_alert(alertmanager)
    assert parse_time(alert["endsAt"]) == datetime.fromtimestamp(now + 120 + 240, UTC)
    assert parse_time(alert["endsAt"]) > before
    assert alert["annotations"]["summary"] == opened.summary, "a tick keeps the annotations"


@pytest.mark.asyncio
async def test_a_restarted_bridge_restores_the_firing_alert_and_keeps_sending_it(
    am_exe: str, tmp_path: Path, http: aiohttp.ClientSession
) -> None:
    opened, updated, _ = oom_lifecycle()
    old = alertmanager_helpers.start(tmp_path / "old", am_exe)
    fresh = alertmanager_helpers.start(tmp_path / "fresh", am_exe)
    try:
        ep = endpoint(http, old.url)
        first = await ep.deliver(opened, None, ROUTE)
        second = await ep.deliver(updated, delivered(opened, first), ROUTE)
        ledger = {(ROUTE.name, updated.id): delivered(updated, second)}
        await ep.close()
        sent = the_alert(old)

        # A new process: only the ledger is left, and a replica that knows nothing.
        restarted = endpoint(http, old.url, fresh.url)
        assert restarted.check_route(ROUTE) is None
        restarted.restore(ledger)
        assert fresh.alerts() == []
        now = float(int(datetime.now(UTC).timestamp()))  # Alertmanager keeps milliseconds
        await restarted.tick(now)
        for am in (old, fresh):
            alert = the_alert(am)
            assert alert["labels"] == sent["labels"]
            assert alert["annotations"] == sent["annotations"]
            assert alert["startsAt"] == sent["startsAt"]
            # Alertmanager keeps the later of two explicit endsAt (types.Alert.Merge).
            assert parse_time(alert["endsAt"]) >= datetime.fromtimestamp(now + 240, UTC)
        assert parse_time(the_alert(fresh)["endsAt"]) == datetime.fromtimestamp(now + 240, UTC)
        assert the_alert(fresh)["fingerprint"] == sent["fingerprint"]
    finally:
        old.stop()
        fresh.stop()


@pytest.mark.asyncio
async def test_a_severity_change_is_a_new_alert_and_the_old_one_ends(
    alertmanager: RunningAlertmanager, http: aiohttp.ClientSession
) -> None:
    revisions = app_fault_escalation()
    ep = endpoint(http, alertmanager.url)
    previous: Delivered | None = None
    seen: list[dict[str, Any]] = []
    for inc in revisions[:3]:
        outcome = await ep.deliver(inc, previous, ROUTE)
        previous = delivered(inc, outcome)
        seen.append(the_alert(alertmanager))
    assert [a["labels"]["severity"] for a in seen] == ["info", "info", "warning"]
    info, escalated = seen[1]["labels"], seen[2]["labels"]
    assert {**info, "severity": "warning"} == escalated, "only severity differs"
    assert seen[0]["fingerprint"] == seen[1]["fingerprint"] != seen[2]["fingerprint"]
    assert info["alertname"] == "GpuAppFault"
    await ep.deliver(revisions[3], previous, ROUTE)
    assert alertmanager.alerts() == []


@pytest.mark.asyncio
async def test_alertmanager_refusing_an_alert_is_rejected_with_its_own_text(
    alertmanager: RunningAlertmanager, http: aiohttp.ClientSession
) -> None:
    opened, _, resolved = oom_lifecycle()
    assert resolved.resolved_at is not None
    broken = msgspec.structs.replace(resolved, resolved_at=opened.first_seen - timedelta(minutes=1))
    ep = endpoint(http, alertmanager.url)
    outcome = await ep.deliver(broken, None, ROUTE)
    assert isinstance(outcome, Rejected), outcome
    assert outcome.reason.startswith("HTTP 400 from http://127.0.0.1:")
    assert outcome.detail == "start time must be before end time"
    assert alertmanager.alerts() == []


@pytest.mark.asyncio
async def test_an_empty_label_is_left_out_as_alertmanager_drops_it(
    alertmanager: RunningAlertmanager, http: aiohttp.ClientSession
) -> None:
    opened = oom_lifecycle()[0]
    nodeless = msgspec.structs.replace(opened, node="", pods=())
    ep = endpoint(http, alertmanager.url)
    outcome = await ep.deliver(nodeless, None, ROUTE)
    labels = loads(delivered(nodeless, outcome).memo["alert"])["labels"]
    assert "node" not in labels
    assert "namespace" not in labels
    assert the_alert(alertmanager)["labels"] == labels, "what we keep is what it stores"


# -- the recording receiver: timing, replicas, answers -------------------------------------
@pytest.mark.asyncio
async def test_resolved_alerts_are_resent_for_five_minutes_then_dropped(
    receivers: list[Receiver], http: aiohttp.ClientSession
) -> None:
    opened, _, resolved = oom_lifecycle()
    assert resolved.resolved_at is not None
    t = 1_900_000_000.0
    clock = Clock(t)
    [rx, _] = receivers
    ep = endpoint(http, rx.url, clock=clock)
    first = await ep.deliver(opened, None, ROUTE)
    [posted] = rx.last()
    assert parse_time(posted["endsAt"]) == datetime.fromtimestamp(t + 240, UTC)

    await ep.tick(t + 60)
    [kept] = rx.last()
    assert parse_time(kept["endsAt"]) == datetime.fromtimestamp(t + 60 + 240, UTC)

    clock.now = t + 90
    await ep.deliver(resolved, delivered(opened, first), ROUTE)
    for now in (t + 150, t + 90 + 299):
        await ep.tick(now)
        [again] = rx.last()
        assert parse_time(again["endsAt"]) == resolved.resolved_at, "the resolve time, as sent"
        assert again["labels"] == posted["labels"]
    count = len(rx.batches)
    await ep.tick(t + 90 + 300)
    assert len(rx.batches) == count, "past the window: nothing left to send"


@pytest.mark.asyncio
async def test_a_restored_resolved_entry_is_resent_until_its_window_ends(
    receivers: list[Receiver], http: aiohttp.ClientSession
) -> None:
    opened, _, resolved = oom_lifecycle()
    t = 1_900_000_000.0
    [rx, _] = receivers
    ep = endpoint(http, rx.url, clock=Clock(t))
    first = await ep.deliver(opened, None, ROUTE)
    done = await ep.deliver(resolved, delivered(opened, first), ROUTE)
    ledger = {(ROUTE.name, resolved.id): delivered(resolved, done)}

    restarted = endpoint(http, rx.url, clock=Clock(t + 30))
    restarted.restore(ledger)
    await restarted.tick(t + 30)
    [again] = rx.last()
    assert parse_time(again["endsAt"]) == resolved.resolved_at
    count = len(rx.batches)
    await restarted.tick(t + 301)
    assert len(rx.batches) == count


@pytest.mark.asyncio
async def test_every_replica_gets_every_alert_and_one_that_missed_it_catches_up(
    receivers: list[Receiver], http: aiohttp.ClientSession
) -> None:
    opened = oom_lifecycle()[0]
    up, down = receivers
    down.script = [(503, b'"not ready"', {})]
    t = 1_900_000_000.0
    ep = endpoint(http, up.url, down.url, clock=Clock(t))
    outcome = await ep.deliver(opened, None, ROUTE)
    assert isinstance(outcome, Accepted), "one replica took it"
    assert len(up.batches) == len(down.batches) == 1
    await ep.tick(t + 60)
    assert up.last() == down.last(), "the next tick sends the whole set to both"
    assert down.last()[0]["labels"]["incident_id"] == opened.id


@pytest.mark.asyncio
async def test_5xx_429_and_network_errors_are_retried_400_and_422_rejected(
    receivers: list[Receiver], http: aiohttp.ClientSession
) -> None:
    opened = oom_lifecycle()[0]
    rx, other = receivers
    ep = endpoint(http, rx.url, other.url)
    rx.script = [(500, b"boom", {})]
    other.script = [(429, b"slow down", {"Retry-After": "7"})]
    outcome = await ep.deliver(opened, None, ROUTE)
    assert isinstance(outcome, Retry), outcome
    assert outcome.after_seconds == 7.0
    assert outcome.reason == f"HTTP 500 from {rx.url}/api/v2/alerts: boom"

    rx.script = [(400, b'"invalid label set: invalid name \\"bad-name\\""', {})]
    other.script = [(500, b"", {})]
    outcome = await ep.deliver(opened, None, ROUTE)
    assert isinstance(outcome, Rejected), outcome
    assert outcome.detail == 'invalid label set: invalid name "bad-name"'

    one = endpoint(http, rx.url)
    rx.script = [(422, b'{"code":602,"message":"0.labels in body is required"}', {})]
    outcome = await one.deliver(opened, None, ROUTE)
    assert isinstance(outcome, Rejected)
    assert outcome.detail == "0.labels in body is required"

    closed = endpoint(http, f"http://127.0.0.1:{free_port()}")
    outcome = await closed.deliver(opened, None, ROUTE)
    assert isinstance(outcome, Retry), outcome
    assert outcome.reason.startswith(
        "network error: ClientConnectorError posting to http://127.0.0.1:"
    )


@pytest.mark.asyncio
async def test_an_update_nobody_would_see_is_skipped_and_the_ticks_carry_it(
    receivers: list[Receiver], http: aiohttp.ClientSession
) -> None:
    opened = oom_lifecycle()[0]
    rx = receivers[0]
    t = 1_900_000_000.0
    ep = endpoint(http, rx.url, clock=Clock(t))
    first = await ep.deliver(opened, None, ROUTE)
    later = msgspec.structs.replace(
        opened, revision=2, status="updated", last_seen=opened.last_seen + timedelta(minutes=1)
    )
    outcome = await ep.deliver(later, delivered(opened, first), ROUTE)
    assert isinstance(outcome, Skipped), outcome
    assert len(rx.batches) == 1
    await ep.tick(t + 60)
    assert len(rx.batches) == 2


@pytest.mark.asyncio
async def test_credentials_come_from_the_route_and_never_show(
    receivers: list[Receiver], http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    opened = oom_lifecycle()[0]
    rx = receivers[0]
    token = "tok-3f9a-very-secret"
    env = {"AM_TOKEN": token}
    opts = Settings(urls=(rx.url,))
    bearer = Route(name="b", target={"bearer_token_env": "AM_TOKEN"})
    ep = AlertmanagerEndpoint(opts, http, env)
    assert ep.check_route(bearer) is None
    outcome = await ep.deliver(opened, None, bearer)
    assert rx.headers[-1]["Authorization"] == f"Bearer {token}"
    assert token not in repr(outcome)

    password = tmp_path / "am-password"
    password.write_text("pw-secret\n", encoding="utf-8")
    basic = Route(name="p", target={"username": "bridge", "password_file": str(password)})
    assert ep.check_route(basic) is None
    rx.script = [(500, b"", {})]
    outcome = await ep.deliver(opened, None, basic)
    assert isinstance(outcome, Retry)
    assert (
        rx.headers[-1]["Authorization"] == "Basic " + base64.b64encode(b"bridge:pw-secret").decode()
    )
    assert "pw-secret" not in repr(outcome)

    missing = Route(name="m", target={"bearer_token_env": "NOT_SET"})
    error = ep.check_route(missing)
    assert error is not None
    assert "NOT_SET" in error
    assert ep.check_route(Route(name="t", target={"token": token})) == (
        "route t: unknown alertmanager target keys ['token']"
    )
    assert ep.check_route(Route(name="u", target={"password_env": "AM_TOKEN"})) is not None


def test_options_that_cannot_work_are_refused_at_build() -> None:
    session: Any = None  # build never touches the session
    for bad, message in [
        (Settings(urls=()), "at least one"),
        (Settings(urls=("am:9093",)), "not an http(s) URL"),
        (Settings(urls=("http://u:pw@am:9093",)), "no credentials in a URL"),
        (Settings(generator_url="/incidents/{id}"), "not an absolute URI"),
        (Settings(generator_url="https://g/{incident}"), "bad template"),
        (Settings(runbook_url="https://r/{nope}"), "bad template"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            build(bad, session)
    with pytest.raises(RecordError):
        convert_as({"url": "http://am:9093"}, Settings)
    with pytest.raises(RecordError):
        convert_as({"resend_interval_seconds": 0}, Settings)


def test_alertname_is_the_type_in_camel_case() -> None:
    assert alertname("device_unhealthy_eviction") == "DeviceUnhealthyEviction"
    assert alertname("xid_repeat") == "XidRepeat"


@pytest.mark.asyncio
async def test_a_huge_incident_is_clipped_with_counts_and_its_memo_stays_small(
    receivers: list[Receiver], http: aiohttp.ClientSession
) -> None:
    opened = oom_lifecycle()[0]
    pods = tuple(
        PodInfo(namespace="ns", name=f"trainer-{i:03d}", owner_kind="Job", owner_name="t")
        for i in range(200)
    )
    evidence = tuple(
        Evidence(event_id=f"e{i}", schema="pod.v1", time=opened.first_seen, text="x" * 180)
        for i in range(40)
    )
    huge = msgspec.structs.replace(
        opened, pods=pods, evidence=evidence, evidence_omitted=12, summary="s" * 5000
    )
    rx = receivers[0]
    outcome = await endpoint(http, rx.url).deliver(huge, None, ROUTE)
    memo = delivered(huge, outcome).memo
    assert sum(len(v) for v in memo.values()) < 5000
    notes = rx.last()[0]["annotations"]
    shown = notes["description"].count("\npod ")
    assert notes["description"].endswith(f"… {200 - shown} more pods")
    assert 0 < shown < 200
    lines = notes["evidence"].split("\n")
    assert lines[-1] == f"… {40 - (len(lines) - 1) + 12} more events"
    assert len(notes["summary"]) == 1024
    assert notes["summary"].endswith("…[clipped]")
    assert rx.last()[0]["labels"]["incident_id"] == opened.id, "ids are never cut"


@pytest.mark.asyncio
async def test_a_tick_sends_at_most_256_alerts_a_post_with_each_routes_credentials(
    receivers: list[Receiver], http: aiohttp.ClientSession
) -> None:
    opened = oom_lifecycle()[0]
    rx = receivers[0]
    t = 1_900_000_000.0
    env = {"TOKEN_A": "a-token"}
    ep = AlertmanagerEndpoint(Settings(urls=(rx.url,)), http, env, clock=Clock(t))
    routed = Route(name="a", target={"bearer_token_env": "TOKEN_A"})
    ledger: dict[tuple[str, str], Delivered] = {}
    first = await ep.deliver(opened, None, ROUTE)
    for n in range(300):  # the same incident under 300 ids, as a busy ledger holds them
        ledger[(routed.name, f"{opened.id}-{n}")] = delivered(opened, first)
    rx.batches.clear()
    rx.headers.clear()
    restarted = AlertmanagerEndpoint(Settings(urls=(rx.url,)), http, env, clock=Clock(t))
    assert restarted.check_route(routed) is None
    restarted.restore(ledger)
    await restarted.tick(t + 60)
    assert [len(b) for b in rx.batches] == [256, 44]
    assert {h["Authorization"] for h in rx.headers} == {"Bearer a-token"}


# -- resolves that do not go through, stale alerts, clock skew, odd secrets ------------------
@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("status", "outcome_type"), [(400, Rejected), (500, Retry)], ids=["rejected", "retried"]
)
async def test_a_resolve_that_does_not_go_through_stops_the_firing_resends(
    receivers: list[Receiver], http: aiohttp.ClientSession, status: int, outcome_type: type
) -> None:
    """Whatever comes of a resolve, the ticks must not keep the alert firing for ever."""
    opened, _, resolved = oom_lifecycle()
    rx = receivers[0]
    t = 1_900_000_000.0
    ep = endpoint(http, rx.url, clock=Clock(t))
    first = await ep.deliver(opened, None, ROUTE)
    rx.script = [(status, b'"refused"', {})]
    outcome = await ep.deliver(resolved, delivered(opened, first), ROUTE)
    assert isinstance(outcome, outcome_type), outcome
    count = len(rx.batches)
    await ep.tick(t + 60)
    await ep.tick(t + 120)
    firing = [a for batch in rx.batches[count:] for a in batch if parse_time(a["endsAt"]) > _at(t)]
    assert firing == [], "a resolved incident is never re-sent firing"


@pytest.mark.asyncio
async def test_an_alert_without_a_revision_for_max_firing_seconds_is_no_longer_sent(
    receivers: list[Receiver], http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    opened = oom_lifecycle()[0]
    rx = receivers[0]
    t = 1_900_000_000.0
    clock = Clock(t)
    ep = endpoint(http, rx.url, clock=clock, max_firing_seconds=3600.0)
    first = await ep.deliver(opened, None, ROUTE)
    assert isinstance(first, Accepted)
    assert first.memo is not None
    assert first.memo["revised_at"] == f"{t:.0f}"
    clock.now = t + 1800  # a revision that only moved last_seen still counts as one
    later = msgspec.structs.replace(
        opened, revision=2, status="updated", last_seen=opened.last_seen + timedelta(minutes=1)
    )
    assert isinstance(await ep.deliver(later, delivered(opened, first), ROUTE), Skipped)
    await ep.tick(t + 1800 + 3599)
    assert len(rx.batches) == 2, "still fresh: re-sent"
    await ep.tick(t + 1800 + 3601)
    assert len(rx.batches) == 2, "stale: no longer re-sent"
    assert "no revision for 3600 s" in caplog.text

    # After a restart the memo's revised_at counts, not the restart time.
    restarted = endpoint(http, rx.url, clock=Clock(t + 7200), max_firing_seconds=3600.0)
    restarted.restore({(ROUTE.name, opened.id): delivered(opened, first)})
    await restarted.tick(t + 7200)
    assert len(rx.batches) == 2


def test_max_firing_seconds_is_an_option_with_a_week_by_default() -> None:
    assert Settings().max_firing_seconds == 7 * 86400
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"max_firing_seconds": 0}, Settings)


@pytest.mark.asyncio
async def test_a_retired_alert_ends_a_few_seconds_in_the_past_for_clock_skew(
    receivers: list[Receiver], http: aiohttp.ClientSession
) -> None:
    revisions = app_fault_escalation()
    rx = receivers[0]
    t = revisions[2].last_seen.timestamp() + 60
    ep = endpoint(http, rx.url, clock=Clock(t))
    previous: Delivered | None = None
    for inc in revisions[:3]:
        previous = delivered(inc, await ep.deliver(inc, previous, ROUTE))
    new, retired = rx.last()
    assert (new["labels"]["severity"], retired["labels"]["severity"]) == ("warning", "info")
    assert parse_time(retired["endsAt"]) == _at(t - 5)


@pytest.mark.asyncio
async def test_a_token_with_a_control_character_is_refused_and_never_raises(
    receivers: list[Receiver], http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    """A token file ending "\\n\\n" made aiohttp raise ValueError on every POST."""
    opened = oom_lifecycle()[0]
    rx = receivers[0]
    token_file = tmp_path / "token"
    token_file.write_text("tok-3f9a\n\n", encoding="utf-8")
    env = {"AM_TOKEN": "tok-3f9a\n"}
    ep = AlertmanagerEndpoint(Settings(urls=(rx.url,)), http, env, clock=Clock(1_900_000_000.0))
    for target in ({"bearer_token_file": str(token_file)}, {"bearer_token_env": "AM_TOKEN"}):
        route = Route(name="odd", target=target)
        error = ep.check_route(route)
        assert error is not None
        assert "control character" in error
        assert "tok-3f9a" not in error
        outcome = await ep.deliver(opened, None, route)
        assert isinstance(outcome, Retry), outcome
        assert "tok-3f9a" not in repr(outcome)
        await ep.tick(1_900_000_060.0)  # returns, raises nothing
    assert rx.batches == []


@pytest.mark.asyncio
@pytest.mark.parametrize(("status", "after"), [(401, 60.0), (403, 60.0), (302, 60.0), (404, None)])
async def test_auth_redirects_and_a_wrong_path_are_retried_never_followed(
    receivers: list[Receiver],
    http: aiohttp.ClientSession,
    caplog: pytest.LogCaptureFixture,
    status: int,
    after: float | None,
) -> None:
    opened = oom_lifecycle()[0]
    rx = receivers[0]
    rx.script = [(status, b"", {"Location": rx.url + "/api/v2/alerts"})]
    outcome = await endpoint(http, rx.url).deliver(opened, None, ROUTE)
    assert isinstance(outcome, Retry), outcome
    assert outcome.after_seconds == after
    assert len(rx.batches) == 1, "a redirect is not followed"
    if after is not None:
        assert "route am" in caplog.text


def _at(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, UTC)


@pytest.mark.asyncio
async def test_a_tick_in_flight_never_lands_older_annotations_after_a_delivery(
    receivers: list[Receiver], http: aiohttp.ClientSession
) -> None:
    """A tick reads the firing set, then POSTs; a delivery of the next revision meanwhile
    must wait for it, or the tick's older annotations arrive last and stay (Alertmanager
    keeps the last it received) until the next tick, a minute later."""
    opened, updated, _ = oom_lifecycle()
    up, _ = receivers
    t = 1_900_000_000.0
    ep = endpoint(http, up.url, clock=Clock(t))
    previous = delivered(opened, await ep.deliver(opened, None, ROUTE))
    assert updated.summary != opened.summary
    gate = up.gate = asyncio.Event()
    ticking = asyncio.create_task(ep.tick(t + 60))
    await eventually(lambda: up.held == 1, what="the tick's POST on its way")
    delivering = asyncio.create_task(ep.deliver(updated, previous, ROUTE))
    await asyncio.wait({delivering}, timeout=0.5)  # unlocked, it would land meanwhile
    gate.set()
    await ticking
    assert isinstance(await delivering, Accepted)
    mine = [b for b in up.batches if any(a["labels"]["incident_id"] == opened.id for a in b)]
    assert mine[-1][0]["annotations"]["summary"] == updated.summary
    assert up.violations == []
