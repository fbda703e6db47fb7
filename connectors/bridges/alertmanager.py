"""The Alertmanager endpoint: each incident is an alert POSTed to ``/api/v2/alerts``.

Alertmanager stores *current* alerts that clients keep alive, so this endpoint is
:class:`Periodic`: firing alerts are re-sent every ``resend_interval_seconds`` with
``endsAt`` four intervals ahead, resolved ones for ``resolved_resend_seconds`` (each HA
replica needs its copy), and every replica gets every alert. Labels identify the alert and
never change over its life; everything that changes is an annotation.

Traps: a resolved revision leaves the firing set whatever its outcome; a changed severity
is a new alert (the old label set is sent resolved); a 400 for a batch still stored its
valid alerts; a :class:`Skipped` revision keeps the previous memo; ``tick``'s ``now`` is
Unix time, since it becomes ``endsAt``. Labels, answers, secrets and the memo:
docs/bridges.md, design notes: alertmanager.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
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
    Skipped,
    clip,
    read_secret,
)
from connectors.bridges.http import Verdict, classify, post_bounded, status_outcome
from connectors.kafka.config import Secret
from schemas.codec import RecordError, dumps, encode, loads, typed_decoder
from schemas.incidents import Incident

log = logging.getLogger("gputriage.bridge.alertmanager")

KIND: Final = "alertmanager"
PATH: Final = "/api/v2/alerts"
SEVERITY: Final = {"page": "critical", "ticket": "warning", "info": "info"}
"""Our severities as the label values Alertmanager routing trees commonly match."""

SUMMARY_CHARS: Final = 1024
DESCRIPTION_CHARS: Final = 1024
EVIDENCE_CHARS: Final = 1536
REASON_CHARS: Final = 300
"""The vendor's error text kept in a reason: one line, never the body we sent."""
RETIRE_SKEW_SECONDS: Final = 5.0
"""How far in the past a retired alert's ``endsAt`` is set (clock skew)."""
MAX_BATCH: Final = 256
"""Alerts per POST when re-sending (Prometheus' notifier default, ``DefaultMaxBatchSize``)."""
CLIPPED: Final = " …[clipped]"
TARGET_KEYS: Final = frozenset(
    {"bearer_token_env", "bearer_token_file", "username", "password_env", "password_file"}
)


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[bridge.alertmanager]``: where the replicas are and how often to re-send.

    ``urls``: every replica is POSTed separately, never a load balancer in front of several.
    ``max_firing_seconds``: a resolve may never come (see the module); Alertmanager then
    ends the alert at its last ``endsAt``.
    """

    urls: Annotated[
        tuple[str, ...],
        msgspec.Meta(description="Every replica's base URL, a route prefix included."),
    ] = ("http://127.0.0.1:9093",)
    timeout_seconds: RequestSeconds = 10.0
    resend_interval_seconds: Annotated[
        float,
        msgspec.Meta(
            gt=0, le=86400, description="How often firing (and recently resolved) alerts go again."
        ),
    ] = 60.0
    ends_at_intervals: Annotated[
        int,
        msgspec.Meta(
            ge=2, le=1000, description="A firing alert's endsAt is this many intervals ahead."
        ),
    ] = 4
    resolved_resend_seconds: Annotated[
        float,
        msgspec.Meta(ge=0, le=86400, description="How long a resolved alert is still sent."),
    ] = 300.0
    generator_url: Annotated[
        str,
        msgspec.Meta(
            description="The alert's back-link; {id}, {type}, {cluster}, {node} are filled in."
        ),
    ] = "urn:gputriage:incident:{id}"
    runbook_url: Annotated[
        str,
        msgspec.Meta(
            description="The runbook_url annotation, {type} and {alertname} filled in; "
            "none if empty."
        ),
    ] = ""
    max_firing_seconds: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            le=366 * 86400,
            description="A firing alert with no new revision for this long is no longer sent.",
        ),
    ] = 7 * 86400.0


class PostableAlert(msgspec.Struct, frozen=True, kw_only=True):
    """One element of the ``postableAlerts`` array (``api/v2/openapi.yaml``): the field
    names are the vendor's own."""

    labels: dict[str, str]
    annotations: dict[str, str]
    startsAt: datetime
    endsAt: datetime
    generatorURL: str


_decode_alert = typed_decoder(PostableAlert)


@dataclass(slots=True)
class _Firing:
    alert: PostableAlert
    revised: float
    """Unix time of the last revision seen (delivered or skipped)."""


@dataclass(slots=True)
class _Resolved:
    alert: PostableAlert
    until: float
    """Unix time after which it is no longer sent."""


@dataclass(frozen=True, slots=True)
class _Answer:
    """How one replica answered one POST."""

    ok: bool
    reason: str = ""
    detail: str = ""
    rejected: bool = False
    after: float | None = None


# -- rendering -----------------------------------------------------------------------------
def alertname(incident_type: str) -> str:
    """``device_unhealthy_eviction`` -> ``DeviceUnhealthyEviction``."""
    return "".join(part[:1].upper() + part[1:] for part in incident_type.split("_") if part)


def _namespace(incident: Incident) -> str:
    names = {p.namespace for p in incident.pods}
    return names.pop() if len(names) == 1 else ""


def identity(incident: Incident, fixed: Mapping[str, str] | None) -> dict[str, str]:
    """The alert's labels: ``fixed`` (the first delivery's) wins for all but severity.

    Empty values are left out, as Alertmanager's API drops them (``removeEmptyLabels``):
    what we keep is then what it stores.
    """
    labels = {
        "alertname": alertname(incident.type),
        "cluster": incident.cluster,
        "node": incident.node,
        "namespace": _namespace(incident),
        "incident_id": incident.id,
    }
    if fixed is not None:
        labels = {k: fixed.get(k, "") for k in labels}
    labels["severity"] = SEVERITY.get(incident.severity, incident.severity)
    return {k: v for k, v in labels.items() if v}


def _bounded(lines: Sequence[str], limit: int, noun: str, omitted: int = 0) -> str:
    """Whole lines while they fit in ``limit``, then ``… N more <noun>``: a reader sees
    what was left out, and the ids in the labels are never what gets cut."""
    kept: list[str] = []
    used = 0
    room = limit - 40  # for the marker line
    for n, line in enumerate(lines):
        if used + len(line) + 1 > room:
            kept.append(f"… {len(lines) - n + omitted} more {noun}")
            return clip("\n".join(kept), limit, CLIPPED)
        kept.append(line)
        used += len(line) + 1
    if omitted:
        kept.append(f"… {omitted} more {noun}")
    return clip("\n".join(kept), limit, CLIPPED)


def _description(incident: Incident) -> str:
    """The action, then the GPUs (a few), then the pods: the long part, so the one cut."""
    lines = [clip(incident.action, DESCRIPTION_CHARS // 2, CLIPPED)] if incident.action else []
    for gpu in incident.gpus:
        ids = [x for x in (gpu.uuid, gpu.pci_bus_id) if x]
        if gpu.gpu_instance is not None:
            ids.append(f"GPU-I {gpu.gpu_instance} {gpu.mig_profile}".strip())
        lines.append("gpu " + " ".join(ids))
    for pod in incident.pods:
        owner = f", {pod.owner_kind} {pod.owner_name}" if pod.owner_kind else ""
        lines.append(f"pod {pod.namespace}/{pod.name} ({pod.role or 'affected'}{owner})")
    return _bounded(lines, DESCRIPTION_CHARS, "pods" if incident.pods else "GPUs")


def _evidence(incident: Incident) -> str:
    """One line per event, oldest first, whole lines only."""
    lines = [
        f"{ev.time.astimezone(UTC):%Y-%m-%dT%H:%M:%SZ} {ev.schema}: {ev.text}"
        for ev in incident.evidence
    ]
    return _bounded(lines, EVIDENCE_CHARS, "events", incident.evidence_omitted)


def _fill(template: str, values: Mapping[str, str]) -> str:
    return template.format_map({k: quote(v, safe="") for k, v in values.items()})


def _check_template(name: str, template: str, keys: Iterable[str], need_uri: bool) -> None:
    try:
        filled = _fill(template, dict.fromkeys(keys, "x"))
    except (KeyError, ValueError, IndexError) as exc:
        raise ValueError(f"bridge.alertmanager.{name}: bad template {template!r}: {exc}") from None
    if need_uri and not urlsplit(filled).scheme:
        raise ValueError(f"bridge.alertmanager.{name}: {template!r} is not an absolute URI")


# -- the endpoint -------------------------------------------------------------------------
class AlertmanagerEndpoint:
    """Delivers revisions as alerts and keeps them alive (:class:`Endpoint`, Periodic)."""

    kind = KIND

    def __init__(
        self,
        options: Settings,
        http: aiohttp.ClientSession,
        environ: Mapping[str, str] | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.options = options
        self.interval_seconds = options.resend_interval_seconds
        self._http = http
        self._environ = environ
        self._clock = clock
        self._endpoints = tuple(u.rstrip("/") + PATH for u in options.urls)
        self._timeout = aiohttp.ClientTimeout(total=options.timeout_seconds)
        self._firing: dict[tuple[str, str], _Firing] = {}
        """(route name, incident id) -> the alert as last accepted, kept alive by ticks."""
        self._resolved: dict[tuple[str, str], _Resolved] = {}
        """(route name, label-set key) -> a resolved alert still being sent."""
        self._sending = asyncio.Lock()
        """Held by a delivery and by a tick from reading the firing set to the last answer.
        Without it a tick's POST prepared with revision n's annotations could land after
        revision n+1's delivery, and Alertmanager keeps the last annotations it received
        (until the next tick, a minute later)."""
        self._auth: dict[str, Secret | None] = {}
        """Route name -> its ``Authorization`` header, read at check_route (a restored
        route's ticks need it before any revision of it arrives)."""

    # ---- Endpoint
    def check_route(self, route: Route) -> str | None:
        unknown = sorted(set(route.target) - TARGET_KEYS)
        if unknown:
            return f"route {route.name}: unknown alertmanager target keys {unknown}"
        try:
            self._auth[route.name] = self._read_auth(route)
        except SecretError as exc:
            return f"route {route.name}: {exc}"
        return None

    async def deliver(
        self, incident: Incident, previous: Delivered | None, route: Route
    ) -> Outcome:
        try:
            auth = self._auth[route.name] if route.name in self._auth else self._read_auth(route)
        except SecretError as exc:
            return Retry(f"credentials: {exc}")
        self._auth[route.name] = auth
        async with self._sending:
            return await self._deliver(incident, previous, route, auth)

    async def _deliver(
        self, incident: Incident, previous: Delivered | None, route: Route, auth: Secret | None
    ) -> Outcome:
        before = _memo_alert(previous)
        labels = identity(incident, before.labels if before is not None else None)
        now = self._clock()
        resolved = incident.status == "resolved"
        if resolved:
            end = incident.resolved_at or incident.last_seen
        else:
            end = self._ends(now, incident.first_seen)
        alert = PostableAlert(
            labels=labels,
            annotations=self._annotations(incident, labels["alertname"]),
            startsAt=incident.first_seen,
            endsAt=end,
            generatorURL=self._generator_url(incident),
        )
        key = (route.name, incident.id)
        batch = [alert]
        retired = None
        if before is not None and before.labels != labels and not _is_resolved(previous):
            # A new severity is a new alert: end the old one now, here and in later ticks
            # (a little in the past: an Alertmanager clock behind ours still ends it).
            ends = max(now - RETIRE_SKEW_SECONDS, before.startsAt.timestamp())
            retired = msgspec.structs.replace(before, endsAt=_at(ends))
            batch.append(retired)
        elif (
            before is not None
            and not resolved
            and not _is_resolved(previous)
            and _same(before, alert)
        ):
            self._firing.setdefault(key, _Firing(alert, now)).revised = now
            return Skipped("no label or annotation changed (the ticks keep it alive)")
        if resolved:  # whatever comes of it: the ticks must not keep it firing
            self._firing.pop(key, None)
        answers = await self._post_all(batch, auth, route.name)
        outcome = _outcome(answers)
        if not isinstance(outcome, Accepted):
            return outcome
        until = now + self.options.resolved_resend_seconds
        if retired is not None:
            self._resolved[(route.name, _label_key(retired.labels))] = _Resolved(retired, until)
        memo = {"alert": encode(alert).decode(), "revised_at": f"{now:.0f}"}
        if resolved:
            self._resolved[(route.name, _label_key(labels))] = _Resolved(alert, until)
            memo["resend_until"] = f"{until:.0f}"
        else:
            self._firing[key] = _Firing(alert, now)
            self._resolved.pop((route.name, _label_key(labels)), None)
        return Accepted(memo)

    async def close(self) -> None:
        self._firing.clear()
        self._resolved.clear()

    # ---- Periodic
    def restore(self, entries: Mapping[tuple[str, str], Delivered]) -> None:
        """Rebuild the firing and resolving sets from the ledger (its memos)."""
        for (route_name, incident_id), delivered in entries.items():
            alert = _memo_alert(delivered)
            if alert is None:
                log.warning("ledger entry %s/%s has no alert memo", route_name, incident_id)
                continue
            if delivered.status == "resolved":
                try:
                    until = float(delivered.memo.get("resend_until", "0"))
                except ValueError:
                    until = 0.0
                self._resolved[(route_name, _label_key(alert.labels))] = _Resolved(alert, until)
            else:
                try:
                    revised = float(delivered.memo.get("revised_at", ""))
                except ValueError:  # an older memo: the clock starts at the restart
                    revised = self._clock()
                self._firing[(route_name, incident_id)] = _Firing(alert, revised)

    async def tick(self, now: float) -> None:
        """Send every route's firing alerts (``endsAt`` pushed ahead) and its recently
        resolved ones to every replica; drop those past their resend window.

        Failures are logged, not raised: the next tick sends the whole set again.
        """
        async with self._sending:
            await self._tick(now)

    async def _tick(self, now: float) -> None:
        for key in [k for k, r in self._resolved.items() if r.until <= now]:
            del self._resolved[key]
        stale = now - self.options.max_firing_seconds
        for key in [k for k, f in self._firing.items() if f.revised < stale]:
            del self._firing[key]
            log.warning(
                "route %s: incident %s had no revision for %g s: no longer re-sent firing "
                "(Alertmanager ends it at its last endsAt)",
                key[0],
                key[1],
                self.options.max_firing_seconds,
            )
        by_route: dict[str, list[PostableAlert]] = {}
        for (route_name, _), firing in self._firing.items():
            alert = firing.alert
            by_route.setdefault(route_name, []).append(
                msgspec.structs.replace(alert, endsAt=self._ends(now, alert.startsAt))
            )
        for (route_name, _), res in self._resolved.items():
            by_route.setdefault(route_name, []).append(res.alert)
        for route_name, alerts in by_route.items():
            auth = self._auth.get(route_name)
            for start in range(0, len(alerts), MAX_BATCH):
                await self._resend(route_name, alerts[start : start + MAX_BATCH], auth)

    async def _resend(
        self, route_name: str, alerts: Sequence[PostableAlert], auth: Secret | None
    ) -> None:
        answers = await self._post_all(alerts, auth, route_name)
        for url, answer in zip(self._endpoints, answers, strict=True):
            if not answer.ok:
                log.warning(
                    "re-sending %d alerts of route %s to %s: %s %s",
                    len(alerts),
                    route_name,
                    url,
                    answer.reason,
                    answer.detail,
                )

    # ---- helpers
    def _ends(self, now: float, starts: datetime) -> datetime:
        """A firing alert's ``endsAt``: intervals ahead of now, and of ``startsAt`` when a
        node's clock runs ahead of ours (Alertmanager refuses ``endsAt`` before it)."""
        ahead = self.options.ends_at_intervals * self.options.resend_interval_seconds
        return _at(max(now, starts.timestamp()) + ahead)

    def _read_auth(self, route: Route) -> Secret | None:
        """The ``Authorization`` header's value for ``route``, as a Secret (None: no auth)."""
        target = route.target
        bearer = any(k.startswith("bearer_token_") for k in target)
        basic = "username" in target or any(k.startswith("password_") for k in target)
        if bearer and basic:
            raise SecretError("give a bearer token or basic auth, not both")
        if bearer:
            return Secret("Bearer " + read_secret(target, "bearer_token", self._environ).reveal())
        if basic:
            user = target.get("username", "")
            if not user or ":" in user:
                raise SecretError("username: basic auth needs a username without ':'")
            password = read_secret(target, "password", self._environ).reveal()
            pair = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
            return Secret(f"Basic {pair}")
        return None

    def _annotations(self, incident: Incident, name: str) -> dict[str, str]:
        notes = {
            "summary": clip(incident.summary, SUMMARY_CHARS, CLIPPED),
            "description": _description(incident),
            "evidence": _evidence(incident),
            "incident_type": incident.type,
        }
        if self.options.runbook_url:
            notes["runbook_url"] = _fill(
                self.options.runbook_url, {"type": incident.type, "alertname": name}
            )
        return {k: v for k, v in notes.items() if v}

    def _generator_url(self, incident: Incident) -> str:
        return _fill(
            self.options.generator_url,
            {
                "id": incident.id,
                "type": incident.type,
                "cluster": incident.cluster,
                "node": incident.node,
            },
        )

    async def _post_all(
        self, alerts: Sequence[PostableAlert], auth: Secret | None, route: str
    ) -> list[_Answer]:
        body = encode_alerts(alerts)
        headers = {"Content-Type": "application/json"}
        secrets: list[str] = []
        if auth is not None:
            headers["Authorization"] = auth.reveal()
            secrets = [auth.reveal(), *auth.reveal().split(" ", 1)[1:]]
        return list(
            await asyncio.gather(
                *(self._post(url, body, headers, route, secrets) for url in self._endpoints)
            )
        )

    async def _post(
        self, url: str, body: bytes, headers: Mapping[str, str], route: str, secrets: list[str]
    ) -> _Answer:
        got = await post_bounded(self._http, url, data=body, headers=headers, timeout=self._timeout)
        if isinstance(got, Retry):  # never follows a redirect, names errors by class only
            return _Answer(ok=False, reason=f"{got.reason} posting to {url}")
        if classify(got.status) is Verdict.ACCEPTED:
            return _Answer(ok=True)
        text = _error_text(got.text(secrets))
        outcome = status_outcome(got, route=route, said=f" from {url}", secrets=secrets)
        if isinstance(outcome, Rejected):
            return _Answer(ok=False, reason=outcome.reason, detail=text, rejected=True)
        return _Answer(ok=False, reason=outcome.reason, detail=text, after=outcome.after_seconds)


def encode_alerts(alerts: Sequence[PostableAlert]) -> bytes:
    """The JSON array Alertmanager takes (RFC 3339 times, as msgspec writes datetimes)."""
    return dumps(msgspec.to_builtins(list(alerts)))


def _outcome(answers: Sequence[_Answer]) -> Outcome:
    """Accepted if any replica took it; Rejected if one refused the content; else Retry."""
    if any(a.ok for a in answers):
        for a in answers:
            if not a.ok:
                log.warning("one replica missed a revision (the next tick sends it): %s", a.reason)
        return Accepted()
    for a in answers:
        if a.rejected:
            return Rejected(a.reason + (f": {a.detail}" if a.detail else ""), detail=a.detail)
    first = answers[0]
    afters = [a.after for a in answers if a.after is not None]
    reason = first.reason + (f": {first.detail}" if first.detail else "")
    return Retry(reason, after_seconds=max(afters) if afters else None)


def _error_text(raw: str) -> str:
    """Alertmanager's 400 is a JSON string; go-swagger's 422 is ``{"code", "message"}``
    (``raw`` already masked)."""
    value: object
    try:
        value = loads(raw)
    except RecordError:
        value = raw
    if isinstance(value, dict):
        value = value.get("message", value)
    text = " ".join(str(value).split())
    return clip(text, REASON_CHARS, CLIPPED)


def _memo_alert(previous: Delivered | None) -> PostableAlert | None:
    if previous is None or "alert" not in previous.memo:
        return None
    try:
        return _decode_alert(previous.memo["alert"])
    except RecordError:
        log.warning("an alert memo does not decode; treating the incident as new")
        return None


def _is_resolved(previous: Delivered | None) -> bool:
    return previous is not None and previous.status == "resolved"


def _same(a: PostableAlert, b: PostableAlert) -> bool:
    return (a.labels, a.annotations, a.startsAt, a.generatorURL) == (
        b.labels,
        b.annotations,
        b.startsAt,
        b.generatorURL,
    )


def _label_key(labels: Mapping[str, str]) -> str:
    return "\x00".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _at(unix: float) -> datetime:
    return datetime.fromtimestamp(unix, UTC)


def build(
    options: Settings, http: aiohttp.ClientSession, environ: Mapping[str, str] | None = None
) -> Endpoint:
    """The endpoint for ``[bridge.alertmanager]``; ValueError for options that cannot work."""
    if not options.urls:
        raise ValueError("bridge.alertmanager.urls: give at least one Alertmanager")
    for url in options.urls:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"bridge.alertmanager.urls: {url!r} is not an http(s) URL")
        if parts.username is not None or parts.password is not None:
            raise ValueError(
                "bridge.alertmanager.urls: no credentials in a URL (use the route's "
                "bearer_token_env/_file or username + password_env/_file)"
            )
    _check_template("generator_url", options.generator_url, ("id", "type", "cluster", "node"), True)
    _check_template("runbook_url", options.runbook_url, ("type", "alertname"), False)
    return AlertmanagerEndpoint(options, http, environ)
