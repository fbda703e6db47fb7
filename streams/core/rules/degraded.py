"""``gpu_degraded``: capacity - allocatable of GPUs > 0 for longer than a threshold.

This is the *silent* degradation: the device plugin quietly marked a GPU
unhealthy and nobody's pod died (yet). When a ``device_unhealthy_eviction``
chain already reports the node, this rule stays quiet: one root cause, one page.
XIDs seen on the node are attached as evidence, before and while it is open.

A drop in allocatable (not a level) is also what arms the eviction chain, once
it is trusted (see :func:`streams.core.rules.chain.on_drop`).
"""

from __future__ import annotations

from schemas.events import NodeEvent
from schemas.incidents import Evidence, GpuRef
from streams.core import evidence as text
from streams.core.lifecycle import Step
from streams.core.rules import chain
from streams.core.state import NEVER, NodeState, OpenIncident, gpu_ref

KIND = "gpu_degraded"
SUBJECT = "node"


def on_capacity(step: Step, ev: NodeEvent, capacity: int, allocatable: int) -> None:
    state = step.state
    known = state.capacity >= 0
    before_gap = state.capacity - state.allocatable if known else 0
    before_alloc = state.allocatable
    gap = capacity - allocatable
    state.capacity, state.allocatable = capacity, allocatable
    if known and (gap, before_alloc) == (before_gap, allocatable):
        return
    change = text.allocatable_change(
        ev.id, ev.time, before_alloc if known else -1, allocatable, capacity
    )
    if known and gap > before_gap:
        chain.on_drop(step, change)
    if gap > 0:
        if state.degraded_since is None:
            state.degraded_since = step.now
            state.degraded_evidence = change
            state.degraded_checked = False
            state.timers_dirty = True
        inc = step.find(KIND, SUBJECT)
        if inc is not None:
            step.add_evidence(inc, change)
            _describe(step, inc)
        return
    if state.degraded_since is not None:
        state.degraded_since = None
        state.degraded_evidence = None
        state.timers_dirty = True
        inc = step.find(KIND, SUBJECT)
        if inc is not None:
            step.add_evidence(inc, change)
            step.resolve(inc, step.now, "all GPUs allocatable again")
    chain.on_restored(step)


def on_xid(step: Step, item: Evidence, gpu_key: str, gpu: GpuRef) -> None:
    inc = step.find(KIND, SUBJECT)
    if inc is not None:
        step.add_evidence(inc, item)
        step.add_gpu(inc, gpu_key, gpu)


def on_timer(step: Step) -> None:
    state, config = step.state, step.config
    since = state.degraded_since
    if since is None or state.degraded_checked:
        return
    if step.now < since + config.degraded_after_seconds:
        return
    state.degraded_checked = True
    state.timers_dirty = True
    if step.find(chain.KIND, chain.SUBJECT) is not None or state.degraded_evidence is None:
        return
    inc = step.open(KIND, SUBJECT, state.degraded_evidence.event_id, since)
    step.add_evidence(inc, state.degraded_evidence)
    for _, item in state.recent_xids:
        step.add_evidence(inc, item)
    recent = since - config.eviction_lookback_seconds
    for key, gpu in state.gpus.items():
        if gpu.last_xid >= recent:
            step.add_gpu(inc, key, gpu_ref(key, gpu))
    _describe(step, inc)


def deadline(state: NodeState, after: float) -> float:
    if state.degraded_since is None or state.degraded_checked:
        return NEVER
    return state.degraded_since + after


def _describe(step: Step, inc: OpenIncident) -> None:
    state, config = step.state, step.config
    gap = state.capacity - state.allocatable
    minutes = config.degraded_after_seconds / 60
    inc.summary = (
        f"{gap} of {state.capacity} GPUs on {state.node} unallocatable for more than "
        f"{minutes:g} min (device plugin marked them unhealthy), no pod failure yet"
    )
    inc.action = (
        f"Find the unhealthy GPU (nvidia-smi -q, XIDs below), cordon {state.node} and "
        "schedule a GPU reset or node reboot before workloads land on it."
    )
    inc.attributes["capacity"] = str(state.capacity)
    inc.attributes["allocatable"] = str(state.allocatable)
