"""The Slack endpoint: one parent message per incident, updated in place, with a thread.

With a bot token the parent is posted once, replaced by ``chat.update`` on each revision
and what changed goes into its thread (channel id and ``ts`` kept in the ledger's memo);
an incoming webhook can only post, so each revision a reader would see as news is a new
whole message. Calls are paced per channel instead of earning 429s.

Traps: the Web API answers errors as HTTP 200 ``ok: false``, so ``ok`` counts, never the
status; a channel is named by id (a name posts but cannot be updated); a re-sent revision
after a crash may post a thread reply twice (accepted, metadata tells them apart); every
call says ``parse: none``; the token and webhook URL never reach a reason, memo or log;
hand-written HTTP, not ``slack_sdk`` (it raises and sleeps inside the call). Slack's
facts, outcomes and each trap: docs/bridges.md, design notes: slack.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Final

import aiohttp
import msgspec

from connectors.bridges import slack_blocks
from connectors.bridges.base import (
    Accepted,
    Delivered,
    Endpoint,
    Outcome,
    Rejected,
    RequestSeconds,
    Retry,
    Route,
    SecretError,
    Skipped,
    mask,
    read_secret,
    url_secrets,
)
from connectors.bridges.http import (
    Answer,
    Pacer,
    auth_retry,
    loop_time,
    post_bounded,
    status_outcome,
)
from connectors.kafka.config import Secret
from schemas.codec import RecordError, dumps, loads
from schemas.incidents import Incident

CHANNEL_ID: Final = re.compile(r"[CGD][A-Z0-9]{6,}")
"""Public (C), private (G, older ones) and direct-message (D) conversation ids."""
TRANSIENT: Final = frozenset(
    {
        "ratelimited",
        "rate_limited",
        "internal_error",
        "fatal_error",
        "service_unavailable",
        "request_timeout",
        "team_added_to_org",
    }
)
"""``ok: false`` errors worth trying again (Slack's methods list them as transient)."""
PARENT_GONE: Final = frozenset({"message_not_found", "cant_update_message", "edit_window_closed"})
"""``chat.update`` errors after which the parent cannot be updated: post a new one."""
AUTH_ERRORS: Final = frozenset({"invalid_auth", "token_revoked", "account_inactive"})
"""``ok: false`` errors of a refused token: retried after a long wait, never dead letters."""
WEBHOOK_PERMANENT: Final = frozenset({404, 410})
"""Incoming-webhook statuses that repeating cannot fix (the hook or its channel is gone)."""
ERROR_CODE: Final = re.compile(r"[a-z_]+")
"""What a Slack error code looks like; anything else in an error body is not one."""
MAX_DETAIL: Final = 500
MAX_BUDGET: Final = 11_000
"""The highest ``budget_chars``: Slack fails from about 12,000 characters counting some
structure too (see :mod:`.slack_blocks`)."""
BURST: Final = 4
"""Calls to one channel allowed back to back (an update and its reply are two)."""

log = logging.getLogger("gputriage.bridge.slack")


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[bridge.slack]``; routes give ``channel`` and ``token_env``/``token_file``, or
    ``webhook_url_env``/``webhook_url_file``. ``channel_interval_seconds``: Slack allows
    about one message a second per channel; :data:`BURST` calls may go back to back."""

    api_url: Annotated[
        str, msgspec.Meta(description="The Web API's base URL (a proxy, or a test receiver).")
    ] = "https://slack.com/api/"
    timeout_seconds: RequestSeconds = 10.0
    channel_interval_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=0, le=60, description="Seconds per call to one channel on average; 0: no pacing."
        ),
    ] = 1.0
    thread_replies: Annotated[
        bool,
        msgspec.Meta(description="Post what each revision changed into the parent's thread."),
    ] = True
    budget_chars: Annotated[
        int,
        msgspec.Meta(
            ge=slack_blocks.MIN_BUDGET,
            le=MAX_BUDGET,
            description="Text characters in all blocks of one message.",
        ),
    ] = slack_blocks.DEFAULT_BUDGET


def build(
    options: Settings, http: aiohttp.ClientSession, environ: Mapping[str, str] | None = None
) -> Endpoint:
    return SlackEndpoint(options, http, environ)


def webhook_mode(target: Mapping[str, str]) -> bool:
    return "webhook_url_env" in target or "webhook_url_file" in target


def memo_of(incident: Incident, channel: str, ts: str) -> dict[str, str]:
    """The ledger's memo: where the parent is, and what the reply compares with next."""
    memo = slack_blocks.digest(incident)
    if channel and ts:
        memo.update(channel=channel, ts=ts)
    return memo


def parent_payload(incident: Incident, channel: str, budget: int) -> dict[str, Any]:
    """``chat.postMessage`` of a new parent (no ``ts``: Slack gives it)."""
    message = slack_blocks.render_parent(incident, budget).payload()
    return {"channel": channel, "parse": "none", **message}


def update_payload(incident: Incident, channel: str, ts: str, budget: int) -> dict[str, Any]:
    """``chat.update`` of the parent at ``(channel, ts)`` to this revision: the same for
    every attempt at it (that is what makes a re-sent revision harmless)."""
    return {"ts": ts, **parent_payload(incident, channel, budget)}


def reply_payload(incident: Incident, memo: Mapping[str, str], budget: int) -> dict[str, Any]:
    """``chat.postMessage`` into the parent's thread: what changed since ``memo``."""
    reply = slack_blocks.render_reply(incident, memo, budget).payload()
    return {"channel": memo["channel"], "thread_ts": memo["ts"], "parse": "none", **reply}


Call = tuple[str, dict[str, Any]]
"""One Web API call: the method and its payload."""


def plan(
    incident: Incident, memo: Mapping[str, str], options: Settings, channel: str
) -> list[Call]:
    """The bot-mode calls for one revision, given the ledger's memo (pure: the endpoint
    and ``gputriage demo --bridge slack-stub`` both use it). A memo with the parent's
    ``(channel, ts)``: ``chat.update`` of it, then a reply in its thread when
    ``thread_replies`` is on and something a reader sees changed; else a new parent in
    ``channel``."""
    budget = options.budget_chars
    if memo.get("channel") and memo.get("ts"):
        calls: list[Call] = [
            ("chat.update", update_payload(incident, memo["channel"], memo["ts"], budget))
        ]
        if options.thread_replies and slack_blocks.worth_a_reply(incident, memo):
            calls.append(("chat.postMessage", reply_payload(incident, memo, budget)))
        return calls
    return [("chat.postMessage", parent_payload(incident, channel, budget))]


class SlackEndpoint:
    """Bot-token and webhook delivery (see the module)."""

    kind = "slack"

    def __init__(
        self,
        options: Settings,
        http: aiohttp.ClientSession,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = loop_time,
    ) -> None:
        self._options = options
        self._http = http
        self._environ = environ
        self._base = options.api_url if options.api_url.endswith("/") else options.api_url + "/"
        self._timeout = aiohttp.ClientTimeout(total=options.timeout_seconds)
        self._pacer = Pacer(BURST, BURST * options.channel_interval_seconds, clock)

    def check_route(self, route: Route) -> str | None:
        target = route.target
        try:
            if webhook_mode(target):
                if "token_env" in target or "token_file" in target:
                    return "give a bot token or a webhook URL, not both"
                if "channel" in target:
                    return "an incoming webhook posts to its own channel: drop channel"
                url = read_secret(target, "webhook_url", self._environ).reveal()
                if not url.startswith(("https://", "http://")):
                    return "webhook_url: not an http(s) URL"
                return None
            channel = target.get("channel", "")
            if not CHANNEL_ID.fullmatch(channel):
                return (
                    f"channel {channel!r}: give the channel id (C0123ABCD), not its name "
                    "(chat.update takes ids only)"
                )
            token = read_secret(target, "token", self._environ).reveal()
            if token != token.strip() or any(c.isspace() or not c.isprintable() for c in token):
                return "token: holds whitespace or control characters (a stray newline?)"
        except SecretError as exc:
            return str(exc)
        return None

    async def close(self) -> None:
        """Nothing of its own: the HTTP session is the runner's."""

    async def deliver(
        self, incident: Incident, previous: Delivered | None, route: Route
    ) -> Outcome:
        target = route.target
        secret = "webhook_url" if webhook_mode(target) else "token"
        try:
            credential = read_secret(target, secret, self._environ)
        except SecretError as exc:  # a file being rotated, say: the message names no value
            return Retry(reason=f"slack: {exc}")
        if secret == "webhook_url":
            return await self._webhook(incident, previous, credential, route.name)
        channel = target.get("channel", "")
        if not CHANNEL_ID.fullmatch(channel):
            return Rejected(reason=f"slack: channel {channel!r} is not a channel id")
        memo = previous.memo if previous is not None else {}
        calls = plan(incident, memo, self._options, channel)
        where = memo.get("channel") or channel
        # An update may take two calls (and a gone parent a new post): room for both.
        wait = self._pacer.take(where, cost=2 if memo.get("ts") else 1)
        if wait > 0:
            return Retry(reason=f"slack: paced: channel {where}", after_seconds=wait)
        if calls[0][0] == "chat.update":
            return await self._revise(incident, memo, calls, credential, route.name)
        return await self._open(incident, calls[0][1], credential, route.name)

    # -- bot token -------------------------------------------------------------------------
    async def _open(
        self, incident: Incident, payload: dict[str, Any], token: Secret, route: str
    ) -> Outcome:
        answer = await self._api("chat.postMessage", token, payload, route)
        if not isinstance(answer, dict):
            return answer
        got_channel, ts = answer.get("channel"), answer.get("ts")
        if not isinstance(got_channel, str) or not isinstance(ts, str):
            # Posted, but nothing to update later: the next revision posts a new parent.
            return Accepted(memo=memo_of(incident, "", ""))
        return Accepted(memo=memo_of(incident, got_channel, ts))

    async def _revise(
        self,
        incident: Incident,
        memo: Mapping[str, str],
        calls: list[Call],
        token: Secret,
        route: str,
    ) -> Outcome:
        (method, update), *replies = calls
        channel, ts = memo["channel"], memo["ts"]
        answer = await self._api(method, token, update, route)
        if isinstance(answer, Rejected) and answer.detail.split(" ")[0] in PARENT_GONE:
            parent = parent_payload(incident, channel, self._options.budget_chars)
            return await self._open(incident, parent, token, route)
        if not isinstance(answer, dict):
            return answer
        for method, payload in replies:
            posted = await self._api(method, token, payload, route)
            if not isinstance(posted, dict):
                return posted
        return Accepted(memo=memo_of(incident, channel, ts))

    async def _api(
        self, method: str, token: Secret, payload: dict[str, Any], route: str
    ) -> dict[str, Any] | Retry | Rejected:
        """One Web API call; the decoded answer when ``ok``."""
        channel = str(payload["channel"])
        body = dumps(payload)
        headers = {
            "Authorization": f"Bearer {token.reveal()}",
            "Content-Type": "application/json; charset=utf-8",
        }
        where = f"slack {method}"
        got = await self._post(channel, self._base + method, body, headers, where)
        if isinstance(got, Retry):
            return got
        secrets = [token.reveal()]
        if got.status != 200:
            return _http_outcome(where, got, route, secrets)
        try:
            answer = loads(got.body)
        except RecordError:
            return Retry(reason=f"{where}: HTTP 200 but not JSON")
        if not isinstance(answer, dict):
            return Retry(reason=f"{where}: HTTP 200 but not a JSON object")
        if answer.get("ok") is True:
            return answer
        error = _code(answer.get("error")) or "unknown_error"
        if error in TRANSIENT:
            return Retry(reason=f"{where}: {error}", after_seconds=got.retry_after)
        if error in AUTH_ERRORS:
            return auth_retry(f"{where}: {error}", route, got.retry_after)
        return Rejected(reason=f"{where}: {error}", detail=_detail(error, answer, secrets))

    # -- incoming webhook ------------------------------------------------------------------
    async def _webhook(
        self, incident: Incident, previous: Delivered | None, url: Secret, route: str
    ) -> Outcome:
        if previous is not None and not slack_blocks.worth_a_reply(incident, previous.memo):
            return Skipped("slack webhook: nothing a reader sees changed")
        prefix = {"open": "", "updated": "Update: ", "resolved": "Resolved: "}[incident.status]
        message = slack_blocks.render_parent(incident, self._options.budget_chars)
        payload = message.payload()
        payload["text"] = slack_blocks.fallback(incident, prefix)
        del payload["metadata"]  # a webhook message cannot be found again anyway
        body = dumps(payload)
        headers = {"Content-Type": "application/json; charset=utf-8"}
        # Paced per route: the webhook's channel is not ours to know.
        key = f"webhook:{route}"
        wait = self._pacer.take(key)
        if wait > 0:
            return Retry(reason=f"slack webhook: paced: route {route}", after_seconds=wait)
        got = await self._post(key, url.reveal(), body, headers, "slack webhook")
        if isinstance(got, Retry):
            return got
        if got.status == 200:
            return Accepted(memo=memo_of(incident, "", ""))
        return _http_outcome(
            "slack webhook", got, route, url_secrets(url.reveal()), WEBHOOK_PERMANENT, plain=True
        )

    # -- HTTP ------------------------------------------------------------------------------
    async def _post(
        self, key: str, url: str, body: bytes, headers: dict[str, str], where: str
    ) -> Answer | Retry:
        """POST ``body`` (bounded read, no redirects, failures named by class only: see
        :func:`~connectors.bridges.http.post_bounded`); a ``Retry-After`` keeps the
        channel ``key`` quiet for as long as Slack asked."""
        got = await post_bounded(
            self._http, url, data=body, headers=headers, timeout=self._timeout, where=where
        )
        if isinstance(got, Answer) and got.retry_after is not None:
            self._pacer.close(key, got.retry_after)
        return got


def _code(value: object) -> str:
    """A Slack error code (``channel_not_found``), or "" for anything else."""
    return value if isinstance(value, str) and ERROR_CODE.fullmatch(value) else ""


def _http_outcome(
    where: str,
    answer: Answer,
    route: str,
    secrets: list[str],
    permanent: frozenset[int] = frozenset(),
    plain: bool = False,
) -> Retry | Rejected:
    """A non-200 answer, by the shared policy (:func:`~connectors.bridges.http.classify`)
    and Slack's error code: the whole body when ``plain`` (a webhook answers
    ``channel_not_found`` as text) and it is one, or the JSON error's ``error``. Nothing
    else of the body is kept: a 404 page may start with the URL it was asked for."""
    error = _code(answer.text(secrets).strip()) if plain else ""
    try:
        decoded = loads(answer.body)
        if isinstance(decoded, dict):
            error = _code(decoded.get("error")) or error
    except RecordError:
        pass
    return status_outcome(
        answer,
        where=where,
        route=route,
        secrets=secrets,
        permanent=permanent,
        said=f" {error}" if error else "",
        detail=error,
    )


def _detail(error: str, answer: Mapping[str, Any], secrets: list[str]) -> str:
    """Slack's error and its explanations (``invalid_blocks`` says which block failed),
    from the answer only (never from what was sent), masked, then cut."""
    parts = [error]
    meta = answer.get("response_metadata")
    if isinstance(meta, dict):
        messages = meta.get("messages")
        if isinstance(messages, list):
            parts.extend(str(m) for m in messages[:5])
    for key in ("needed", "provided", "warning"):
        if isinstance(answer.get(key), str):
            parts.append(f"{key}={answer[key]}")
    return mask(" ".join(parts), secrets)[:MAX_DETAIL]
