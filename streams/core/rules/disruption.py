"""Planned disruption: a node drained, consolidated, scaled down or shut down on purpose.

Not an incident type: the signals that say a node is being taken away on purpose, so the
device rules do not read its teardown as a GPU fault (a healthy Karpenter consolidation
used to page "reset or replace the GPU"). The node says it as a level (Karpenter's and
cluster-autoscaler's disruption taints, a cordon, out-of-service, a graceful shutdown);
Events say it once (Karpenter's ``Evicted pod: <reason>``, ``ScaleDown``, ``NodeShutdown``).

What it changes: an eviction through the API fails no pod, and a drop of *every* GPU there
is the teardown. Traps: a partial drop is still a GPU marked unhealthy, a fatal XID is a
fault whatever the node's plans, and a cordon alone (a health checker cordons *because* a
GPU failed) masks only the all-GPU drop and the deletion's exits. Each signal's source
(taint keys, Event reasons, by release): docs/detection.md, design notes.
"""

from __future__ import annotations

from typing import Final

from schemas.events import CORDON_TAINT, KubeEvent, NodeEvent
from schemas.wellknown import (
    AUTOSCALER_DELETING,
    KARPENTER_DISRUPTED,
    KARPENTER_DISRUPTION,
    OUT_OF_SERVICE,
    SHUTTING_DOWN,
)
from streams.core.lifecycle import Step

UNSCHEDULABLE: Final = CORDON_TAINT

_REMOVING: Final = {
    KARPENTER_DISRUPTED: "Karpenter is disrupting the node (karpenter.sh/disrupted)",
    AUTOSCALER_DELETING: "cluster-autoscaler is scaling the node down "
    "(ToBeDeletedByClusterAutoscaler)",
    OUT_OF_SERVICE: "the node is out of service (node.kubernetes.io/out-of-service)",
}
CORDONED: Final = "the node is cordoned (node.kubernetes.io/unschedulable)"

_POD_EVENTS = {
    "Disrupted": "Karpenter deleted the pod to meet the node's termination time",
    "ScaleDown": "cluster-autoscaler evicted the pod for a scale-down",
}
_NODE_EVENTS = {
    "DisruptionTerminating": "Karpenter is disrupting the node",
    "DeprovisioningTerminating": "Karpenter is deprovisioning the node",
    "ScaleDown": "cluster-autoscaler is scaling the node down",
}
_KARPENTER_EVICTED = "Evicted pod"
"""The message of Karpenter's ``Evicted`` Event (``Evicted pod: <reason>`` since v1.2)."""
_SHUTDOWN_REASONS = ("Terminated", "Shutdown", "NodeShutdown")
"""Pod status reasons of the kubelet's graceful node shutdown (``Shutdown``: v1.21)."""
_SHUTDOWN_WORDS = ("node shutdown", SHUTTING_DOWN)


def of_node(ev: NodeEvent) -> str:
    """What the node object says of a planned disruption, in words; ``""`` for none.

    A node that will be removed (Karpenter, the autoscaler, out of service, shutting
    down) comes before a mere cordon."""
    cordoned = ""
    for taint in ev.taints:
        key = taint.key  # read once: a msgspec field is a generic attribute read
        said = _REMOVING.get(key, "")
        if said:
            return said
        if key == KARPENTER_DISRUPTION and taint.value == "disrupting":
            return "Karpenter is disrupting the node (karpenter.sh/disruption=disrupting)"
        if key == UNSCHEDULABLE:
            cordoned = CORDONED
    for cond in ev.conditions:
        if cond.type == "Ready" and SHUTTING_DOWN in cond.message.lower():
            return "the node is shutting down (kubelet graceful node shutdown)"
    return cordoned


def removing(ev: NodeEvent) -> bool:
    """Does the node object say it is being removed (not merely cordoned)?"""
    for taint in ev.taints:
        if taint.key in _REMOVING or (
            taint.key == KARPENTER_DISRUPTION and taint.value == "disrupting"
        ):
            return True
    return any(c.type == "Ready" and SHUTTING_DOWN in c.message.lower() for c in ev.conditions)


def of_event(ev: KubeEvent) -> str:
    """What an Event says of a planned disruption of its node or pod; ``""`` for none.

    Trap: ``Evicted`` is also the kubelet's node-pressure eviction (a Warning, "The node
    was low on resource: memory"): only Karpenter's message (``Evicted pod...``) or a
    Karpenter source says an eviction through the API."""
    kind = ev.involved.kind
    if ev.reason == "Evicted" and kind == "Pod":
        message = ev.message.strip()
        if message.startswith(_KARPENTER_EVICTED) or "karpenter" in ev.source.lower():
            return f"Karpenter evicted the pod ({message or 'Evicted'})"
        return ""
    if kind == "Pod":
        return _POD_EVENTS.get(ev.reason, "")
    if kind == "Node":
        return _NODE_EVENTS.get(ev.reason, "")
    return ""


def of_pod_status(reason: str, message: str) -> str:
    """A pod status that says the kubelet shut its node down gracefully; ``""`` if not."""
    if reason not in _SHUTDOWN_REASONS:
        return ""
    lowered = message.lower()
    if reason == "Shutdown" or any(w in lowered for w in _SHUTDOWN_WORDS):
        return "the node is shutting down (kubelet graceful node shutdown)"
    return ""


def note(step: Step, said: str) -> None:
    """An Event or a pod status said the node is being disrupted now. A late copy (a
    relist) never moves the last word back in time."""
    seen = step.state.disruption_seen
    if said and (seen is None or step.now >= seen[0]):
        step.state.disruption_seen = (step.now, said)


def planned(step: Step) -> str:
    """The planned disruption the node is under now, in words; ``""`` for none: the node
    object's (a level), else an Event's within ``eviction_window_seconds``."""
    state = step.state
    if state.disruption:
        return state.disruption
    seen = state.disruption_seen
    if seen is not None and step.now - seen[0] <= step.config.eviction_window_seconds:
        return seen[1]
    return ""


def removal(step: Step) -> bool:
    """Is the node under a planned disruption that removes it (not a mere cordon)?"""
    said = planned(step)
    return bool(said) and said != CORDONED


def teardown(step: Step, capacity: int, allocatable: int) -> bool:
    """Is this GPU count the node's planned teardown: every GPU gone from allocatable on a
    node under planned disruption? (A partial drop is a GPU marked unhealthy: a fault.)"""
    return capacity > 0 and allocatable == 0 and bool(planned(step))
