"""Planned disruption: a node drained, consolidated, scaled down or shut down on purpose.

Not an incident type: the signals that say a node is being taken away *on purpose*, so
that the device rules (``device_unhealthy_eviction``, ``gpu_degraded``,
``allocation_mismatch``) do not read its teardown as a GPU fault. A healthy Karpenter
consolidation used to page "reset or replace the GPU": the node was tainted, its pods
evicted (Karpenter writes an ``Evicted`` Event for each), then the device plugin went
away with the node and allocatable fell 8 -> 0, which armed the eviction chain, and
the evictions joined it.

**The node object says it (a level, read from every update).** Taints:

* ``karpenter.sh/disrupted`` (Karpenter v1: consolidation, drift, expiry, emptiness,
  interruption; kubernetes-sigs/karpenter pkg/apis/v1/taints.go ``DisruptedTaintKey``)
  and ``karpenter.sh/disruption=disrupting`` (v0.32-v0.37, v1beta1;
  pkg/apis/v1beta1/taints.go ``DisruptionTaintKey``, ``DisruptingNoScheduleTaintValue``);
* ``ToBeDeletedByClusterAutoscaler`` (cluster-autoscaler's scale-down, written before it
  drains; kubernetes/autoscaler cluster-autoscaler/utils/taints/taints.go
  ``ToBeDeletedTaint``). Its soft ``DeletionCandidateOfClusterAutoscaler``
  (PreferNoSchedule) only says the node is unneeded and may stay for hours: it is no
  disruption by itself;
* ``node.kubernetes.io/unschedulable``: a cordon (``kubectl cordon``/``drain``, or any
  tool setting ``spec.unschedulable``; the node lifecycle controller mirrors it as this
  taint, kubernetes pkg/controller/nodelifecycle, ``TaintNodeUnschedulable``);
* ``node.kubernetes.io/out-of-service`` (an administrator's mark of a node shut down
  for good: non-graceful node shutdown, kubernetes.io "Node Shutdowns");
* a ``Ready`` condition whose message says ``node is shutting down`` (the kubelet's
  graceful node shutdown: pkg/kubelet/nodeshutdown ``ShutdownStatus``).

**Events say it (one-shot, each good for ``eviction_window_seconds``).** Karpenter's
terminator writes ``Evicted`` with ``Evicted pod`` (v0.32-v1.1) or ``Evicted pod:
<Underutilized|Empty|Drifted|...>`` (v1.2+; pkg/controllers/node/termination/terminator/
events/events.go ``EvictPod``), and ``Disrupted`` when it deletes a pod to meet the
node's termination time; its disruption controller writes ``DisruptionTerminating``
("Disrupting Node: Underutilized"; ``DeprovisioningTerminating`` before v0.33).
cluster-autoscaler writes ``ScaleDown`` ("marked the node as toBeDeleted/unschedulable"
on the node, "deleting pod for node scale down" on each pod;
cluster-autoscaler/core/scaledown/actuation/actuator.go and drain.go). The kubelet's
graceful shutdown fails pods ``Terminated`` ("Pod was terminated in response to
imminent node shutdown.") and rejects new ones ``NodeShutdown`` (pkg/kubelet/
nodeshutdown/nodeshutdown_manager_linux.go).

What it changes, and why each is safe:

* An eviction *through the API* is no failure: the evictor (Karpenter, the autoscaler,
  ``kubectl drain``) asked for it and the pod's controller reschedules it. So
  Karpenter's ``Evicted pod...`` Event fails no pod (the kubelet's own ``Evicted``, a
  Warning "The node was low on resource: ...", still does), and on a node under planned
  disruption a pod being deleted exits as the deletion asked, whatever its code (a
  trainer that catches SIGTERM exits 1, not 143).
* A drop of *every* GPU on a node under planned disruption is the node's teardown (the
  device plugin stops with the node, or the kubelet stops reporting it): it neither
  arms the chain nor opens ``gpu_degraded``. Trap: a *partial* drop (7 of 8) is the
  device plugin marking one GPU unhealthy: a fault even on a draining node, judged as
  ever. And a fatal XID is a fault whatever the node's plans: an XID 79 during a drain
  still arms the chain, and a pod that then fails on its own (not by its deletion)
  pages.
* A cordon alone is weak (a health checker cordons a node *because* its GPU failed):
  it masks only the all-GPU drop and the deletion's exits, never an XID or a partial
  drop.
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
