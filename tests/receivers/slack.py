"""A stand-in for Slack's Web API (``chat.postMessage``, ``chat.update``) and an incoming
webhook, checking every message against Slack's published format.

The checks (Slack's docs, as cited in :mod:`connectors.bridges.slack_blocks`): a bearer
token in ``Authorization``; a JSON object body; ``channel`` an id (``C0123ABCD``), never
a name (``chat.update`` takes ids only); the ``text`` fallback set; ``link_names`` never
set, ``parse`` never anything but ``none`` (and said on ``chat.update``, whose default is
``client``); at most 50 blocks of the kinds we send (``header``, ``section``, ``context``,
``divider``); a header's ``plain_text`` ≤ 150; a section's ``text`` ≤ 3000, its ``fields``
≤ 10 of ≤ 2000; a context's elements ≤ 10; text objects ``plain_text`` or ``mrkdwn``; and
the cumulative limit, answered as Slack does (``msg_blocks_too_long``, HTTP 200) above
:data:`TOTAL_TEXT` characters. One check is ours, stricter than Slack: no
text may hold a raw ``<`` or ``>``, nor an ``&`` that is not ``&amp;``/``&lt;``/``&gt;``
(the bridge never sends Slack's control sequences, so any is untrusted text that got
through unescaped: a mention, a link, a blockquote).

A violation is answered 400 with its reason *and* recorded in :attr:`violations`, so a
test that only looks at outcomes still fails on it. Slack's own answers (``ok: false``
with ``invalid_auth``, ``channel_not_found``, ``message_not_found``) are not violations:
they are what Slack says to a well-formed request it cannot serve. ``answer`` scripts the
next answers (429 + ``Retry-After``, 5xx, ``ok: false``), once each, in order.

State, as Slack keeps it: messages by ``(channel, ts)``, each with every version it had
(``chat.update``) and its thread replies (``thread_ts``).
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import quote

from aiohttp import web

from schemas.codec import RecordError, loads

API: Final = "/api/"
HOOK: Final = "/services/T0000TEST/B0000TEST/"
CHANNEL_ID: Final = re.compile(r"[CGD][A-Z0-9]{6,}")
MAX_BLOCKS: Final = 50
TOTAL_TEXT: Final = 12_000
BLOCK_TYPES: Final = frozenset({"header", "section", "context", "divider"})
ENTITY: Final = re.compile(r"&(?!(?:amp|lt|gt);)")


Match = Callable[[str, dict[str, Any]], bool]
"""Which request a scripted answer is for: ``(method, payload) -> bool``."""


@dataclass
class Scripted:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    when: Match | None = None
    echo: bool = False
    """Start the (text) body with the requested URL, as sent and percent-encoded, as
    many error pages do: the trap that leaks a webhook's secret URL into a reason."""


@dataclass
class Message:
    """One parent message: every version it had (the first is the post), its replies."""

    channel: str
    ts: str
    versions: list[dict[str, Any]] = field(default_factory=list)
    replies: list[dict[str, Any]] = field(default_factory=list)

    @property
    def current(self) -> dict[str, Any]:
        return self.versions[-1]


@dataclass
class Call:
    """One request that passed the checks, with when it arrived."""

    method: str
    payload: dict[str, Any]
    at: float
    status: int = 200


# -- the format -------------------------------------------------------------------------------
def texts(obj: Any, path: str = "") -> Iterator[tuple[str, str, str]]:
    """Every text in a payload: ``(path, type, text)``; the top-level fallback is ``text``."""
    if isinstance(obj, dict):
        if isinstance(obj.get("text"), str):
            yield path or "text", str(obj.get("type", "text")), obj["text"]
        for key, value in obj.items():
            if key != "text" or not isinstance(value, str):
                yield from texts(value, f"{path}/{key}")
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            yield from texts(value, f"{path}/{i}")


def total_text(blocks: Any) -> int:
    return sum(len(text) for _, _, text in texts(blocks))


def unescaped(text: str) -> str | None:
    """Why ``text`` is not safely escaped, or None."""
    if "<" in text or ">" in text:
        return "a raw '<' or '>'"
    if ENTITY.search(text):
        return "an '&' that is not &amp;, &lt; or &gt;"
    return None


def _text_object(obj: Any, where: str, limit: int, kinds: frozenset[str]) -> list[str]:
    if not isinstance(obj, dict) or obj.get("type") not in kinds:
        return [f"{where}: a text object of type {sorted(kinds)}"]
    text = obj.get("text")
    if not isinstance(text, str) or not text:
        return [f"{where}: empty text"]
    if len(text) > limit:
        return [f"{where}: {len(text)} characters, over {limit}"]
    return []


def block_violations(blocks: Any) -> list[str]:
    if not isinstance(blocks, list) or not blocks:
        return ["blocks: a non-empty array"]
    errors = []
    if len(blocks) > MAX_BLOCKS:
        errors.append(f"blocks: {len(blocks)}, over {MAX_BLOCKS}")
    any_text = frozenset({"plain_text", "mrkdwn"})
    for i, block in enumerate(blocks):
        where = f"blocks/{i}"
        kind = block.get("type") if isinstance(block, dict) else None
        if kind not in BLOCK_TYPES:
            errors.append(f"{where}: type {kind!r} is not one we send")
            continue
        if kind == "header":
            errors += _text_object(block.get("text"), where, 150, frozenset({"plain_text"}))
        elif kind == "section":
            if "text" not in block and "fields" not in block:
                errors.append(f"{where}: a section needs text or fields")
            if "text" in block:
                errors += _text_object(block["text"], f"{where}/text", 3000, any_text)
            if "fields" in block:
                fields = block["fields"]
                if not isinstance(fields, list) or not 1 <= len(fields) <= 10:
                    errors.append(f"{where}/fields: 1 to 10 text objects")
                else:
                    for j, item in enumerate(fields):
                        errors += _text_object(item, f"{where}/fields/{j}", 2000, any_text)
        elif kind == "context":
            elements = block.get("elements")
            if not isinstance(elements, list) or not 1 <= len(elements) <= 10:
                errors.append(f"{where}/elements: 1 to 10 elements")
            else:
                for j, item in enumerate(elements):
                    errors += _text_object(item, f"{where}/elements/{j}", 3000, any_text)
    return errors


def method_update(payload: dict[str, Any]) -> bool:
    """``chat.update`` is the call that names a ``ts`` without a ``thread_ts``."""
    return "ts" in payload and "thread_ts" not in payload


def message_violations(payload: dict[str, Any], *, webhook: bool) -> list[str]:
    """What is wrong with one message by Slack's format (and our escaping rule)."""
    errors = []
    text = payload.get("text")
    if not isinstance(text, str) or not text.strip():
        errors.append("text: the fallback must always be set")
    if "link_names" in payload:
        errors.append("link_names is set (it would turn untrusted names into mentions)")
    if payload.get("parse", "none") != "none":
        errors.append(f"parse is {payload['parse']!r}: Slack would parse untrusted names")
    if not webhook and method_update(payload) and payload.get("parse") != "none":
        errors.append("chat.update without parse=none parses its text as 'client'")
    if webhook:
        for name in ("channel", "thread_ts", "ts"):
            if name in payload:
                errors.append(f"{name}: an incoming webhook posts to its own channel only")
    else:
        channel = payload.get("channel")
        if not isinstance(channel, str) or not CHANNEL_ID.fullmatch(channel):
            errors.append(f"channel {channel!r} is not a channel id")
    errors += block_violations(payload.get("blocks"))
    for where, _, value in texts({k: v for k, v in payload.items() if k != "metadata"}):
        why = unescaped(value)
        if why:
            errors.append(f"{where}: {why}: {value[:80]!r}")
    meta = payload.get("metadata")
    if meta is not None and not (
        isinstance(meta, dict)
        and isinstance(meta.get("event_type"), str)
        and isinstance(meta.get("event_payload"), dict)
    ):
        errors.append("metadata: needs event_type and event_payload")
    return errors


# -- the server -------------------------------------------------------------------------------
class SlackReceiver:
    """Slack's Web API for one workspace, plus one incoming webhook."""

    def __init__(self, token: str = "xoxb-test-token", channels: tuple[str, ...] = ()) -> None:
        self.token = token
        self.channels = set(channels or ("C0ALERTS1",))
        self.messages: dict[tuple[str, str], Message] = {}
        self.webhook_posts: list[dict[str, Any]] = []
        self.calls: list[Call] = []
        """Every request that passed the checks, scripted ones included, in order."""
        self.violations: list[str] = []
        self.script: list[Scripted] = []
        self.url = ""
        """The Web API base (``.../api/``): the endpoint's ``api_url``."""
        self.webhook_url = ""
        self.hanging = False
        self.release = asyncio.Event()
        self._n = 0

    def answer(
        self,
        status: int,
        body: Any = None,
        headers: dict[str, str] | None = None,
        when: Match | None = None,
        echo: bool = False,
    ) -> None:
        """Answer the next valid request (the next one ``when`` matches) with this,
        instead of serving it (``ok: false`` bodies are dicts); once, in order."""
        self.script.append(Scripted(status, body, dict(headers or {}), when, echo))

    def _scripted(self, method: str, payload: dict[str, Any]) -> Scripted | None:
        for i, scripted in enumerate(self.script):
            if scripted.when is None or scripted.when(method, payload):
                return self.script.pop(i)
        return None

    def parents(self) -> list[Message]:
        return list(self.messages.values())

    def delete(self, channel: str, ts: str) -> None:
        """Someone deleted the message in Slack."""
        del self.messages[(channel, ts)]

    def _ts(self) -> str:
        self._n += 1
        return f"{1764600000 + self._n}.{self._n:06d}"

    def _reject(self, errors: list[str], error: str = "invalid_arguments") -> web.Response:
        self.violations.extend(errors)
        return web.json_response({"ok": False, "error": error, "violations": errors}, status=400)

    async def api(self, request: web.Request) -> web.Response:
        if self.hanging:
            await self.release.wait()
        method = request.match_info["method"]
        if request.method != "POST":
            return self._reject([f"{request.method} {method}: we only POST"])
        if method not in ("chat.postMessage", "chat.update"):
            return self._reject([f"{method}: not a method the bridge should call"])
        auth = request.headers.get("Authorization", "")
        if not auth.startswith("Bearer ") or not auth[7:]:
            return self._reject([f"{method}: no bearer token"], "not_authed")
        if request.content_type != "application/json":
            return self._reject([f"{method}: Content-Type {request.content_type!r}"])
        try:
            payload = loads(await request.read())
        except RecordError as exc:
            return self._reject([f"{method}: {exc}"], "invalid_json")
        if not isinstance(payload, dict):
            return self._reject([f"{method}: the body is not a JSON object"], "invalid_json")
        errors = message_violations(payload, webhook=False)
        if method == "chat.update" and not isinstance(payload.get("ts"), str):
            errors.append("chat.update: ts is required")
        if method == "chat.postMessage" and "ts" in payload:
            errors.append("chat.postMessage: ts is not an argument (thread_ts is)")
        if errors:
            return self._reject(errors, "invalid_blocks")
        call = Call(method, payload, time.monotonic())
        self.calls.append(call)
        scripted = self._scripted(method, payload)
        if scripted is not None:
            call.status = scripted.status
            return _answer(scripted, request)
        if auth[7:] != self.token:
            return web.json_response({"ok": False, "error": "invalid_auth"})
        if total_text(payload["blocks"]) > TOTAL_TEXT:
            self.violations.append(f"{method}: {total_text(payload['blocks'])} characters")
            return web.json_response({"ok": False, "error": "msg_blocks_too_long"})
        channel = payload["channel"]
        if channel not in self.channels:
            return web.json_response({"ok": False, "error": "channel_not_found"})
        if method == "chat.update":
            return self._update(channel, payload)
        return self._post(channel, payload)

    def _post(self, channel: str, payload: dict[str, Any]) -> web.Response:
        ts = self._ts()
        thread = payload.get("thread_ts")
        if thread is None:
            self.messages[(channel, ts)] = Message(channel, ts, [payload])
        else:
            parent = self.messages.get((channel, str(thread)))
            if parent is None:
                self.violations.append(f"thread_ts {thread!r} names no parent message")
                return web.json_response({"ok": False, "error": "thread_not_found"})
            parent.replies.append(payload)
        body = {"ok": True, "channel": channel, "ts": ts, "message": {"text": payload["text"]}}
        return web.json_response(body)

    def _update(self, channel: str, payload: dict[str, Any]) -> web.Response:
        message = self.messages.get((channel, payload["ts"]))
        if message is None:
            return web.json_response({"ok": False, "error": "message_not_found"})
        message.versions.append(payload)
        body = {"ok": True, "channel": channel, "ts": message.ts, "text": payload["text"]}
        return web.json_response(body)

    async def webhook(self, request: web.Request) -> web.Response:
        if request.match_info["secret"] != "hooksecret":
            self.violations.append("webhook: unknown URL")
            return web.Response(status=404, text="no_service")
        if request.content_type != "application/json":
            self.violations.append(f"webhook: Content-Type {request.content_type!r}")
            return web.Response(status=400, text="invalid_payload")
        try:
            payload = loads(await request.read())
        except RecordError as exc:
            self.violations.append(f"webhook: {exc}")
            return web.Response(status=400, text="invalid_payload")
        errors = message_violations(payload, webhook=True) if isinstance(payload, dict) else []
        if not isinstance(payload, dict) or errors:
            self.violations.extend(errors or ["webhook: the body is not a JSON object"])
            return web.Response(status=400, text="invalid_payload")
        self.calls.append(Call("webhook", payload, time.monotonic()))
        scripted = self._scripted("webhook", payload)
        if scripted is not None:
            self.calls[-1].status = scripted.status
            return _answer(scripted, request)
        if total_text(payload["blocks"]) > TOTAL_TEXT:  # Slack's limit holds for webhooks too
            self.violations.append(f"webhook: {total_text(payload['blocks'])} characters")
            return web.Response(status=400, text="msg_blocks_too_long")
        self.webhook_posts.append(payload)
        return web.Response(text="ok")


def _answer(scripted: Scripted, request: web.Request) -> web.Response:
    if scripted.echo:
        url = str(request.url)
        text = f"{url} {quote(url, safe='')} {scripted.body or ''}"
        return web.Response(status=scripted.status, text=text, headers=scripted.headers)
    if scripted.body is None:
        return web.Response(status=scripted.status, headers=scripted.headers)
    if isinstance(scripted.body, str):
        return web.Response(status=scripted.status, text=scripted.body, headers=scripted.headers)
    return web.json_response(scripted.body, status=scripted.status, headers=scripted.headers)


@asynccontextmanager
async def serving(receiver: SlackReceiver | None = None) -> AsyncIterator[SlackReceiver]:
    """The receiver on 127.0.0.1, a free port: ``receiver.url`` is the Web API base,
    ``receiver.webhook_url`` the incoming webhook."""
    receiver = receiver or SlackReceiver()
    app = web.Application(client_max_size=4 * 1024 * 1024)
    app.router.add_route("*", API + "{method}", receiver.api)
    app.router.add_route("*", HOOK + "{secret}", receiver.webhook)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    receiver.url = base + API
    receiver.webhook_url = base + HOOK + "hooksecret"
    try:
        yield receiver
    finally:
        receiver.release.set()
        await runner.cleanup()
