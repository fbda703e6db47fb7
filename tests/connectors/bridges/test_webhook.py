"""The CloudEvents webhook endpoint against a receiver that validates the CloudEvents spec.

Incidents are real: one ``host_oom_kill`` driven through the core (opened by an OOM
kill, updated by a second, resolved when quiet), so every event carries a record the
processor would publish.
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from email.utils import formatdate
from pathlib import Path

import aiohttp
import msgspec
import pytest

from connectors.bridges.base import Accepted, Endpoint, Rejected, Retry, Route
from connectors.bridges.webhook import (
    CONTENT_TYPE,
    Settings,
    WebhookEndpoint,
    build,
    render,
)
from schemas.codec import decode_incident
from schemas.incidents import Incident
from tests.core_helpers import run
from tests.factories import Cluster, term
from tests.receivers.cloudevents import (
    Answer,
    CloudEventsReceiver,
    validate_event,
    verify_signature,
)

pytestmark = pytest.mark.timeout(30)

MIN = 60.0
NOW = 1_800_000_000.0
"""A fixed clock for the tests that read Retry-After dates or signature times."""
KEY = "k3y-0f-the-hmac-please-keep"
TOKEN = "xoxb-bearer-T0KEN-9f8e7d"
PATH_TOKEN = "B07SECRET/Zq9pathtoken42"


def lifecycle() -> list[Incident]:
    """open, updated, resolved: the core's revisions of one host_oom_kill."""
    c = Cluster()
    c.node("n2", 0)
    c.pod("n2", "srv", 1)
    c.pod("n2", "srv", 2 * MIN, restarts=1, last=term(2 * MIN - 1, "OOMKilled", 137))
    c.pod("n2", "srv", 4 * MIN, restarts=2, last=term(4 * MIN - 1, "OOMKilled", 137))
    c.tick(60 * MIN)
    revisions = [r for r in run(c.events) if r.type == "host_oom_kill"]
    assert [r.status for r in revisions] == ["open", "updated", "resolved"]
    return revisions


@asynccontextmanager
async def endpoint(
    options: Settings | None = None, environ: Mapping[str, str] | None = None
) -> AsyncIterator[WebhookEndpoint]:
    async with aiohttp.ClientSession() as http:
        yield WebhookEndpoint(options or Settings(), http, environ, clock=lambda: NOW)


def route(**target: str) -> Route:
    return Route(name="hooks", target=target)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.mark.asyncio
async def test_open_update_resolve_arrive_as_three_valid_cloudevents() -> None:
    revisions = lifecycle()
    async with CloudEventsReceiver() as hook, aiohttp.ClientSession() as http:
        webhook = build(Settings(), http)
        assert isinstance(webhook, Endpoint)
        assert webhook.check_route(route(url=hook.url + "/events")) is None
        outcomes = [
            await webhook.deliver(r, None, route(url=hook.url + "/events")) for r in revisions
        ]
    assert outcomes == [Accepted()] * 3
    assert hook.violations == []
    assert {seen.headers["Content-Type"] for seen in hook.requests} == {CONTENT_TYPE}
    inc = revisions[0]
    assert [e["type"] for e in hook.events] == [
        "io.gputriage.incident.opened",
        "io.gputriage.incident.updated",
        "io.gputriage.incident.resolved",
    ]
    assert [e["id"] for e in hook.events] == [f"{inc.id}/{r.revision}" for r in revisions]
    assert {e["subject"] for e in hook.events} == {inc.id}
    assert {e["source"] for e in hook.events} == {"/gputriage/clusters/c1"}
    assert {e["datacontenttype"] for e in hook.events} == {"application/json"}
    assert {(e["incidenttype"], e["incidentseverity"]) for e in hook.events} == {
        ("host_oom_kill", inc.severity)
    }
    assert "dataschema" not in hook.events[0]
    resolved = revisions[2]
    assert resolved.resolved_at is not None
    times = [r.last_seen for r in revisions[:2]] + [resolved.resolved_at]
    assert [datetime.fromisoformat(e["time"]) for e in hook.events] == times
    # data is the incident record itself, as the topic carries it.
    assert [decode_incident(json.dumps(e["data"])) for e in hook.events] == revisions


@pytest.mark.asyncio
async def test_a_retried_revision_is_the_same_event_byte_for_byte() -> None:
    inc = lifecycle()[0]
    async with CloudEventsReceiver() as hook, endpoint() as webhook:
        hook.answer(Answer(500), Answer(503))
        first = await webhook.deliver(inc, None, route(url=hook.url))
        second = await webhook.deliver(inc, None, route(url=hook.url))
        third = await webhook.deliver(inc, None, route(url=hook.url))
    assert (first, second, third) == (Retry("HTTP 500"), Retry("HTTP 503"), Accepted())
    assert hook.violations == []
    bodies = {seen.body for seen in hook.requests}
    assert len(hook.requests) == 3
    # After a restart (a new endpoint) the revision renders to the very same bytes.
    assert bodies == {render(inc, Settings())}
    assert [e["id"] for e in hook.events] == [f"{inc.id}/1"]


@pytest.mark.asyncio
async def test_the_hmac_signature_verifies_and_a_tampered_or_replayed_body_fails(
    tmp_path: Path,
) -> None:
    key_file = tmp_path / "hmac"
    key_file.write_text(KEY + "\n")  # as a Kubernetes Secret file often ends
    revisions = lifecycle()
    signed = route(hmac_key_file=str(key_file))
    async with (
        CloudEventsReceiver(hmac_key=KEY.encode(), clock=lambda: NOW) as hook,
        endpoint() as webhook,
    ):
        target = route(url=hook.url, hmac_key_file=str(key_file))
        assert webhook.check_route(target) is None
        outcomes = [await webhook.deliver(r, None, target) for r in revisions]
        assert webhook.check_route(signed) is not None  # a signing route still needs a url
    assert outcomes == [Accepted()] * 3
    assert hook.violations == []
    seen = hook.requests[0]
    assert seen.headers["X-Gputriage-Timestamp"] == str(int(NOW))
    assert seen.headers["X-Gputriage-Signature"].startswith("sha256=")
    assert verify_signature(KEY.encode(), seen.headers, seen.body, NOW) is None
    tampered = seen.body.replace(b'"severity":"', b'"severity":"x', 1)
    assert tampered != seen.body
    assert verify_signature(KEY.encode(), seen.headers, tampered, NOW) == (
        "signature does not match the body"
    )
    assert verify_signature(b"another key", seen.headers, seen.body, NOW) is not None
    assert verify_signature(KEY.encode(), seen.headers, seen.body, NOW + 301) == (
        "timestamp outside the replay window"
    )


@pytest.mark.asyncio
async def test_a_receiver_with_another_key_refuses_and_the_revision_is_rejected() -> None:
    inc = lifecycle()[0]
    async with (
        CloudEventsReceiver(hmac_key=b"not the key", clock=lambda: NOW) as hook,
        endpoint(environ={"HOOK_KEY": KEY}) as webhook,
    ):
        outcome = await webhook.deliver(inc, None, route(url=hook.url, hmac_key_env="HOOK_KEY"))
    assert outcome == Rejected("HTTP 400", "signature: signature does not match the body")
    assert hook.violations == ["signature: signature does not match the body"]
    assert hook.events == []


@pytest.mark.asyncio
async def test_429_and_503_honour_retry_after_seconds_and_http_dates() -> None:
    inc = lifecycle()[0]
    async with CloudEventsReceiver() as hook, endpoint() as webhook:
        hook.answer(
            Answer(429, {"Retry-After": "7"}),
            Answer(503, {"Retry-After": formatdate(NOW + 30, usegmt=True)}),
            Answer(408),
            Answer(500, {"Retry-After": "soon"}),
        )
        outcomes = [await webhook.deliver(inc, None, route(url=hook.url)) for _ in range(5)]
    assert outcomes == [
        Retry("HTTP 429", 7.0),
        Retry("HTTP 503", 30.0),
        Retry("HTTP 408"),
        Retry("HTTP 500"),
        Accepted(),
    ]
    assert hook.violations == []


@pytest.mark.asyncio
async def test_every_2xx_the_webhook_spec_names_is_accepted() -> None:
    """http-webhook.md §2.2: 200/201 processed (with or without details), 202 queued,
    204 processed without a payload."""
    inc = lifecycle()[0]
    async with CloudEventsReceiver() as hook, endpoint() as webhook:
        hook.answer(Answer(200, body='{"status": "ok"}'), Answer(201), Answer(202), Answer(204))
        outcomes = [await webhook.deliver(inc, None, route(url=hook.url)) for _ in range(4)]
    assert outcomes == [Accepted()] * 4
    assert len(hook.events) == 4


@pytest.mark.asyncio
async def test_client_errors_are_rejected_with_the_receivers_words_and_never_retried() -> None:
    inc = lifecycle()[0]
    words = "field data.pods: " + "x" * 600
    async with CloudEventsReceiver() as hook, endpoint() as webhook:
        hook.answer(
            Answer(400, body=words),
            Answer(410, body="gone"),
            Answer(422),
            Answer(302, {"Location": hook.url + "/elsewhere"}),
        )
        outcomes = [await webhook.deliver(inc, None, route(url=hook.url)) for _ in range(4)]
    assert outcomes == [
        Rejected("HTTP 400", words[:499] + "…"),
        Rejected("HTTP 410", "gone"),
        Rejected("HTTP 422", ""),
        Rejected("HTTP 302: redirects are not followed"),
    ]
    assert len(outcomes[0].detail) == 500  # type: ignore[union-attr]
    assert [seen.path for seen in hook.requests] == ["/"] * 4  # the redirect was not followed


@pytest.mark.asyncio
async def test_network_errors_and_timeouts_are_retried() -> None:
    inc = lifecycle()[0]
    async with (
        CloudEventsReceiver() as hook,
        endpoint(Settings(timeout_seconds=0.3)) as webhook,
    ):
        hook.answer(Answer(204, hold=True))
        slow = await webhook.deliver(inc, None, route(url=hook.url))
        down = await webhook.deliver(inc, None, route(url=f"http://127.0.0.1:{closed_port()}/"))
    assert slow == Retry("timeout after 0.3 s")
    assert isinstance(down, Retry)
    assert down.reason.startswith("network error: ")
    assert down.after_seconds is None
    assert hook.events == []


@pytest.mark.asyncio
async def test_secrets_never_reach_a_reason_a_detail_a_memo_or_a_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    revisions = lifecycle()
    async with CloudEventsReceiver(hmac_key=KEY.encode(), bearer=TOKEN, clock=lambda: NOW) as hook:
        secret_url = f"{hook.url}/hooks/{PATH_TOKEN}?sig=q5ecretqu3ry"
        down_url = f"http://127.0.0.1:{closed_port()}/hooks/{PATH_TOKEN}"
        environ = {"HOOK_URL": secret_url, "HOOK_KEY": KEY, "HOOK_TOKEN": TOKEN, "DOWN": down_url}
        secrets = [PATH_TOKEN, "q5ecretqu3ry", KEY, TOKEN, secret_url]
        target = {"hmac_key_env": "HOOK_KEY", "token_env": "HOOK_TOKEN"}
        async with endpoint(environ=environ) as webhook:
            hook.answer(
                Answer(404, body="no such hook:", echo_path=True),
                Answer(400, body=f"bad token {TOKEN} for key {KEY}"),
                Answer(500, body=secret_url),
            )
            outcomes = [
                await webhook.deliver(revisions[0], None, route(url_env="HOOK_URL", **target))
                for _ in range(4)
            ]
            outcomes.append(await webhook.deliver(revisions[1], None, route(url_env="DOWN")))
            outcomes.append(await webhook.deliver(revisions[1], None, route(url_env="UNSET")))
            errors = [
                webhook.check_route(route(url_env="UNSET")),
                webhook.check_route(route(url_env="HOOK_KEY")),  # set, but not a URL
            ]
    assert hook.violations == []  # bearer and signature were right every time
    rejected_404 = outcomes[0]
    assert isinstance(rejected_404, Rejected)
    assert rejected_404.detail == "no such hook: ***?***"  # the echoed path and query, masked
    assert [type(o) for o in outcomes] == [Rejected, Rejected, Retry, Accepted, Retry, Retry]
    assert errors[0] is not None
    assert "UNSET" in errors[0]
    assert errors[1] == "route hooks: url: not an absolute http(s) URL"
    texts = [repr(o) for o in outcomes] + [str(e) for e in errors] + [caplog.text]
    texts += [str(getattr(o, "memo", "")) for o in outcomes]
    assert caplog.records  # the endpoint did log, and nothing secret
    for text in texts:
        for secret in secrets:
            assert secret not in text, (secret, text)


@pytest.mark.asyncio
async def test_check_route_names_what_is_missing() -> None:
    async with endpoint(environ={"URL": "https://hooks.example.com/x"}) as webhook:
        assert webhook.check_route(route(url_env="URL")) is None
        assert webhook.check_route(route(url="https://hooks.example.com/x", token_env="T")) == (
            "route hooks: token: environment variable T is not set"
        )
        assert webhook.check_route(route(url="https://a.example/", url_env="URL")) == (
            "route hooks: url: give url or one of url_env and url_file, not both"
        )
        assert webhook.check_route(route()) == (
            "route hooks: url: give exactly one of url_env and url_file"
        )
        assert webhook.check_route(route(url="hooks.example.com/x")) == (
            "route hooks: url: not an absolute http(s) URL"
        )
        assert webhook.check_route(route(url="https://a.example/", hmac_key="inline")) == (
            "route hooks: hmac_key: give hmac_key_env or hmac_key_file, never the secret itself"
        )


def test_options_refuse_unknown_fields_owned_headers_and_a_relative_dataschema() -> None:
    assert msgspec.convert({}, Settings) == Settings()
    for bad in (
        {"timeout": 3},
        {"timeout_seconds": 0},
        {"headers": {"ce-source": "/x"}},
        {"headers": {"Authorization": "Bearer x"}},
        {"headers": {"content-type": "text/plain"}},
        {"dataschema": "schemas/incident.v1.json"},
        {"source_prefix": ""},
        {"headers": {"X-Team": "gpu\r\nX-Evil: 1"}},
        {"headers": {"X Team": "gpu"}},
        {"headers": {"": "gpu"}},
    ):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(bad, Settings)


@pytest.mark.asyncio
async def test_options_shape_the_event_and_the_request() -> None:
    inc = lifecycle()[0]
    options = Settings(
        source_prefix="https://triage.example.com/clusters/",
        dataschema="https://triage.example.com/schemas/incident.v1.json",
        headers={"X-Team": "gpu-infra"},
        user_agent="triage-test/2",
        origin="triage.example.com",
    )
    async with CloudEventsReceiver() as hook, endpoint(options) as webhook:
        assert await webhook.deliver(inc, None, route(url=hook.url)) == Accepted()
    assert hook.violations == []
    [event] = hook.events
    assert event["source"] == "https://triage.example.com/clusters/c1"
    assert event["dataschema"] == "https://triage.example.com/schemas/incident.v1.json"
    headers = hook.requests[0].headers
    assert (headers["X-Team"], headers["User-Agent"]) == ("gpu-infra", "triage-test/2")
    assert headers["WebHook-Request-Origin"] == "triage.example.com"
    assert "X-Gputriage-Signature" not in headers  # no key, no signature


def test_a_cluster_name_is_percent_encoded_into_the_source() -> None:
    inc = msgspec.structs.replace(lifecycle()[0], cluster="eu west/1")
    event = json.loads(render(inc, Settings()))
    assert event["source"] == "/gputriage/clusters/eu%20west%2F1"
    assert validate_event(event) == []


def test_the_receiver_catches_what_the_sdk_would_let_through() -> None:
    """The validator itself can fail: a missing id (the SDK invents one), a bare date
    (dateutil parses it), an upper-case extension, a relative dataschema."""
    good = json.loads(render(lifecycle()[0], Settings()))
    assert validate_event(good) == []
    bad = {k: v for k, v in good.items() if k != "id"}
    bad |= {"time": "2026-11-30", "clusterName": "c1", "dataschema": "incident.v1.json"}
    assert validate_event(bad) == [
        "id: required, a non-empty string",
        "time: '2026-11-30' is not RFC 3339",
        "dataschema: 'incident.v1.json' is not an absolute URI",
        "attribute name 'clusterName': only a-z and 0-9",
    ]
    assert validate_event({**good, "specversion": "0.3", "source": "a b"}) == [
        "specversion: '0.3', not '1.0'",
        "source: 'a b' is not a URI-reference",
    ]


@pytest.mark.asyncio
async def test_a_secret_with_a_control_character_is_refused_and_deliver_never_raises(
    tmp_path: Path,
) -> None:
    """A token file ending "\\n\\n" (or an env var with a newline) made aiohttp raise
    ValueError out of deliver on every call."""
    inc = lifecycle()[0]
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n\n")
    async with CloudEventsReceiver() as hook:
        environ = {"HOOK_TOKEN": TOKEN + "\n", "HOOK_URL": hook.url + "/\n"}
        async with endpoint(environ=environ) as webhook:
            routes = [
                route(url=hook.url, token_file=str(token_file)),
                route(url=hook.url, token_env="HOOK_TOKEN"),
                route(url_env="HOOK_URL"),
            ]
            for target in routes:
                error = webhook.check_route(target)
                assert error is not None
                assert "control character" in error
                outcome = await webhook.deliver(inc, None, target)
                assert isinstance(outcome, Retry), outcome
                assert TOKEN not in repr(outcome)
    assert hook.requests == []


def test_a_bad_static_header_is_refused_when_the_options_are_built() -> None:
    """At start, with the option's name: not a retry of every revision at every send."""
    with pytest.raises(ValueError, match="headers: 'X-Team'"):
        Settings(headers={"X-Team": "gpu\r\ninfra"})


@pytest.mark.asyncio
async def test_auth_is_retried_long_and_the_specs_permanent_codes_are_rejected(
    caplog: pytest.LogCaptureFixture,
) -> None:
    inc = lifecycle()[0]
    async with CloudEventsReceiver() as hook, endpoint() as webhook:
        hook.answer(Answer(401), Answer(403), Answer(404), Answer(415), Answer(405))
        outcomes = [await webhook.deliver(inc, None, route(url=hook.url)) for _ in range(5)]
    assert outcomes == [
        Retry("HTTP 401 (credential refused)", 60.0),
        Retry("HTTP 403 (credential refused)", 60.0),
        Rejected("HTTP 404", ""),
        Rejected("HTTP 415", ""),
        Retry("HTTP 405"),
    ]
    assert "route hooks" in caplog.text
