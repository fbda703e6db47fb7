"""Autoscaler Kubernetes Events (already slimmed to ``KubeEvent``) to ``autoscaler.v1`` records.

cluster-autoscaler and Karpenter record their decisions as Events on the pods they
could or could not help (and on the ``cluster-autoscaler-status`` ConfigMap, on
nodes, NodePools and NodeClaims). The k8s connector publishes every GPU-related Event
as a ``k8s_event.v1``; :func:`autoscaler_event` *also* turns the autoscaler's into an
:class:`~schemas.events.AutoscalerEvent` (cluster-scoped, ``node`` empty), whatever
the GPU filter says of the Event: a scale-up that fails for a CPU pool is context for
the GPU pod next to it. The k8s family does not import this one (independent source
families): the CLI hands this function to the connector as its ``derive`` hook.

Event reasons, from cluster-autoscaler's ``core/scaleup`` and ``clusterstate``
(``TriggeredScaleUp``, ``NotTriggerScaleUp``, ``ScaledUpGroup``, ``FailedToScaleUpGroup``,
``ScaleUpFailed``, ``ScaleUpTimedOut``, ``ScaleDown*``) and Karpenter's
``pkg/controllers/provisioning`` / ``nodeclaim/lifecycle`` (``Nominated``,
``FailedScheduling``, ``InsufficientCapacityError``, ``NoCompatibleInstanceTypes``);
the corpus ``tests/data/autoscaler/events.jsonl`` cites the real messages.

Traps:

* ``NotTriggerScaleUp`` lists its reasons with counts (``12 node(s) didn't match Pod's
  node affinity/selector, 3 max node group size reached``): the record's reason is the
  most *actionable* class present (backoff, then max_size, then config), never the
  most frequent: 12 nodes of the wrong kind say nothing, 3 full groups are the news.
  Old releases say only ``(it wouldn't fit if a new node is added)``: ``config``.
* A ``Nominated`` naming an existing ``node/`` is Karpenter placing a pod on capacity
  it already has: not a scale-up, no record.
* The scheduler's own ``FailedScheduling`` (``default-scheduler``) is not the
  autoscaler's; only Karpenter's (``incompatible with nodepool``) is mapped.
* Ids are a hash of the Event's id (``k8s:<uid>:<resourceVersion>``): a relist gives the
  same record again, which the core skips.
"""

from __future__ import annotations

import re
from typing import Final

from connectors.autoscaler import klog
from connectors.autoscaler.classify import classify, cloud_of, not_triggered
from schemas.events import AutoscalerEvent, KubeEvent, PodRef
from schemas.ids import hashed_id

SOURCES: Final = frozenset({"cluster-autoscaler", "karpenter"})
"""``source.component`` / ``reportingController`` of the autoscalers' Events."""

_TRIGGERED_OLD: Final = re.compile(
    r"group: (?P<group>\S+?), sizes \(current/new\): (?P<from>\d+)/(?P<to>\d+)"
)
_TRIGGERED_NEW: Final = re.compile(
    r"\{(?P<group>\S+) (?P<from>\d+)->(?P<to>\d+) \(max: (?P<max>\d+)\)\}"
)
_SIZE_SET: Final = re.compile(
    r"group (?P<group>\S+) size (?:set )?to (?P<to>\d+) instead of (?P<from>\d+)"
    r"(?: \(max: (?P<max>\d+)\))?"
)
_FAILED_GROUP: Final = re.compile(
    r"(?:Scale-up failed for group|to group|Nodes added to group) (?P<group>[^\s:;]+)"
)
_NODEPOOL: Final = re.compile(r'nodepool "(?P<pool>[^"]+)"')


def autoscaler_event(event: KubeEvent) -> AutoscalerEvent | None:
    """The ``autoscaler.v1`` record of an autoscaler's Event, or None (not one of those)."""
    if event.source not in SOURCES:
        return None
    message = event.message
    fields: dict[str, object] = {}
    reason = event.reason
    if reason == "TriggeredScaleUp":
        action, why = "scale_up_planned", ""
        match = _TRIGGERED_NEW.search(message) or _TRIGGERED_OLD.search(message)
        if match is not None:
            fields = _sizes(match)
    elif reason == "NotTriggerScaleUp":
        action, why = not_triggered(message)
    elif reason == "ScaledUpGroup":
        action, why = "scale_up_planned", ""
        match = _SIZE_SET.search(message)
        if match is not None:
            fields = _sizes(match)
    elif reason in ("FailedToScaleUpGroup", "ScaleUpFailed"):
        action = "scale_up_failed"
        if "requested outside" in message:  # a size outside the group's min/max
            why, code = "config", ""
        else:
            facts = klog.parse_message(message)
            why, code = (facts[0].reason, facts[0].cloud_code) if facts else classify(message)
        fields = {"cloud_code": code}
        fields.update(_group(message))
    elif reason == "ScaleUpTimedOut":
        action, why = "scale_up_timeout", "timeout"
        fields = {"cloud_code": "timeout", **_group(message)}
    elif reason.startswith("ScaleDown"):
        action, why = "scale_down", "other" if reason == "ScaleDownFailed" else ""
    elif reason == "Nominated":
        if "node/" in message:
            return None  # existing capacity: no scale-up
        action, why = "scale_up_planned", ""  # a nodeclaim is not a node group: none
    elif reason in ("InsufficientCapacityError", "NoCompatibleInstanceTypes"):
        action = "scale_up_failed"
        why, code = ("config", "") if reason == "NoCompatibleInstanceTypes" else classify(message)
        fields = {"cloud_code": code}
    elif reason == "FailedScheduling" and "incompatible with nodepool" in message:
        action, why = "unschedulable", "config"
    else:
        return None
    involved = event.involved
    if "node_group" not in fields:
        pool = _NODEPOOL.search(message)
        if involved.kind == "NodePool":
            fields["node_group"] = involved.name
        elif pool is not None:
            fields["node_group"] = pool["pool"]
    pods = (
        (PodRef(namespace=involved.namespace, name=involved.name),)
        if involved.kind == "Pod" and involved.name
        else ()
    )
    return AutoscalerEvent(
        id=hashed_id("as-ev", event.id),
        cluster=event.cluster,
        time=event.time,
        action=action,
        reason=why,
        message=message,
        pods=pods,
        source=event.source,
        cloud=cloud_of(message),
        line=message,
        **fields,  # type: ignore[arg-type]
    )


def derive(event: KubeEvent) -> tuple[AutoscalerEvent, ...]:
    """The k8s connector's ``derive`` hook: the record, if the Event is an autoscaler's."""
    record = autoscaler_event(event)
    return () if record is None else (record,)


def _sizes(match: re.Match[str]) -> dict[str, object]:
    found = match.groupdict()
    fields: dict[str, object] = {"node_group": found["group"]}
    for key, name in (("from", "size_from"), ("to", "size_to"), ("max", "max_size")):
        if found.get(key):
            fields[name] = int(found[key])
    return fields


def _group(message: str) -> dict[str, object]:
    match = _FAILED_GROUP.search(message)
    return {"node_group": match["group"]} if match is not None else {}
