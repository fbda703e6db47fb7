"""``gpu_node_not_ready``: a node with running GPU pods stays Ready=False/Unknown.

Opens on the *transition* from Ready=True; a node first seen NotReady has no
running pods we know of. Pods that fail or are evicted while it is open join
it (unless an eviction chain claims them first). Resolves when Ready=True again.

Why a grace (``not_ready_grace_seconds``, default 120 s; DESIGN §2 refinements):
Kubernetes itself waits before it acts on a NotReady node. The node controller
marks a node Unknown only after the node-monitor grace period (40 s), and pods
are evicted only after their ``node.kubernetes.io/not-ready`` /
``unreachable`` NoExecute tolerations run out (300 s by default). A 30 s blip (a
kubelet restart, an API-server hiccup, a lease renewal lost to a busy control
plane) evicts nothing and fixes itself, so paging on it trains people to ignore
the page. So the transition only *arms* the rule (``NodeState.not_ready_pending``);
it pages when either

* the node is still not Ready ``not_ready_grace_seconds`` later (a timer on the
  engine's watermark: event time, never a clock, so a replay pages at the same
  instant as the live run), or
* a GPU pod on it fails or is evicted meanwhile (the blip is already costing
  work: no reason to wait). Kubernetes taking the pod off (an eviction, a pod
  ``Failed`` with a reason: ``NodeLost``, ``Terminated``...) counts; a container's
  own non-zero exit (:func:`streams.core.rules.chain.ordinary_crash`) does not: a
  NotReady kubelet (PLEG unhealthy, a lost lease) kills no container, so a crash
  during a 40 s blip is the application's and the blip is still Kubernetes working
  (simulator seeds 1 and 2: an NCCL error 37 s into a PLEG blip paged). Past the
  grace, every failure joins the page.

A blip shorter than the grace publishes *nothing*, not an ``info`` revision: an
incident opened and resolved within the same minute still lands on the compacted
topic and in every bridge (Slack, Alertmanager) as a row someone has to read,
for behaviour that is Kubernetes working as designed; the condition changes stay
on the raw topic for anyone who wants them. The incident that does open keeps
the id and ``first_seen`` of the transition that started it (the anchor), so a
replay with any grace names the same incident.

Traps:

* Ready=False and Ready=Unknown are one episode: False -> Unknown (the kubelet
  stopped reporting after saying it was unhealthy) neither restarts the grace nor
  pages twice; both must be in ``not_ready_statuses`` to count at all.
* A flapping node (True -> Unknown -> True every few seconds) measures each
  NotReady stretch on its own: the grace restarts from the latest transition,
  so flaps do not add up to a page, while one stretch past the grace does. (A
  node that flaps for hours without a failure never pages here; its pods'
  failures would.)
* A node deleted while its page is pending pages at once (and resolves as
  deleted): it never came back, and the pod garbage collector force-deletes
  every pod bound to a node that no longer exists, so its GPU pods are lost
  exactly as if they had failed. The deletion wipes the node's state (and the
  timer) right after, so it cannot page a second time.
* The pods named are those still running when it pages; if none is left (all
  finished or deleted during the grace) there is nothing to page about.
* A node being removed on purpose (Karpenter's or cluster-autoscaler's disruption
  taint, out of service, a graceful shutdown, or their Events within the eviction
  window: :func:`streams.core.rules.disruption.removal`) goes NotReady because it is
  being shut down: no page. Its pods' controllers reschedule them, as the evictor
  planned. A mere cordon arms as ever (a cordoned node going down is not yet a planned
  removal).
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
