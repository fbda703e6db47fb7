"""A local CloudEvents 1.0 webhook receiver that checks every request against the spec.

What it enforces (cloudevents/spec ``spec.md`` v1.0.2 §Context Attributes, ``formats/
json-format.md`` §2-3, ``bindings/http-protocol-binding.md`` §3.2, ``http-webhook.md``
§2-3):

* POST, ``Content-Type: application/cloudevents+json`` (structured mode; parameters
  allowed, a charset other than UTF-8 is not) and no ``ce-`` header: stricter than the
  HTTP binding (§3.2.3 allows them), held to because the Python SDK's ``from_http``
  reads any request with one as binary mode;
* a UTF-8 JSON object whose ``specversion`` is ``"1.0"``; ``id``, ``source``, ``type``
  non-empty strings; ``source`` a URI-reference (RFC 3986 §4.1), ``dataschema`` an
  absolute URI (§4.3), ``time`` RFC 3339 with an offset, ``datacontenttype`` a media type
  (RFC 2046), ``subject`` non-empty;
* every attribute name lower-case ASCII letters and digits (a MUST), at most 20
  characters (a SHOULD, held to here: our producer meets it), none named ``data``;
  string values without control characters (spec §Type System ``String``);
  ``data`` and ``data_base64`` never both;
* with ``hmac_key``, the signature recipe of :mod:`connectors.bridges.webhook`
  (:func:`verify_signature`); with ``bearer``, ``Authorization: Bearer <token>``.

Each violation answers 400 with the reasons and is kept in :attr:`violations`, so a test
that asserts ``receiver.violations == []`` fails on any of them.

The ``cloudevents`` SDK reads each request too, as a second opinion. Trap: the SDK alone
is not a validator: building an event **fills in a missing ``id`` (a UUID) and ``time``
(now)**, and parses ``time`` with dateutil's lenient ``isoparse`` (a bare date passes).
So the raw JSON is checked here first.

Scripted answers (:meth:`CloudEventsReceiver.answer`) are given, in order, to the next
valid requests (429 with ``Retry-After``, 5xx, 400 with a body, a redirect); after
them every valid request is taken with 204.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, Final

from aiohttp import web
from cloudevents.core.bindings.http import HTTPMessage, from_http
from cloudevents.core.formats.json import JSONFormat

SIGNATURE_HEADER: Final = "X-Gputriage-Signature"
TIMESTAMP_HEADER: Final = "X-Gputriage-Timestamp"
MAX_SKEW_SECONDS: Final = 300.0

REQUIRED: Final = ("id", "source", "specversion", "type")
OPTIONAL: Final = ("datacontenttype", "dataschema", "subject", "time")
_NAME = re.compile(r"[a-z0-9]+")
_URI_CHARS = re.compile(r"(?:[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=]|%[0-9A-Fa-f]{2})+")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
_RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[Zz]|[+-]\d{2}:\d{2})")
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z\-]+"
_MEDIA_TYPE = re.compile(rf"{_TOKEN}/{_TOKEN}(?:\s*;.*)?", re.DOTALL)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def is_uri_reference(value: str) -> bool:
    """RFC 3986 §4.1, as far as characters and the scheme go (no IRIs, no spaces)."""
    if not _URI_CHARS.fullmatch(value):
        return False
    head = value.split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    # A colon in the first segment makes it a scheme, which must be well-formed.
    return ":" not in head or _SCHEME.match(value) is not None


def is_absolute_uri(value: str) -> bool:
    """RFC 3986 §4.3: a scheme and no fragment."""
    return is_uri_reference(value) and _SCHEME.match(value) is not None and "#" not in value


def is_rfc3339(value: str) -> bool:
    if not _RFC3339.fullmatch(value):
        return False
    try:
        datetime.fromisoformat(value.upper())
    except ValueError:  # 2026-02-30, 25:00 ...
        return False
    return True


def validate_event(event: object) -> list[str]:
    """Every way ``event`` (parsed JSON) breaks CloudEvents 1.0's JSON format; [] if none."""
    if not isinstance(event, dict):
        return ["the body is not a JSON object"]
    errors: list[str] = []
    for name in REQUIRED:
        value = event.get(name)
        if not isinstance(value, str) or not value:
            errors.append(f"{name}: required, a non-empty string")
    if event.get("specversion") not in (None, "1.0"):
        errors.append(f"specversion: {event.get('specversion')!r}, not '1.0'")
    source = event.get("source")
    if isinstance(source, str) and source and not is_uri_reference(source):
        errors.append(f"source: {source!r} is not a URI-reference")
    for name in OPTIONAL:
        if name in event and (not isinstance(event[name], str) or not event[name]):
            errors.append(f"{name}: when present, a non-empty string")
    if isinstance(event.get("time"), str) and not is_rfc3339(event["time"]):
        errors.append(f"time: {event['time']!r} is not RFC 3339")
    if isinstance(event.get("dataschema"), str) and not is_absolute_uri(event["dataschema"]):
        errors.append(f"dataschema: {event['dataschema']!r} is not an absolute URI")
    if isinstance(event.get("datacontenttype"), str) and not _MEDIA_TYPE.fullmatch(
        event["datacontenttype"]
    ):
        errors.append(f"datacontenttype: {event['datacontenttype']!r} is not a media type")
    if "data" in event and "data_base64" in event:
        errors.append("data and data_base64 are exclusive")
    for name, value in event.items():
        if name in ("data", "data_base64"):
            continue
        if not _NAME.fullmatch(name):
            errors.append(f"attribute name {name!r}: only a-z and 0-9")
        elif len(name) > 20:
            errors.append(f"attribute name {name!r}: longer than 20 characters")
        if isinstance(value, str) and _CONTROL.search(value):
            errors.append(f"{name}: control characters in a String")
        elif not isinstance(value, str | bool | int):
            errors.append(f"{name}: {type(value).__name__} is no CloudEvents type")
        elif isinstance(value, int) and not -(2**31) <= value < 2**31:
            errors.append(f"{name}: Integer out of the 32-bit range")
    return errors


def expected_signature(key: bytes, timestamp: str, body: bytes) -> str:
    """The recipe of :mod:`connectors.bridges.webhook`, written again on the receiving side."""
    mac = hmac.new(key, timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def verify_signature(
    key: bytes,
    headers: Mapping[str, str],
    body: bytes,
    now: float,
    max_skew: float = MAX_SKEW_SECONDS,
) -> str | None:
    """None when the request is signed by ``key`` recently enough, else why not."""
    stamp = headers.get(TIMESTAMP_HEADER)
    given = headers.get(SIGNATURE_HEADER)
    if stamp is None or given is None:
        return "signature headers missing"
    if not stamp.isdigit():
        return "timestamp is not Unix seconds"
    if abs(now - int(stamp)) > max_skew:
        return "timestamp outside the replay window"
    if not hmac.compare_digest(given, expected_signature(key, stamp, body)):
        return "signature does not match the body"
    return None


@dataclass(frozen=True)
class Answer:
    """A scripted reply. ``echo_path`` appends the request's path to the body, as many
    404 pages do (the trap that leaks a token-bearing URL)."""

    status: int
    headers: Mapping[str, str] = field(default_factory=dict)
    body: str = ""
    echo_path: bool = False
    hold: bool = False
    """Never answer (until the receiver closes): the sender's timeout must fire."""


@dataclass(frozen=True)
class Seen:
    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: bytes


class CloudEventsReceiver:
    """``async with CloudEventsReceiver() as hook:`` then POST to ``hook.url``."""

    def __init__(
        self,
        *,
        hmac_key: bytes | None = None,
        bearer: str | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.hmac_key = hmac_key
        self.bearer = bearer
        self.clock = clock
        self.requests: list[Seen] = []
        self.events: list[dict[str, Any]] = []
        """Events taken (2xx), in arrival order."""
        self.violations: list[str] = []
        self._answers: deque[Answer] = deque()
        self._runner: web.AppRunner | None = None
        self._port = 0
        self._closing = asyncio.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}"

    def answer(self, *answers: Answer) -> None:
        self._answers.extend(answers)

    async def __aenter__(self) -> CloudEventsReceiver:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # No access log: it would print the (secret) paths into the tests' captured logs.
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self._port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closing.set()
        if self._runner is not None:
            await self._runner.cleanup()

    def check(self, seen: Seen) -> tuple[list[str], dict[str, Any] | None]:
        """The violations of one request, and its event when the body parsed."""
        errors: list[str] = []
        if seen.method != "POST":
            errors.append(f"method {seen.method}, not POST (http-webhook.md §2.1)")
        content_type = seen.headers.get("Content-Type", "")
        media, _, params = content_type.partition(";")
        if media.strip().lower() != "application/cloudevents+json":
            errors.append(f"Content-Type {content_type!r} is not structured JSON mode")
        charset = re.search(r"charset=\"?([^\";]+)", params, re.IGNORECASE)
        if charset is not None and charset[1].strip().lower() not in ("utf-8", "utf8"):
            errors.append(f"charset {charset[1]!r}: JSON is UTF-8")
        errors += [f"header {h}: binary mode" for h in seen.headers if h.lower().startswith("ce-")]
        if self.bearer is not None and seen.headers.get("Authorization") != f"Bearer {self.bearer}":
            errors.append("Authorization: no or wrong bearer token")
        if self.hmac_key is not None:
            why = verify_signature(self.hmac_key, seen.headers, seen.body, self.clock())
            if why is not None:
                errors.append(f"signature: {why}")
        try:
            event = json.loads(seen.body.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return [*errors, f"body: {exc.__class__.__name__}"], None
        errors += validate_event(event)
        if not errors:
            try:
                parsed = from_http(HTTPMessage(dict(seen.headers), seen.body), JSONFormat())
            except Exception as exc:
                errors.append(f"cloudevents SDK: {exc}")
            else:
                if parsed.get_id() != event["id"] or parsed.get_type() != event["type"]:
                    errors.append("cloudevents SDK read another event")
        return errors, event if isinstance(event, dict) else None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        seen = Seen(
            request.method,
            request.path,
            request.query_string,
            dict(request.headers),
            await request.read(),
        )
        self.requests.append(seen)
        errors, event = self.check(seen)
        if errors:
            self.violations += errors
            return web.Response(status=400, text="; ".join(errors))
        answer = self._answers.popleft() if self._answers else Answer(204)
        if answer.hold:  # the sender gives up first; what it then sees is not an answer
            await self._closing.wait()
            return web.Response(status=503)
        if 200 <= answer.status < 300 and event is not None:
            self.events.append(event)
        body = answer.body + (f" {request.path_qs}" if answer.echo_path else "")
        return web.Response(status=answer.status, headers=dict(answer.headers), text=body or None)
