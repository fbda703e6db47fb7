"""GKE cluster autoscaler visibility events (Cloud Logging) to autoscaler facts.

GKE runs cluster-autoscaler on its control plane, so there is no pod log to follow; GKE
publishes ``container.googleapis.com/cluster-autoscaler-visibility`` entries instead. A
``decision`` gives ``scale_up_planned`` per MIG or ``scale_down`` per node; a
``resultInfo`` error gives the failure its ``messageId`` names (quota, a stockout, a
timeout, the pool's configuration); a ``noScaleUp`` gives ``unschedulable`` per pod group,
ranked like the ``NotTriggerScaleUp`` Event. Input is one entry per line (a LogEntry, a
whole ``gcloud`` array, or a bare ``jsonPayload``); nothing here raises.

Traps: autoprovisioning limits are ``max_size``, not a quota; an exhausted subnet is
``other``, as cluster-autoscaler's GCE client says; ``gcloud``'s default YAML is not
line-readable; Karpenter's ``"decision": "replace"`` is a string, not this. Every
messageId and its reading: docs/connectors.md, design notes.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from connectors.autoscaler.classify import classify
from connectors.autoscaler.klog import Fact
from connectors.autoscaler.unwrap import parse_time
from schemas.events import PodRef

LOG_NAME: Final = "cluster-autoscaler-visibility"
PAYLOAD_KEYS: Final = ("decision", "noDecisionStatus", "resultInfo")
MAX_ENTRY: Final = 262144
"""Cloud Logging's limit on one entry (256 KiB): a line up to this long that starts
like JSON is decoded whole, though the evidence kept is clipped like any line's."""
MAX_ITEMS: Final = 256
"""Records from one list (MIGs, nodes, pod groups, results) at most: bounded work."""
_MAX_PODS: Final = 64

_NODE_SUFFIX: Final = re.compile(r"^(?P<base>[a-z0-9-]+-[0-9a-f]{8})-[a-z0-9]{4}$")
_MIG_URL: Final = re.compile(r"/instanceGroup(?:Manager)?s/(?P<name>[^/\s]+)$")

_SCALE_UP_ERRORS: Final = {
    "scale.up.error.quota.exceeded": ("scale_up_failed", "quota"),
    "scale.up.error.out.of.resources": ("scale_up_failed", "capacity"),
    "scale.up.error.reservation.capacity.exceeded": ("scale_up_failed", "capacity"),
    "scale.up.error.any.affinity.reservations.no.capacity": ("scale_up_failed", "capacity"),
    "scale.up.error.waiting.for.instances.timeout": ("scale_up_timeout", "timeout"),
    "scale.up.error.ip.space.exhausted": ("scale_up_failed", "other"),
    "scale.up.error.service.account.deleted": ("scale_up_failed", "config"),
    "scale.up.error.invalid.reservation": ("scale_up_failed", "config"),
    "scale.up.error.reservation.not.ready": ("scale_up_failed", "config"),
    "scale.up.error.reservation.not.found": ("scale_up_failed", "config"),
    "scale.up.error.reservation.incompatible": ("scale_up_failed", "config"),
    "scale.up.error.any.affinity.reservations.not.available": ("scale_up_failed", "config"),
    "scale.up.error.tpu.topology.invalid": ("scale_up_failed", "config"),
    "scale.up.error.tpu.configuration.invalid": ("scale_up_failed", "config"),
    "scale.up.error.compact.placement.node.group.already.exists": ("scale_up_failed", "config"),
    # sic: GKE spells it "unsupportred" (the messageId is an identifier, kept as sent)
    "scale.up.error.unsupportred.compact.placement.config": ("scale_up_failed", "config"),
}
_NO_SCALE_UP: Final = {
    "no.scale.up.mig.failing.predicate": "config",
    "no.scale.up.in.backoff": "backoff",
    "no.scale.up.nap.pod.zonal.resources.exceeded": "max_size",
    "no.scale.up.nap.node.groups.limit.reached": "max_size",
    "no.scale.up.nap.capacity.constraints": "capacity",
    "no.scale.up.nap.disabled": "config",
    "no.scale.up.nap.no.locations.available": "config",
    "no.scale.up.nap.pod.zonal.failing.predicates": "config",
    "no.scale.up.nap.pod.zonal.illegal.config": "config",
    "no.scale.up.not.tried": "",
}
_RANK: Final = ("backoff", "max_size", "capacity", "config", "other")


@dataclass(slots=True, frozen=True)
class Finding:
    """One fact of an entry and the words that say it (the record's ``message``)."""

    fact: Fact
    message: str


def _dict(value: object) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _list(value: object) -> list[Any]:
    return value[:MAX_ITEMS] if isinstance(value, list) else []


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def payload_of(record: dict[str, Any]) -> dict[str, Any] | None:
    """The visibility payload of a LogEntry (or of a bare payload); ``None`` if not one."""
    payload = _dict(record.get("jsonPayload"))
    if payload is None and "logName" not in record:
        payload = record  # a bare jsonPayload
    if payload is not None and any(_dict(payload.get(key)) is not None for key in PAYLOAD_KEYS):
        return payload
    if _str(record.get("logName")).endswith(LOG_NAME):
        return payload or {}
    return None


def is_entry(record: dict[str, Any]) -> bool:
    """Whether ``record`` is a cluster autoscaler visibility entry (see the module doc)."""
    return payload_of(record) is not None


def entry_time(record: dict[str, Any]) -> datetime | None:
    """When the entry happened: ``timestamp``, ``receiveTimestamp``, else the payload's
    ``decideTime``/``measureTime`` (epoch seconds, as a string)."""
    for key in ("timestamp", "receiveTimestamp"):
        value = record.get(key)
        if isinstance(value, str):
            stamp = parse_time(value)
            if stamp is not None:
                return stamp
    payload = payload_of(record) or {}
    for key, inner in (
        ("decision", "decideTime"),
        ("noDecisionStatus", "measureTime"),
        ("resultInfo", "measureTime"),
    ):
        part = _dict(payload.get(key))
        if part is not None:
            stamp = _epoch(part.get(inner))
            if stamp is not None:
                return stamp
    return None


def _epoch(value: object) -> datetime | None:
    if isinstance(value, str) and value.isdigit() and len(value) <= 11:
        seconds = int(value)
    elif isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**11:
        seconds = value
    else:
        return None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)


def parse_entry(record: dict[str, Any]) -> tuple[Finding, ...]:
    """The facts of one visibility entry (usually one or none)."""
    payload = payload_of(record)
    if payload is None:
        return ()
    found: list[Finding] = []
    decision = _dict(payload.get("decision"))
    if decision is not None:
        found.extend(_decision(decision))
    result = _dict(payload.get("resultInfo"))
    if result is not None:
        found.extend(_results(result))
    status = _dict(payload.get("noDecisionStatus"))
    if status is not None:
        no_scale_up = _dict(status.get("noScaleUp"))
        if no_scale_up is not None:
            found.extend(_no_scale_up(no_scale_up))
    return tuple(found)


def _mig_name(mig: object) -> str:
    """A MIG's name from ``{name, zone, nodepool}``, or from a name or URL string."""
    if isinstance(mig, dict):
        mig = mig.get("name")
    text = _str(mig)
    match = _MIG_URL.search(text)
    return match["name"] if match else text


def _pod(value: object) -> PodRef | None:
    pod = _dict(value)
    if pod is None:
        return None
    name = _str(pod.get("name"))
    return PodRef(namespace=_str(pod.get("namespace")), name=name) if name else None


def _pods(values: object) -> tuple[PodRef, ...]:
    refs = (_pod(value) for value in _list(values)[:_MAX_PODS])
    return tuple(ref for ref in refs if ref is not None)


def _head(kind: str, event: str) -> str:
    return f"{kind} {event}" if event else kind


def _decision(decision: dict[str, Any]) -> Iterator[Finding]:
    event = _str(decision.get("eventId"))
    scale_up = _dict(decision.get("scaleUp"))
    if scale_up is not None:
        pods = _pods(scale_up.get("triggeringPods"))
        for item in _list(scale_up.get("increasedMigs")):
            increased = _dict(item) or {}
            group = _mig_name(increased.get("mig"))
            requested = increased.get("requestedNodes")
            more = f" +{requested}" if isinstance(requested, int) else ""
            yield Finding(
                Fact("scale_up_planned", node_group=group, pods=pods),
                f"{_head('scaleUp', event)}: {group}{more}",
            )
    scale_down = _dict(decision.get("scaleDown"))
    if scale_down is not None:
        for item in _list(scale_down.get("nodesToBeRemoved")):
            removed = _dict(item) or {}
            node = _dict(removed.get("node")) or {}
            group = _mig_name(node.get("mig"))
            name = _str(node.get("name"))
            yield Finding(
                Fact("scale_down", node_group=group, pods=_pods(removed.get("evictedPods"))),
                f"{_head('scaleDown', event)}: {name} ({group})",
            )


def _results(result: dict[str, Any]) -> Iterator[Finding]:
    for item in _list(result.get("results")):
        error = _dict((_dict(item) or {}).get("errorMsg"))
        if error is None:
            continue  # a success
        message_id = _str(error.get("messageId"))
        parameters = [_str(p) for p in _list(error.get("parameters"))]
        text = f"{message_id}: {', '.join(parameters)}" if parameters else message_id
        event = _str((_dict(item) or {}).get("eventId"))
        words = f"{_head('resultInfo', event)}: {text}"
        if message_id.startswith("scale.up.error"):
            action, reason = _SCALE_UP_ERRORS.get(message_id, ("scale_up_failed", "other"))
            group = next((_mig_name(p) for p in parameters if p), "")
            yield Finding(Fact(action, reason, group, cloud_code=message_id), words)
        elif message_id.startswith("scale.down.error"):
            group = next((g for g in map(_node_group, parameters) if g), "")
            yield Finding(Fact("scale_down", "other", group, cloud_code=message_id), words)


def _node_group(node: str) -> str:
    match = _NODE_SUFFIX.match(node)
    return f"{match['base']}-grp" if match else ""


def _class_of(message_id: str, parameters: list[str]) -> str:
    """The reason class of one noScaleUp reason (see the module docstring)."""
    if message_id in _NO_SCALE_UP:
        return _NO_SCALE_UP[message_id]
    text = " ".join(parameters).lower()
    if message_id == "no.scale.up.mig.skipped":
        if "backoff" in text or "not ready" in text:
            return "backoff"
        if "max" in text or "limit" in text or "quota" in text:
            return "max_size"  # the group's max size, the cluster's or a CapacityQuota
        return "capacity" if "capacity" in text else "other"
    if "unexpected" in message_id or "other.error" in message_id or "unknown" in message_id:
        return "other"
    if message_id.startswith("no.scale.up."):
        reason, _code = classify(" ".join(parameters))
        if reason in ("quota", "capacity"):
            return reason
        return "config"  # a pod request or autoprovisioning setting no group can serve
    return "other"


@dataclass(slots=True)
class _Reason:
    klass: str
    message_id: str
    group: str
    text: str


def _reason(value: object, group: str = "") -> _Reason | None:
    reason = _dict(value)
    if reason is None:
        return None
    message_id = _str(reason.get("messageId"))
    if not message_id:
        return None
    parameters = [_str(p) for p in _list(reason.get("parameters"))]
    text = f"{message_id} ({', '.join(parameters)})" if parameters else message_id
    if group:
        text = f"{group}: {text}"
    return _Reason(_class_of(message_id, parameters), message_id, group, text)


def _no_scale_up(no_scale_up: dict[str, Any]) -> Iterator[Finding]:
    shared: list[_Reason] = []
    for item in _list(no_scale_up.get("skippedMigs")):
        skipped = _dict(item) or {}
        found = _reason(skipped.get("reason"), _mig_name(skipped.get("mig")))
        if found is not None:
            shared.append(found)
    top = _reason(no_scale_up.get("reason"))
    if top is not None:
        shared.append(top)
    groups = _list(no_scale_up.get("unhandledPodGroups"))
    if not groups:
        if shared:
            yield _verdict(shared, ())
        return
    for item in groups:
        group = _dict(item) or {}
        reasons: list[_Reason] = []
        for rejected_item in _list(group.get("rejectedMigs")):
            rejected = _dict(rejected_item) or {}
            found = _reason(rejected.get("reason"), _mig_name(rejected.get("mig")))
            if found is not None:
                reasons.append(found)
        for nap in _list(group.get("napFailureReasons")):
            found = _reason(nap)
            if found is not None:
                reasons.append(found)
        pod = _pod((_dict(group.get("podGroup")) or {}).get("samplePod"))
        yield _verdict([*reasons, *shared], (pod,) if pod else ())


def _verdict(reasons: list[_Reason], pods: tuple[PodRef, ...]) -> Finding:
    """One unschedulable pod group's record, ranked like ``NotTriggerScaleUp``."""
    words = "noScaleUp: " + "; ".join(r.text for r in reasons) if reasons else "noScaleUp"
    ranked = [r for r in reasons if r.klass]
    if not ranked:
        return Finding(Fact("unschedulable", pods=pods), words)
    first = min(ranked, key=lambda r: _RANK.index(r.klass))
    classes = {r.klass for r in ranked}
    action = "unschedulable"
    if classes == {"backoff"}:
        action = "backoff"
    elif classes == {"max_size"}:
        action = "max_size_reached"
    return Finding(
        Fact(action, first.klass, first.group, cloud_code=first.message_id, pods=pods), words
    )
