"""The cluster key's rules: pending GPU pods, the autoscaler, the cross-source GPU count.

A pending pod has no node, so its records are keyed by the cluster; once scheduled, the
producer sends a slimmed copy here of each record that changes what this key reads
(:class:`schemas.keys.Router`). Autoscaler records are cluster-scoped at the source. Five
types: ``gpu_pods_starved``, ``gpu_pods_unschedulable``, ``scale_up_failure``
(:mod:`streams.core.rules.starved`), ``allocation_mismatch``
(:mod:`streams.core.rules.mismatch`), ``nvlink_domain_fault``
(:mod:`streams.core.rules.fabric`).

Traps: only the engine's key position orders this key (no per-object versions); a pod is
pending here only while its records have no node: one record with a node ends it, and so
does a deleted or finished pending pod. docs/detection.md, design notes: the cluster key's
rules.
"""

from __future__ import annotations

import math
from typing import Any

from schemas.events import (
    AutoscalerEvent,
    GpuBindingEvent,
    KubeEvent,
    NodeEvent,
    PodEvent,
    XidEvent,
)
from schemas.incidents import Incident
from schemas.keys import finished, gpu_devices, holds_gpus
from streams.core import evidence, shortcuts
from streams.core.config import CoreSettings
from streams.core.lifecycle import ClusterStep, held_until
from streams.core.rules import fabric, mismatch, starved
from streams.core.rules.registry import CLUSTER_RULES
from streams.core.state import NEVER, ClusterState, PendingPod
from streams.core.timeconv import to_seconds


def _routine(
    state: ClusterState, ev: PodEvent, key: str, key_hash: int, config: CoreSettings
) -> bool:
    """Is this copy of a scheduled pod's record news to no cluster rule? The router sends
    a copy only when the pod's placement changed, but a producer that restarted sends
    every pod's first record again, and a dump of the raw topics replays copies made by
    another router: those repeat what this key holds (not pending, the same GPUs on the
    same node). Then nothing changes and nothing needs evaluating (thresholds in time
    are the timers', and ``due`` is handled by the caller).

    It reads the placement :func:`_on_pod` would record from :func:`_scheduled_on`, the
    one definition both use; the differential check is the byte-for-byte incidents of
    generated streams and the scenario (tests/streams/core/test_differential.py)."""
    if key in state.pending:
        return False
    devices, _ = gpu_devices(ev.gpu_requests, ev.claims)
    return mismatch.placed_as(state, key_hash, _scheduled_on(ev, config), devices, ev)


def _scheduled_on(ev: PodEvent, config: CoreSettings) -> str:
    """The node a scheduled pod's GPUs count on for the cross-source check: its node while
    it runs with whole GPUs outside the ignored namespaces, else ``""`` (none)."""
    if not holds_gpus(ev) or ev.namespace in config.mismatch_ignore_namespaces:
        return ""
    return ev.node


def apply_event(
    state: ClusterState, event: Any, now: float, config: CoreSettings
) -> list[Incident]:
    """Apply one cluster-scoped record (or a copy routed here) at event time ``now``."""
    # An event at exactly the key's deadline goes before its timer (the engine's order),
    # and the deadline is recomputed after it from ``checked_at``: the rules must do the
    # timer's work here, or a threshold reached at this instant would never be seen.
    due = now >= state.deadline
    kind = type(event)
    key = ""
    key_hash = 0
    if kind is PodEvent:  # its key and hash, once: the shortcut and the handler read them
        if event.monitor:
            return []  # a GPU monitoring pod is never a GPU pod (the node key watches it)
        key = f"{event.namespace}/{event.name}"
        key_hash = mismatch.pod_hash(key)
        routine = not due and event.node and shortcuts.ENABLED
        if routine and _routine(state, event, key, key_hash, config):
            state.checked_at = now
            return []
    if kind is XidEvent and not due:
        # A fabric XID's copy is news to the domain rule alone (rare: no shortcut needed).
        step = ClusterStep(state, config, now)
        fabric.on_xid(step, event)
        state.checked_at = now
        return step.finish()
    step = ClusterStep(state, config, now)
    if kind is PodEvent:
        _on_pod(step, event, key, key_hash)
    elif kind is AutoscalerEvent:
        starved.on_autoscaler(step, event)
    elif kind is KubeEvent:
        _on_kube_event(step, event)
    elif kind is NodeEvent:
        mismatch.on_node(step, event)
        fabric.on_node(step, event)
    elif kind is XidEvent:
        fabric.on_xid(step, event)
    elif kind is GpuBindingEvent:
        mismatch.on_binding(step, event)
    else:
        return []
    for rule in CLUSTER_RULES:  # registry order: part of the output
        if rule.evaluate is not None:
            rule.evaluate(step, due)
    state.checked_at = now
    return step.finish()


def _on_pod(step: ClusterStep, ev: PodEvent, key: str, key_hash: int) -> None:
    state = step.state
    devices, resource = gpu_devices(ev.gpu_requests, ev.claims)
    done = finished(ev)
    if ev.node:  # scheduled: the copy of a node-scoped record
        if key in state.pending:
            starved.on_left(step, key, f"scheduled on {ev.node}")
        mismatch.place(step, key_hash, _scheduled_on(ev, step.config), devices, ev)
        return
    mismatch.place(step, key_hash, "", 0, ev)
    if done or ev.phase not in ("", "Pending") or not (devices or ev.gpu_share):
        if key in state.pending:
            starved.on_left(step, key, "deleted while pending" if done else ev.phase)
        return
    pod = state.pending.get(key)
    state.starved_dirty = True
    if pod is None:
        state.timers_dirty = True
        since = to_seconds(ev.created_at) if ev.created_at is not None else step.now
        pod = state.pending[key] = PendingPod(
            namespace=ev.namespace,
            name=ev.name,
            owner_kind=ev.owner_kind,
            owner_name=ev.owner_name,
            since=min(since, step.now),
        )
    pod.gpus, pod.resource = devices, resource
    cond = ev.scheduled
    unschedulable = (
        cond is not None
        and cond.status == "False"
        and cond.reason == "Unschedulable"
        and starved.shortage(cond.message)
    )
    item = evidence.pod_unschedulable(ev, cond) if unschedulable and cond is not None else None
    if item is not None and (pod.unschedulable is None or pod.unschedulable.text != item.text):
        state.timers_dirty = state.timers_dirty or pod.unschedulable is None
        pod.unschedulable = item  # the latest message: the scheduler's count of nodes moves


def _on_kube_event(step: ClusterStep, ev: KubeEvent) -> None:
    """``FailedScheduling`` on a pending GPU pod: the scheduler's word that it cannot fit
    (not that its DRA claim is still being made: :func:`starved.shortage`)."""
    obj = ev.involved
    if obj.kind != "Pod" or ev.reason != "FailedScheduling":
        return
    pod = step.state.pending.get(f"{obj.namespace}/{obj.name}")
    if pod is not None and pod.unschedulable is None and starved.shortage(ev.message):
        pod.unschedulable = evidence.kube_event(ev)
        step.state.starved_dirty = step.state.timers_dirty = True


def apply_timer(state: ClusterState, now: float, config: CoreSettings) -> list[Incident]:
    """Fire everything due at or before ``now``: thresholds reached, quiet incidents."""
    step = ClusterStep(state, config, now)
    for rule in CLUSTER_RULES:  # registry order: part of the output
        if rule.evaluate is not None:
            rule.evaluate(step, True)
        if rule.on_timer is not None:
            rule.on_timer(step)
    due = sorted(
        (inc for inc in state.incidents.values() if inc.resolve_at <= now),
        key=lambda inc: (inc.resolve_at, inc.id),
    )
    for inc in due:
        step.resolve(inc, inc.resolve_at, "no new failure for scale_up_quiet_seconds")
    step.release_held()
    state.checked_at = now
    state.timers_dirty = True
    return step.finish()


def next_deadline(state: ClusterState, config: CoreSettings) -> float:
    """The earliest event time at which :func:`apply_timer` has something to do."""
    found = NEVER
    for rule in CLUSTER_RULES:
        if rule.deadline is not None:
            found = min(found, rule.deadline(state, config))
    for inc in state.incidents.values():
        found = min(found, inc.resolve_at, held_until(inc, config))
    return found if found > -math.inf else NEVER
