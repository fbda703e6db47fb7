"""A stand-in for PagerDuty's Events API v2 (``POST /v2/enqueue``) that checks every event.

The checks are PagerDuty's published format (PagerDuty/developer-docs,
``docs/events-API-v2/02-Trigger-Events.md`` and ``01-Overview.md``, published under
https://developer.pagerduty.com/docs/events-api-v2/): a 32-character ``routing_key``;
``event_action`` one of ``trigger``/``acknowledge``/``resolve``; a ``dedup_key`` of at most
255 characters (required by a follow-up); a trigger's ``payload`` with a ``summary`` of at
most 1024 characters, a ``source`` and a ``severity`` of ``critical|error|warning|info``; an
ISO 8601 ``timestamp``; ``custom_details`` an object; ``images`` with an https ``src``;
``links`` with an ``href``; a body of at most 512 KB (checked as 512,000 bytes, the
stricter reading). Fields PagerDuty does not define are violations too: a typo in a field
name would otherwise be dropped by PagerDuty without a word.

Answers are PagerDuty's: 202 ``{"status": "success", "message": "Event processed",
"dedup_key": ...}``, 400 ``{"status": "invalid event", "message": "Event object is
invalid", "errors": [...]}``. It also keeps PagerDuty's alert state per
``(routing_key, dedup_key)``, including the trap: a follow-up through another routing key
than the trigger's is dropped, answered 202 all the same.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiohttp import web

from schemas.codec import RecordError, loads

PATH = "/v2/enqueue"
MAX_BODY = 512_000
ACTIONS = frozenset({"trigger", "acknowledge", "resolve"})
SEVERITIES = frozenset({"critical", "error", "warning", "info"})
TOP_FIELDS = frozenset(
    {"routing_key", "event_action", "dedup_key", "payload", "images", "links", "client"}
    | {"client_url"}
)
PAYLOAD_FIELDS = frozenset(
    {"summary", "source", "severity", "timestamp", "component", "group", "class"}
    | {"custom_details"}
)


@dataclass
class Scripted:
    """One answer given instead of the normal one (after the request passed the checks)."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Alert:
    """PagerDuty's alert for one ``(routing_key, dedup_key)``."""

    status: str
    triggers: int = 1
    last: dict[str, Any] = field(default_factory=dict)


def violations(raw: bytes, content_type: str) -> list[str]:
    """What is wrong with one request body, by PagerDuty's published format."""
    if content_type != "application/json":
        return [f"Content-Type is {content_type!r}, not application/json"]
    if len(raw) > MAX_BODY:
        return [f"body is {len(raw)} bytes, over PagerDuty's 512 KB"]
    try:
        event = loads(raw)
    except RecordError as exc:
        return [str(exc)]
    if not isinstance(event, dict):
        return ["the body is not a JSON object"]
    errors = [f"unknown field {k!r}" for k in sorted(set(event) - TOP_FIELDS)]
    key = event.get("routing_key")
    if not isinstance(key, str) or len(key) != 32:
        errors.append("Length of 'routing_key' is incorrect (should be 32 characters)")
    action = event.get("event_action")
    if action not in ACTIONS:
        errors.append(f"'event_action' is invalid (must be one of {sorted(ACTIONS)})")
    dedup = event.get("dedup_key")
    if dedup is None:
        if action in ("acknowledge", "resolve"):
            errors.append(f"'dedup_key' is required for {action}")
    elif not isinstance(dedup, str) or not dedup or len(dedup) > 255:
        errors.append("'dedup_key' must be a string of 1 to 255 characters")
    if action == "trigger":
        errors += _payload_violations(event.get("payload"))
    for name in ("client", "client_url"):
        if name in event and not isinstance(event[name], str):
            errors.append(f"'{name}' must be a string")
    errors += _context_violations(event.get("images", []), "images", "src")
    errors += _context_violations(event.get("links", []), "links", "href")
    return errors


def _payload_violations(payload: Any) -> list[str]:
    if not isinstance(payload, dict):
        return ["'payload' is required for trigger and must be an object"]
    errors = [f"unknown payload field {k!r}" for k in sorted(set(payload) - PAYLOAD_FIELDS)]
    summary = payload.get("summary")
    if not isinstance(summary, str) or not summary:
        errors.append("'payload.summary' is required")
    elif len(summary) > 1024:
        errors.append(f"'payload.summary' is {len(summary)} characters, over 1024")
    if not isinstance(payload.get("source"), str) or not payload["source"]:
        errors.append("'payload.source' is required")
    if payload.get("severity") not in SEVERITIES:
        errors.append(f"'payload.severity' must be one of {sorted(SEVERITIES)}")
    if "timestamp" in payload:
        try:
            datetime.fromisoformat(str(payload["timestamp"]))
        except ValueError:
            errors.append("'payload.timestamp' is not ISO 8601")
    for name in ("component", "group", "class"):
        if name in payload and not isinstance(payload[name], str):
            errors.append(f"'payload.{name}' must be a string")
    if "custom_details" in payload and not isinstance(payload["custom_details"], dict):
        errors.append("'payload.custom_details' must be an object")
    return errors


def _context_violations(items: Any, name: str, required: str) -> list[str]:
    if not isinstance(items, list):
        return [f"'{name}' must be an array"]
    errors = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get(required), str):
            errors.append(f"each of '{name}' needs '{required}'")
        elif name == "images" and not item[required].startswith("https://"):
            errors.append("an image's 'src' must be served over HTTPS")
    return errors


class PagerDutyReceiver:
    """Records every valid event; ``script`` answers first, in order, once each."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        """Every valid event, in arrival order (scripted answers included)."""
        self.answered: list[int] = []
        """The status each of :attr:`events` was answered with."""
        self.violations: list[str] = []
        self.script: list[Scripted] = []
        self.alerts: dict[tuple[str, str], Alert] = {}
        self.dropped: list[dict[str, Any]] = []
        """Follow-ups PagerDuty would drop (no open alert through that key), 202 all the same."""
        self.requests = 0
        self.delay = 0.0
        """Seconds each answer takes (a slow vendor, so a kill lands mid-batch)."""
        self.held = 0
        """Requests inside :attr:`delay` (arrived, not answered): a kill while this is
        above zero lands with a delivery in flight."""
        self.hanging = False
        self.release = asyncio.Event()
        self.url = ""

    def answer(self, status: int, body: Any = None, **headers: str) -> None:
        self.script.append(Scripted(status, body, dict(headers)))

    def accepted(self) -> list[dict[str, Any]]:
        """The events PagerDuty would have taken (valid, and answered 202)."""
        return [e for e, status in zip(self.events, self.answered, strict=True) if status == 202]

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.hanging:
            await self.release.wait()
        if self.delay:
            self.held += 1
            try:
                await asyncio.sleep(self.delay)  # the simulated slowness, not synchronisation
            finally:
                self.held -= 1
        raw = await request.read()
        if request.method != "POST":
            self.violations.append(f"{request.method} {PATH}: the Events API takes POST only")
            return web.Response(status=405)
        errors = violations(raw, request.content_type)
        if errors:
            self.violations.extend(errors)
            return _json(
                400,
                {"status": "invalid event", "message": "Event object is invalid", "errors": errors},
            )
        event: dict[str, Any] = loads(raw)
        if self.script:
            scripted = self.script.pop(0)
            self.events.append(event)
            self.answered.append(scripted.status)
            return _json(scripted.status, scripted.body, scripted.headers)
        self.events.append(event)
        self.answered.append(202)
        dedup = event.get("dedup_key") or f"generated-{self.requests}"
        self._apply(event, dedup)
        return _json(202, {"status": "success", "message": "Event processed", "dedup_key": dedup})

    def _apply(self, event: dict[str, Any], dedup: str) -> None:
        where = (event["routing_key"], dedup)
        alert = self.alerts.get(where)
        if event["event_action"] == "trigger":
            if alert is None or alert.status == "resolved":
                self.alerts[where] = Alert("triggered", last=event)
            else:
                alert.triggers += 1
                alert.last = event
        elif alert is None or alert.status == "resolved":
            self.dropped.append(event)
        else:
            alert.status = "resolved" if event["event_action"] == "resolve" else "acknowledged"


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> web.Response:
    if body is None:
        return web.Response(status=status, headers=headers)
    if isinstance(body, str):
        return web.Response(status=status, text=body, headers=headers)
    return web.json_response(body, status=status, headers=headers)


@asynccontextmanager
async def serving(receiver: PagerDutyReceiver | None = None) -> AsyncIterator[PagerDutyReceiver]:
    """The receiver on 127.0.0.1, a free port; ``receiver.url`` is its enqueue URL."""
    receiver = receiver or PagerDutyReceiver()
    app = web.Application(client_max_size=4 * 1024 * 1024)  # the check says 512 KB, not aiohttp
    app.router.add_route("*", PATH, receiver.handle)
    app.router.add_route("*", "/{tail:.*}", _wrong_path(receiver))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    receiver.url = f"http://127.0.0.1:{runner.addresses[0][1]}{PATH}"
    try:
        yield receiver
    finally:
        receiver.release.set()
        await runner.cleanup()


def _wrong_path(receiver: PagerDutyReceiver) -> Any:
    async def handle(request: web.Request) -> web.Response:
        receiver.violations.append(f"{request.method} {request.path}: not {PATH}")
        return web.Response(status=404)

    return handle
