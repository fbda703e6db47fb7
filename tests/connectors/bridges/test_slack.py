"""The Slack endpoint against a local Slack (tests/receivers/slack.py) over real HTTP.

Incidents come from the real core (tests/factories.py through tests/core_helpers.py);
the endpoint is driven as the runner drives it: one revision at a time, with what the
ledger kept of the last one (:class:`Delivered`).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any

import aiohttp
import msgspec
import pytest
import pytest_asyncio

from connectors.bridges import slack_blocks
from connectors.bridges.base import (
    Accepted,
    Delivered,
    Endpoint,
    Outcome,
    Rejected,
    Retry,
    Route,
    Skipped,
)
from connectors.bridges.slack import MAX_BUDGET, Settings, SlackEndpoint, build
from schemas.incidents import Evidence, Incident, PodInfo
from tests.core_helpers import of_type, run
from tests.factories import Cluster, term
from tests.receivers.slack import SlackReceiver, serving, total_text

MIN = 60.0
TOKEN = "xoxb-test-token"
CHANNEL = "C0ALERTS1"
ENV = {"SLACK_TOKEN": TOKEN}
ROUTE = Route(name="oncall", target={"channel": CHANNEL, "token_env": "SLACK_TOKEN"})
FAST = Settings(channel_interval_seconds=0.0)

HOSTILE_POD = "<!channel>-*bold*-`zap`"
"""Would mention the channel, bold, and close a code span."""
STARRED_POD = "*bold*_it_~strike~"
"""Formats, without a backtick: fine in a code span."""
HOSTILE_LOG = "<@U123ABC> ```boom``` & <https://evil.example|click>"


# -- incidents from the core --------------------------------------------------------------------
def oom_lifecycle(pod: str = "srv", message: str = "") -> list[Incident]:
    """host_oom_kill: open, updated (a second kill), resolved (quiet)."""
    c = Cluster()
    c.node("n2", 0)
    c.pod("n2", pod, 1)
    c.pod("n2", pod, 2 * MIN, restarts=1, last=term(2 * MIN - 1, "OOMKilled", 137, message))
    c.pod("n2", pod, 4 * MIN, restarts=2, last=term(4 * MIN - 1, "OOMKilled", 137, message))
    c.tick(60 * MIN)
    revisions = [r for r in run(c.events) if r.type == "host_oom_kill"]
    assert [r.status for r in revisions] == ["open", "updated", "resolved"]
    return revisions


def storm(pods: int = 200) -> Incident:
    """An XID 79 and 200 evictions on one node: one chain incident naming every pod."""
    c = Cluster()
    c.node("n1", 0, capacity=8, alloc=8)
    names = [f"trainer-{i:03d}" for i in range(pods)]
    for name in names:
        c.pod("n1", name, 1)
    c.xid("n1", 5 * MIN, 79)
    c.node("n1", 5 * MIN + 9, capacity=8, alloc=7)
    for i, name in enumerate(names):
        c.kube("n1", 5 * MIN + 20 + i / 10, "Evicted", name=name)
    [chain] = of_type(run(c.events), "device_unhealthy_eviction")
    assert len(chain.pods) == pods
    return chain


# -- plumbing ----------------------------------------------------------------------------------
@pytest_asyncio.fixture
async def slack() -> AsyncIterator[SlackReceiver]:
    async with serving() as receiver:
        yield receiver
    assert receiver.violations == [], "every request must follow Slack's format"


@pytest_asyncio.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


class Clock:
    """A monotonic clock the test moves (the pacer's)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def endpoint(
    slack: SlackReceiver,
    http: aiohttp.ClientSession,
    options: Settings = FAST,
    clock: Clock | None = None,
) -> SlackEndpoint:
    options = msgspec.structs.replace(options, api_url=slack.url)
    return SlackEndpoint(options, http, ENV, clock=clock or Clock())


def delivered(incident: Incident, outcome: Outcome, previous: Delivered | None) -> Delivered:
    assert isinstance(outcome, Accepted), outcome
    memo = outcome.memo if outcome.memo is not None else (previous.memo if previous else {})
    return Delivered(incident.revision, incident.status, memo)


async def deliver_all(
    ep: Endpoint, revisions: Sequence[Incident], route: Route = ROUTE
) -> list[Delivered]:
    """As the runner does: each revision with the ledger's last entry."""
    ledger: list[Delivered] = []
    for incident in revisions:
        previous = ledger[-1] if ledger else None
        ledger.append(delivered(incident, await ep.deliver(incident, previous, route), previous))
    return ledger


def text_objects(payload: Any) -> list[dict[str, Any]]:
    """Every text object in the blocks."""
    found: list[dict[str, Any]] = []

    def walk(obj: Any) -> None:
        if isinstance(obj, dict):
            if obj.get("type") in ("plain_text", "mrkdwn"):
                found.append(obj)
            for value in obj.values():
                walk(value)
        elif isinstance(obj, list):
            for value in obj:
                walk(value)

    walk(payload.get("blocks", []))
    return found


def outside_code(mrkdwn: str) -> str:
    """What Slack would format in a mrkdwn text: everything but code blocks and spans."""
    return re.sub(r"`[^`\n]*`", "", re.sub(r"```.*?```", "", mrkdwn, flags=re.S))


# -- the lifecycle -----------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_open_update_resolve_is_one_parent_updated_in_place_with_a_thread(
    slack: SlackReceiver, http: aiohttp.ClientSession
) -> None:
    revisions = oom_lifecycle()
    ledger = await deliver_all(endpoint(slack, http), revisions)

    [parent] = slack.parents()
    assert [c.method for c in slack.calls] == ["chat.postMessage"] + 2 * [
        "chat.update",
        "chat.postMessage",
    ]
    assert len(parent.versions) == 3, "posted once, then updated for r2 and r3"
    assert [r["thread_ts"] for r in parent.replies] == [parent.ts, parent.ts]
    assert all(d.memo["channel"] == CHANNEL and d.memo["ts"] == parent.ts for d in ledger)
    headers = [v["blocks"][0]["text"]["text"] for v in parent.versions]
    assert headers[0].startswith("🟠 TICKET")
    assert "RESOLVED" in headers[2]
    assert [v["metadata"]["event_payload"]["revision"] for v in parent.versions] == [1, 2, 3]
    # The r2 reply says what the second kill added; the r3 reply says it resolved.
    r2, r3 = (json.dumps(r, ensure_ascii=False) for r in parent.replies)
    assert "+ " in r2
    assert "OOMKilled" in r2
    assert "Resolved" in r3
    assert parent.replies[1]["text"].startswith("Resolved: ")
    assert all(r["text"] for r in [*parent.versions, *parent.replies]), "fallback always set"


@pytest.mark.asyncio
async def test_a_memo_without_ts_starts_a_new_parent(
    slack: SlackReceiver, http: aiohttp.ClientSession
) -> None:
    """An older ledger (or a route that was a webhook) kept no ts: post, do not update."""
    _, second, _ = oom_lifecycle()
    outcome = await endpoint(slack, http).deliver(second, Delivered(1, "open", {}), ROUTE)
    [parent] = slack.parents()
    assert isinstance(outcome, Accepted)
    assert outcome.memo is not None
    assert (outcome.memo["ts"], [c.method for c in slack.calls]) == (
        parent.ts,
        ["chat.postMessage"],
    )
    assert parent.replies == []


@pytest.mark.asyncio
async def test_a_deleted_parent_is_posted_again(
    slack: SlackReceiver, http: aiohttp.ClientSession
) -> None:
    first, second, _ = oom_lifecycle()
    ep = endpoint(slack, http)
    [opened] = await deliver_all(ep, [first])
    slack.delete(CHANNEL, opened.memo["ts"])
    outcome = await ep.deliver(second, opened, ROUTE)
    [parent] = slack.parents()
    assert isinstance(outcome, Accepted)
    assert outcome.memo is not None
    assert outcome.memo["ts"] == parent.ts != opened.memo["ts"]
    assert parent.current["metadata"]["event_payload"]["revision"] == 2


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_a_ratelimited_channel_opens_when_the_loops_clock_has_waited() -> None:
    """No clock given: the channel's pause runs on the loop's clock, the one the runner
    waits on, so a fast-forwarded wait (looptime) finds the channel open again."""
    first = oom_lifecycle()[0]
    async with serving() as slack, aiohttp.ClientSession() as http:
        ep = build(msgspec.structs.replace(FAST, api_url=slack.url), http, ENV)
        slack.answer(429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "3"})
        outcome = await ep.deliver(first, None, ROUTE)
        assert isinstance(outcome, Retry)
        assert outcome.after_seconds == pytest.approx(3.0)
        await asyncio.sleep(3.0)
        assert isinstance(await ep.deliver(first, None, ROUTE), Accepted)
        await ep.close()


@pytest.mark.asyncio
async def test_a_failed_reply_retries_and_a_resent_revision_is_harmless(
    slack: SlackReceiver, http: aiohttp.ClientSession
) -> None:
    first, second, _ = oom_lifecycle()
    clock = Clock()
    ep = endpoint(slack, http, clock=clock)
    [opened] = await deliver_all(ep, [first])
    slack.answer(
        429,
        {"ok": False, "error": "ratelimited"},
        {"Retry-After": "3"},
        when=lambda method, payload: "thread_ts" in payload,
    )
    outcome = await ep.deliver(second, opened, ROUTE)
    assert outcome == Retry(
        reason="slack chat.postMessage: HTTP 429 ratelimited", after_seconds=3.0
    )
    [parent] = slack.parents()
    assert (len(parent.versions), parent.replies) == (2, []), "updated, not yet replied"
    # The channel is quiet for as long as Slack asked: said, not slept.
    paced = await ep.deliver(second, opened, ROUTE)
    assert paced == Retry(reason=f"slack: paced: channel {CHANNEL}", after_seconds=3.0)
    assert len(parent.versions) == 2
    clock.now += 3.0

    # The runner tries again with the same ledger entry: the update is set again, the
    # reply posted once.
    again = await ep.deliver(second, opened, ROUTE)
    assert isinstance(again, Accepted)
    assert len(parent.versions) == 3
    assert parent.versions[1] == parent.versions[2]
    assert len(parent.replies) == 1

    # A crash before the ledger's write: the same revision once more. The parent is the
    # same; the reply is posted again (documented), identical and marked with its revision.
    crash = await ep.deliver(second, opened, ROUTE)
    assert isinstance(crash, Accepted)
    assert crash.memo == again.memo
    assert len(slack.parents()) == 1
    assert parent.versions[-1] == parent.versions[1]
    assert parent.replies[0] == parent.replies[1]
    assert parent.replies[1]["metadata"]["event_payload"]["revision"] == 2


@pytest.mark.asyncio
async def test_a_revision_that_only_moves_last_seen_gets_no_reply(
    slack: SlackReceiver, http: aiohttp.ClientSession
) -> None:
    first, second, _ = oom_lifecycle()
    later = msgspec.structs.replace(
        second, revision=3, last_seen=second.last_seen + (second.last_seen - first.last_seen)
    )
    ledger = await deliver_all(endpoint(slack, http), [first, second, later])
    [parent] = slack.parents()
    assert [c.method for c in slack.calls][-1] == "chat.update"
    assert (len(parent.versions), len(parent.replies)) == (3, 1)
    assert parent.current["metadata"]["event_payload"]["revision"] == 3
    assert ledger[-1].memo == {**ledger[1].memo}, "the digest is the same"


def test_a_revision_that_swaps_a_pod_for_another_is_worth_a_reply() -> None:
    """Same count, another pod: a reader sees a change (the digest keeps which pods)."""
    first, second, _ = oom_lifecycle()
    memo = slack_blocks.digest(second)
    [pod, *rest] = second.pods
    swapped = msgspec.structs.replace(
        second, revision=3, pods=(msgspec.structs.replace(pod, name=pod.name + "-b"), *rest)
    )
    assert len(swapped.pods) == len(second.pods)
    assert slack_blocks.worth_a_reply(swapped, memo)
    assert not slack_blocks.worth_a_reply(msgspec.structs.replace(second, revision=3), memo)
    assert first.pods  # the lifecycle names its pod


# -- untrusted text ------------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_hostile_pod_names_and_logs_neither_mention_nor_format(
    slack: SlackReceiver, http: aiohttp.ClientSession
) -> None:
    ep = endpoint(slack, http)
    hostile = oom_lifecycle(HOSTILE_POD, HOSTILE_LOG)
    starred = oom_lifecycle(STARRED_POD, "*not bold* _nor italic_")
    await deliver_all(ep, hostile)
    await deliver_all(ep, starred)
    payloads = [p for m in slack.parents() for p in [*m.versions, *m.replies]]
    assert len(payloads) == 10

    for payload in payloads:
        raw = json.dumps(payload, ensure_ascii=False)
        for control in ("<!channel>", "<@U123ABC>", "<https://", "<!", "<@"):
            assert control not in raw, "escaped: Slack sees &lt;, never a control sequence"
        assert "link_names" not in payload
        assert payload["unfurl_links"] is False
        for obj in text_objects(payload):
            text = obj["text"]
            if obj["type"] == "mrkdwn":
                # Outside code, only our own labels are formatted.
                loose = outside_code(text)
                for untrusted in ("bold", "it_", "strike", "zap", "boom", "U123ABC"):
                    assert untrusted not in loose, (untrusted, text)
                # A backtick-bearing name never sits in mrkdwn at all (it would close a span).
                assert "zap" not in text, text
                assert "```boom```" not in text, text
            else:
                assert obj.get("emoji") is False
    # The hostile name is there, escaped, in plain_text; the starred one in a code span.
    objects = [o for p in payloads for o in text_objects(p)]
    assert any(
        o["type"] == "plain_text" and "&lt;!channel&gt;-*bold*-`zap`" in o["text"] for o in objects
    )
    assert any(o["type"] == "mrkdwn" and f"ns/{STARRED_POD}" in o["text"] for o in objects)
    assert any("&lt;@U123ABC&gt; ```boom``` &amp;" in o["text"] for o in objects)


def test_escaping_touches_only_slacks_three_control_characters() -> None:
    assert slack_blocks.escape("a & b < c > d 'e' \"f\" *g*") == (
        "a &amp; b &lt; c &gt; d 'e' \"f\" *g*"
    )
    assert slack_blocks.escape("&lt;") == "&amp;lt;", "an entity in the input stays literal"
    clipped = slack_blocks.clip("<" * 100, 10)
    assert clipped == "&lt;&lt;" + slack_blocks.MARK, "never half an entity"
    assert not slack_blocks.spannable("a`b")
    assert not slack_blocks.spannable("a\nb")
    assert slack_blocks.field_text("Node", "n`1")["type"] == "plain_text"
    assert slack_blocks.field_text("Node", "n*1*") == {
        "type": "mrkdwn",
        "text": "*Node*\n`n*1*`",
        "verbatim": True,
    }


# -- limits --------------------------------------------------------------------------------------
def inflated(incident: Incident, lines: int = 400, width: int = 600) -> Incident:
    """The storm's incident with far more (and wider, escape-heavy) evidence than any
    message holds, and one very long pod name."""
    base = incident.evidence[0]
    evidence = tuple(
        Evidence(
            event_id=f"x-{i}",
            schema=base.schema,
            time=base.time,
            text=f"line {i} " + "<&>" * (width // 3),
        )
        for i in range(lines)
    )
    pods = (PodInfo(namespace="ns", name="p" * 5000), *incident.pods)
    return msgspec.structs.replace(
        incident,
        evidence=evidence,
        evidence_omitted=37,
        pods=pods,
        summary="s" * 9000,
        action="a" * 9000,
        type="t" * 400,
    )


@pytest.mark.asyncio
async def test_a_huge_incident_is_clipped_within_every_limit_and_says_so(
    slack: SlackReceiver, http: aiohttp.ClientSession
) -> None:
    big = inflated(storm())
    outcome = await endpoint(slack, http).deliver(big, None, ROUTE)
    assert isinstance(outcome, Accepted), outcome  # and the receiver checked each limit
    [parent] = slack.parents()
    blocks = parent.current["blocks"]
    assert len(blocks) <= 50
    assert total_text(blocks) <= slack_blocks.DEFAULT_BUDGET
    assert len(blocks[0]["text"]["text"]) <= 150
    notes = [
        int(m.group(1))
        for b in blocks
        if b["type"] == "context"
        for e in b["elements"]
        if (m := re.match(r"… (\d+) more not shown", e["text"]))
    ]
    pods_note, evidence_note = notes
    shown_pods = sum(b["text"]["text"].count("\nns/") for b in blocks if "Affected pods" in str(b))
    shown_lines = sum(
        len(re.findall(r"^\d\d:\d\d:\d\d line \d+ ", b["text"]["text"], flags=re.M))
        for b in blocks
        if "Evidence" in str(b.get("text", {}).get("text", ""))
    )
    assert shown_pods + pods_note == len(big.pods)
    assert shown_pods > 0
    assert shown_lines + evidence_note == len(big.evidence) + big.evidence_omitted
    assert shown_lines > 0
    assert "incident inc-" in blocks[-1]["elements"][0]["text"], "the ids are never clipped"


@pytest.mark.asyncio
async def test_a_storm_of_evictions_is_one_message_naming_every_pod(
    slack: SlackReceiver, http: aiohttp.ClientSession
) -> None:
    chain = storm()
    assert isinstance(await endpoint(slack, http).deliver(chain, None, ROUTE), Accepted)
    [parent] = slack.parents()
    listed = "\n".join(
        b["text"]["text"] for b in parent.current["blocks"] if "Affected pods" in str(b)
    )
    assert all(f"ns/{p.name} (evicted)" in listed for p in chain.pods)
    assert "more not shown" not in json.dumps(parent.current["blocks"][:-3])


@pytest.mark.parametrize("budget", [slack_blocks.MIN_BUDGET, 7000, slack_blocks.DEFAULT_BUDGET])
def test_every_rendering_of_the_storm_keeps_the_budget(budget: int) -> None:
    chain = storm()
    for incident in (chain, inflated(chain, lines=60, width=3500)):
        message = slack_blocks.render_parent(incident, budget)
        assert total_text(message.blocks) <= budget
        assert len(message.blocks) <= 50
        assert message.text
        reply = slack_blocks.render_reply(incident, {"evidence_last": "none"}, budget)
        assert total_text(reply.blocks) <= max(budget, slack_blocks.MIN_BUDGET)


# -- Slack's answers -----------------------------------------------------------------------------
@pytest.mark.asyncio
@pytest.mark.parametrize(
    "error", ["not_in_channel", "msg_blocks_too_long", "invalid_blocks", "is_archived"]
)
async def test_a_permanent_error_is_rejected_with_slacks_reason(
    slack: SlackReceiver, http: aiohttp.ClientSession, error: str
) -> None:
    first, *_ = oom_lifecycle()
    slack.answer(
        200,
        {"ok": False, "error": error, "response_metadata": {"messages": ["[ERROR] why"]}},
    )
    outcome = await endpoint(slack, http).deliver(first, None, ROUTE)
    assert outcome == Rejected(
        reason=f"slack chat.postMessage: {error}", detail=f"{error} [ERROR] why"
    )


@pytest.mark.asyncio
async def test_a_refused_token_is_retried_long_and_an_unknown_channel_rejected(
    slack: SlackReceiver, http: aiohttp.ClientSession, caplog: pytest.LogCaptureFixture
) -> None:
    """A token being rotated must not dead-letter every incident: a long Retry and a
    warning naming the route, never the token."""
    first, *_ = oom_lifecycle()
    wrong = build(Settings(api_url=slack.url), http, {"SLACK_TOKEN": "xoxb-leaked-value"})
    outcome = await wrong.deliver(first, None, ROUTE)
    assert outcome == Retry(
        reason="slack chat.postMessage: invalid_auth (credential refused)", after_seconds=60.0
    )
    assert "leaked" not in repr(outcome)
    assert "route oncall" in caplog.text
    assert "leaked" not in caplog.text
    for error in ("token_revoked", "account_inactive"):
        slack.answer(200, {"ok": False, "error": error})
        again = await endpoint(slack, http).deliver(first, None, ROUTE)
        assert isinstance(again, Retry)
        assert again.after_seconds == 60.0
    elsewhere = Route(name="x", target={"channel": "C0NOWHERE", "token_env": "SLACK_TOKEN"})
    outcome = await endpoint(slack, http).deliver(first, None, elsewhere)
    assert isinstance(outcome, Rejected)
    assert outcome.reason.endswith("channel_not_found")
    assert TOKEN not in repr(outcome)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("status", "body", "headers", "expected"),
    [
        (429, {"ok": False, "error": "ratelimited"}, {"Retry-After": "7"}, Retry(
            reason="slack chat.postMessage: HTTP 429 ratelimited", after_seconds=7.0
        )),
        (429, "", {"Retry-After": "inf"}, Retry(reason="slack chat.postMessage: HTTP 429")),
        (429, "", {"Retry-After": "nan"}, Retry(reason="slack chat.postMessage: HTTP 429")),
        (429, "", {"Retry-After": "-1"}, Retry(reason="slack chat.postMessage: HTTP 429")),
        (429, "", {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, Retry(
            reason="slack chat.postMessage: HTTP 429", after_seconds=0.0
        )),
        (429, "", {"Retry-After": "86400"}, Retry(
            reason="slack chat.postMessage: HTTP 429", after_seconds=3600.0
        )),
        (401, {"ok": False, "error": "invalid_auth"}, {}, Retry(
            reason="slack chat.postMessage: HTTP 401 invalid_auth (credential refused)",
            after_seconds=60.0,
        )),
        (302, "", {"Location": "http://elsewhere.invalid/"}, Retry(
            reason="slack chat.postMessage: HTTP 302: redirects are not followed",
            after_seconds=60.0,
        )),
        (400, {"ok": False, "error": "invalid_json"}, {}, Rejected(
            reason="slack chat.postMessage: HTTP 400 invalid_json", detail="invalid_json"
        )),
        (200, {"ok": False, "error": "ratelimited"}, {"Retry-After": "2"}, Retry(
            reason="slack chat.postMessage: ratelimited", after_seconds=2.0
        )),
        (503, "upstream", {}, Retry(reason="slack chat.postMessage: HTTP 503")),
        (200, {"ok": False, "error": "internal_error"}, {}, Retry(
            reason="slack chat.postMessage: internal_error"
        )),
        (200, "<html>proxy</html>", {}, Retry(
            reason="slack chat.postMessage: HTTP 200 but not JSON"
        )),
        (404, {"ok": False, "error": "unknown_method"}, {}, Retry(
            reason="slack chat.postMessage: HTTP 404 unknown_method"
        )),  # a wrong api_url: the configuration's fault, nothing lost by retrying
    ],
)  # fmt: skip
async def test_rate_limits_and_outages_are_retried_honouring_retry_after(
    slack: SlackReceiver,
    http: aiohttp.ClientSession,
    status: int,
    body: Any,
    headers: dict[str, str],
    expected: Outcome,
) -> None:
    first, *_ = oom_lifecycle()
    slack.answer(status, body, headers)
    assert await endpoint(slack, http).deliver(first, None, ROUTE) == expected
    assert slack.parents() == [], "nothing was posted"


@pytest.mark.asyncio
async def test_a_network_failure_is_retried_and_named_by_class_only(
    http: aiohttp.ClientSession,
) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    first, *_ = oom_lifecycle()
    ep = build(Settings(api_url=f"http://127.0.0.1:{port}/api/"), http, ENV)
    outcome = await ep.deliver(first, None, ROUTE)
    assert isinstance(outcome, Retry)
    assert outcome.after_seconds is None
    assert re.fullmatch(r"slack chat\.postMessage: network error: \w+", outcome.reason), (
        outcome.reason
    )


@pytest.mark.asyncio
async def test_calls_to_one_channel_are_spaced(
    slack: SlackReceiver, http: aiohttp.ClientSession
) -> None:
    """About one message a second per channel, a short burst allowed: past it the
    endpoint answers Retry with when to come back (it never sleeps holding the call)."""
    clock = Clock()
    ep = endpoint(slack, http, Settings(channel_interval_seconds=0.25), clock)
    first, second, third = oom_lifecycle()
    [_, updated] = await deliver_all(ep, [first, second])  # 1 + 2 calls of 4
    assert len(slack.calls) == 3
    paced = await ep.deliver(third, updated, ROUTE)  # two more calls do not fit in 1 s
    assert paced == Retry(reason=f"slack: paced: channel {CHANNEL}", after_seconds=1.0)
    assert len(slack.calls) == 3, "nothing sent while paced"
    clock.now += 1.0
    assert isinstance(await ep.deliver(third, updated, ROUTE), Accepted)
    assert len(slack.calls) == 5
    other = Route(name="x", target={"channel": "C0OTHER1", "token_env": "SLACK_TOKEN"})
    slack.channels.add("C0OTHER1")
    assert isinstance(await ep.deliver(first, None, other), Accepted), "paced per channel"


# -- incoming webhook ----------------------------------------------------------------------------
@pytest.mark.asyncio
async def test_webhook_mode_posts_each_revision_whole_and_never_threads(
    slack: SlackReceiver, http: aiohttp.ClientSession
) -> None:
    route = Route(name="hook", target={"webhook_url_env": "HOOK"})
    ep = build(FAST, http, {"HOOK": slack.webhook_url})
    assert ep.check_route(route) is None
    ledger = await deliver_all(ep, oom_lifecycle(HOSTILE_POD), route)
    assert [c.method for c in slack.calls] == ["webhook"] * 3
    assert slack.messages == {}
    assert all("ts" not in d.memo and "channel" not in d.memo for d in ledger)
    texts = [p["text"] for p in slack.webhook_posts]
    assert texts[1].startswith("Update: ")
    assert texts[2].startswith("Resolved: ")
    assert "RESOLVED" in slack.webhook_posts[2]["blocks"][0]["text"]["text"]
    assert all("metadata" not in p for p in slack.webhook_posts)


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (404, "channel_not_found", Rejected(
            reason="slack webhook: HTTP 404 channel_not_found", detail="channel_not_found"
        )),
        (410, "channel_is_archived", Rejected(
            reason="slack webhook: HTTP 410 channel_is_archived", detail="channel_is_archived"
        )),
        (429, "rate limited", Retry(reason="slack webhook: HTTP 429", after_seconds=30.0)),
        (500, "rollup_error", Retry(reason="slack webhook: HTTP 500 rollup_error")),
        (403, "invalid_token", Retry(
            reason="slack webhook: HTTP 403 invalid_token (credential refused)",
            after_seconds=60.0,
        )),
    ],
)  # fmt: skip
async def test_webhook_errors_are_values_without_the_url(
    slack: SlackReceiver, http: aiohttp.ClientSession, status: int, body: str, expected: Outcome
) -> None:
    route = Route(name="hook", target={"webhook_url_env": "HOOK"})
    ep = build(FAST, http, {"HOOK": slack.webhook_url})
    headers = {"Retry-After": "30"} if status == 429 else {}
    slack.answer(status, body, headers)
    first, *_ = oom_lifecycle()
    outcome = await ep.deliver(first, None, route)
    assert outcome == expected
    assert "hooksecret" not in repr(outcome)


@pytest.mark.asyncio
async def test_webhook_mode_skips_a_revision_nobody_would_see_changed(
    slack: SlackReceiver, http: aiohttp.ClientSession
) -> None:
    """A webhook can only post whole new messages: one that only moved last_seen would
    repeat the last one in the channel."""
    route = Route(name="hook", target={"webhook_url_env": "HOOK"})
    ep = build(FAST, http, {"HOOK": slack.webhook_url})
    first, second, third = oom_lifecycle()
    ledger = await deliver_all(ep, [first, second], route)
    quiet = msgspec.structs.replace(
        second, revision=second.revision + 1, last_seen=second.last_seen + timedelta(minutes=1)
    )
    outcome = await ep.deliver(quiet, ledger[-1], route)
    assert isinstance(outcome, Skipped), outcome
    assert len(slack.webhook_posts) == 2
    assert isinstance(await ep.deliver(third, ledger[-1], route), Accepted), "resolved is news"
    assert len(slack.webhook_posts) == 3


@pytest.mark.asyncio
@pytest.mark.parametrize("status", [404, 500, 403])
async def test_a_webhook_error_page_echoing_the_url_never_reaches_the_outcome(
    slack: SlackReceiver, http: aiohttp.ClientSession, status: int
) -> None:
    route = Route(name="hook", target={"webhook_url_env": "HOOK"})
    ep = build(FAST, http, {"HOOK": slack.webhook_url})
    slack.answer(status, "no_service", echo=True)
    first, *_ = oom_lifecycle()
    outcome = await ep.deliver(first, None, route)
    assert isinstance(outcome, (Retry, Rejected)), outcome
    assert "hooksecret" not in repr(outcome)
    assert "B0000TEST" not in repr(outcome)
    assert outcome.reason == f"slack webhook: HTTP {status}" + (
        " (credential refused)" if status == 403 else ""
    )


@pytest.mark.asyncio
async def test_the_receiver_holds_webhook_posts_to_slacks_total_text_limit() -> None:
    """Without this check a webhook message over Slack's limit passed every test."""
    blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "x" * 2900}}] * 5
    async with (
        serving() as receiver,
        aiohttp.ClientSession() as http,
        http.post(receiver.webhook_url, json={"text": "t", "blocks": blocks}) as response,
    ):
        assert response.status == 400
        assert await response.text() == "msg_blocks_too_long"
    assert receiver.violations == ["webhook: 14500 characters"]


@pytest.mark.asyncio
async def test_a_storm_fits_a_webhook_message_at_the_highest_budget(
    slack: SlackReceiver, http: aiohttp.ClientSession
) -> None:
    route = Route(name="hook", target={"webhook_url_env": "HOOK"})
    options = Settings(channel_interval_seconds=0.0, budget_chars=MAX_BUDGET)
    ep = build(options, http, {"HOOK": slack.webhook_url})
    assert isinstance(await ep.deliver(storm(), None, route), Accepted)
    assert total_text(slack.webhook_posts[0]["blocks"]) <= MAX_BUDGET


# -- routes and options ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("target", "error"),
    [
        ({"channel": CHANNEL, "token_env": "SLACK_TOKEN"}, None),
        ({"channel": "#alerts", "token_env": "SLACK_TOKEN"}, "give the channel id"),
        ({"channel": CHANNEL, "token_env": "NOPE"}, "environment variable NOPE is not set"),
        ({"channel": CHANNEL, "token": TOKEN}, "never the secret itself"),
        ({"webhook_url_env": "SLACK_TOKEN"}, "not an http(s) URL"),
        ({"webhook_url_env": "SLACK_TOKEN", "channel": CHANNEL}, "drop channel"),
        ({"webhook_url_env": "SLACK_TOKEN", "token_env": "SLACK_TOKEN"}, "not both"),
        ({"channel": CHANNEL, "token_env": "SPACED"}, "whitespace or control characters"),
    ],
)
def test_check_route_says_what_is_missing_and_never_the_secret(
    target: dict[str, str], error: str | None
) -> None:
    environ = {**ENV, "SPACED": "xoxb-two words"}
    ep = SlackEndpoint(FAST, None, environ)  # type: ignore[arg-type]  # no HTTP here
    said = ep.check_route(Route(name="r", target=target))
    if error is None:
        assert said is None
    else:
        assert said is not None
        assert error in said
        assert TOKEN not in said
        assert "two words" not in said


def test_options_refuse_unknown_keys_and_hold_no_secret() -> None:
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"token": TOKEN}, Settings)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert({"budget_chars": 20_000}, Settings)
    with pytest.raises(msgspec.ValidationError):  # Slack fails near 12k counting structure
        msgspec.convert({"budget_chars": 11_001}, Settings)
    assert msgspec.convert({"budget_chars": 11_000}, Settings).budget_chars == 11_000
    assert not {"token", "webhook_url"} & set(Settings.__struct_fields__)
