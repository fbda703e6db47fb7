"""PagerDuty Events API v2: each incident's lifecycle as trigger / re-trigger / resolve.

``open`` is a ``trigger``; an ``updated`` revision re-triggers with the same ``dedup_key``
only when what a responder reads changed, else it is :class:`Skipped`; ``resolved`` is a
``resolve``, always sent (harmless when nothing is open). ``page`` maps to ``critical``,
and ``error`` stays unused so event rules can tell our pages apart.

Traps: the routing key is in the body (never log one); follow-ups through another key are
dropped silently after a 202, so the memo keeps a fingerprint of the trigger's key and a
change is warned about; about 120 calls a minute per key, so a sliding window paces each
key and answers :class:`Retry` rather than sleeping; 512 KB per event (evidence is cut
first, ids and summary never). What PagerDuty documents, with sources:
docs/bridges.md, design notes: pagerduty.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Literal

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
    mask,
    read_secret,
)
from connectors.bridges.http import (
    Answer,
    Pacer,
    Verdict,
    classify,
    loop_time,
    post_bounded,
    status_outcome,
)
from connectors.kafka.config import Secret
from schemas.codec import RecordError, dumps, loads
from schemas.incidents import GpuRef, Incident, PodInfo

log = logging.getLogger("gputriage.bridge.pagerduty")

ENQUEUE_URL: Final = "https://events.pagerduty.com/v2/enqueue"
ROUTING_KEY_LENGTH: Final = 32
MAX_DEDUP_KEY: Final = 255
MAX_SUMMARY: Final = 1024
BODY_BUDGET: Final = 500_000
"""What a body may take: under PagerDuty's "512 KB" whether it means 512,000 bytes or
524,288, with room to spare."""
EVIDENCE_HEAD: Final = 3
"""The first evidence events (the chain's cause) are part of what a responder reads."""
MAX_EVIDENCE_TEXT: Final = 4096
MAX_ACTION: Final = 16_384
WINDOW_SECONDS: Final = 60.0
SECRET_KEY: Final = "routing_key"
"""The route's secret: ``routing_key_env`` or ``routing_key_file`` in its target."""

SEVERITY: Final[Mapping[str, str]] = {"page": "critical", "ticket": "warning", "info": "info"}

Action = Literal["trigger", "resolve"]


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[bridge.pagerduty]``: every setting defaulted; the routing key is per route."""

    url: Annotated[
        str, msgspec.Meta(description="Events API v2 enqueue URL (a proxy, or a test receiver).")
    ] = ENQUEUE_URL
    timeout_seconds: RequestSeconds = 10.0
    client: Annotated[
        str, msgspec.Meta(description="Shown in PagerDuty as the alert's monitoring client.")
    ] = "gputriage"
    client_url: Annotated[
        str, msgspec.Meta(description="A link back (a dashboard); left out when empty.")
    ] = ""
    runbook_url: Annotated[
        str,
        msgspec.Meta(
            description="A link for every event, {type} replaced by the incident type; "
            "none when empty."
        ),
    ] = ""
    calls_per_minute: Annotated[
        int,
        msgspec.Meta(
            ge=1, le=1000, description="Our own pace per routing key, below PagerDuty's ~120."
        ),
    ] = 100
    rate_limited_retry_seconds: Annotated[
        float,
        msgspec.Meta(ge=0, le=3600, description="After a 429 without Retry-After, wait this long."),
    ] = 30.0


def key_fingerprint(key: Secret) -> str:
    """8 hex characters of the key's SHA-256: enough to tell two keys apart in a log or
    a memo, far too little to recover a 32-character key from."""
    return hashlib.sha256(key.reveal().encode()).hexdigest()[:8]


def dedup_key(incident_id: str) -> str:
    """The incident id, which is short; a longer one keeps a head and a hash of the whole,
    so two ids sharing 255 characters never share an alert."""
    if len(incident_id) <= MAX_DEDUP_KEY:
        return incident_id
    digest = hashlib.sha256(incident_id.encode()).hexdigest()
    return f"{incident_id[: MAX_DEDUP_KEY - len(digest) - 1]}~{digest}"


def visible_digest(incident: Incident) -> str:
    """A hash of what a responder reads in PagerDuty: a change in any of these is worth a
    re-trigger (an alert's log entry, a new summary); ``last_seen``, the tail of the
    evidence and counters in the attributes (``kills``, ``attempts``) move with nearly
    every revision and are not (they go out with the next re-trigger or resolve)."""
    seen = (
        incident.type,
        incident.severity,
        incident.summary,
        incident.action,
        incident.node,
        sorted(
            (p.namespace, p.name, p.role, p.owner_kind, p.owner_name, p.container)
            for p in incident.pods
        ),
        sorted(gpu_label(g) for g in incident.gpus),
        [e.event_id for e in incident.evidence[:EVIDENCE_HEAD]],
    )
    return hashlib.sha256(dumps(seen)).hexdigest()[:16]


def gpu_label(gpu: GpuRef) -> str:
    name = gpu.uuid or gpu.pci_bus_id or (f"GPU {gpu.index}" if gpu.index is not None else "")
    if gpu.gpu_instance is not None:
        name = f"{name} GI {gpu.gpu_instance}"
    return name


def _gpu_details(gpu: GpuRef) -> dict[str, Any]:
    raw = msgspec.structs.asdict(gpu)
    return {k: v for k, v in raw.items() if v not in ("", None)}


def _pod_details(pod: PodInfo) -> dict[str, str]:
    raw = msgspec.structs.asdict(pod)
    return {k: v for k, v in raw.items() if v}


def _group(incident: Incident) -> str:
    """The node group when the incident names one, else the pods' namespace(s)."""
    attrs = incident.attributes
    if attrs.get("node_group") or attrs.get("node_groups"):
        return attrs.get("node_group") or attrs["node_groups"]
    namespaces = sorted({p.namespace for p in incident.pods})
    return clip(",".join(namespaces), 255) if namespaces else ""


def _component(incident: Incident) -> str:
    labels = [gpu_label(g) for g in incident.gpus if gpu_label(g)]
    if not labels:
        return incident.node
    more = f" (+{len(labels) - 3} more)" if len(labels) > 3 else ""
    return ", ".join(labels[:3]) + more


@dataclass(frozen=True, slots=True)
class _Details:
    """The parts of ``custom_details`` that may be cut to fit, kept apart from the ids."""

    evidence: list[str]
    pods: list[dict[str, str]]
    attributes: dict[str, str]


def _evidence_line(incident: Incident, i: int) -> str:
    e = incident.evidence[i]
    text = clip(e.text, MAX_EVIDENCE_TEXT)
    return f"{e.time.isoformat()} {e.schema} {e.event_id}: {text}"


def trigger_body(incident: Incident, key: Secret, options: Settings) -> bytes:
    """The trigger event for this revision, fitted under :data:`BODY_BUDGET` when it can
    be (what is never cut is bounded: ids, a clipped summary and action, the GPUs)."""
    parts = _Details(
        evidence=[_evidence_line(incident, i) for i in range(len(incident.evidence))],
        pods=[_pod_details(p) for p in incident.pods],
        attributes=dict(incident.attributes),
    )
    render = _renderer(incident, key, options)
    body = render(parts, len(parts.evidence), len(parts.pods), True)
    if len(body) <= BODY_BUDGET:
        return body
    # Cut in order: the evidence's tail, then the pods' tail, then the attributes.
    keep = _most(lambda n: render(parts, n, len(parts.pods), True), len(parts.evidence))
    if keep > 0:
        return render(parts, keep, len(parts.pods), True)
    pods = _most(lambda n: render(parts, 0, n, True), len(parts.pods))
    body = render(parts, 0, pods, True)
    return body if len(body) <= BODY_BUDGET else render(parts, 0, pods, False)


def _most(fits: Callable[[int], bytes], upper: int) -> int:
    """The largest n in [0, upper] whose body fits (bodies grow with n), or 0."""
    lo, hi = 0, upper
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(fits(mid)) <= BODY_BUDGET:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _renderer(
    incident: Incident, key: Secret, options: Settings
) -> Callable[[_Details, int, int, bool], bytes]:
    summary = clip(f"[{incident.cluster}] {incident.summary}", MAX_SUMMARY)
    payload_head: dict[str, Any] = {
        "summary": summary,
        "source": incident.node or incident.cluster,
        "severity": SEVERITY[incident.severity],
        "timestamp": incident.last_seen.isoformat(),
        "class": incident.type,
    }
    if component := _component(incident):
        payload_head["component"] = component
    if group := _group(incident):
        payload_head["group"] = group
    ids: dict[str, Any] = {
        "incident_id": incident.id,
        "revision": incident.revision,
        "status": incident.status,
        "type": incident.type,
        "severity": incident.severity,
        "cluster": incident.cluster,
        "node": incident.node,
        "first_seen": incident.first_seen.isoformat(),
        "last_seen": incident.last_seen.isoformat(),
        "recommended_action": clip(incident.action, MAX_ACTION),
        "gpus": [_gpu_details(g) for g in incident.gpus],
    }

    def render(parts: _Details, evidence: int, pods: int, attributes: bool) -> bytes:
        details = dict(ids)
        details["pods"] = parts.pods[:pods]
        if pods < len(parts.pods):
            details["pods_left_out"] = (
                f"{len(parts.pods) - pods} more pods left out to fit PagerDuty's 512 KB limit"
            )
        details["evidence"] = parts.evidence[:evidence]
        omitted = incident.evidence_omitted + len(parts.evidence) - evidence
        if evidence < len(parts.evidence):
            details["evidence_truncated"] = (
                f"{len(parts.evidence) - evidence} evidence events left out to fit "
                "PagerDuty's 512 KB limit"
            )
        if omitted:
            details["evidence_omitted"] = omitted
        details["attributes"] = parts.attributes if attributes else {}
        if not attributes and parts.attributes:
            details["attributes_left_out"] = "left out to fit PagerDuty's 512 KB limit"
        event: dict[str, Any] = {
            "routing_key": key.reveal(),
            "event_action": "trigger",
            "dedup_key": dedup_key(incident.id),
            "payload": {**payload_head, "custom_details": details},
            "client": options.client,
        }
        if options.client_url:
            event["client_url"] = options.client_url
        if options.runbook_url:
            href = options.runbook_url.replace("{type}", incident.type)
            event["links"] = [{"href": href, "text": f"Runbook: {incident.type}"}]
        return dumps(event)

    return render


def resolve_body(incident: Incident, key: Secret) -> bytes:
    return dumps(
        {
            "routing_key": key.reveal(),
            "event_action": "resolve",
            "dedup_key": dedup_key(incident.id),
        }
    )


class PagerDutyEndpoint:
    """The Events API v2 endpoint behind :class:`~connectors.bridges.base.Endpoint`."""

    kind = "pagerduty"

    def __init__(
        self,
        options: Settings,
        http: aiohttp.ClientSession,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = loop_time,
    ) -> None:
        self.options = options
        self.http = http
        self.environ = environ
        self.pacer = Pacer(options.calls_per_minute, WINDOW_SECONDS, clock)

    def _key(self, route: Route) -> Secret:
        key = read_secret(route.target, SECRET_KEY, self.environ)
        if len(key.reveal()) != ROUTING_KEY_LENGTH:
            raise SecretError(
                f"{SECRET_KEY}: an Events API v2 integration key has {ROUTING_KEY_LENGTH} "
                f"characters, this one {len(key.reveal())}"
            )
        return key

    def check_route(self, route: Route) -> str | None:
        try:
            self._key(route)
        except SecretError as exc:
            return f"route {route.name}: {exc}"
        return None

    async def deliver(
        self, incident: Incident, previous: Delivered | None, route: Route
    ) -> Outcome:
        try:
            key = self._key(route)
        except SecretError as exc:  # the file went away since start-up: fixable, retry
            return Retry(f"route {route.name}: {exc}")
        fingerprint = key_fingerprint(key)
        memo = dict(previous.memo) if previous is not None else {}
        sent_with = memo.get("routing_key_sha256", "")
        key_changed = bool(sent_with) and sent_with != fingerprint
        if key_changed:
            log.warning(
                "route %s: incident %s was triggered through routing key %s, the route's key "
                "is now %s; PagerDuty drops follow-ups through another key with a 202: "
                "sending through the new key, resolve the old alert by hand",
                route.name,
                incident.id,
                sent_with,
                fingerprint,
            )
        action: Action = "resolve" if incident.status == "resolved" else "trigger"
        digest = visible_digest(incident)
        if (
            action == "trigger"
            and incident.status == "updated"
            and previous is not None
            and previous.status != "resolved"
            and memo.get("visible") == digest
            and not key_changed
        ):
            return Skipped("nothing a responder sees changed")
        key_id = hashlib.sha256(key.reveal().encode()).hexdigest()
        wait = self.pacer.take(key_id)
        if wait > 0:
            return Retry(
                f"paced: {self.pacer.limit} calls through this routing key in {WINDOW_SECONDS:g} s",
                after_seconds=wait,
            )
        body = (
            trigger_body(incident, key, self.options)
            if action == "trigger"
            else resolve_body(incident, key)
        )
        if len(body) > BODY_BUDGET:  # cannot happen with real incidents: said, not raised
            return Rejected(f"{action} event of {len(body)} bytes, over PagerDuty's 512 KB")
        outcome = await self._post(body, key, key_id, route.name)
        log.debug(
            "route %s: %s of %s revision %d: %s",
            route.name,
            action,
            incident.id,
            incident.revision,
            type(outcome).__name__,
        )
        if isinstance(outcome, Accepted) and action == "trigger":
            memo.update(
                visible=digest, routing_key_sha256=fingerprint, dedup_key=dedup_key(incident.id)
            )
            return Accepted(memo=memo)
        return outcome

    async def close(self) -> None:
        """Nothing of its own to release: the HTTP session is the runner's."""

    async def _post(self, body: bytes, key: Secret, key_id: str, route: str) -> Outcome:
        got = await post_bounded(
            self.http,
            self.options.url,
            data=body,
            headers={"Content-Type": "application/json"},
            timeout=aiohttp.ClientTimeout(total=self.options.timeout_seconds),
        )
        if isinstance(got, Retry):
            return got
        return self._judge(got, key, key_id, route)

    def _judge(self, answer: Answer, key: Secret, key_id: str, route: str) -> Outcome:
        """The shared status policy (:mod:`connectors.bridges.http`), and PagerDuty's own
        429: its window is closed for a while, as no ``Retry-After`` is documented."""
        status = answer.status
        verdict = classify(status)
        if verdict is Verdict.ACCEPTED:
            return Accepted()
        if status == 429:
            wait = max(answer.retry_after or 0.0, self.options.rate_limited_retry_seconds)
            self.pacer.close(key_id, wait)
            return Retry("HTTP 429: rate limited", wait)
        secrets = [key.reveal()]
        said, detail = "", ""
        if verdict is Verdict.REJECTED:
            text = answer.text(secrets)
            reply = _answer(text)
            said = str(reply.get("status") or reply.get("message") or "bad request")
            errors = reply.get("errors")
            if isinstance(errors, list) and errors:
                detail = "; ".join(str(e) for e in errors)
            else:
                detail = str(reply.get("message", "")) or text
            said = ": " + clip(mask(said, secrets), 200)
        return status_outcome(
            answer,
            route=route,
            where="",
            secrets=secrets,
            said=said,
            detail=detail,
            reason_chars=250,
            detail_chars=4000,
        )


def _answer(text: str) -> dict[str, Any]:
    try:
        value = loads(text)
    except RecordError:
        return {}
    return value if isinstance(value, dict) else {}


def build(
    options: Settings, http: aiohttp.ClientSession, environ: Mapping[str, str] | None = None
) -> Endpoint:
    return PagerDutyEndpoint(options, http, environ)
