"""The PagerDuty endpoint against a local Events API v2 receiver, over real HTTP.

Incidents are the core's own (a ``device_unhealthy_eviction`` chain driven through the
correlator); the receiver (``tests/receivers/pagerduty.py``) checks each event against
PagerDuty's published format and keeps PagerDuty's alert state, so a test sees what a
responder would. The runner's part (ledger, retries) is played by :func:`deliver_all`:
the previous delivery is what the ledger would hand back.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp
import msgspec
import pytest

from connectors.bridges.base import (
    Accepted,
    Delivered,
    Outcome,
    Rejected,
    Retry,
    Route,
    Skipped,
)
from connectors.bridges.pagerduty import (
    BODY_BUDGET,
    MAX_DEDUP_KEY,
    PagerDutyEndpoint,
    Settings,
    build,
    dedup_key,
    key_fingerprint,
)
from connectors.kafka.config import Secret
from schemas.codec import RecordError, convert_as, dumps, encode
from schemas.incidents import Evidence, GpuRef, Incident, PodInfo
from tests.core_helpers import config, run
from tests.factories import Cluster, term
from tests.receivers.pagerduty import PagerDutyReceiver, serving, violations

KEY = "0a1b2c3d4e5f60718293a4b5c6d7e8f9"
OTHER_KEY = "ffeeddccbbaa99887766554433221100"
ENV = {"PD_KEY": KEY, "PD_OTHER": OTHER_KEY, "PD_SHORT": "x" * 31}
ROUTE = Route(name="oncall", target={"routing_key_env": "PD_KEY"})
OTHER_ROUTE = Route(name="platform", target={"routing_key_env": "PD_OTHER"})
MIN = 60.0
CHAIN = "device_unhealthy_eviction"


def chain(
    pods: Iterable[str] = ("a", "b", "c"), namespace: str = "ml", *, every: bool = True
) -> list[Incident]:
    """The core's revisions of one eviction chain: XID 79 and a GPU drop on n1, then each
    pod fails (open, one update per further pod), then the GPU comes back (resolved).
    ``every=False``: the core's default ``revision_interval_seconds`` (the failures less
    than it apart are one held update)."""
    c = Cluster()
    names = list(pods)
    c.node("n1", 0)
    for name in names:
        c.pod("n1", name, 1, namespace=namespace)
    c.bind("n1", 2, "GPU-1", "0000:9b:00.0", names[:1], namespace=namespace)
    c.xid("n1", 5 * MIN, 79)
    c.node("n1", 5 * MIN + 9, alloc=7)
    c.pod("n1", names[0], 5 * MIN + 20, phase="Failed", namespace=namespace, current=term(318))
    for i, name in enumerate(names[1:]):
        c.pod(
            "n1",
            name,
            5 * MIN + 30 + i,
            phase="Failed",
            reason="UnexpectedAdmissionError",
            namespace=namespace,
        )
    c.node("n1", 50 * MIN, alloc=8)
    c.tick(60 * MIN)
    if not every:
        return [r for r in run(c.events) if r.type == CHAIN]
    # Every change published (no revision_interval_seconds): one re-trigger per pod.
    revisions = [r for r in run(c.events, config(revision_interval_seconds=0)) if r.type == CHAIN]
    assert [r.status for r in revisions] == ["open"] + ["updated"] * (len(names) - 1) + ["resolved"]
    return revisions


def only_later(incident: Incident) -> Incident:
    """The next revision of ``incident`` with nothing new but ``last_seen``."""
    return msgspec.structs.replace(
        incident,
        status="updated",
        revision=incident.revision + 1,
        last_seen=incident.last_seen + timedelta(minutes=1),
    )


def ledger(outcome: Outcome, incident: Incident, previous: Delivered | None) -> Delivered:
    """What the runner writes after an outcome: the memo replaced, or kept when None."""
    assert isinstance(outcome, (Accepted, Skipped)), outcome
    kept = previous.memo if previous is not None else {}
    memo = outcome.memo if isinstance(outcome, Accepted) and outcome.memo is not None else kept
    return Delivered(incident.revision, incident.status, memo)


async def deliver_all(
    endpoint: PagerDutyEndpoint,
    revisions: Iterable[Incident],
    route: Route = ROUTE,
    previous: Delivered | None = None,
) -> tuple[list[Outcome], Delivered | None]:
    outcomes: list[Outcome] = []
    for incident in revisions:
        outcome = await endpoint.deliver(incident, previous, route)
        outcomes.append(outcome)
        previous = ledger(outcome, incident, previous)
    return outcomes, previous


@asynccontextmanager
async def bridge(
    environ: dict[str, str] | None = None, **options: Any
) -> AsyncIterator[tuple[PagerDutyEndpoint, PagerDutyReceiver]]:
    async with serving() as receiver, aiohttp.ClientSession() as http:
        endpoint = build(Settings(url=receiver.url, **options), http, environ or ENV)
        assert isinstance(endpoint, PagerDutyEndpoint)
        yield endpoint, receiver
        await endpoint.close()
    assert receiver.violations == []


def free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@asynccontextmanager
async def paced(
    **options: Any,
) -> AsyncIterator[tuple[PagerDutyEndpoint, PagerDutyReceiver, Clock]]:
    clock = Clock()
    async with serving() as receiver, aiohttp.ClientSession() as http:
        yield (
            PagerDutyEndpoint(Settings(url=receiver.url, **options), http, ENV, clock),
            receiver,
            clock,
        )
    assert receiver.violations == []


# -- the lifecycle ---------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_with_the_core_defaults_one_retrigger_names_every_failed_pod() -> None:
    """What users run: the core holds the failures that follow the open within its
    revision interval, so PagerDuty gets a trigger, one re-trigger naming every pod, and
    the resolve, on one alert."""
    revisions = chain(("a", "b", "c", "d", "e"), every=False)
    assert [r.status for r in revisions] == ["open", "updated", "resolved"]
    async with bridge() as (endpoint, receiver):
        outcomes, _ = await deliver_all(endpoint, revisions)
    assert [type(o) for o in outcomes] == [Accepted] * 3
    assert [e["event_action"] for e in receiver.events] == ["trigger", "trigger", "resolve"]
    assert {e["dedup_key"] for e in receiver.events} == {revisions[0].id}
    assert receiver.alerts[(KEY, revisions[0].id)].triggers == 2
    assert len(revisions[1].pods) == 5


@pytest.mark.asyncio
async def test_open_update_resolve_are_trigger_retrigger_resolve_on_one_alert() -> None:
    revisions = chain()
    async with bridge(client_url="https://grafana.example/d/gpu") as (endpoint, receiver):
        outcomes, last = await deliver_all(endpoint, revisions)
    assert [type(o) for o in outcomes] == [Accepted] * 4
    inc = revisions[0]
    assert [e["event_action"] for e in receiver.events] == [
        "trigger",
        "trigger",
        "trigger",
        "resolve",
    ]
    assert {e["dedup_key"] for e in receiver.events} == {inc.id}
    assert {e["routing_key"] for e in receiver.events} == {KEY}
    alert = receiver.alerts[(KEY, inc.id)]
    assert (alert.status, alert.triggers) == ("resolved", 3)
    assert receiver.dropped == []

    first = receiver.events[0]
    assert first["client"] == "gputriage"
    assert first["client_url"] == "https://grafana.example/d/gpu"
    payload = first["payload"]
    assert payload["summary"] == f"[c1] {inc.summary}"
    assert payload["severity"] == "critical"
    assert payload["source"] == "n1"
    assert payload["component"] == "GPU-1"
    assert payload["group"] == "ml"
    assert payload["class"] == CHAIN
    assert payload["timestamp"] == inc.last_seen.isoformat()
    details = payload["custom_details"]
    assert (details["incident_id"], details["revision"], details["status"]) == (inc.id, 1, "open")
    assert details["recommended_action"] == inc.action != ""
    assert [p["name"] for p in details["pods"]] == ["a"]
    assert details["pods"][0]["owner_kind"] == "Job"
    assert details["gpus"] == [{"uuid": "GPU-1", "pci_bus_id": "0000:9b:00.0"}]
    assert len(details["evidence"]) == len(inc.evidence) > 0
    assert inc.evidence[0].event_id in details["evidence"][0]
    assert details["first_seen"] == inc.first_seen.isoformat()
    assert details["attributes"] == {"xids": "79"}
    assert [p["name"] for p in receiver.events[2]["payload"]["custom_details"]["pods"]] == [
        "a",
        "b",
        "c",
    ]

    resolve = receiver.events[3]
    assert set(resolve) == {"routing_key", "event_action", "dedup_key"}
    assert last is not None
    assert last.memo["routing_key_sha256"] == key_fingerprint(Secret(KEY))
    assert last.memo["dedup_key"] == inc.id


@pytest.mark.asyncio
async def test_an_update_that_only_moves_last_seen_is_skipped() -> None:
    opened = chain()[0]
    async with bridge() as (endpoint, receiver):
        outcomes, previous = await deliver_all(endpoint, [opened, only_later(opened)])
        assert isinstance(outcomes[1], Skipped)
        assert receiver.requests == 1
        severer = msgspec.structs.replace(only_later(opened), revision=3, severity="ticket")
        [outcome], _ = await deliver_all(endpoint, [severer], previous=previous)
    assert isinstance(outcome, Accepted)
    assert [e["payload"]["severity"] for e in receiver.events] == ["critical", "warning"]


@pytest.mark.asyncio
async def test_a_resolve_is_sent_even_with_no_delivery_before_it() -> None:
    resolved = chain()[-1]
    async with bridge() as (endpoint, receiver):
        outcome = await endpoint.deliver(resolved, None, ROUTE)
    assert isinstance(outcome, Accepted)
    assert [e["event_action"] for e in receiver.events] == ["resolve"]
    assert len(receiver.dropped) == 1, "PagerDuty drops it: nothing was open through this key"


# -- vendor answers as outcomes ----------------------------------------------------------------
@pytest.mark.asyncio
async def test_400_is_rejected_with_pagerdutys_error_list() -> None:
    errors = ["Length of 'routing_key' is incorrect (should be 32 characters)", "other"]
    async with bridge() as (endpoint, receiver):
        receiver.answer(
            400, {"status": "invalid event", "message": "Event object is invalid", "errors": errors}
        )
        outcome = await endpoint.deliver(chain()[0], None, ROUTE)
    assert outcome == Rejected("HTTP 400: invalid event", "; ".join(errors))


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [500, 502, 503, 504])
async def test_5xx_is_retried_then_accepted(status: int) -> None:
    opened = chain()[0]
    async with bridge() as (endpoint, receiver):
        receiver.answer(status, "oops")
        receiver.answer(status)
        first = await endpoint.deliver(opened, None, ROUTE)
        second = await endpoint.deliver(opened, None, ROUTE)
        third = await endpoint.deliver(opened, None, ROUTE)
    assert first == second == Retry(f"HTTP {status}")
    assert isinstance(third, Accepted)
    assert len(receiver.accepted()) == 1
    assert receiver.alerts[(KEY, opened.id)].triggers == 1


@pytest.mark.asyncio
async def test_429_is_retried_after_our_own_pause_and_closes_the_key_meanwhile() -> None:
    [opened, updated, *_] = chain()
    async with paced() as (endpoint, receiver, clock):
        receiver.answer(429)
        outcome = await endpoint.deliver(opened, None, ROUTE)
        assert outcome == Retry("HTTP 429: rate limited", 30.0)
        meanwhile = await endpoint.deliver(updated, None, ROUTE)
        assert isinstance(meanwhile, Retry)
        assert meanwhile.after_seconds == pytest.approx(30.0)
        assert receiver.requests == 1, "nothing is sent through a key PagerDuty throttled"
        other = await endpoint.deliver(opened, None, OTHER_ROUTE)
        assert isinstance(other, Accepted), "another key has its own budget"
        clock.now += 30.0
        assert isinstance(await endpoint.deliver(opened, None, ROUTE), Accepted)


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_a_throttled_key_opens_when_the_loops_clock_has_waited_the_pause() -> None:
    """No clock given: the pause runs on the loop's clock, the one the runner waits on, so
    a fast-forwarded wait (looptime) finds the key open again."""
    opened = chain()[0]
    async with bridge() as (endpoint, receiver):
        receiver.answer(429)
        outcome = await endpoint.deliver(opened, None, ROUTE)
        assert isinstance(outcome, Retry)
        assert outcome.after_seconds == pytest.approx(30.0)
        await asyncio.sleep(30.0)
        assert isinstance(await endpoint.deliver(opened, None, ROUTE), Accepted)
        assert receiver.requests == 2


@pytest.mark.asyncio
async def test_a_retry_after_longer_than_ours_is_honoured() -> None:
    async with bridge() as (endpoint, receiver):
        receiver.answer(429, None, **{"Retry-After": "90"})
        outcome = await endpoint.deliver(chain()[0], None, ROUTE)
    assert outcome == Retry("HTTP 429: rate limited", 90.0)


@pytest.mark.asyncio
async def test_the_pacer_keeps_a_storm_under_the_keys_budget() -> None:
    incidents = [chain(pods=(f"p{i}",))[0] for i in range(3)]
    async with paced(calls_per_minute=2) as (endpoint, receiver, clock):
        first = [await endpoint.deliver(inc, None, ROUTE) for inc in incidents[:2]]
        clock.now += 20.0
        third = await endpoint.deliver(incidents[2], None, ROUTE)
        assert receiver.requests == 2
        clock.now += 40.0
        again = await endpoint.deliver(incidents[2], None, ROUTE)
    assert [type(o) for o in first] == [Accepted, Accepted]
    assert isinstance(third, Retry)
    assert third.after_seconds == pytest.approx(40.0)
    assert isinstance(again, Accepted)


@pytest.mark.asyncio
async def test_timeouts_and_network_errors_are_retried() -> None:
    opened = chain()[0]
    async with bridge(timeout_seconds=0.2) as (endpoint, receiver):
        receiver.hanging = True
        timed_out = await endpoint.deliver(opened, None, ROUTE)
        receiver.hanging = False
    assert timed_out == Retry("timeout after 0.2 s")
    async with aiohttp.ClientSession() as http:
        dead = f"http://127.0.0.1:{free_port()}/v2/enqueue"
        refused = await build(Settings(url=dead), http, ENV).deliver(opened, None, ROUTE)
    assert isinstance(refused, Retry)
    assert refused.reason.startswith("network error")


# -- the routing key -------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_check_route_names_what_is_missing_never_a_value(tmp_path: Path) -> None:
    async with aiohttp.ClientSession() as http:
        endpoint = build(Settings(), http, ENV)
    key_file = tmp_path / "key"
    key_file.write_text(OTHER_KEY + "\n")
    assert endpoint.check_route(ROUTE) is None
    assert endpoint.check_route(Route(name="f", target={"routing_key_file": str(key_file)})) is None
    missing = endpoint.check_route(Route(name="m", target={"routing_key_env": "PD_NONE"}))
    assert missing is not None
    assert "PD_NONE" in missing
    assert missing.startswith("route m:")
    short = endpoint.check_route(Route(name="s", target={"routing_key_env": "PD_SHORT"}))
    assert short is not None
    assert "32" in short
    assert "x" * 31 not in short
    inline = endpoint.check_route(Route(name="i", target={"routing_key": KEY}))
    assert inline is not None
    assert KEY not in inline
    assert endpoint.check_route(Route(name="none")) is not None


@pytest.mark.asyncio
async def test_a_changed_routing_key_warns_and_retriggers_through_the_new_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    opened = chain()[0]
    moved = Route(name="oncall", target={"routing_key_env": "PD_OTHER"})
    caplog.set_level(logging.DEBUG)
    async with bridge() as (endpoint, receiver):
        _, previous = await deliver_all(endpoint, [opened])
        outcomes, _ = await deliver_all(
            endpoint, [only_later(opened), chain()[-1]], moved, previous
        )
    assert [type(o) for o in outcomes] == [Accepted, Accepted], "not skipped: the key moved"
    old, new = key_fingerprint(Secret(KEY)), key_fingerprint(Secret(OTHER_KEY))
    assert receiver.alerts[(OTHER_KEY, opened.id)].status == "resolved"
    assert receiver.alerts[(KEY, opened.id)].status == "triggered", "the trap: left to a human"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings
    assert all(old in w and new in w for w in warnings)
    assert KEY not in caplog.text
    assert OTHER_KEY not in caplog.text


@pytest.mark.asyncio
async def test_no_secret_in_outcomes_memos_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    revisions = chain()
    outcomes: list[Outcome] = []
    async with bridge(timeout_seconds=0.2) as (endpoint, receiver):
        done, previous = await deliver_all(endpoint, revisions)
        outcomes += done
        echoed = {"status": "invalid event", "errors": [f"routing_key {KEY} is not known"]}
        receiver.answer(400, echoed)
        receiver.answer(400, f"no JSON, but {KEY}")
        receiver.answer(500, KEY)
        receiver.answer(429)
        for _ in range(4):
            outcomes.append(await endpoint.deliver(revisions[0], None, ROUTE))
        receiver.hanging = True
        outcomes.append(await endpoint.deliver(revisions[0], None, OTHER_ROUTE))
        receiver.hanging = False
    assert {type(o) for o in outcomes} == {Accepted, Rejected, Retry}
    assert isinstance(outcomes[4], Rejected)
    assert "is not known" in outcomes[4].detail
    assert previous is not None
    shown = repr(outcomes) + repr(previous) + caplog.text
    for secret in (KEY, OTHER_KEY):
        assert secret not in shown


# -- fitting PagerDuty's limits ----------------------------------------------------------------
@pytest.mark.asyncio
async def test_huge_evidence_is_cut_under_512_kb_and_the_ids_survive() -> None:
    opened = chain()[0]
    head = opened.evidence[0]
    many = tuple(
        Evidence(event_id=f"ev-{i}", schema="kube.v1", time=head.time, text="y" * 9000)
        for i in range(400)
    )
    huge = msgspec.structs.replace(opened, evidence=(head, *many), evidence_omitted=7)
    assert len(encode(huge)) > 512 * 1024
    async with bridge() as (endpoint, receiver):
        outcome = await endpoint.deliver(huge, None, ROUTE)
    assert isinstance(outcome, Accepted)
    [event] = receiver.events
    assert len(dumps(event)) <= BODY_BUDGET
    assert event["dedup_key"] == opened.id
    details = event["payload"]["custom_details"]
    assert (details["incident_id"], details["revision"]) == (opened.id, opened.revision)
    kept = details["evidence"]
    assert 0 < len(kept) < len(huge.evidence)
    assert head.event_id in kept[0], "the head of the chain is what is kept"
    assert all(len(line) < 4200 for line in kept), "one event's text is clipped too"
    assert details["evidence_truncated"].startswith(f"{len(huge.evidence) - len(kept)} evidence")
    assert details["evidence_omitted"] == 7 + len(huge.evidence) - len(kept)
    assert [p["name"] for p in details["pods"]] == ["a"]


@pytest.mark.asyncio
async def test_a_pod_list_too_big_for_512_kb_is_cut_with_a_count() -> None:
    opened = chain()[0]
    pods = tuple(
        PodInfo(namespace="ml", name=f"worker-{i:05d}-" + "z" * 200, role="evicted")
        for i in range(3000)
    )
    async with bridge() as (endpoint, receiver):
        outcome = await endpoint.deliver(msgspec.structs.replace(opened, pods=pods), None, ROUTE)
    assert isinstance(outcome, Accepted)
    details = receiver.events[0]["payload"]["custom_details"]
    assert details["evidence"] == []
    assert 0 < len(details["pods"]) < 3000
    assert details["pods_left_out"].startswith(f"{3000 - len(details['pods'])} more pods")
    assert details["incident_id"] == opened.id


@pytest.mark.asyncio
async def test_a_long_summary_is_clipped_to_1024_with_a_marker() -> None:
    opened = msgspec.structs.replace(chain()[0], summary="s" * 3000)
    async with bridge() as (endpoint, receiver):
        assert isinstance(await endpoint.deliver(opened, None, ROUTE), Accepted)
    summary = receiver.events[0]["payload"]["summary"]
    assert len(summary) == 1024
    assert summary.endswith("…")


@pytest.mark.asyncio
async def test_attributes_go_when_nothing_else_can_and_an_unfittable_event_is_rejected() -> None:
    opened = chain()[0]
    bulky = msgspec.structs.replace(opened, attributes={f"k{i}": "v" * 1000 for i in range(600)})
    gpus = tuple(GpuRef(uuid=f"GPU-{i:08d}-" + "u" * 40, index=i) for i in range(20_000))
    async with bridge() as (endpoint, receiver):
        assert isinstance(await endpoint.deliver(bulky, None, ROUTE), Accepted)
        unfittable = await endpoint.deliver(msgspec.structs.replace(opened, gpus=gpus), None, ROUTE)
    details = receiver.events[0]["payload"]["custom_details"]
    assert details["attributes"] == {}
    assert details["attributes_left_out"]
    assert isinstance(unfittable, Rejected)
    assert "512 KB" in unfittable.reason
    assert receiver.requests == 1, "an event PagerDuty would refuse is not sent"


@pytest.mark.asyncio
async def test_a_runbook_link_names_the_incident_type() -> None:
    async with bridge(runbook_url="https://wiki.example/gpu/{type}") as (endpoint, receiver):
        assert isinstance(await endpoint.deliver(chain()[0], None, ROUTE), Accepted)
    assert receiver.events[0]["links"] == [
        {"href": f"https://wiki.example/gpu/{CHAIN}", "text": f"Runbook: {CHAIN}"}
    ]


def test_options_refuse_what_cannot_work() -> None:
    assert convert_as({}, Settings) == Settings()
    for bad in ({"timeout_seconds": 0}, {"calls_per_minute": 0}, {"routing_key": KEY}):
        with pytest.raises(RecordError):
            convert_as(bad, Settings)


def test_dedup_key_is_the_id_and_a_long_id_stays_unique_under_255() -> None:
    assert dedup_key("inc-0123456789abcdef0123") == "inc-0123456789abcdef0123"
    one, two = "i" * 300 + "1", "i" * 300 + "2"
    assert len(dedup_key(one)) <= MAX_DEDUP_KEY
    assert dedup_key(one) != dedup_key(two)
    assert dedup_key(one) == dedup_key(one)


@pytest.mark.asyncio
async def test_pod_names_with_odd_characters_survive_the_json() -> None:
    names = ["<!channel>", "*bold*`tick`", 'q"uote\\back', "ünï\u2028line\nx"]
    revisions = chain(pods=names, namespace="ml-<team>")
    async with bridge() as (endpoint, receiver):
        outcomes, _ = await deliver_all(endpoint, revisions)
    assert all(isinstance(o, Accepted) for o in outcomes)
    last_trigger = receiver.events[-2]["payload"]
    assert [p["name"] for p in last_trigger["custom_details"]["pods"]] == names
    assert last_trigger["group"] == "ml-<team>"


# -- the receiver's own checks (so a passing test above means something) ----------------------
@pytest.mark.parametrize(
    ("event", "complaint"),
    [
        ({"routing_key": "k" * 31, "event_action": "resolve", "dedup_key": "d"}, "routing_key"),
        ({"routing_key": KEY, "event_action": "resolve"}, "'dedup_key' is required"),
        ({"routing_key": KEY, "event_action": "close", "dedup_key": "d"}, "event_action"),
        ({"routing_key": KEY, "event_action": "resolve", "dedup_key": "d" * 256}, "dedup_key"),
        ({"routing_key": KEY, "event_action": "trigger"}, "'payload' is required"),
        (
            {
                "routing_key": KEY,
                "event_action": "trigger",
                "payload": {"summary": "s" * 1025, "source": "n", "severity": "info"},
            },
            "over 1024",
        ),
        (
            {
                "routing_key": KEY,
                "event_action": "trigger",
                "payload": {"summary": "s", "source": "n", "severity": "page"},
            },
            "payload.severity",
        ),
        (
            {
                "routing_key": KEY,
                "event_action": "trigger",
                "payload": {"summary": "s", "source": "n", "severity": "info", "sevrity": "x"},
            },
            "unknown payload field",
        ),
        ({"routing_key": KEY, "event_action": "resolve", "dedup_key": "d", "x": 1}, "unknown"),
    ],
)
def test_the_receiver_rejects_what_pagerduty_would(event: dict[str, Any], complaint: str) -> None:
    found = violations(dumps(event), "application/json")
    assert any(complaint in v for v in found), found


def test_the_receiver_checks_size_and_content_type() -> None:
    ok = {"routing_key": KEY, "event_action": "resolve", "dedup_key": "d"}
    assert violations(dumps(ok), "application/json") == []
    assert violations(dumps(ok), "text/plain")
    assert violations(dumps({**ok, "client": "c" * 512_001}), "application/json")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("status", "header", "expected"),
    [
        (503, "inf", Retry("HTTP 503")),
        (503, "nan", Retry("HTTP 503")),
        (503, "-1", Retry("HTTP 503")),
        (503, "Wed, 21 Oct 2015 07:28:00 GMT", Retry("HTTP 503", 0.0)),  # long past
        (503, "86400", Retry("HTTP 503", 3600.0)),
        (429, "nan", Retry("HTTP 429: rate limited", 30.0)),
        (429, "inf", Retry("HTTP 429: rate limited", 30.0)),
    ],
)
async def test_an_odd_retry_after_is_ignored_and_a_huge_one_capped(
    status: int, header: str, expected: Retry
) -> None:
    async with bridge() as (endpoint, receiver):
        receiver.answer(status, None, **{"Retry-After": header})
        outcome = await endpoint.deliver(chain()[0], None, ROUTE)
    assert outcome == expected


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (401, Retry("HTTP 401 (credential refused)", 60.0)),
        (403, Retry("HTTP 403 (credential refused)", 60.0)),
        (301, Retry("HTTP 301: redirects are not followed", 60.0)),
        (413, Rejected("HTTP 413: bad request", "")),
    ],
)
async def test_auth_and_redirects_are_retried_long_never_dead_letters(
    status: int, expected: Retry, caplog: pytest.LogCaptureFixture
) -> None:
    async with bridge() as (endpoint, receiver):
        receiver.answer(status, None, Location="http://127.0.0.1:1/elsewhere")
        outcome = await endpoint.deliver(chain()[0], None, ROUTE)
    assert outcome == expected
    if isinstance(expected, Retry):
        assert "route oncall" in caplog.text
    assert KEY not in caplog.text


@pytest.mark.asyncio
async def test_an_error_answer_is_read_bounded_and_masked() -> None:
    """A proxy's endless error page is read no further than 64 KiB, and a key it echoes
    (as sent, or percent-encoded) never reaches the detail."""
    async with bridge() as (endpoint, receiver):
        receiver.answer(400, {"message": f"bad key {KEY} {quote(KEY)} " + "x" * 200_000})
        outcome = await endpoint.deliver(chain()[0], None, ROUTE)
    assert isinstance(outcome, Rejected)
    assert KEY not in repr(outcome)
    assert "bad key *** *** xxx" in outcome.detail
    assert len(outcome.detail) <= 4000
