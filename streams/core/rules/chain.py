"""``device_unhealthy_eviction``: fatal XID / allocatable drop, then GPU pods fail.

The whole chain is ONE incident, anchored at the first trigger in event time; pods that failed up to
``eviction_lookback_seconds`` before it join too (the kubelet may see a dead container first). It
opens only when a pod fails, and resolves after the window once the node's GPUs are allocatable
again. The page says "reset or replace the GPU", so both halves must be about a device:

* a drop arms the chain only when trusted (with a fatal XID, after a pod failure that says device,
  or once it lasted ``drop_persist_seconds``): a plugin re-registering is 8->0->8;
* a pod joins only if its failure is the device's (its words, its GPU, an exit right after a fatal
  XID), never an ordinary crash, nor an eviction on a node taken away on purpose.

Traps: ``CUDA error: out of memory`` is the workload's; a kernel fault says device only against a
fatal XID. docs/detection.md, design notes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Final

from schemas.events import KubeEvent, NodeEvent, PodEvent, ResourceSliceEvent, XidEvent
from schemas.incidents import Evidence, GpuRef, PodInfo
from schemas.termination_causes import OOM, CauseClass, load_causes
from streams.core.config import CoreSettings
from streams.core.evidence import xid_code_and_class
from streams.core.lifecycle import Step
from streams.core.rules import dra
from streams.core.rules.gpuids import split_gpu_key, unpack_uuid
from streams.core.rules.spec import NodeRule
from streams.core.state import NEVER, GpuTrack, NodeState, OpenIncident, bound_pods
from streams.core.timeconv import to_seconds

KIND = "device_unhealthy_eviction"
SUBJECT = "chain"
DEGRADED = "gpu_degraded"
DEGRADED_SUBJECT = "node"
"""The node's ``gpu_degraded`` (:mod:`streams.core.rules.degraded`): a device failure that
finds it open, and no chain incident, escalates it instead of opening a second incident."""
_MAX_RECENT_FAILURES = 64
_PRESSURE = "low on resource"
"""The kubelet's node-pressure eviction message: memory or disk, not the GPU."""
_CAUSES = load_causes()
"""The packaged termination-cause table (packaged data read once at import, as in
:mod:`streams.core.rules.cuda`)."""
_CLASSIFIED: dict[str, CauseClass | None] = {}
"""What :func:`classify` answered, by message."""
_CLASSIFIED_MAX: Final = 256
"""Messages remembered at most: a crash loop's few texts fit many times over."""


def classify(message: str) -> CauseClass | None:
    """``_CAUSES.classify(message)``, each text searched once.

    Why: the table does one case-insensitive regex search per class, tens of thousands
    of instructions per message (a few percent of the whole core on the bench's
    stream), and a crash loop repeats its last log lines on every restart, so most
    messages were classified already. The answer depends on the text alone: the memo
    changes no output. Trap: messages are the workload's, unbounded in variety, so the
    memo is cleared whole when full (that costs speed, never a different answer).
    """
    try:
        return _CLASSIFIED[message]  # one lookup on a hit; None is an answer too
    except KeyError:
        pass  # a miss costs the search below, far more than the exception
    found = _CAUSES.classify(message)
    if len(_CLASSIFIED) >= _CLASSIFIED_MAX:
        _CLASSIFIED.clear()
    _CLASSIFIED[message] = found
    return found


_KERNEL_FAULT = "kernel_fault"
_NOT_DEVICE = frozenset({OOM, _KERNEL_FAULT, "nccl_comm"})
"""Termination-cause classes whose text does not by itself say device even where it
contains "CUDA error": the workload's (CUDA OOM), the network's (NCCL), and a kernel
fault, which says device only against a fatal XID (:func:`_kernel_fault_says_device`)."""
_GPU_WORDS = (
    "cuda",
    "nvml",
    "nvidia",
    "nvrm",
    "xid",
    "ecc",
    "gpu",
    "nccl",
    "device",
    "driver",
    "fallen off the bus",
)
"""Lower-case words a termination message that may be a dead GPU's can contain: one
with any of them is not read as an application error (:func:`_names_other_cause`).
Broad on purpose: a false match only keeps the old nearness rule."""
_DEVICE = "device"
_KERNEL = "kernel"


def degraded(state: NodeState) -> bool:
    """A GPU is out of service: allocatable below capacity, or (on a DRA node, where
    nothing is counted) a device tainted or reported Unhealthy."""
    return (state.capacity >= 0 and state.allocatable < state.capacity) or dra.faulty(state)


def armed(step: Step) -> bool:
    return bool(step.state.chain_triggers) and step.now <= step.state.chain_until


def arm(
    step: Step,
    trigger: Evidence,
    gpu_key: str = "",
    gpu: GpuRef | None = None,
    code: int | None = None,
    at: float | None = None,
) -> None:
    """A fatal XID or a trusted allocatable drop: pod failures in the window now join.

    ``at``: the trigger's own time when it is armed later than it happened (a drop
    trusted once it persisted); window and look-back count from it.
    """
    state, config = step.state, step.config
    when = step.now if at is None else at
    pending = state.drop_pending
    if pending is not None:
        _forget_drop(state)
        if pending[1].event_id != trigger.event_id:
            # A fatal XID while a drop is pending: the drop came with it, trust it now,
            # first (it is the earlier trigger, so it anchors the id).
            arm(step, pending[1], at=pending[0])
    inc = step.find(KIND, SUBJECT)
    if inc is None and (not armed(step) or _ticket_holds_the_old_faults(step, gpu_key, gpu)):
        _disarm(state)
        state.chain_until = -math.inf
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
    state.chain_until = max(state.chain_until, when + config.eviction_window_seconds)
    state.timers_dirty = True
    if inc is not None:
        step.add_evidence(inc, trigger)
        if gpu is not None:
            step.add_gpu(inc, gpu_key, gpu)
        _describe(step, inc)
    lookback = when - config.eviction_lookback_seconds
    recent = [f for f in state.recent_failures if f[0] >= lookback]
    kept = []
    for failure in recent:
        if _belongs(step, failure[1], failure[2], failure[0]):
            _join(step, failure[1], failure[2])
        else:
            kept.append(failure)
    state.recent_failures = tuple(kept)


DEVICE_TAINT_EVICTIONS: Final = ("DeviceTaintManagerEviction", "DeletionByDeviceTaintManager")
"""The device taint eviction controller's words on a pod it evicts: its Event's reason
(``Marking for deletion``) and its ``DisruptionTarget`` condition's. Not the node taint
manager's (``TaintManagerEviction``, ``DeletionByTaintManager``): a node's taint."""
_DEVICE_TAINT_WORD: Final = "DeviceTaintManager"
"""In the evidence line of either (``streams.core.evidence``): a trigger that is one."""


def arm_on_eviction(step: Step, pod: str, trigger: Evidence, other_claims: tuple[str, ...]) -> bool:
    """The device taint eviction controller evicts ``pod`` and no known fault claimed
    it: arm the chain on the GPUs the pod holds by DRA binding, the eviction the trigger.
    True when armed (the failure, in the look-back, then joins).

    Why: the controller evicts only for a ``NoExecute`` taint on a device the pod's
    claims hold, so its word is a device fault even when the taint never reached this
    key (a v1alpha3 DeviceTaintRule with a CEL selector, which the connector does not
    apply; a slice record lost). Traps: it does not say which device, so every GPU the
    pod holds is named; a pod that also holds a claim no GPU binding names (a NIC, a
    compute domain's channel: ``other_claims``) may have lost that device instead, and
    no GPU is blamed; a pod whose holds are unknown arms nothing.
    """
    held = dra.held_gpus(step.state, pod)
    if not held:
        return False
    claims = {claim for *_, named in held for claim in named}
    if any(claim not in claims for claim in other_claims):
        return False
    for _device, gpu_key, ref, _claims in held:
        arm(step, trigger, gpu_key, ref)
    return True


def _ticket_holds_the_old_faults(step: Step, gpu_key: str, gpu: GpuRef | None) -> bool:
    """Does a fatal XID on a new GPU start a chain of its own while an armed one has
    no incident yet? It does when every trigger armed so far is a fatal XID on other
    GPUs that the node's open ``gpu_degraded`` (or an ``xid_repeat``, which supersedes a
    flaky GPU's ticket) already reports: those faults have their incident (a casualty
    of a ticket's GPU still escalates it, :func:`_escalate`), so the new fault is not
    folded into their window. Folded, a flaky GPU's XID 79 nine
    minutes earlier anchored the page of an XID 74 on another GPU and its DeviceFailed
    eviction, dated from the wrong fault and naming both GPUs (seen in a simulated fleet). A
    drop among the triggers names no GPU: it may be the new GPU's, and the chain goes
    on as one."""
    state = step.state
    if gpu is None or gpu_key == "unknown" or not state.chain_codes:
        return False
    if any(t.schema == "node.v1" for t in state.chain_triggers):
        return False
    if not state.chain_gpus:
        return False
    named = [
        ref
        for inc in state.incidents.values()
        if inc.type in (DEGRADED, REPEAT)
        for ref in inc.gpus.values()
    ]
    for key, ref in state.chain_gpus:
        if key == gpu_key or _same_ref(ref, gpu):
            return False  # the same GPU again: one fault
        if not any(_same_ref(ref, known) for known in named):
            return False  # a fault no incident reports yet
    return True


REPEAT = "xid_repeat"
"""The repeat rule's type (:mod:`streams.core.rules.xid`): its page reports a GPU's fault."""


def repeat_subject(gpu_key: str, code: int) -> str:
    """The subject of a GPU's ``xid_repeat`` for one code: ``<gpu>/<code>``. The one
    place that spells it (``xid.on_fatal`` opens the page; :func:`open_repeats` finds it)."""
    return f"{gpu_key}/{code}"


def open_repeats(step: Step, gpu_key: str, code: int | None = None) -> list[OpenIncident]:
    """The GPU's open ``xid_repeat`` pages: the one for ``code``, or every code's (``None``).
    Trap: every code means a scan of the node's incidents by key prefix; the node holds
    few, so it is cheap, but callers with a code should pass it."""
    incidents = step.state.incidents
    if code is not None:
        found = incidents.get(f"{REPEAT}|{repeat_subject(gpu_key, code)}")
        return [] if found is None else [found]
    prefix = f"{REPEAT}|{gpu_key}/"
    return [inc for key, inc in incidents.items() if key.startswith(prefix)]


def _same_ref(a: GpuRef, b: GpuRef) -> bool:
    return bool(a.uuid and a.uuid == b.uuid) or bool(
        a.pci_bus_id and a.pci_bus_id == b.pci_bus_id and a.gpu_instance == b.gpu_instance
    )


def on_drop(step: Step, change: Evidence) -> None:
    """Allocatable fell: arm the chain if the drop is trusted, else hold it pending."""
    state, config = step.state, step.config
    near = step.now - config.device_fault_near_seconds
    if (
        armed(step)
        or step.find(KIND, SUBJECT) is not None
        or config.drop_persist_seconds <= 0
        or any(
            near <= when <= step.now and _says_device_failure(step, info, evidence)
            for when, info, evidence in state.recent_failures
        )
    ):
        arm(step, change)
        return
    if state.drop_pending is None:
        state.drop_pending = (step.now, change)
        state.timers_dirty = True


def on_failure(step: Step, info: PodInfo, evidence: Evidence) -> bool:
    """A GPU pod failed. Join the armed chain if it belongs, or remember it for the look-back.

    It joins the chain's incident too while that is still open after its window (the
    GPU is still unallocatable), and, with no chain incident, it escalates the node's
    open ``gpu_degraded``: an eviction that comes after the window closed
    is still the degraded GPU's doing, not a failure floating unattached. A failure
    that is not the open chain's is tried against the ticket too: the two are both open
    when the ticket tells an older fault.
    """
    open_chain = step.find(KIND, SUBJECT) is not None
    if (armed(step) or open_chain) and _belongs(step, info, evidence, step.now):
        _join(step, info, evidence)
        return True
    # Not the chain's: it may still be the open ticket's. Both are open when the ticket
    # tells an older fault (:func:`older_fault`): a pod crashing on the ticket's GPU
    # while a new chain is open on another escalates the ticket.
    if _escalate(step, info, evidence):
        return True
    state, config = step.state, step.config
    lookback = step.now - config.eviction_lookback_seconds - config.drop_persist_seconds
    kept = [f for f in state.recent_failures if f[0] >= lookback]
    kept.append((step.now, info, evidence))
    state.recent_failures = tuple(kept[-_MAX_RECENT_FAILURES:])
    return False


def _belongs(step: Step, info: PodInfo, evidence: Evidence, when: float) -> bool:
    """Is this failure the chain's device's doing? (See the module docstring.)"""
    state = step.state
    times = [to_seconds(t.time) for t in state.chain_triggers]
    fatal = bool(state.chain_codes)
    return belongs_to(step, info, evidence, when, state.chain_gpus, times, fatal=fatal)


def belongs_to(
    step: Step,
    info: PodInfo,
    evidence: Evidence,
    when: float,
    gpus: Iterable[tuple[str, GpuRef]],
    fault_times: Iterable[float],
    *,
    fatal: bool,
) -> bool:
    """Is this failure the doing of the faulty ``gpus`` (whose faults were at
    ``fault_times``)? The chain's test, for the chain and for a degraded GPU.

    ``fatal``: a fatal XID (or a reset-asking XID 154) is among the fault's triggers,
    not only an allocatable drop. A kernel-fault text says device only then (see
    :func:`_kernel_fault_says_device`), and an ordinary crash is judged by time only
    then (:func:`_crash_after_a_fatal_xid`)."""
    state, config = step.state, step.config
    words = evidence.text
    said = _words_say(step, words)
    if said == _DEVICE:
        return True
    key = f"{info.namespace}/{info.name}"
    # An XID with no GPU identity ("unknown") says nothing about where: not a GPU set.
    affected = [(k, ref) for k, ref in gpus if k != "unknown"]
    bound = [(k, gpu) for k, gpu in state.gpus.items() if key in bound_pods(gpu)]
    near = config.device_fault_near_seconds
    times = tuple(fault_times)
    if (
        said == _KERNEL
        and any(t - _CLOCK_SKEW_SECONDS <= when for t in times)
        and _kernel_fault_says_device(step, fatal, bound, when - near, when)
    ):
        return True  # (never a kernel fault before the fault: it was not yet there)
    if _PRESSURE in words:
        return False  # the host's memory or disk, wherever the pod ran
    if bound and affected:
        if not any(_same_gpu(k, gpu, ak, ref) for k, gpu in bound for ak, ref in affected):
            return False
        if not ordinary_crash(info, evidence):
            return True  # Kubernetes took it off the faulty GPU (eviction, admission)
        if _app_fault_before(
            step, [k for k, _ in bound], when - near, when
        ) and not _crash_after_a_fatal_xid(when, times, near):
            # One of its GPUs just logged the workload's fault (XID 13/31/43) and the
            # fault is not so near that it killed the process itself.
            return False
        return _bound_crash_is_the_faults(step, evidence, when, times)
    if not ordinary_crash(info, evidence):
        return True
    if not fatal:  # a drop alone: the crash's words must name the GPU
        return _may_name_the_gpu(step, evidence) and any(abs(when - t) <= near for t in times)
    if any(p in words for p in config.cuda_oom_patterns):
        return False  # the workload's memory, whatever its timing
    if _app_fault_before(step, [k for k, _ in bound], when - near, when):
        return False  # its own GPU just logged the workload's fault (XID 13/31/43)
    if _names_other_cause(step, evidence):
        return False  # its own last words are an application error, not a CUDA one
    return _crash_after_a_fatal_xid(when, times, near)


_CLOCK_SKEW_SECONDS = 5.0
"""How far a pod failure's report may seem to precede the XID that caused it: the XID's
time is the node's kernel clock (kmsg), the failure's the API server's watch event; both
NTP-synced, seconds apart at worst. Nothing more: the process dies after the fault."""


def _crash_after_a_fatal_xid(when: float, fault_times: Iterable[float], within: float) -> bool:
    """May an ordinary crash at ``when`` (no binding to compare, no words that say
    device) be the doing of a fault at one of ``fault_times``? Only if it came *after* one,
    within ``within`` seconds: a fatal XID kills the CUDA processes on its GPU in their next
    CUDA call, so an exit right after it is plausibly its casualty; one before is not.

    Only with a fatal XID (the caller's ``fatal``). Trap: against an allocatable drop alone an
    ordinary crash joins only if its words name the GPU (:func:`_may_name_the_gpu`): the drop
    is the device plugin's bookkeeping and names no GPU, and joining by nearness alone turned
    drop tickets into false pages (4 of 13 on one simulated fleet). A failure that says device
    still joins the drop; for those, time does not decide.
    docs/detection.md, design notes: `_crash_after_a_fatal_xid`.
    """
    return any(t - _CLOCK_SKEW_SECONDS <= when <= t + within for t in fault_times)


def _bound_crash_is_the_faults(
    step: Step, evidence: Evidence, when: float, fault_times: Iterable[float]
) -> bool:
    """Is an ordinary crash (a container's own non-zero exit) of a pod that ran on the
    faulty GPU the fault's doing? Its GPU says *where*, not *why*: a fatal XID kills the CUDA
    process on it in its next CUDA or NVML call (NVIDIA's XID catalog). So its own last words
    decide first (a ``CUDA out of memory`` is the workload's memory; a message naming another
    cause with no GPU word, :func:`_names_other_cause`, died of that), then time: it joins
    only within the chain's window after a fault, never before it
    (:func:`_crash_after_a_fatal_xid`), which matters for a ``gpu_degraded`` ticket open a day.

    Trap: no message says nothing and keeps the binding's verdict within the window (most
    containers write no termination message).
    docs/detection.md, design notes: `_bound_crash_is_the_faults`.
    """
    config = step.config
    words = evidence.text
    if any(p in words for p in config.cuda_oom_patterns) or _names_other_cause(step, evidence):
        return False
    return _crash_after_a_fatal_xid(when, fault_times, config.eviction_window_seconds)


def _app_fault_before(step: Step, gpu_keys: list[str], since: float, until: float) -> bool:
    """Did one of the pod's GPUs log an application-class XID (13, 31, 43...) between
    ``since`` and ``until``? Then its crash is explained: the workload's kernel faulted
    on that GPU (the XID is the driver's side of the CUDA error the process died of),
    and the device plugin does not mark a GPU unhealthy for such an XID, so a drop
    that names no GPU does not claim the crash by its nearness (seen in a simulated fleet: XID
    13 on a pod's GPU, a drop 7 s later, the pod's "illegal memory access" exit 14 s
    after that)."""
    if not gpu_keys:
        return False
    xids = step.config.xid
    for gpu_key, code, last, _ in step.state.xid_episodes:
        if gpu_key in gpu_keys and since <= last <= until:
            rule = xids.get(code)
            if rule is not None and rule.xid_class == "app":
                return True
    return False


def _message(evidence: Evidence) -> str:
    """A container termination's message as its evidence line carries it ("" when the
    line is not one, or has none)."""
    text = evidence.text
    at = text.find(", exit code ")
    if evidence.schema != "pod.v1" or not text.startswith("container ") or at < 0:
        return ""
    head, sep, message = text[at + len(", exit code ") :].partition(": ")
    if not sep or not head.lstrip("-").isdigit():
        return ""
    return message


def _may_name_the_gpu(step: Step, evidence: Evidence) -> bool:
    """May an ordinary crash's last words say the GPU failed it, against a drop alone?

    A drop names no GPU and kills no process (the device plugin marks a GPU unhealthy),
    so a crash near it is the drop's only by its words (the rule: "its failure
    says device"): a GPU word in its message (:data:`_GPU_WORDS`: ``Uncorrectable ECC
    error``, ``GPU is lost``, an Xid, NVML, ``NCCL error: unhandled cuda error``) that
    the cause table does not class as the workload's or the network's (a CUDA OOM, an
    NCCL timeout or remote exit, a kernel fault: :data:`_NOT_DEVICE`), or a message the
    evidence line cut short (a traceback names its CUDA error last: it may be what was
    cut) unless what it kept is already so classed (an NCCL error that does not say
    CUDA: :data:`_NCCL`). No message, or an application error, says nothing: by
    nearness alone every unrelated crash within a minute of a drop paged (see
    :func:`_crash_after_a_fatal_xid`).
    """
    message = _message(evidence)
    if not message or any(p in message for p in step.config.cuda_oom_patterns):
        return False
    cause = classify(message)
    if cause is not None and cause.name in _NOT_DEVICE:
        return False  # what the line kept already names the cause
    lowered = message.lower()
    named = any(word in lowered for word in _GPU_WORDS if word != _NCCL)
    if _NCCL in lowered and not named:
        return False  # a collective's failure: the network's or a peer's
    return named or message.endswith("…")


_NCCL = "nccl"
"""An NCCL error says the GPU only when it says CUDA (``ncclUnhandledCudaError``,
"unhandled cuda error"); otherwise it is a collective that failed: a peer that exited,
the network, a timeout (NCCL's result codes; the cause table's ``nccl_comm``), whatever
the line kept of it."""


def _names_other_cause(step: Step, evidence: Evidence) -> bool:
    """Does a container's termination message, read whole, name a cause with no device
    word in it (a Python ``KeyError``, a truncated checkpoint)?

    A process a dead GPU kills dies in a CUDA or NVML call, and its last words say so
    (``CUDA error: ...``, ``NVML ...``: ``device_failure_patterns``); one whose last
    words are an application error died of that error, whenever it happened: the
    nearness of a trigger does not claim it (seen in simulated 100-node fleets, 6 h:
    ``KeyError: 'input_ids'`` 29 s before a drop, ``checkpoint shard ... is truncated``
    57 s before an XID 48). Traps: no message says nothing (the old rule stands), and a
    message the evidence line cut short (it ends in "…") may have lost its CUDA error
    (a traceback names the exception last): that, too, says nothing. A message with
    any GPU word in it, in any case (:data:`_GPU_WORDS`: ``Uncorrectable ECC error``,
    ``NCCL error: unhandled cuda error``, ``GPU is lost``, an ``Xid``, NVML), is not
    an application error either: only a message with none is.
    """
    message = _message(evidence)
    if not message or message.endswith("…"):
        return False
    if any(p in message for p in step.config.device_failure_patterns):
        return False
    lowered = message.lower()
    return not any(word in lowered for word in _GPU_WORDS)


def _says_device_failure(step: Step, info: PodInfo, evidence: Evidence) -> bool:
    """Does a failure just before a drop vouch for the drop? Only one that is not an
    ordinary crash nor a host-pressure eviction: the kubelet taking pods off a dead
    device (UnexpectedAdmissionError, a DeviceFailed eviction), or a text that says
    device. An application crash a minute before a plugin restart vouches for nothing."""
    config, words = step.config, evidence.text
    if any(p in words for p in config.cuda_oom_patterns):
        return False
    if _text_says_device(step, words):
        return True
    return _PRESSURE not in words and not ordinary_crash(info, evidence)


def _text_says_device(step: Step, words: str) -> bool:
    """Do a failure's words say *device* with no fatal XID to back them? A device
    pattern, and neither a CUDA OOM text nor one the cause table names as the
    workload's, the network's or a kernel fault's (see the module docstring)."""
    return _words_say(step, words) == _DEVICE


def _words_say(step: Step, words: str) -> str:
    """What a failure's words say: :data:`_DEVICE`, :data:`_KERNEL` (a kernel-fault
    text: the workload's, or a failing GPU's, see :func:`_kernel_fault_says_device`), or
    ``""`` (nothing about the device: no device pattern, a CUDA OOM, an NCCL error)."""
    config = step.config
    if not any(p in words for p in config.device_failure_patterns):
        return ""
    if any(p in words for p in config.cuda_oom_patterns):
        return ""
    cause = classify(words)
    if cause is None or cause.name not in _NOT_DEVICE:
        return _DEVICE
    return _KERNEL if cause.name == _KERNEL_FAULT else ""


def _kernel_fault_says_device(
    step: Step, fatal: bool, bound: list[tuple[str, GpuTrack]], since: float, until: float
) -> bool:
    """Does a kernel-fault text (``illegal memory access``, ``unspecified launch
    failure``) say device here? The cause table's own words: "most often a bug in a
    kernel, sometimes a failing GPU", and its action: "XID 13/31/43 only means a bug in
    the workload ...; a fatal XID (48, 79, 95, 119...) means the GPU". So it does when
    the fault has a fatal XID (a pod that dies of an ``unspecified launch failure`` three
    minutes after an XID 119 on its node died of the GPU, bound or not), unless the
    pod's own GPU logged an application XID just before (its kernel faulted: the XID is
    the driver's side of its CUDA error). Against a drop alone (it names no GPU, the
    device plugin also drops GPUs for reasons that are not this pod's) it does not: the
    crash is judged as an ordinary one (seen in a simulated fleet)."""
    if not fatal:
        return False
    return not _app_fault_before(step, [k for k, _ in bound], since, until)


def _same_gpu(key: str, gpu: GpuTrack, chain_key: str, ref: GpuRef) -> bool:
    """Is the GPU (or MIG instance) under ``key`` the chain's GPU, or part of it?

    Traps: the chain keeps the key the GPU had when it was armed (``uuid:<uuid>``
    before a binding revealed the bus id), so compare identities, not only keys. A
    MIG instance is part of its parent: a fault of the whole GPU (XID 79 names no
    instance) is every instance's; a fault attributed to one instance is not its
    siblings' (MIG isolates them), whatever the shared parent uuid says.
    """
    parent, instance = split_gpu_key(key)
    if instance is not None and ref.gpu_instance is not None and instance != ref.gpu_instance:
        return False
    if instance is None and ref.gpu_instance is not None:
        return False  # a whole GPU's pod is not on one instance of it
    if key == chain_key or (ref.pci_bus_id and key == ref.pci_bus_id):
        return True
    if instance is not None and ref.gpu_instance is None and parent in (chain_key, ref.pci_bus_id):
        return True
    return bool(ref.uuid) and unpack_uuid(gpu.uuid) == ref.uuid


def ordinary_crash(info: PodInfo, evidence: Evidence) -> bool:
    """A container's own non-zero exit, or a pod ``Failed`` with no reason given.

    Reads the evidence line (``streams.core.evidence``): a termination names its
    container; a pod status reads ``pod ns/name <phase>: <reason>[: message]``.
    """
    if info.container:
        return True
    head = f"pod {info.namespace}/{info.name} "
    if evidence.schema != "pod.v1" or not evidence.text.startswith(head):
        return False
    parts = evidence.text[len(head) :].split(": ", 2)
    return len(parts) > 1 and parts[1] == "Failed"


def holds_pod(step: Step, key: str) -> bool:
    """Is this pod already part of the open chain, or of an escalated gpu_degraded (so
    its crashes are not CUDA OOM)?"""
    for inc in (step.find(KIND, SUBJECT), step.find(DEGRADED, DEGRADED_SUBJECT)):
        if inc is None or (inc.type == DEGRADED and "escalated" not in inc.attributes):
            continue
        if any(
            f"{p.namespace}/{p.name}" == key for p in inc.pods.values() if p.role != "candidate"
        ):
            return True
    return False


def on_timer(step: Step) -> None:
    state = step.state
    pending = state.drop_pending
    if pending is not None and step.now >= pending[0] + step.config.drop_persist_seconds:
        _forget_drop(state)
        if degraded(state):
            arm(step, pending[1], at=pending[0])  # it persisted: not a plugin re-registering
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


def on_restored(step: Step, note: str = "all GPUs allocatable again") -> None:
    """All GPUs allocatable again (and no DRA device faulty): a chain whose window has
    closed can resolve, and a pending drop was a device plugin re-registering
    (8 -> 0 -> 8): forget it. ``note``: the resolution's words."""
    state = step.state
    if state.drop_pending is not None:
        _forget_drop(state)
    inc = step.find(KIND, SUBJECT)
    persist = step.config.drop_persist_seconds
    if inc is None and persist > 0 and state.chain_triggers and not state.chain_codes:
        # A chain armed by drops alone, none of whose window's pods failed: the device
        # plugin now reports every GPU healthy again, so the device that worried it is
        # back. A pod failing later in the old window is not that drop's casualty, and a
        # new fault (an XID minutes later) starts its own chain, dated from itself, not
        # from the recovered drop (seen in a simulated fleet: a drop at 02:08:57 that persisted
        # 86 s, back at 02:10:23, then an XID 74 and its DeviceFailed eviction at 02:13:42
        # came out as a page first seen at 02:08:57). A fatal XID among the triggers keeps
        # the chain: a GPU reset is invisible to Kubernetes, allocatable says nothing of it.
        # Only drops trusted by lasting (``drop_persist_seconds`` > 0): with 0 every drop
        # arms at once and stays armed its window, as configured.
        _disarm(state)
        state.chain_until = -math.inf
        state.timers_dirty = True
        return
    if inc is not None and state.chain_until < step.now:
        _disarm(step.state)
        step.resolve(inc, step.now, note)


def deadline(state: NodeState, config: CoreSettings) -> float:
    found = state.chain_until if state.chain_until != -math.inf else NEVER
    if state.drop_pending is not None:
        found = min(found, state.drop_pending[0] + config.drop_persist_seconds)
    return found


def _forget_drop(state: NodeState) -> None:
    state.drop_pending = None
    state.timers_dirty = True


def _disarm(state: NodeState) -> None:
    state.chain_triggers = ()
    state.chain_gpus = ()
    state.chain_codes = ()
    state.chain_anchor = ""


def _join(step: Step, info: PodInfo, evidence: Evidence) -> None:
    state = step.state
    inc = step.find(KIND, SUBJECT)
    if inc is None:
        repeat = _repeat_telling(step)
        if repeat is not None:
            # The GPU's xid_repeat page (drain, RMA) tells this fault: its casualty joins
            # it, one root cause, one page.
            for trigger in state.chain_triggers:
                step.add_evidence(repeat, trigger)
            step.add_pod(repeat, info)
            step.add_evidence(repeat, evidence)
            return
        degraded = step.find(DEGRADED, DEGRADED_SUBJECT)
        first = min(to_seconds(t.time) for t in state.chain_triggers)
        if degraded is not None and older_fault(step, degraded, first):
            inc = _open_chain(step, first)
            _supersede(step, degraded, inc)
        elif degraded is not None:
            # The node's gpu_degraded already tells this fault: one root cause, one
            # incident. The chain's triggers and GPUs join it, and the failure escalates it.
            for trigger in state.chain_triggers:
                step.add_evidence(degraded, trigger)
            for key, gpu in state.chain_gpus:
                step.add_gpu(degraded, key, gpu)
            escalate(step, degraded, info, evidence)
            return
        else:
            inc = _open_chain(step, first)
    step.add_pod(inc, info)
    step.add_evidence(inc, evidence)
    _describe(step, inc)


def _open_chain(step: Step, first: float) -> OpenIncident:
    state = step.state
    state.fault_draft = None  # the chain reports the fault: no gpu_degraded for it
    inc = step.open(KIND, SUBJECT, state.chain_anchor, first)
    for trigger in state.chain_triggers:
        step.add_evidence(inc, trigger)
    for key, gpu in state.chain_gpus:
        step.add_gpu(inc, key, gpu)
    return inc


def _supersede(step: Step, degraded: OpenIncident, chain: OpenIncident) -> None:
    """A new fault's page on the GPU(s) an older ticket names (and no other) supersedes
    the ticket: its action (cordon, drain, reset or replace the GPU) covers what the
    ticket asked, and one GPU has one open incident. A ticket that names other GPUs
    stays: it has more to say (an escalated one is a page of its own already)."""
    if "escalated" in degraded.attributes:
        return
    if not degraded.gpus or not set(degraded.gpus) <= set(chain.gpus):
        return
    degraded.attributes["superseded_by"] = chain.id
    step.resolve(degraded, step.now, f"superseded by {KIND} {chain.id}")


def _repeat_telling(step: Step) -> OpenIncident | None:
    """The open ``xid_repeat`` that tells the armed chain's fault: the chain's triggers
    are XIDs only, on one GPU, of codes whose repeats are open on it. A pod failing then
    is a casualty of the failing hardware that page already names (seen in a simulated fleet: an
    XID 48 repeat opened at 13:26:43, the GPU's pod crashed at 13:27:22 and paged a
    second time as a new chain). A drop among the triggers, or another GPU, is more
    than the repeat tells: the chain goes on."""
    state = step.state
    if not state.chain_codes or len(state.chain_gpus) != 1:
        return None
    if any(t.schema == "node.v1" for t in state.chain_triggers):
        return None
    key = state.chain_gpus[0][0]
    found = [open_repeats(step, key, code) for code in state.chain_codes]
    if not all(found):
        return None  # another code among the triggers: a fault the repeat does not tell
    return found[0][0]


def older_fault(step: Step, degraded: OpenIncident, first: float) -> bool:
    """Does the node's open ``gpu_degraded`` tell an *older* fault than the chain's, whose
    first trigger is at ``first``? It does when it began more than the chain's window before
    that trigger: an XID-only ticket stays open a day, and a new fatal XID on another GPU an
    hour later with a pod failing is a new fault that pages as its own chain (folded in, it
    came out as an update of an hour-old incident). Within the window it is one incident.

    Traps: a flaky GPU logs one fault again and again, so the ticket is older only when none
    of the chain's GPUs is named in its evidence from before the window (its GPU list does not
    tell); a chain whose GPU is unknown (a drop) escalates; only the same code is the ticket's
    fault come back (:func:`_same_fault_code`); an old drop tells only while it lasts; only
    the ticket's fault evidence tells (:func:`fault_evidence`), not an application XID or a
    crash. docs/detection.md, design notes: `older_fault`.
    """
    state = step.state
    cutoff = first - step.config.eviction_window_seconds
    if degraded.first_seen >= cutoff:
        return False
    gpus = [ref for key, ref in state.chain_gpus if key != "unknown"]
    if not gpus:
        return False
    persisting = state.degraded_since is not None and state.degraded_since < cutoff
    for item in degraded.evidence:
        if to_seconds(item.time) >= cutoff:
            continue
        if item.schema == "node.v1":
            if persisting:
                return False  # an old drop names no GPU: it may be this one
            continue  # it recovered since (a plugin's 8 -> 0 -> 8): it is not this one
        if not fault_evidence(item):
            continue  # an application XID or a pod's crash the ticket attached
        if not _same_fault_code(item, state.chain_codes):
            continue  # the GPU's other fault: the chain's code is new to it
        for ref in gpus:
            if (ref.uuid and ref.uuid in item.text) or (
                ref.pci_bus_id and ref.pci_bus_id in item.text
            ):
                return False
    return True


def _same_fault_code(item: Evidence, codes: tuple[int, ...]) -> bool:
    """Can the ticket's XID line ``item`` be the chain's fault come back? When its code is
    one of the chain's, or the chain has no code (a drop names none), or the line is an
    XID 154 (the driver's request about the GPU, whatever the fault)."""
    read = xid_code_and_class(item)
    if read is None or not codes:
        return True
    return read[0] in codes or read[0] == _RECOVERY_XID


_SLICE = "resource_slice.v1"
_UNHEALTHY = "Unhealthy (allocatedResourcesStatus)"
"""How a device-health evidence line ends (``streams.core.evidence.device_unhealthy``)."""


def _claimed(inc: OpenIncident) -> str:
    """The DRA devices and claims an incident names (``dra.name_devices``), in words."""
    devices = inc.attributes.get("dra_devices", "")
    if not devices:
        return ""
    claims = inc.attributes.get("claims", "")
    held = f", held by claim {claims.replace(',', ', ')}" if claims else ""
    return f"; DRA device {devices.replace(',', ', ')}{held}"


def _describe(step: Step, inc: OpenIncident) -> None:
    state, config = step.state, step.config
    causes = [f"XID {code}" for code in state.chain_codes]
    if any(t.schema == "node.v1" for t in state.chain_triggers):
        causes.append("GPU allocatable drop")
    if any(t.schema == _SLICE for t in state.chain_triggers):
        causes.append("DRA device taint")
    elif any(_DEVICE_TAINT_WORD in t.text for t in state.chain_triggers):
        causes.append("NoExecute device taint (its eviction controller's word)")
    if any(t.text.endswith(_UNHEALTHY) for t in state.chain_triggers):
        causes.append("device reported Unhealthy")
    dra.name_devices(state, inc.attributes, list(inc.gpus.values()))
    cause = " + ".join(causes) or "device failure"
    pods = len({(p.namespace, p.name) for p in inc.pods.values()})
    where = ", ".join(g.uuid or g.pci_bus_id for g in inc.gpus.values()) or "a GPU"
    inc.summary = (
        f"{cause} on {state.node} ({where}), then {pods} GPU pod{'s' if pods != 1 else ''} "
        "failed or were evicted"
    ) + _claimed(inc)
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


# -- a device failure that finds the node's gpu_degraded open ----------------------------
def _escalate(step: Step, info: PodInfo, evidence: Evidence) -> bool:
    """A device failure with no chain to join escalates an open ``gpu_degraded`` it belongs
    to: the chain's test, against the degraded GPUs and the times of their XIDs / drop
    (never an ordinary crash far from the fault, never a host-pressure eviction)."""
    inc = step.find(DEGRADED, DEGRADED_SUBJECT)
    if inc is None:
        return False
    times = [to_seconds(e.time) for e in inc.evidence if fault_evidence(e)]
    fatal = bool(inc.attributes.get("xids"))
    if not belongs_to(step, info, evidence, step.now, inc.gpus.items(), times, fatal=fatal):
        return False
    escalate(step, inc, info, evidence)
    return True


_CLEANUP_XID = 45
"""Preemptive cleanup after earlier errors: never a fault time of its own."""
_RECOVERY_XID = 154
"""The driver's recovery action: a request about the GPU, whatever its fault."""


def fault_evidence(item: Evidence) -> bool:
    """An allocatable change or an XID that is not an application / informational one:
    the times a failure is judged against. A workload's own XID 13 is no device fault
    time, nor is the cleanup XID 45 that follows it: after a fatal XID the fault's own
    line, seconds earlier, is in the evidence already, and after an application XID (or
    alone) it is the workload's teardown (the device plugin skips 45 too:
    NVIDIA/k8s-device-plugin internal/rm/health.go). An XID 154 is a recovery action
    and keeps counting."""
    if item.schema in ("node.v1", _SLICE):
        return True  # a drop, or a DRA device tainted or gone from its slices
    read = xid_code_and_class(item)
    if read is None:
        return False
    code, xid_class = read
    return xid_class not in ("app", "info") and code != _CLEANUP_XID


def escalate(step: Step, inc: OpenIncident, info: PodInfo, evidence: Evidence) -> None:
    """The degraded GPU is now evicting workloads: the eviction chain's situation, in the
    same incident (same id: a revision, not a new page), at the chain's severity."""
    inc.severity = step.config.severity.get(KIND, "page")
    inc.attributes["escalated"] = "pod failure"
    step.add_pod(inc, info)
    step.add_evidence(inc, evidence)
    step.set_deadline(inc, NEVER if degraded(step.state) else inc.resolve_at)
    describe_escalated(step, inc)


def describe_escalated(step: Step, inc: OpenIncident) -> None:
    state, config = step.state, step.config
    codes = [c for c in inc.attributes.get("xids", "").split(",") if c]
    causes = [f"XID {c}" for c in codes]
    if any(e.schema == "node.v1" for e in inc.evidence):
        causes.append("GPU allocatable drop")
    if any(e.schema == _SLICE for e in inc.evidence):
        causes.append("DRA device fault")
    if any(e.text.endswith(_UNHEALTHY) for e in inc.evidence):
        causes.append("device reported Unhealthy")
    dra.name_devices(state, inc.attributes, list(inc.gpus.values()))
    cause = " + ".join(causes) or "device failure"
    failed = {(p.namespace, p.name) for p in inc.pods.values() if p.role in ("evicted", "failed")}
    where = ", ".join(g.uuid or g.pci_bus_id for g in inc.gpus.values()) or "a GPU"
    n = len(failed)
    inc.summary = (
        f"{cause} on {state.node} ({where}) degraded the node, then {n} GPU "
        f"pod{'s' if n != 1 else ''} failed or were evicted: the eviction chain's situation"
    ) + _claimed(inc)
    told = inc.attributes.get("recovery_action", "")
    nvidia = f" The driver asks: {told}." if told else ""
    for code in codes:
        rule = config.xid.get(int(code))
        if not nvidia and rule is not None and rule.action:
            nvidia = f" NVIDIA's action for XID {code}: {rule.action}"
    inc.action = (
        f"Cordon and drain {state.node}, then reset or replace the GPU; the failed pods' "
        f"controllers reschedule them elsewhere.{nvidia}"
    )


SPEC: NodeRule = NodeRule(
    name="chain",
    emits=((KIND, "page"),),
    reads=(XidEvent, NodeEvent, PodEvent, KubeEvent, ResourceSliceEvent),
    state=(
        "recent_failures",
        "chain_until",
        "chain_anchor",
        "chain_triggers",
        "chain_gpus",
        "chain_codes",
        "drop_pending",
    ),
    settings=(
        "eviction_window_seconds",
        "eviction_lookback_seconds",
        "failure_reasons",
        "drop_persist_seconds",
        "device_fault_near_seconds",
        "device_failure_patterns",
        "cuda_oom_patterns",
    ),
    deadline=deadline,
    on_timer=on_timer,
)
"""``device_unhealthy_eviction``: a fatal XID or an allocatable drop, and the GPU pods
that fail after it (or just before)."""
