"""``suspected_cuda_oom``: a GPU container crash-loops with non-zero exits, never OOMKilled.

CUDA running out of GPU memory is invisible to Kubernetes (the process raises, exits 1,
the container restarts), so the rule needs no log: more than ``cuda_oom_restarts`` non-zero
exits within ``cuda_oom_window_seconds``, none ``OOMKilled`` (that is ``host_oom_kill``).
A termination message saying ``CUDA out of memory`` confirms it; one naming another cause
(``schemas/termination_causes.toml``) names that cause and its action instead, and a GPU or
driver cause is a ``gpu_fault_crash_loop`` (or joins the GPU's open hardware incident): a
pager that reads "CUDA OOM" shrinks a batch while the GPU is broken.

Traps: exit 137 without ``OOMKilled`` and 143 are kills from outside, never crashes;
restarts count from ``restartCount`` (crashes a watch gap hid still count); the unnamed
loop keeps its old subject and text byte for byte (replay ids unchanged); windows are
inclusive. The reasoning: docs/detection.md, design notes.
"""

from __future__ import annotations

from schemas.events import PodEvent, Termination
from schemas.incidents import Evidence
from schemas.termination_causes import OOM, CauseClass, load_causes
from streams.core import evidence as text
from streams.core.lifecycle import Step
from streams.core.rules import chain
from streams.core.rules.gpuids import split_gpu_key
from streams.core.rules.pods import co_tenants, pod_info
from streams.core.rules.spec import NodeRule
from streams.core.state import ContainerTrack, GpuTrack, OpenIncident, PodTrack, bound_pods, gpu_ref
from streams.core.timeconv import to_datetime

KIND = "suspected_cuda_oom"
FAULT_KIND = "gpu_fault_crash_loop"
"""A crash loop whose termination message names the GPU or its driver (the table's
``device`` classes), or a kernel fault just after a fatal XID on its GPU."""
_KERNEL_FAULT = "kernel_fault"
_MAX_RESTARTS = 32

_CAUSES = load_causes()
"""The packaged termination-cause table (not in CoreSettings: see the module docstring)."""
_NAMED = tuple(cls for cls in _CAUSES.classes if cls.name != OOM)
_FATAL_XID_ACTION = (
    "Drain the node and reset the GPU (nvidia-smi -r); check the kernel log for the fatal XID "
    "and nvidia-smi -q -d ECC,ROW_REMAPPER; if it recurs after a reset, replace the GPU. Not "
    "the workload: do not shrink the batch."
)
"""A kernel fault just after a fatal XID on its GPU: the XID's action, not a code bug's."""
_WITHIN_A_LOOP = frozenset({"kernel_fault", "nccl_comm"})
"""Named causes that do not split a log-confirmed CUDA OOM loop (:func:`_confirmed_loop`)."""


def cause_subject(base: str, cause: str) -> str:
    """The subject of a crash loop of container ``base`` whose message named ``cause``."""
    return f"{base}#{cause}"


def on_crash(
    step: Step,
    key: str,
    track: PodTrack,
    ctr: ContainerTrack,
    term: Termination,
    ev: PodEvent,
    finished: float,
) -> None:
    """A non-zero, non-OOM termination of a GPU container."""
    config = step.config
    window = config.cuda_oom_window_seconds
    kept = tuple(t for t in ctr.restarts if t >= finished - window)[-_MAX_RESTARTS + 1 :]
    ctr.restarts = (*kept, finished)
    if not kept:
        ctr.cuda_log = False  # a fresh window: forget the previous episode's log line
    message = term.message
    named: CauseClass | None = None
    if message:
        if any(p in message for p in config.cuda_oom_patterns):
            ctr.cuda_log = True
        else:
            named = chain.classify(message)
            if named is not None and named.name == OOM:
                ctr.cuda_log = True
                named = None
    base = f"{key}/{ctr.name}"
    if named is None and not ctr.cuda_log:
        named = _open_cause(step, base)
    device = named is not None and (
        named.device
        or (named.name == _KERNEL_FAULT and _after_fatal_xid(step, key, ctr.restarts[0]))
    )
    if (
        named is not None
        and not device
        and named.name in _WITHIN_A_LOOP
        and _confirmed_loop(step, base)
    ):
        named = None  # one crash of a loop its log proved CUDA OOM: that loop's incident
    if named is not None:
        _on_named_crash(step, key, track, ctr, term, ev, finished, base, named, device=device)
        return
    subject = base
    ordinal = len(ctr.restarts)
    inc = step.find(KIND, subject)
    if inc is None:
        if not _may_open(step, key, ctr, finished):
            return  # the common case on a crash: no text built for nothing
        inc = step.open(KIND, subject, ev.id, ctr.restarts[0])
        step.add_pod(inc, pod_info(key, track, "restarting", ctr.name))
        neighbours = co_tenants(step.state, key)
        if neighbours or step.state.sharing:
            inc.attributes["shared_gpu"] = step.state.sharing or "shared"
        for other in neighbours:
            step.add_pod(inc, pod_info(other, step.state.pods.get(other), "candidate"))
    _add_crash(step, inc, ctr, term, ev, ordinal)
    confirmed = ctr.cuda_log
    inc.attributes["confidence"] = "log-confirmed" if confirmed else "suspected"
    inc.attributes["restarts_in_window"] = str(inc.count)
    minutes = window / 60
    inc.summary = (
        f"container {subject} on {step.state.node} restarted {inc.count} times in "
        f"{minutes:g} min with non-zero exits and no OOMKilled: "
        + (
            "CUDA out of memory (seen in its termination message)"
            if confirmed
            else "suspected CUDA OOM or driver error"
        )
    )
    shared = (
        " On a shared GPU, check the co-tenant pods' memory use."
        if ("shared_gpu" in inc.attributes)
        else ""
    )
    inc.action = (
        "Check the container's logs for torch.cuda.OutOfMemoryError; reduce batch size or "
        f"request a larger GPU / MIG profile.{shared}"
    )


def _may_open(step: Step, key: str, ctr: ContainerTrack, finished: float) -> bool:
    """Whether the window's crashes make a loop: past the threshold, no OOM kill, no chain."""
    config = step.config
    if len(ctr.restarts) <= config.cuda_oom_restarts:
        return False
    if ctr.oom_at >= finished - config.cuda_oom_window_seconds:
        return False
    return not chain.holds_pod(step, key)


def _add_crash(
    step: Step,
    inc: OpenIncident,
    ctr: ContainerTrack,
    term: Termination,
    ev: PodEvent,
    ordinal: int,
) -> None:
    """The crash as evidence, the count, and the quiet deadline (shared by every cause)."""
    window = step.config.cuda_oom_window_seconds
    # Unseen restarts (restartCount deltas) share one stamp: list each time once.
    shown = dict.fromkeys(ctr.restarts[:-1])
    earlier = ", ".join(to_datetime(t).strftime("%H:%M:%S") for t in list(shown)[-4:])
    item = text.termination(
        ev,
        ctr.name,
        term,
        f"crash {ordinal} in {window / 60:g} min" + (f" (earlier: {earlier})" if earlier else ""),
    )
    inc.count = len(ctr.restarts)
    step.add_evidence(inc, item)
    step.set_deadline(inc, step.now + window)


def _confirmed_loop(step: Step, base: str) -> bool:
    """Is a log-confirmed CUDA OOM loop of container ``base`` open? Then a crash whose
    message names a cause of the workload's or the network's (:data:`_WITHIN_A_LOOP`:
    an illegal memory access, an NCCL error) is one more crash of that loop, not a loop
    of its own: the restarts are the container's one count, the loop's log already
    proved it out of GPU memory, and such texts are what a dying rank's peers and an
    OOM'ing process's last kernels print (the cause table: the NCCL watchdog re-raises
    the error that killed the rank). Opened as a second incident, first seen at the
    same crash, one loop was two tickets (seen in a simulated fleet: four loops, an NCCL or an
    illegal-memory-access exit among their OOM exits). A device's own words (an ECC
    error, a failing NVML: ``gpu_fault``, ``driver_fault``) still open their own: they
    call for the GPU, not for a smaller batch. An unconfirmed suspicion is superseded by
    a named cause as before (the text proved the guess wrong)."""
    inc = step.find(KIND, base)
    return inc is not None and inc.attributes.get("confidence") == "log-confirmed"


def _open_cause(step: Step, base: str) -> CauseClass | None:
    """The cause of a named-cause loop already open for the container, if any.

    Several can be open (two different texts in one window): the first in precedence
    order wins, so the choice never depends on dict order.
    """
    for cls in _NAMED:
        subject = cause_subject(base, cls.name)
        if step.find(KIND, subject) is not None or step.find(FAULT_KIND, subject) is not None:
            return cls
    return None


def _pod_gpus(step: Step, key: str) -> list[tuple[str, GpuTrack]]:
    """The GPUs (or MIG instances) the pod is bound to, in the node's order."""
    return [(k, g) for k, g in step.state.gpus.items() if key in bound_pods(g)]


def _after_fatal_xid(step: Step, key: str, since: float) -> bool:
    """Did the loop (its first crash in the window at ``since``) begin at most
    ``device_fault_near_seconds`` after a fatal XID on one of the pod's GPUs (an
    instance's parent too), or during it? Then its kernel faults are the GPU's, not the
    code's: an XID 79 or 48 kills every kernel in flight with exactly those words, and
    the restarts that follow fail alike. Trap: the GPU's last XID must be a fault (not
    the workload's 13/31/43: ``last_xid_app``), as the eviction chain judges it."""
    near = step.config.device_fault_near_seconds
    gpus = step.state.gpus
    for gpu_key, gpu in _pod_gpus(step, key):
        parent = gpus.get(split_gpu_key(gpu_key)[0])
        for track in (gpu, parent):
            if (
                track is not None
                and track.fatal
                and not track.last_xid_app
                and since - near <= track.last_xid <= step.now
            ):
                return True
    return False


def _hardware_incident(step: Step, key: str) -> OpenIncident | None:
    """An open incident that already tells the pod's GPU's hardware fault, if any: an
    ``xid_repeat`` of one of its GPUs, or the node's ``gpu_degraded`` naming one of
    them. (The eviction chain and an escalated ``gpu_degraded`` took the crash before
    this rule ran, when it was theirs.)"""
    bound = _pod_gpus(step, key)
    for gpu_key, _ in bound:
        parent = split_gpu_key(gpu_key)[0]
        for candidate in dict.fromkeys((gpu_key, parent)):
            repeats = chain.open_repeats(step, candidate)
            if repeats:
                return min(repeats, key=lambda inc: inc.subject)
    degraded = step.find(chain.DEGRADED, chain.DEGRADED_SUBJECT)
    if degraded is not None:
        for gpu_key, _ in bound:
            parent = split_gpu_key(gpu_key)[0]
            if gpu_key in degraded.gpus or parent in degraded.gpus:
                return degraded
    return None


def _join_hardware(
    step: Step, inc: OpenIncident, key: str, track: PodTrack, ctr: ContainerTrack, item: Evidence
) -> None:
    """The crash is one more casualty of the GPU's open hardware incident: the pod is
    named there (restarting), the crash is its evidence; no incident of its own."""
    step.add_pod(inc, pod_info(key, track, "restarting", ctr.name))
    step.add_evidence(inc, item)


def _on_named_crash(
    step: Step,
    key: str,
    track: PodTrack,
    ctr: ContainerTrack,
    term: Termination,
    ev: PodEvent,
    finished: float,
    base: str,
    cause: CauseClass,
    *,
    device: bool = False,
) -> None:
    """A crash of a loop whose termination message names ``cause`` (not CUDA OOM);
    ``device``: the cause is the GPU's (typed :data:`FAULT_KIND`, or joined to the GPU's
    open hardware incident)."""
    subject = cause_subject(base, cause.name)
    ordinal = len(ctr.restarts)
    kind = FAULT_KIND if device else KIND
    inc = step.find(kind, subject)
    if device and inc is None:
        # A kernel fault's loop opened before the fatal XID came keeps its own type: the
        # crashes are one loop, counted once.
        inc = step.find(KIND, subject)
        if inc is not None:
            kind = KIND
    if device and inc is None:
        hardware = _hardware_incident(step, key)
        if hardware is not None:
            _join_hardware(step, hardware, key, track, ctr, text.termination(ev, ctr.name, term))
            return
    if inc is None:
        if not _may_open(step, key, ctr, finished):
            return
        inc = step.open(kind, subject, ev.id, ctr.restarts[0])
        step.add_pod(inc, pod_info(key, track, "restarting", ctr.name))
        suspicion = step.find(KIND, base)
        if suspicion is not None and suspicion.attributes.get("confidence") == "suspected":
            step.resolve(
                suspicion,
                step.now,
                f"superseded: the termination message names {cause.label} ({subject})",
            )
    if cause.names_gpu or device:
        for gpu_key, gpu in step.state.gpus.items():
            pods = bound_pods(gpu)
            if key in pods:
                step.add_gpu(inc, gpu_key, gpu_ref(gpu_key, gpu, step.state))
                for other in pods:
                    if other != key:
                        step.add_pod(inc, pod_info(other, step.state.pods.get(other), "bound"))
    _add_crash(step, inc, ctr, term, ev, ordinal)
    inc.attributes["cause"] = cause.name
    inc.attributes["confidence"] = "log-named"
    inc.attributes["restarts_in_window"] = str(inc.count)
    minutes = step.config.cuda_oom_window_seconds / 60
    after_xid = inc.type == FAULT_KIND and not cause.device
    inc.summary = (
        f"container {base} on {step.state.node} restarted {inc.count} times in "
        f"{minutes:g} min with non-zero exits and no OOMKilled: {cause.label} "
        + (
            "just after a fatal XID on its GPU (a GPU fault), not CUDA OOM"
            if after_xid
            else "(named in its termination message), not CUDA OOM"
        )
    )
    gpus = ", ".join(g.uuid or g.pci_bus_id for g in inc.gpus.values() if g.uuid or g.pci_bus_id)
    inc.action = (_FATAL_XID_ACTION if after_xid else cause.action) + (
        f" GPU: {gpus}." if gpus else ""
    )


def on_unseen_restarts(step: Step, ctr: ContainerTrack, count: int, since: float) -> None:
    """``count`` crashes that only ``restartCount`` shows, at the earliest ``since``.

    They join the container's window as restarts stamped ``since`` (the last time we
    saw the container): the next handled crash counts them, opens the incident if
    they take it past ``cuda_oom_restarts`` (its evidence lists each earlier time once).
    An OOM kill in the window still vetoes, as for seen crashes.
    """
    window = step.config.cuda_oom_window_seconds
    if since < step.now - window:
        return  # the delta may be spread over more than the window: not a loop in it
    kept = tuple(t for t in ctr.restarts if t >= step.now - window)
    if not kept:
        ctr.cuda_log = False
    ctr.restarts = (*kept, *((since,) * count))[-_MAX_RESTARTS + 1 :]


def on_oom_killed(step: Step, key: str, ctr: ContainerTrack) -> None:
    """The container's last termination was OOMKilled: this is host memory, not CUDA."""
    base = f"{key}/{ctr.name}"
    for subject in (base, *[cause_subject(base, cls.name) for cls in _NAMED]):
        for kind in (KIND, FAULT_KIND):
            inc = step.find(kind, subject)
            if inc is not None:
                step.resolve(
                    inc, step.now, "superseded: last termination was OOMKilled (host_oom_kill)"
                )


SPEC: NodeRule = NodeRule(
    name="cuda",
    emits=((KIND, "ticket"), (FAULT_KIND, "ticket")),
    reads=(PodEvent,),
    state=(),
    settings=(
        "cuda_oom_restarts",
        "cuda_oom_window_seconds",
        "cuda_oom_patterns",
        "device_fault_near_seconds",
    ),
)
"""``suspected_cuda_oom`` and ``gpu_fault_crash_loop``: a GPU container's crash loop, by
its causes. Its state is per container (``ContainerTrack``), none per node; no timer:
the incidents resolve by their quiet time."""
