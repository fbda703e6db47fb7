"""``gpu_degraded``: a GPU is faulty, and no eviction chain reports it.

One incident per node, two ways in: capacity - allocatable > 0 for longer than
``degraded_after_seconds`` (the device plugin marked a GPU unhealthy, nobody's pod died),
or a fatal XID (or an XID 154 asking for a reset) that no eviction chain reported by then
(drafted in ``NodeState.fault_draft``, never published, until the timer finds no chain).
It names the GPUs, their pods as candidates, the XIDs and the driver's or catalog's action.
A device failure while it is open escalates it to the chain's page, same id.

Resolves when all GPUs are allocatable again; an XID-only one after a quiet day, or when the
driver's recovery action goes back to None (a reset is invisible to Kubernetes). Traps: an
``xid_repeat`` of its GPU supersedes it; a recurrence of a code opens no second ticket; an
application XID never names a GPU degraded; on a node under planned disruption an all-GPU
drop is the teardown, not a fault. docs/detection.md, design notes.
"""

from __future__ import annotations

from schemas.events import NodeEvent, PodEvent, ResourceSliceEvent, XidEvent
from schemas.ids import incident_id
from schemas.incidents import Evidence, GpuRef
from streams.core import evidence as text
from streams.core.config import CoreSettings
from streams.core.lifecycle import Step
from streams.core.rules import chain, disruption, dra
from streams.core.rules.pods import pod_info
from streams.core.rules.spec import NodeRule
from streams.core.state import (
    NEVER,
    GpuTrack,
    NodeState,
    OpenIncident,
    gpu_ref,
    pods_on,
)
from streams.core.timeconv import to_seconds

KIND = chain.DEGRADED
SUBJECT = chain.DEGRADED_SUBJECT


def on_capacity(step: Step, ev: NodeEvent, capacity: int, allocatable: int) -> None:
    state = step.state
    if state.allocatable == allocatable and state.capacity == capacity and capacity >= 0:
        # The same counts again (a node's heartbeat): the full path below would store
        # them and return without a change, teardown or not.
        return
    if disruption.teardown(step, capacity, allocatable):
        # Every GPU gone on a node drained on purpose: the device plugin stopping with
        # the node, no fault. What was known of its GPUs stands (an open ticket stays).
        return
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
        if inc is not None and not _another_faults_drop(step, inc):
            step.add_evidence(inc, change)
            step.set_deadline(inc, NEVER)  # unallocatable: it resolves on recovery
            _describe(step, inc)
        return
    since, dropped = state.degraded_since, state.degraded_evidence
    if since is not None:
        state.degraded_since = None
        state.degraded_evidence = None
        state.timers_dirty = True
        inc = step.find(KIND, SUBJECT)
        if inc is not None:
            held = _holds(inc, dropped)
            if held:
                step.add_evidence(inc, change)
            quiet = _xid_deadline(step, inc) if _blip(step, since) or not held else None
            if _told_devices(step, inc):
                _describe(step, inc)  # a DRA device fault it tells stands
            elif quiet is None:
                step.resolve(inc, step.now, "all GPUs allocatable again")
            else:
                step.set_deadline(inc, quiet)
    if not dra.faulty(state):
        chain.on_restored(step)


def _another_faults_drop(step: Step, inc: OpenIncident) -> bool:
    """Is a drop that finds the ticket open another GPU's new fault's? It is when it
    comes while the eviction chain is armed by a fatal XID on a GPU the ticket told no
    fault of before the chain's window (:func:`streams.core.rules.chain.older_fault`:
    the ticket tells an older fault): the device plugin marked *that* GPU unhealthy,
    and the chain reports it. Taken
    by the ticket, its recovery resolved the ticket of a flaky GPU that was never
    reset (seen in a simulated fleet: a flaky GPU's ticket at 10:47, an XID 95 on another GPU
    and its drop at 14:57, the drop's recovery at 15:29 closed the flaky ticket)."""
    state = step.state
    if not state.chain_codes or not chain.armed(step):
        return False
    first = min(to_seconds(t.time) for t in state.chain_triggers)
    return chain.older_fault(step, inc, first)


def _holds(inc: OpenIncident, dropped: Evidence | None) -> bool:
    """Did the ticket take the drop that just recovered? One it left to another fault's
    chain (:func:`_another_faults_drop`) says nothing of the ticket's GPU."""
    if dropped is None:
        return True
    return any(e.event_id == dropped.event_id for e in inc.evidence)


def _blip(step: Step, since: float) -> bool:
    """Was a drop that ended now a device plugin re-registering (8 -> 0 -> 8 within
    ``drop_persist_seconds``), not a GPU the plugin marked unhealthy and then healthy?"""
    return step.now - since < step.config.drop_persist_seconds


def _xid_deadline(step: Step, inc: OpenIncident) -> float | None:
    """The quiet deadline of a ticket its fatal XIDs opened (their last line plus
    ``degraded_quiet_seconds``), or None when it has none (a drop's ticket).

    A plugin restart's 8 -> 0 -> 8 says nothing of an XID-only ticket's GPU: it was
    allocatable before and is again, and a GPU reset is invisible to Kubernetes. Read
    as "all GPUs allocatable again" it resolved a flaky GPU's ticket, and the GPU's next
    XID opened a second one for the same fault (seen in a simulated fleet: two on one node).
    The chain's doctrine is the same: such a drop is no fault (``drop_persist_seconds``).
    """
    if "xids" not in inc.attributes:
        return None
    times = [
        to_seconds(e.time)
        for e in inc.evidence
        if e.schema != "node.v1" and chain.fault_evidence(e)
    ]
    if not times:
        return None
    return max(times) + step.config.degraded_quiet_seconds


def on_xid(step: Step, item: Evidence, gpu_key: str, gpu: GpuRef, *, fault: bool) -> None:
    """Any XID on the node while the incident is open: context evidence.

    ``fault``: the line is not the workload's (not an application-class code, nor a
    cleanup XID 45 after one). Only such an XID names its GPU as a degraded one: an
    XID 13/31/43 and its 45 are the workload's
    (NVIDIA's catalog; the device plugin does not mark a GPU unhealthy for it), and
    naming its GPU would let that workload's crash escalate the ticket
    (:func:`streams.core.rules.chain.belongs_to` tests a failure against these GPUs).
    """
    inc = step.find(KIND, SUBJECT)
    if inc is not None:
        step.add_evidence(inc, item, context=True)
        if fault:
            step.add_gpu(inc, gpu_key, gpu)


def on_fault(
    step: Step, item: Evidence, gpu_key: str, gpu: GpuTrack, code: int, action: str
) -> None:
    """A fatal XID line, or an XID 154 asking for a reset / drain / reboot."""
    state = step.state
    if step.find(chain.KIND, chain.SUBJECT) is not None:
        return  # the chain reports it (and took the line as a trigger)
    inc = step.find(KIND, SUBJECT)
    if inc is not None:
        _add_fault(step, inc, item, gpu_key, gpu, code, action)
        if state.degraded_since is None:
            step.set_deadline(inc, step.now + step.config.degraded_quiet_seconds)
        _describe(step, inc)
        return
    draft = state.fault_draft
    if draft is None and recurrence(step, item, gpu, code):
        return  # counted (xid.on_fatal) toward the GPU's xid_repeat; told by its first
    if draft is None:
        draft = state.fault_draft = OpenIncident(
            id=incident_id(KIND, state.cluster, state.node, SUBJECT, item.event_id),
            type=KIND,
            subject=SUBJECT,
            severity=step.config.severity.get(KIND, "ticket"),
            first_seen=step.now,
            last_seen=step.now,
        )
        state.timers_dirty = True
    _add_fault(step, draft, item, gpu_key, gpu, code, action)
    _hide(step, draft)


def recurrence(step: Step, item: Evidence, gpu: GpuTrack, code: int) -> bool:
    """Is this fatal line a new episode of a fault its GPU logged within
    ``xid_repeat_window_seconds``? Its first episode's incident told it, so it opens no
    ticket of its own: the fault came back, which is what ``xid_repeat`` counts.

    Why: a chain's page resolves ten minutes after the fault, and a ticket when the plugin
    reports the GPU healthy; the flaky GPU's next XID then opened a second incident for the
    one fault. Only the same code: another fatal code drafts its own ticket.

    Traps: an XID 154 (the driver's request) is no recurrence; the episode's own first line is
    not an earlier one; a first episode the driver called recovered told nobody, yet its
    recurrence is counted too. docs/detection.md, design notes: `recurrence`.
    """
    if gpu.fatal is None:
        return False
    horizon = step.now - step.config.xid_repeat_window_seconds
    return any(
        o.event_id != item.event_id and to_seconds(o.time) > horizon
        for o in gpu.fatal.get(code, ())
    )


def on_follow(step: Step, item: Evidence) -> None:
    """A follow-up XID (45) of a fatal one: evidence of the fault drafted or open."""
    draft = step.state.fault_draft
    if draft is not None:
        step.add_evidence(draft, item)
        _hide(step, draft)


def on_recovered(step: Step, gpu_key: str) -> None:
    """XID 154 says the GPU's recovery action is now None (logged after a reset): a
    fault of this GPU alone, seen only through XIDs, is over."""
    inc = _xid_only_ticket(step, gpu_key)
    if inc is not None:
        step.resolve(inc, step.now, "the driver reports no recovery action needed any more")


def on_repeat(step: Step, gpu_key: str, repeat: OpenIncident) -> None:
    """An ``xid_repeat`` opened for this GPU: its page (RMA, resets will not hold)
    supersedes an XID-only ticket of this GPU alone, whose action was one reset. A
    ticket that also tells a drop or failed pods stays: it has more to say."""
    inc = _xid_only_ticket(step, gpu_key)
    if inc is not None:
        inc.attributes["superseded_by"] = repeat.id
        step.resolve(inc, step.now, f"superseded by xid_repeat {repeat.id}")


def _xid_only_ticket(step: Step, gpu_key: str) -> OpenIncident | None:
    """Drop a pending draft about this GPU alone, and return the open ``gpu_degraded``
    that only XIDs of this GPU made (no drop, not escalated), if there is one."""
    state = step.state
    draft = state.fault_draft
    if draft is not None and set(draft.gpus) <= {gpu_key}:
        state.fault_draft = None
        state.timers_dirty = True
    inc = step.find(KIND, SUBJECT)
    if (
        inc is not None
        and "xids" in inc.attributes
        and "escalated" not in inc.attributes
        and state.degraded_since is None
        and set(inc.gpus) <= {gpu_key}
    ):
        return inc
    return None


def _add_fault(
    step: Step,
    inc: OpenIncident,
    item: Evidence,
    gpu_key: str,
    gpu: GpuTrack,
    code: int,
    action: str,
) -> None:
    state = step.state
    step.add_evidence(inc, item)
    step.add_gpu(inc, gpu_key, gpu_ref(gpu_key, gpu, step.state))
    for key in pods_on(state, gpu_key, gpu):
        step.add_pod(inc, pod_info(key, state.pods.get(key), "candidate"))
    codes = inc.attributes.get("xids", "")
    if str(code) not in codes.split(","):
        inc.attributes["xids"] = f"{codes},{code}" if codes else str(code)
    if code == 154 and action:
        inc.attributes["recovery_action"] = action.removeprefix("The driver asks: ").rstrip(".")
    elif action and "xid_action" not in inc.attributes:
        inc.attributes["xid_action"] = f"NVIDIA's action for XID {code}: {action}"


def _hide(step: Step, draft: OpenIncident) -> None:
    """A draft is not published: undo the touch the Step's helpers made."""
    if draft in step.dirty:
        step.dirty.remove(draft)


def on_timer(step: Step) -> None:
    state, config = step.state, step.config
    draft = state.fault_draft
    draft_due = draft is not None and step.now >= draft.first_seen + config.degraded_after_seconds
    since = state.degraded_since
    drop_due = (
        since is not None
        and not state.degraded_checked
        and step.now >= since + config.degraded_after_seconds
    )
    # Both due in one timer: the earlier fault first (it anchors the incident's id).
    if (
        draft_due
        and drop_due
        and since is not None
        and draft is not None
        and since < draft.first_seen
    ):
        _open_drop(step)
        drop_due = False
    if draft_due:
        _open_fault(step)
    if drop_due:
        _open_drop(step)
    _open_devices(step)


def _open_fault(step: Step) -> None:
    state, config = step.state, step.config
    draft = state.fault_draft
    state.fault_draft = None
    state.timers_dirty = True
    if draft is None or step.find(chain.KIND, chain.SUBJECT) is not None:
        return
    inc = step.find(KIND, SUBJECT)
    if inc is None:
        state.incidents[f"{KIND}|{SUBJECT}"] = inc = draft
    else:
        for item in draft.evidence:
            step.add_evidence(inc, item)
        for key, ref in draft.gpus.items():
            step.add_gpu(inc, key, ref)
        for key, attr in draft.attributes.items():
            inc.attributes.setdefault(key, attr)
    step.touch(inc)
    for key, gpu in state.gpus.items():  # the pods bound now, not only at the first line
        if key in inc.gpus:
            for pod in pods_on(state, key, gpu):
                step.add_pod(inc, pod_info(pod, state.pods.get(pod), "candidate"))
    if state.degraded_since is None:
        step.set_deadline(inc, inc.last_seen + config.degraded_quiet_seconds)
    _describe(step, inc)


def _open_drop(step: Step) -> None:
    state, config = step.state, step.config
    since = state.degraded_since
    state.degraded_checked = True
    state.timers_dirty = True
    if (
        since is None
        or step.find(chain.KIND, chain.SUBJECT) is not None
        or state.degraded_evidence is None
    ):
        return
    inc = step.find(KIND, SUBJECT)
    recent = since - config.eviction_lookback_seconds
    suspects = [
        key for key, gpu in state.gpus.items() if gpu.last_xid >= recent and not gpu.last_xid_app
    ]
    if inc is None and _repeats_tell(step, suspects, state.degraded_evidence):
        return
    if inc is None:
        inc = step.open(KIND, SUBJECT, state.degraded_evidence.event_id, since)
    step.add_evidence(inc, state.degraded_evidence)
    step.set_deadline(inc, NEVER)
    for _, item in state.recent_xids:
        # Context, not the fault: the degradation began at the drop (or at the fatal
        # XID whose draft anchors the incident), so these never move first_seen.
        step.add_evidence(inc, item, context=True)
    for key in suspects:
        # A GPU with an XID near the drop is the likely unhealthy one, unless that XID is
        # an application one: the device plugin ignores those (13, 31, 43, ...).
        # (A cleanup XID 45 after the workload's XID 13 is the workload's too: typed on
        # the GPU as its line came, GpuTrack.last_xid_app.)
        step.add_gpu(inc, key, gpu_ref(key, state.gpus[key], step.state))
    _describe(step, inc)


def _repeats_tell(step: Step, suspects: list[str], dropped: Evidence) -> bool:
    """Does an open ``xid_repeat`` already tell the GPU a lasting drop is about? When
    every GPU with a fault XID near the drop has its repeat page open, the device plugin
    marked that failing GPU unhealthy: the page (drain, RMA) says more than a ticket
    would, and the drop joins it as evidence (seen in a simulated fleet: an XID 74 repeat opened
    at 20:11, the plugin's drop of that GPU made a second, "1 of 8 GPUs unallocatable"
    ticket at 20:17). A drop no XID explains names no GPU, and opens its ticket."""
    if not suspects:
        return False
    pages = []
    for key in suspects:
        found = chain.open_repeats(step, key)
        if not found:
            return False
        pages.extend(found)
    for page in pages:
        step.add_evidence(page, dropped)
    return True


def deadline(state: NodeState, config: CoreSettings) -> float:
    after = config.degraded_after_seconds
    found = NEVER
    if state.degraded_since is not None and not state.degraded_checked:
        found = state.degraded_since + after
    if state.fault_draft is not None:
        found = min(found, state.fault_draft.first_seen + after)
    if state.dra is not None:
        found = min(found, dra.next_due(state, config))
    return found


# -- DRA device faults (streams.core.rules.dra) ----------------------------------------------
def on_device_fault(step: Step, fault: dra.Fault) -> None:
    """A device's taint or Unhealthy report just began. An open ticket takes it at once
    (as it takes a drop); otherwise it waits ``degraded_after_seconds`` for a chain."""
    step.state.timers_dirty = True
    inc = step.find(KIND, SUBJECT)
    if inc is not None and step.find(chain.KIND, chain.SUBJECT) is None:
        dra.mark_checked(step.state, fault)
        _tell_device(step, inc, fault)
        step.set_deadline(inc, NEVER)
        _describe(step, inc)


def _open_devices(step: Step) -> None:
    """Device faults due now: each opens the node's ticket or joins it, unless the
    eviction chain's page names its GPU (it tells the fault), or, for a GPU gone from
    the slices, the node is being removed (its teardown: judged again a window later)."""
    state = step.state
    due = [f for f in dra.faults(state, step.config) if not f.checked and f.due <= step.now]
    if not due:
        return
    state.timers_dirty = True
    page = step.find(chain.KIND, chain.SUBJECT)
    told = False
    for fault in due:
        if fault.kind == dra.ABSENT and disruption.removal(step):
            dra.postpone(state, fault.ident, step.now)
            continue
        dra.mark_checked(state, fault)
        if page is not None and any(
            fault.key == key or (fault.ref.uuid and fault.ref.uuid == ref.uuid)
            for key, ref in page.gpus.items()
        ):
            continue
        inc = step.find(KIND, SUBJECT)
        if inc is None:
            inc = step.open(KIND, SUBJECT, fault.item.event_id, fault.since)
        _tell_device(step, inc, fault)
        step.set_deadline(inc, NEVER)
        told = True
    inc = step.find(KIND, SUBJECT)
    if told and inc is not None:
        _describe(step, inc)


def _tell_device(step: Step, inc: OpenIncident, fault: dra.Fault) -> None:
    """The ticket names the device's GPU, the fault's record, and who holds it."""
    state = step.state
    step.add_evidence(inc, fault.item)
    step.add_gpu(inc, fault.key, fault.ref)
    for key in fault.pods:
        step.add_pod(inc, pod_info(key, state.pods.get(key), "candidate"))
    inc.attributes["device_faults"] = "yes"


def _told_devices(step: Step, inc: OpenIncident) -> list[dra.Fault]:
    """The device faults the ticket tells that still stand."""
    if "device_faults" not in inc.attributes:
        return []
    ids = {e.event_id for e in inc.evidence}
    return [f for f in dra.faults(step.state, step.config) if f.item.event_id in ids]


def on_device_recovered(step: Step, note: str, *, healthy: bool = True) -> None:
    """A device fault ended (a taint lifted, a report healthy again, a GPU listed again).
    The ticket resolves once none it tells stands, unless a drop keeps it; a chain
    resolves as when the GPUs are allocatable again.

    ``healthy``: the device itself says so (its driver lifted its taint, the slice lists
    it again, the kubelet's report changed). That is a DRA node's allocatable coming back,
    and resolves a ticket its fatal XIDs made too, as a lasting drop's recovery does
    (:func:`on_capacity`): else the XID's quiet day kept it open and the node's next
    fault joined it. Trap: a report that ends with its pod (deleted, forgotten) says
    nothing of the GPU, so such a ticket keeps its XIDs' quiet deadline."""
    state = step.state
    state.timers_dirty = True
    inc = step.find(KIND, SUBJECT)
    if inc is not None and "device_faults" in inc.attributes:
        if _told_devices(step, inc):
            _describe(step, inc)
        elif state.degraded_since is not None:
            del inc.attributes["device_faults"]
            _describe(step, inc)
        else:
            quiet = None if healthy else _xid_deadline(step, inc)
            if quiet is None:
                step.resolve(inc, step.now, note)
            else:
                del inc.attributes["device_faults"]
                step.set_deadline(inc, quiet)
                _describe(step, inc)
    if not chain.degraded(state):
        chain.on_restored(step, note)


def _gap(state: NodeState) -> str:
    """ "1 of 8 GPUs", or per resource on a MIG node ("1 of 7 MIG 1g.10gb instances")."""
    text = state.resources.unallocatable if state.resources is not None else ""
    return text or f"{state.capacity - state.allocatable} of {state.capacity} GPUs"


def _describe(step: Step, inc: OpenIncident) -> None:
    dra.name_devices(step.state, inc.attributes, list(inc.gpus.values()))
    if "escalated" in inc.attributes:
        chain.describe_escalated(step, inc)
        return
    state, config = step.state, step.config
    minutes = config.degraded_after_seconds / 60
    dropped = state.degraded_since is not None
    if dropped:
        inc.attributes["capacity"] = str(state.capacity)
        inc.attributes["allocatable"] = str(state.allocatable)
    codes = [c for c in inc.attributes.get("xids", "").split(",") if c]
    devices = _told_devices(step, inc)
    if devices:
        inc.attributes["device_faults"] = "; ".join(f.words for f in devices)
    if devices and not codes and not dropped:
        _describe_devices(step, inc, devices)
        return
    if not codes:
        inc.summary = (
            f"{_gap(state)} on {state.node} unallocatable for more than "
            f"{minutes:g} min (device plugin marked them unhealthy), no pod failure yet"
        )
        inc.action = (
            f"Find the unhealthy GPU (nvidia-smi -q, XIDs below), cordon {state.node} and "
            "schedule a GPU reset or node reboot before workloads land on it."
        )
        return
    names = []
    for code in codes:
        rule = config.xid.get(int(code))
        names.append(f"XID {code} ({rule.mnemonic})" if rule and rule.mnemonic else f"XID {code}")
    where = ", ".join(
        " / ".join(p for p in (g.uuid, g.pci_bus_id) if p) or key for key, g in inc.gpus.items()
    )
    pods = [f"{p.namespace}/{p.name}" for p in inc.pods.values()]
    who = ", ".join(pods) if pods else "none bound"
    told = inc.attributes.get("recovery_action", "")
    if told:
        inc.summary = (
            f"{' + '.join(names)} on {where} ({state.node}): the driver asks for "
            f"'{told}'; no eviction chain followed"
        )
    else:
        inc.summary = f"{' + '.join(names)} on {where} ({state.node}): no eviction chain followed"
    if dropped:
        inc.summary += f", {_gap(state)} unallocatable"
    else:
        inc.summary += " (no allocatable drop, no pod failure)"
    inc.summary += f"; pods on it: {who}"
    if devices:
        inc.summary += "; DRA device " + "; ".join(f.words for f in devices)
    first = f"The driver asks: {told}." if told else inc.attributes.get("xid_action", "")
    inc.action = (
        f"{first} Cordon {state.node} and move the pods off {where} ({who}) before the "
        "GPU reset / node reboot; nothing has failed yet, so it can be planned. "
        "Check nvidia-smi -q (GPU Recovery Action) for the driver's current request."
    ).strip()


def _describe_devices(step: Step, inc: OpenIncident, devices: list[dra.Fault]) -> None:
    """The summary of a ticket that only DRA device faults made (no drop, no XID)."""
    node = step.state.node
    what = "; ".join(
        f"{f.words} ({f.ref.uuid or f.key}"
        + (f" / {f.ref.pci_bus_id})" if f.ref.pci_bus_id and f.ref.uuid else ")")
        for f in devices
    )
    pods = [f"{p.namespace}/{p.name}" for p in inc.pods.values()]
    claims = inc.attributes.get("claims", "")
    who = ", ".join(pods) if pods else "none"
    held = f"; claims: {claims.replace(',', ', ')}" if claims else ""
    inc.summary = f"GPU device fault on {node}: {what}; no pod failure yet{held}; pods: {who}"
    inc.action = (
        f"Check the GPU (nvidia-smi -q, the node's XIDs), then cordon {node} or keep the "
        "device tainted, and move the pods holding it before a GPU reset or node reboot. "
        "A taint that evicts (NoExecute) comes from a DeviceTaintRule: remove it once the "
        "GPU is repaired."
    )


SPEC: NodeRule = NodeRule(
    name="degraded",
    emits=((KIND, "ticket"),),
    reads=(NodeEvent, XidEvent, ResourceSliceEvent, PodEvent),
    state=(
        "recent_xids",
        "degraded_since",
        "degraded_evidence",
        "degraded_checked",
        "fault_draft",
        "dra",
    ),
    settings=(
        "degraded_after_seconds",
        "dra_absent_seconds",
        "degraded_quiet_seconds",
        "drop_persist_seconds",
        "eviction_lookback_seconds",
        "xid_repeat_window_seconds",
    ),
    deadline=deadline,
    on_timer=on_timer,
)
"""``gpu_degraded``: allocatable below capacity for ``degraded_after_seconds``, or a fatal
XID no eviction chain reported that long."""
