"""``gputriage bridge webhook``: each incident revision as one CloudEvents 1.0 event.

Any CloudEvents receiver (Knative, Argo Events, a team's own service) gets every revision
POSTed in structured mode: the body is the whole event as JSON, ``data`` the
``incident.v1`` record byte for byte. ``id`` is ``<incident id>/<revision>``, the same on
every retry and after a restart, so a receiver that dedupes on ``(source, id)`` sees each
revision once; an optional HMAC signature covers the exact body bytes.

Traps: a secret URL leaks through aiohttp's errors and echoed 404 pages, so reasons carry
the exception's class only and every detail is masked; secrets are read per delivery (a
mounted Secret is rotated in place); redirects are never followed (they would carry the
signed body and token elsewhere); no ``ce-`` static headers (the SDK would read the
request as binary mode). The event's fields, the verification recipe and each answer:
docs/bridges.md, design notes: webhook.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Annotated, Final
from urllib.parse import quote, urlsplit

import aiohttp
import msgspec

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
    read_secret,
    url_secrets,
)
from connectors.bridges.http import Verdict, classify, post_bounded, status_outcome
from connectors.kafka.config import Secret
from schemas.codec import encode
from schemas.incidents import Incident

log = logging.getLogger(__name__)

KIND: Final = "webhook"
CONTENT_TYPE: Final = "application/cloudevents+json; charset=utf-8"
SPECVERSION: Final = "1.0"
TYPE_PREFIX: Final = "io.gputriage.incident."
EVENT_TYPES: Final[Mapping[str, str]] = {
    "open": TYPE_PREFIX + "opened",
    "updated": TYPE_PREFIX + "updated",
    "resolved": TYPE_PREFIX + "resolved",
}
SIGNATURE_HEADER: Final = "X-Gputriage-Signature"
TIMESTAMP_HEADER: Final = "X-Gputriage-Timestamp"
ORIGIN_HEADER: Final = "WebHook-Request-Origin"
DETAIL_CHARS: Final = 500
"""How much of a rejecting response's body is kept as :attr:`Rejected.detail`."""
PERMANENT: Final = frozenset({404, 410, 415})
"""The webhook's own permanent statuses, beside the shared 400/413/422."""
_OWNED_HEADERS: Final = frozenset(
    {
        "content-type",
        "content-length",
        "host",
        "authorization",
        SIGNATURE_HEADER.lower(),
        TIMESTAMP_HEADER.lower(),
        ORIGIN_HEADER.lower(),
        "user-agent",
    }
)


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[bridge.webhook]``: settings shared by every webhook route (never a secret).

    ``headers`` are not for secrets: a token goes in the route's ``token_env`` /
    ``token_file``; ``ce-*`` and the headers this module sets are refused (see the traps).
    ``origin`` answers the webhook spec's abuse protection (http-webhook.md, section 4).
    """

    timeout_seconds: RequestSeconds = 10.0
    user_agent: Annotated[str, msgspec.Meta(description="The User-Agent header.")] = (
        "gputriage-bridge-webhook/1"
    )
    headers: Annotated[
        dict[str, str], msgspec.Meta(description="Extra static headers (X-Team: gpu-infra).")
    ] = {}
    source_prefix: Annotated[
        str,
        msgspec.Meta(description="source is this plus the cluster name, percent-encoded."),
    ] = "/gputriage/clusters/"
    dataschema: Annotated[
        str,
        msgspec.Meta(description="Absolute URI of incident.v1.json; empty: no dataschema."),
    ] = ""
    origin: Annotated[
        str,
        msgspec.Meta(description="Sent as WebHook-Request-Origin when set (this sender's name)."),
    ] = ""

    def __post_init__(self) -> None:
        for name, value in self.headers.items():
            lower = name.lower()
            if lower in _OWNED_HEADERS or lower.startswith("ce-"):
                raise ValueError(f"headers: {name} is set by the bridge or is not allowed")
            # Refused here, at start, not at every send (aiohttp raises on a control
            # character in a header: each revision would be retried forever).
            if not name or any(c in name for c in " :") or not _printable(name + value):
                raise ValueError(f"headers: {name!r} is not a valid header name and value")
        if not self.source_prefix:
            raise ValueError("source_prefix: must not be empty (source is a URI-reference)")
        if self.dataschema and not urlsplit(self.dataschema).scheme:
            raise ValueError("dataschema: must be an absolute URI (CloudEvents type URI)")


def _printable(text: str) -> bool:
    """No control character (CR, LF, NUL, DEL ...): what an HTTP header may carry."""
    return all(" " <= c != "\x7f" for c in text)


class _CloudEvent(msgspec.Struct, frozen=True, kw_only=True):
    """The structured-mode envelope; field order fixed, so the same revision is the same
    bytes on every attempt."""

    specversion: str
    type: str
    source: str
    id: str
    subject: str
    time: datetime
    datacontenttype: str
    dataschema: str | msgspec.UnsetType = msgspec.UNSET
    incidenttype: str
    incidentseverity: str
    data: msgspec.Raw


def event_id(incident: Incident) -> str:
    """The CloudEvents ``id`` of one revision: the same for every attempt and restart."""
    return f"{incident.id}/{incident.revision}"


def event_time(incident: Incident) -> datetime:
    """When the revision's occurrence happened (not when it is sent)."""
    if incident.status == "resolved" and incident.resolved_at is not None:
        return incident.resolved_at
    return incident.last_seen


def render(incident: Incident, options: Settings) -> bytes:
    """The request body for one revision (pure: same revision, same bytes)."""
    envelope = _CloudEvent(
        specversion=SPECVERSION,
        type=EVENT_TYPES[incident.status],
        source=options.source_prefix + quote(incident.cluster, safe=""),
        id=event_id(incident),
        subject=incident.id,
        time=event_time(incident),
        datacontenttype="application/json",
        dataschema=options.dataschema or msgspec.UNSET,
        incidenttype=incident.type,
        incidentseverity=incident.severity,
        data=msgspec.Raw(encode(incident)),
    )
    return encode(envelope)


def signature(key: bytes, timestamp: str, body: bytes) -> str:
    """The ``X-Gputriage-Signature`` value for ``body`` sent at ``timestamp``."""
    digest = hmac.new(key, timestamp.encode("ascii") + b"." + body, hashlib.sha256)
    return "sha256=" + digest.hexdigest()


def _check_url(url: str) -> str | None:
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        return "url: not an absolute http(s) URL"
    return None


def _secrets_of(url: str, is_secret: bool, others: list[Secret]) -> list[str]:
    """Every string that must not appear in a detail: the secrets, and for a secret URL
    its path and query too (:func:`~connectors.bridges.base.url_secrets`)."""
    return [s.reveal() for s in others] + (url_secrets(url) if is_secret else [])


class WebhookEndpoint:
    """The :class:`~connectors.bridges.base.Endpoint` for CloudEvents webhooks."""

    kind = KIND

    def __init__(
        self,
        options: Settings,
        http: aiohttp.ClientSession,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._options = options
        self._http = http
        self._environ = environ
        self._clock = clock
        self._timeout = aiohttp.ClientTimeout(total=options.timeout_seconds)

    def _url(self, target: Mapping[str, str]) -> tuple[str, bool]:
        """The route's URL and whether it is a secret; raises :class:`SecretError`."""
        if "url" in target:
            if "url_env" in target or "url_file" in target:
                raise SecretError("url: give url or one of url_env and url_file, not both")
            return target["url"], False
        return read_secret(target, "url", self._environ).reveal(), True

    def _optional(self, target: Mapping[str, str], name: str) -> Secret | None:
        if f"{name}_env" in target or f"{name}_file" in target or name in target:
            return read_secret(target, name, self._environ)
        return None

    def check_route(self, route: Route) -> str | None:
        try:
            url, _ = self._url(route.target)
            self._optional(route.target, "hmac_key")
            self._optional(route.target, "token")
        except SecretError as exc:
            return f"route {route.name}: {exc}"
        problem = _check_url(url)
        return None if problem is None else f"route {route.name}: {problem}"

    async def deliver(
        self, incident: Incident, previous: Delivered | None, route: Route
    ) -> Outcome:
        """POST one revision. ``previous`` is not needed: every revision is an event of
        its own (never :class:`Skipped`: a webhook consumer mirrors the whole lifecycle),
        and a redelivered one carries the same ``id`` for the receiver to dedupe."""
        try:
            url, url_is_secret = self._url(route.target)
            key = self._optional(route.target, "hmac_key")
            token = self._optional(route.target, "token")
        except SecretError as exc:
            return Retry(f"secret: {exc}")
        problem = _check_url(url)
        if problem is not None:
            return Rejected(problem)
        body = render(incident, self._options)
        headers = {
            **self._options.headers,
            "Content-Type": CONTENT_TYPE,
            "User-Agent": self._options.user_agent,
        }
        if self._options.origin:
            headers[ORIGIN_HEADER] = self._options.origin
        if token is not None:
            headers["Authorization"] = f"Bearer {token.reveal()}"
        if key is not None:
            stamp = str(int(self._clock()))
            headers[TIMESTAMP_HEADER] = stamp
            headers[SIGNATURE_HEADER] = signature(key.reveal().encode("utf-8"), stamp, body)
        secrets = _secrets_of(url, url_is_secret, [s for s in (key, token) if s is not None])
        outcome = await self._post(url, headers, body, secrets, route.name)
        log.debug(
            "webhook route %s: %s %s -> %s",
            route.name,
            EVENT_TYPES[incident.status],
            event_id(incident),
            type(outcome).__name__,
        )
        return outcome

    async def _post(
        self, url: str, headers: Mapping[str, str], body: bytes, secrets: list[str], route: str
    ) -> Outcome:
        got = await post_bounded(
            self._http, url, data=body, headers=headers, timeout=self._timeout, clock=self._clock
        )
        if isinstance(got, Retry):
            return got
        if classify(got.status, PERMANENT) is Verdict.ACCEPTED:
            return Accepted()
        return status_outcome(
            got,
            route=route,
            secrets=secrets,
            permanent=PERMANENT,
            redirect_rejected=True,
            detail=got.text(secrets),
            detail_chars=DETAIL_CHARS,
        )

    async def close(self) -> None:
        """Nothing of its own: the HTTP session belongs to the runner."""


def build(
    options: Settings, http: aiohttp.ClientSession, environ: Mapping[str, str] | None = None
) -> Endpoint:
    """The runner's entry point (``connectors.bridges.webhook``)."""
    return WebhookEndpoint(options, http, environ)


__all__ = [
    "CONTENT_TYPE",
    "EVENT_TYPES",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "Settings",
    "WebhookEndpoint",
    "build",
    "event_id",
    "event_time",
    "render",
    "signature",
]
