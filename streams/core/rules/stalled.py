"""``remediation_stalled``: a node marked for repair that nobody repairs.

A tool (gputriage's write-back, EKS's node monitoring agent, NVSentinel, NPD) marks a node
with a condition (``core.repair_conditions``, ``Type=Status``); a repair system (Karpenter,
EKS auto repair, NVSentinel's remediation) should then drain and replace it. When the
mark stands ``remediation_stalled_seconds`` and the node is still there, not being
removed, the repair is not coming: page (one per node).

Traps: the clock is the core's first sight of the mark, never ``lastTransitionTime``,
which aggregating agents reset (kubernetes-sigs/karpenter#2833); a node being removed
(Karpenter's or the autoscaler's taint, out of service) is the repair at work, a cordon
is not: a quarantine cordons the node it marks. gputriage's own ``GPUHealthy=False`` is
no default mark (nothing reads it unless told to: every page-level hardware incident
would page twice); added, its page says ``marked_by=gputriage``. docs/detection.md.
"""

from __future__ import annotations

from sys import intern
from typing import Final

from schemas.events import KubeEvent, NodeEvent
from schemas.incidents import Evidence
from schemas.wellknown import GPU_HEALTH_CONDITION
from streams.core import evidence as text
from streams.core.config import CoreSettings
from streams.core.lifecycle import Step
from streams.core.rules import disruption
from streams.core.rules.spec import NodeRule
from streams.core.state import NEVER, NodeState
from streams.core.timeconv import to_datetime

KIND: Final = "remediation_stalled"
SUBJECT: Final = "node"


def on_node(step: Step, ev: NodeEvent) -> None:
    """The node object (not its deletion): which repair marks it carries now."""
    state, config = step.state, step.config
    if _removing(step):
        return
    wanted = config.repair_conditions
    known = state.repair
    marks: list[tuple[str, float, Evidence]] = []
    for cond in ev.conditions:
        name = f"{cond.type}={cond.status}"
        if name not in wanted or any(m[0] == name for m in marks):
            continue
        since = next((k for k in known if k[0] == name), None)
        if since is None:
            item = text.node_condition(ev.id, ev.time, cond)
            marks.append((intern(name), step.now, item))
        elif step.now < since[1]:
            # A late copy (a relist) shows it earlier: the mark stood since then.
            marks.append((since[0], step.now, text.node_condition(ev.id, ev.time, cond)))
        else:
            marks.append(since)
    fresh = tuple(sorted(marks, key=lambda m: (m[1], m[0])))
    if fresh == known:
        return
    state.repair = fresh
    state.timers_dirty = True
    inc = step.find(KIND, SUBJECT)
    if inc is None:
        return
    if not fresh:
        types = {k[0].partition("=")[0] for k in known}
        for cond in ev.conditions:
            if cond.type in types:
                step.add_evidence(inc, text.node_condition(ev.id, ev.time, cond))
        step.resolve(inc, step.now, "the repair mark cleared")
        return
    _describe(step)


def on_event(step: Step) -> None:
    """An Event said the node is being disrupted: a removal ends the stall."""
    _removing(step)


def _removing(step: Step) -> bool:
    """Is the node being removed (the repair at work)? Then nothing stands, nothing pages."""
    if not disruption.removal(step):
        return False
    state = step.state
    if state.repair:
        state.repair = ()
        state.timers_dirty = True
    inc = step.find(KIND, SUBJECT)
    if inc is not None:
        step.resolve(inc, step.now, f"the node is being removed: {disruption.planned(step)}")
    return True


def deadline(state: NodeState, config: CoreSettings) -> float:
    marks = state.repair
    if not marks or (state.incidents and f"{KIND}|{SUBJECT}" in state.incidents):
        return NEVER
    return marks[0][1] + config.remediation_stalled_seconds


def on_timer(step: Step) -> None:
    state = step.state
    marks = state.repair
    if not marks or step.find(KIND, SUBJECT) is not None:
        return
    if step.now < marks[0][1] + step.config.remediation_stalled_seconds:
        return
    if _removing(step):
        return
    _, since, item = marks[0]
    inc = step.open(KIND, SUBJECT, item.event_id, since)
    step.add_evidence(inc, item)
    _describe(step)


def _describe(step: Step) -> None:
    """Say the incident: the mark held longest (the first in ``state.repair``)."""
    state = step.state
    inc = step.find(KIND, SUBJECT)
    if inc is None:
        return
    name, marked, item = state.repair[0]
    step.add_evidence(inc, item)
    kind = name.partition("=")[0]
    by = "gputriage" if kind == GPU_HEALTH_CONDITION else "other"
    for key, value in (
        ("condition", name),
        ("marked_by", by),
        ("since", to_datetime(marked).isoformat()),
    ):
        if inc.attributes.get(key) != value:
            inc.attributes[key] = value
            step.touch(inc)
    more = len(state.repair) - 1
    also = f" (and {more} more mark{'s' if more != 1 else ''})" if more else ""
    who = "gputriage" if by == "gputriage" else "another tool"
    inc.summary = (
        f"{state.node} has been marked {name} by {who} since "
        f"{to_datetime(marked).strftime('%Y-%m-%d %H:%M:%S UTC')}{also} and is still running: "
        "no repair or replacement has started"
    )
    inc.action = (
        f"Find why the repair of {state.node} has not started (Karpenter's NodeRepairBlocked "
        "Events: more than 20% of the pool unhealthy; a tripped quarantine breaker; no repair "
        "policy for this condition), then drain and replace the node, or clear the mark "
        "if the GPU is healthy."
    )


SPEC: NodeRule = NodeRule(
    name="stalled",
    emits=((KIND, "page"),),
    reads=(NodeEvent, KubeEvent),
    state=("repair",),
    settings=("repair_conditions", "remediation_stalled_seconds"),
    deadline=deadline,
    on_timer=on_timer,
)
"""``remediation_stalled``: the node's repair conditions (``node.v1``), and the Events
that say it is being removed (``k8s_event.v1``)."""
