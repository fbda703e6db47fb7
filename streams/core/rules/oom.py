"""``host_oom_kill``: a GPU container terminated ``OOMKilled``, or the node's OOM killer fired.

A container's OOM kill and the node's ``OOMKilling`` event describe the same
kill when they are within ``oom_join_seconds``: they become one incident. An
``OOMKilling`` event that no container termination claims within that time is a
host-level kill (a system daemon, a non-GPU pod) and gets its own incident.

One incident per container while it keeps being OOM-killed; it resolves after
``oom_quiet_seconds`` without another kill, or when the pod goes away.

The worked example of a rule's one shape (:mod:`streams.core.rules.spec`): ``SPEC`` at
the end declares its type and severity, the events it reads, its state slice
(``NodeState.oom``, an :class:`~streams.core.state.OomState` that is None while no
``OOMKilling`` event waits, so a node pays one slot), its timer and its settings.
"""

from __future__ import annotations

from schemas.events import KubeEvent, PodEvent
from schemas.incidents import Evidence, PodInfo
from streams.core.config import CoreSettings
from streams.core.lifecycle import Step
from streams.core.rules.spec import NodeRule
from streams.core.state import NEVER, NodeState, OomState, OpenIncident

KIND = "host_oom_kill"


def on_container_oom(
    step: Step, subject: str, info: PodInfo, item: Evidence, finished: float
) -> None:
    inc = step.find(KIND, subject)
    if inc is None:
        inc = step.open(KIND, subject, item.event_id, finished)
    inc.count += 1
    step.add_pod(inc, info)
    step.add_evidence(inc, item)
    _claim_pending(step, inc, finished)
    step.set_deadline(inc, step.now + step.config.oom_quiet_seconds)
    inc.attributes["kills"] = str(inc.count)
    times = "once" if inc.count == 1 else f"{inc.count} times"
    inc.summary = (
        f"container {subject} on {step.state.node} OOMKilled {times} "
        "(host memory limit, not GPU memory)"
    )
    inc.action = (
        "Raise the container's memory limit or reduce host-side memory use "
        "(data loader workers, pinned buffers); check the node's memory pressure."
    )


def on_node_oom_event(step: Step, item: Evidence) -> None:
    """A node ``OOMKilling`` event: join a nearby container kill, or wait for one."""
    window = step.config.oom_join_seconds
    best: OpenIncident | None = None
    for inc in step.state.incidents.values():
        if inc.type != KIND or not inc.pods:  # host-level ones name no pod
            continue
        if abs(inc.last_seen - step.now) <= window and (
            best is None or (inc.last_seen, inc.id) > (best.last_seen, best.id)
        ):
            best = inc
    if best is not None:
        step.add_evidence(best, item)
        return
    pending = _pending(step.state)
    if all(e.event_id != item.event_id for _, e in pending):
        _keep(step.state, (*pending, (step.now, item)))


def on_timer(step: Step) -> None:
    state, config = step.state, step.config
    pending = _pending(state)
    due = [p for p in pending if p[0] + config.oom_join_seconds <= step.now]
    if not due:
        return
    _keep(state, tuple(p for p in pending if p[0] + config.oom_join_seconds > step.now))
    for seen, item in due:
        inc = step.open(KIND, f"node/{item.event_id}", item.event_id, seen)
        inc.count = 1
        step.add_evidence(inc, item)
        step.set_deadline(inc, seen + config.oom_quiet_seconds)
        inc.summary = (
            f"host OOM killer fired on {state.node} and no GPU container was OOMKilled "
            "with it: a system process or non-GPU pod was killed"
        )
        inc.action = (
            f"Check memory pressure on {state.node}: a killed kubelet, device plugin or "
            "dcgm-exporter breaks GPU pods next."
        )


def deadline(state: NodeState, config: CoreSettings) -> float:
    window = config.oom_join_seconds
    return min((seen + window for seen, _ in _pending(state)), default=NEVER)


def _pending(state: NodeState) -> tuple[tuple[float, Evidence], ...]:
    slice_ = state.oom
    if slice_ is None:
        return ()
    # A bare tuple is the previous release's layout, which restoring converts: read anyway.
    return slice_.pending if isinstance(slice_, OomState) else slice_


def _keep(state: NodeState, pending: tuple[tuple[float, Evidence], ...]) -> None:
    """Replace the waiting events (None when there are none: no slot's worth of struct)."""
    state.oom = OomState(pending=pending) if pending else None
    state.timers_dirty = True


def _claim_pending(step: Step, inc: OpenIncident, finished: float) -> None:
    window = step.config.oom_join_seconds
    pending = _pending(step.state)
    if not pending:
        return
    keep = tuple(p for p in pending if abs(p[0] - finished) > window)
    for seen, item in pending:
        if abs(seen - finished) <= window:
            step.add_evidence(inc, item)
    if len(keep) != len(pending):
        _keep(step.state, keep)


SPEC: NodeRule = NodeRule(
    name="oom",
    emits=((KIND, "ticket"),),
    reads=(PodEvent, KubeEvent),
    state=("oom",),
    settings=("oom_join_seconds", "oom_quiet_seconds"),
    deadline=deadline,
    on_timer=on_timer,
)
"""``host_oom_kill``: the container's ``OOMKilled`` (``pod.v1``) and the node's
``OOMKilling`` Event (``kube_event.v1``), joined within ``oom_join_seconds``."""
