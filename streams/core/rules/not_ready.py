"""``gpu_node_not_ready``: a node with running GPU pods stays Ready=False/Unknown.

Opens on the transition from Ready=True and resolves at Ready=True; pods failing while it
is open join it. Why a grace (``not_ready_grace_seconds``, 120 s): Kubernetes itself waits
(40 s to mark Unknown, 300 s before evicting), and paging on a blip that fixes itself trains
people to ignore the page. So the transition only arms the rule; it pages when the node is
still not Ready at the grace (a timer on event time: a replay pages at the same instant), or
when a GPU pod is taken off the node meanwhile. A container's own exit does not count: a
NotReady kubelet kills no container. A blip shorter than the grace publishes nothing.

Traps: False -> Unknown is one episode; a flapping node measures each stretch alone; a node
deleted while pending pages at once (its pods are force-deleted); a node being removed on
purpose pages nothing (a cordon alone does not count). docs/detection.md, design notes.
"""

from __future__ import annotations

from sys import intern

from schemas.events import KubeEvent, NodeCondition, NodeEvent, PodEvent
from schemas.incidents import Evidence, PodInfo
from streams.core import evidence as text
from streams.core.config import CoreSettings
from streams.core.lifecycle import Step
from streams.core.rules import disruption
from streams.core.rules.chain import ordinary_crash
from streams.core.rules.pods import pod_info
from streams.core.rules.spec import NodeRule
from streams.core.state import NEVER, NodeState, OpenIncident

KIND = "gpu_node_not_ready"
SUBJECT = "node"


def on_ready(step: Step, ev: NodeEvent, cond: NodeCondition) -> None:
    state, config = step.state, step.config
    before, status = state.ready, cond.status
    if before == status:
        return  # the heartbeat: nothing to write (``ready`` holds an equal string)
    state.ready = intern(status)
    item = text.node_condition(ev.id, ev.time, cond)
    inc = step.find(KIND, SUBJECT)
    if cond.status == "True":
        _clear(state)
        if inc is not None:
            step.add_evidence(inc, item)
            step.resolve(inc, step.now, "node Ready again")
        return
    if before != "True" or cond.status not in config.not_ready_statuses:
        if inc is not None:
            step.add_evidence(inc, item)
            inc.attributes["ready"] = cond.status
        return
    if not _running(state) or disruption.removal(step):
        return
    state.not_ready_pending = (step.now, item)
    state.timers_dirty = True
    if config.not_ready_grace_seconds <= 0:
        _open(step)


def on_timer(step: Step) -> None:
    """The grace ran out with the node still not Ready: page."""
    pending = step.state.not_ready_pending
    if pending is None or step.now < pending[0] + step.config.not_ready_grace_seconds:
        return
    _open(step)


def on_node_deleted(step: Step) -> None:
    """The node object is gone while NotReady: its GPU pods go with it, so page now."""
    if step.state.not_ready_pending is not None and step.find(KIND, SUBJECT) is None:
        _open(step)


def deadline(state: NodeState, config: CoreSettings) -> float:
    pending = state.not_ready_pending
    return NEVER if pending is None else pending[0] + config.not_ready_grace_seconds


def on_failure(step: Step, info: PodInfo, item: Evidence) -> bool:
    inc = step.find(KIND, SUBJECT)
    if inc is None:
        if step.state.not_ready_pending is None or ordinary_crash(info, item):
            return False
        # A GPU pod failed during the grace: the blip is costing work, page now.
        inc = _open(step, failed=True)
        if inc is None:
            return False
    step.add_pod(inc, info)
    step.add_evidence(inc, item)
    failed = sum(1 for p in inc.pods.values() if p.role != "running")
    inc.summary = (
        f"{step.state.node} went Ready={step.state.ready}; {failed} GPU "
        f"pod{'s' if failed != 1 else ''} failed or evicted since"
    )
    return True


def _running(state: NodeState) -> list[str]:
    return [
        key for key, track in state.pods.items() if track.phase == "Running" and not track.failed
    ]


def _clear(state: NodeState) -> None:
    if state.not_ready_pending is not None:
        state.not_ready_pending = None
        state.timers_dirty = True


def _open(step: Step, *, failed: bool = False) -> OpenIncident | None:
    """Open the pending incident, anchored on the transition that started it.

    ``failed``: a pod failure opens it, so it pages even if that was the node's last
    running GPU pod (trap: the failed pod is no longer "running")."""
    state = step.state
    pending = state.not_ready_pending
    _clear(state)
    running = _running(state)
    if pending is None or not (running or failed):
        return None
    since, item = pending
    inc = step.open(KIND, SUBJECT, item.event_id, since)
    step.add_evidence(inc, item)
    for key in running:
        step.add_pod(inc, pod_info(key, state.pods[key], "running"))
    inc.summary = (
        f"{state.node} went Ready={state.ready} with {len(running) or 'no other'} running GPU "
        f"pod{'s' if len(running) != 1 else ''}"
    )
    inc.action = (
        f"Check the kubelet and the host of {state.node} (kubectl describe node); "
        "GPU pods on it will be evicted after the toleration period."
    )
    inc.attributes["ready"] = state.ready
    return inc


SPEC: NodeRule = NodeRule(
    name="not_ready",
    emits=((KIND, "page"),),
    reads=(NodeEvent, PodEvent, KubeEvent),
    state=("not_ready_pending",),
    settings=("not_ready_statuses", "not_ready_grace_seconds"),
    deadline=deadline,
    on_timer=on_timer,
)
"""``gpu_node_not_ready``: a node with running GPU pods NotReady past its grace, or a GPU
pod failing meanwhile."""
