"""``gpu_app_fault`` and ``xid_repeat``: what XID fault *episodes* say on their own.

An episode (:func:`streams.core.node._on_xid`): lines of one code on one GPU less than
``xid_episode_gap_seconds`` apart. Both rules count episodes; every line is evidence.

* Application-class XIDs (13, 31, 43, 94...) on a GPU are the workload's fault,
  not the hardware's: one incident per GPU, naming the pod(s) bound to it, going
  from info to ticket at ``app_fault_escalate_count`` episodes. Several pods on one
  GPU (time-slicing / MPS) are all named as candidates.
* The same fatal XID in ``xid_repeat_count`` episodes within
  ``xid_repeat_window_seconds`` on one GPU is failing hardware: escalate, and say RMA,
  because it came back after each recovery. A single burst is not a repeat: its
  action is the catalog's (reset), carried by ``gpu_degraded`` or the eviction chain
  (NVIDIA/NVSentinel#1710: counting lines made 672 fatal events of application churn).
"""

from __future__ import annotations

import math

from schemas.events import XidEvent
from schemas.incidents import Evidence
from streams.core.config import CoreSettings
from streams.core.lifecycle import Step
from streams.core.rules import chain, degraded, dra
from streams.core.rules.gpuids import unpack_uuid
from streams.core.rules.pods import pod_info
from streams.core.rules.spec import NodeRule
from streams.core.state import NEVER, GpuTrack, NodeState, gpu_ref, pods_on
from streams.core.timeconv import to_seconds

APP = "gpu_app_fault"
REPEAT = chain.REPEAT
_RANK = {"info": 0, "ticket": 1, "page": 2}
NO_EPISODE = (-math.inf, -math.inf)


# -- episode memory (NodeState.xid_episodes) --------------------------------------------------
def episode_gap(config: CoreSettings) -> float:
    """Lines of one code on one GPU closer than this are one episode. The dual-source
    coalescing window is its floor: a gap of 0 still counts a line seen twice once."""
    return max(config.xid_episode_gap_seconds, config.xid_coalesce_seconds)


def recent_episodes(
    state: NodeState, gpu_key: str, horizon: float
) -> dict[int, tuple[float, float]]:
    """The GPU's codes with a line after ``horizon``: code -> (last counted line, last
    info line)."""
    return {
        code: (last, quiet)
        for key, code, last, quiet in state.xid_episodes
        if key == gpu_key and max(last, quiet) > horizon
    }


def remember(step: Step, gpu_key: str, code: int, last: float, quiet: float) -> None:
    state = step.state
    others = tuple(e for e in state.xid_episodes if e[0] != gpu_key or e[1] != code)
    state.xid_episodes = (*others, (gpu_key, code, last, quiet))
    state.timers_dirty = True


def deadline(state: NodeState, config: CoreSettings) -> float:
    """When the oldest remembered episode's gap has passed (it is forgotten then)."""
    if not state.xid_episodes:
        return NEVER
    gap = episode_gap(config)
    return min(max(last, quiet) for _, _, last, quiet in state.xid_episodes) + gap


def on_timer(step: Step) -> None:
    state = step.state
    if not state.xid_episodes:
        return
    horizon = step.now - episode_gap(step.config)
    kept = tuple(e for e in state.xid_episodes if max(e[2], e[3]) > horizon)
    if len(kept) != len(state.xid_episodes):
        state.xid_episodes = kept
        state.timers_dirty = True


# -- the rules ----------------------------------------------------------------------------


def on_app(
    step: Step, gpu_key: str, gpu: GpuTrack, item: Evidence, code: int, new_episode: bool
) -> None:
    config, state = step.config, step.state
    inc = step.find(APP, gpu_key)
    if inc is None or not inc.pods:
        # Opened, or still naming no pod: the GPU's binding may have been learnt since the
        # first line (a MIG instance's bus id told after its XID), so a later line names it.
        if inc is None:
            inc = step.open(APP, gpu_key, item.event_id, step.now)
        pods = pods_on(state, gpu_key, gpu)
        shared = len(pods) > 1 or bool(state.sharing)
        for key in pods:
            role = "candidate" if shared else "bound"
            step.add_pod(inc, pod_info(key, state.pods.get(key), role))
        if shared:
            inc.attributes["shared_gpu"] = state.sharing or "shared"
    if new_episode or inc.count == 0:
        inc.count += 1
    step.add_gpu(inc, gpu_key, gpu_ref(gpu_key, gpu, step.state))
    step.add_evidence(inc, item)
    dra.name_devices(state, inc.attributes, list(inc.gpus.values()))
    codes = inc.attributes.get("xids", "")
    if str(code) not in codes.split(","):
        inc.attributes["xids"] = f"{codes},{code}" if codes else str(code)
    inc.attributes["count"] = str(inc.count)
    if inc.count >= config.app_fault_escalate_count and inc.severity == "info":
        inc.severity = "ticket"
    step.set_deadline(inc, step.now + config.app_fault_quiet_seconds)
    who = (
        "no pod binding known"
        if not inc.pods
        else ", ".join(f"{p.namespace}/{p.name}" for p in inc.pods.values())
    )
    shared_note = " (shared GPU: candidates)" if "shared_gpu" in inc.attributes else ""
    inc.summary = (
        f"application XID {inc.attributes['xids']} on {unpack_uuid(gpu.uuid) or gpu_key} "
        f"({step.state.node}), {inc.count} episode{'s' if inc.count != 1 else ''}: "
        "workload fault, not hardware; "
        f"pods: {who}{shared_note}"
    )
    rule = config.xid.get(code)
    inc.action = (rule.action if rule and rule.action else "Restart the application.") + (
        " The GPU itself is healthy; check the workload's CUDA code and driver compatibility."
    )


def repeating(step: Step, gpu_key: str, code: int | None) -> bool:
    """Is an ``xid_repeat`` open for this code on this GPU (``None``: for any code)? Then
    its page tells the line (the RMA is asked for; a ticket for one more recurrence would
    say less). The caller passes ``None`` for a line that is no fault of its own: an XID
    154 asking for a reset is the driver's request about the GPU the page already says
    resets will not mend.

    Only the same code: the page tells the fault that came back ("XID 79 in 6 episodes"),
    not another. A GPU whose XID 79 page is open and that logs its first XID 48 (a
    double-bit ECC error) twelve hours later has a new fault that page does not name;
    suppressed for any code, it was told by nothing (seen in a simulated fleet: a flaky GPU's
    XID 79 repeat at 10:02, its XID 48s from 22:40)."""
    return bool(chain.open_repeats(step, gpu_key, code))


def on_fatal(
    step: Step, gpu_key: str, gpu: GpuTrack, item: Evidence, code: int, new_episode: bool
) -> None:
    config = step.config
    if gpu.fatal is None:
        gpu.fatal = {}
    occurrences = gpu.fatal.get(code)
    if occurrences is None:
        occurrences = gpu.fatal[code] = []
    if any(o.event_id == item.event_id for o in occurrences):
        return
    subject = chain.repeat_subject(gpu_key, code)
    if not new_episode:
        # The same fault, logged again: evidence of an open repeat, never a new count.
        inc = step.find(REPEAT, subject)
        if inc is not None:
            step.add_evidence(inc, item)
            step.set_deadline(inc, step.now + config.xid_repeat_window_seconds)
        return
    occurrences.append(item)
    if len(occurrences) > config.xid_repeat_count:
        del occurrences[0]
    inc = step.find(REPEAT, subject)
    if inc is None:
        first = to_seconds(occurrences[0].time)
        if len(occurrences) < config.xid_repeat_count:
            return
        if step.now - first > config.xid_repeat_window_seconds:
            return
        inc = step.open(REPEAT, subject, occurrences[0].event_id, first)
        capped = config.xid.get(code)
        if capped is not None and capped.severity is not None:
            # NVIDIA's codes for parts of older GPUs are ticket-worthy even when
            # repeated; the type's severity ([core]) stays the ceiling.
            inc.severity = min(inc.severity, capped.severity, key=_RANK.__getitem__)
        for earlier in occurrences:
            step.add_evidence(inc, earlier)
        inc.count = len(occurrences) - 1
        for key in pods_on(step.state, gpu_key, gpu):
            step.add_pod(inc, pod_info(key, step.state.pods.get(key), "bound"))
        degraded.on_repeat(step, gpu_key, inc)
    inc.count += 1
    step.add_evidence(inc, item)
    step.add_gpu(inc, gpu_key, gpu_ref(gpu_key, gpu, step.state))
    dra.name_devices(step.state, inc.attributes, list(inc.gpus.values()))
    step.set_deadline(inc, step.now + config.xid_repeat_window_seconds)
    rule = config.xid.get(code)
    name = rule.mnemonic if rule and rule.mnemonic else "fatal XID"
    hours = config.xid_repeat_window_seconds / 3600
    inc.attributes["xid"] = str(code)
    inc.attributes["occurrences"] = str(inc.count)
    inc.summary = (
        f"XID {code} ({name}) in {inc.count} separate fault episodes within {hours:g} h on "
        f"{unpack_uuid(gpu.uuid) or gpu_key} ({step.state.node}): failing hardware"
    )
    inc.action = (
        f"Drain {step.state.node} and open a hardware case for this GPU (RMA): the fault "
        "came back after each recovery, resets will not hold. "
        + (f"NVIDIA's action for one episode: {rule.action}" if rule and rule.action else "")
    ).strip()


SPEC: NodeRule = NodeRule(
    name="xid",
    emits=((APP, "info"), (REPEAT, "page")),
    reads=(XidEvent,),
    state=("xid_episodes",),
    settings=(
        "app_fault_quiet_seconds",
        "app_fault_escalate_count",
        "xid_repeat_count",
        "xid_repeat_window_seconds",
        "xid_coalesce_seconds",
        "xid_episode_gap_seconds",
    ),
    deadline=deadline,
    on_timer=on_timer,
)
"""``gpu_app_fault`` (the workload's XIDs on a GPU) and ``xid_repeat`` (episodes of one
fatal code on one GPU)."""
