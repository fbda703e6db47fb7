"""``device_unhealthy_eviction``: fatal XID / allocatable drop, then GPU pods fail.

The whole chain is ONE incident: the first trigger (in event time) anchors the
id, later triggers and every failed pod are added to it. Pods that failed a
little *before* the first trigger (``eviction_lookback_seconds``) join too: the
kubelet can report a dead container before the node status shows the drop.

The incident opens only when a pod fails. A fatal XID on an idle node is left to
``gpu_degraded`` / ``xid_repeat``; a pod failure without any trigger is not a
device incident. After the window closes, the incident resolves once the node's
GPUs are allocatable again; while they are not, it stays open.
"""

from __future__ import annotations

import math

from schemas.incidents import Evidence, GpuRef, PodInfo
from streams.core.lifecycle import Step
from streams.core.state import NEVER, NodeState, OpenIncident

KIND = "device_unhealthy_eviction"
SUBJECT = "chain"
_MAX_RECENT_FAILURES = 64


def degraded(state: NodeState) -> bool:
    return state.capacity >= 0 and state.allocatable < state.capacity


def armed(step: Step) -> bool:
    return bool(step.state.chain_triggers) and step.now <= step.state.chain_until


def arm(
    step: Step,
    trigger: Evidence,
    gpu_key: str = "",
    gpu: GpuRef | None = None,
    code: int | None = None,
) -> None:
    """A fatal XID or an allocatable drop: pod failures in the window now join the chain."""
    state, config = step.state, step.config
    inc = step.find(KIND, SUBJECT)
    if inc is None and not armed(step):
        _disarm(state)
        state.chain_anchor = trigger.event_id
    if len(state.chain_triggers) < config.max_evidence and all(
        t.event_id != trigger.event_id for t in state.chain_triggers
    ):
        state.chain_triggers = (*state.chain_triggers, trigger)
    if gpu is not None and (gpu_key, gpu) not in state.chain_gpus:
        others = tuple(g for g in state.chain_gpus if g[0] != gpu_key)
        state.chain_gpus = (*others, (gpu_key, gpu))
    if code is not None and code not in state.chain_codes:
        state.chain_codes = (*state.chain_codes, code)
    state.chain_until = max(state.chain_until, step.now + config.eviction_window_seconds)
    state.timers_dirty = True
    if inc is not None:
        step.add_evidence(inc, trigger)
        if gpu is not None:
            step.add_gpu(inc, gpu_key, gpu)
        _describe(step, inc)
    lookback = step.now - config.eviction_lookback_seconds
    recent = [f for f in state.recent_failures if f[0] >= lookback]
    state.recent_failures = ()
    for _, info, evidence in recent:
        _join(step, info, evidence)


def on_failure(step: Step, info: PodInfo, evidence: Evidence) -> bool:
    """A GPU pod failed. Join the armed chain, or remember it for the look-back."""
    if armed(step):
        _join(step, info, evidence)
        return True
    state = step.state
    lookback = step.now - step.config.eviction_lookback_seconds
    kept = [f for f in state.recent_failures if f[0] >= lookback]
    kept.append((step.now, info, evidence))
    state.recent_failures = tuple(kept[-_MAX_RECENT_FAILURES:])
    return False


def holds_pod(step: Step, key: str) -> bool:
    """Is this pod already part of the open chain (so its crashes are not CUDA OOM)?"""
    inc = step.find(KIND, SUBJECT)
    if inc is None:
        return False
    return any(f"{p.namespace}/{p.name}" == key for p in inc.pods.values())


def on_timer(step: Step) -> None:
    state = step.state
    if state.chain_until == -math.inf or state.chain_until > step.now:
        return
    inc = step.find(KIND, SUBJECT)
    closed_at = state.chain_until
    state.chain_until = -math.inf
    state.timers_dirty = True
    if inc is None or not degraded(state):
        _disarm(state)
    if inc is not None and not degraded(state):
        step.resolve(inc, closed_at, "window closed and all GPUs allocatable")


def on_restored(step: Step) -> None:
    """All GPUs allocatable again: a chain whose window has closed can resolve."""
    inc = step.find(KIND, SUBJECT)
    if inc is not None and step.state.chain_until < step.now:
        _disarm(step.state)
        step.resolve(inc, step.now, "all GPUs allocatable again")


def deadline(state: NodeState) -> float:
    return state.chain_until if state.chain_until != -math.inf else NEVER


def _disarm(state: NodeState) -> None:
    state.chain_triggers = ()
    state.chain_gpus = ()
    state.chain_codes = ()
    state.chain_anchor = ""


def _join(step: Step, info: PodInfo, evidence: Evidence) -> None:
    state = step.state
    inc = step.find(KIND, SUBJECT)
    if inc is None:
        first = min(t.time.timestamp() for t in state.chain_triggers)
        inc = step.open(KIND, SUBJECT, state.chain_anchor, first)
        for trigger in state.chain_triggers:
            step.add_evidence(inc, trigger)
        for key, gpu in state.chain_gpus:
            step.add_gpu(inc, key, gpu)
    step.add_pod(inc, info)
    step.add_evidence(inc, evidence)
    _describe(step, inc)


def _describe(step: Step, inc: OpenIncident) -> None:
    state, config = step.state, step.config
    causes = [f"XID {code}" for code in state.chain_codes]
    if any(t.schema == "node.v1" for t in state.chain_triggers):
        causes.append("GPU allocatable drop")
    cause = " + ".join(causes) or "device failure"
    pods = len({(p.namespace, p.name) for p in inc.pods.values()})
    where = ", ".join(g.uuid or g.pci_bus_id for g in inc.gpus.values()) or "a GPU"
    inc.summary = (
        f"{cause} on {state.node} ({where}), then {pods} GPU pod{'s' if pods != 1 else ''} "
        "failed or were evicted"
    )
    nvidia = ""
    for code in state.chain_codes:
        rule = config.xid.get(code)
        if rule is not None and rule.action:
            nvidia = f" NVIDIA's action for XID {code}: {rule.action}"
            break
    inc.action = (
        f"Cordon and drain {state.node}, then reset or replace the GPU; the failed pods' "
        f"controllers reschedule them elsewhere.{nvidia}"
    )
    if state.chain_codes:
        inc.attributes["xids"] = ",".join(str(c) for c in state.chain_codes)
