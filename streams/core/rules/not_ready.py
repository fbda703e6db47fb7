"""``gpu_node_not_ready``: a node with running GPU pods goes Ready=False/Unknown.

Opens on the *transition* from Ready=True; a node first seen NotReady has no
running pods we know of. Pods that fail or are evicted while it is open join
it (unless an eviction chain claims them first). Resolves when Ready=True again.
"""

from __future__ import annotations

from sys import intern

from schemas.events import NodeCondition, NodeEvent
from schemas.incidents import Evidence, PodInfo
from streams.core import evidence as text
from streams.core.lifecycle import Step
from streams.core.rules.pods import pod_info

KIND = "gpu_node_not_ready"
SUBJECT = "node"


def on_ready(step: Step, ev: NodeEvent, cond: NodeCondition) -> None:
    state, config = step.state, step.config
    before, state.ready = state.ready, intern(cond.status)
    if before == cond.status:
        return
    item = text.node_condition(ev.id, ev.time, cond)
    inc = step.find(KIND, SUBJECT)
    if cond.status == "True":
        if inc is not None:
            step.add_evidence(inc, item)
            step.resolve(inc, step.now, "node Ready again")
        return
    if before != "True" or cond.status not in config.not_ready_statuses:
        if inc is not None:
            step.add_evidence(inc, item)
        return
    running = [
        (key, track)
        for key, track in state.pods.items()
        if track.phase == "Running" and not track.failed
    ]
    if not running:
        return
    inc = step.open(KIND, SUBJECT, ev.id, step.now)
    step.add_evidence(inc, item)
    for key, track in running:
        step.add_pod(inc, pod_info(key, track, "running"))
    inc.summary = (
        f"{state.node} went Ready={cond.status} with {len(running)} running GPU "
        f"pod{'s' if len(running) != 1 else ''}"
    )
    inc.action = (
        f"Check the kubelet and the host of {state.node} (kubectl describe node); "
        "GPU pods on it will be evicted after the toleration period."
    )
    inc.attributes["ready"] = cond.status


def on_failure(step: Step, info: PodInfo, item: Evidence) -> bool:
    inc = step.find(KIND, SUBJECT)
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
