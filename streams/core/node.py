"""Applying one event (or one timer) to one node's state.

This is the node-scoped transition function: the engine calls
:func:`apply_event` with events already in event-time order, and
:func:`apply_timer` when the watermark passes :func:`next_deadline`.
The handlers below only decode *what changed* in the object; the rules in
:mod:`streams.core.rules` decide what it means.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from sys import intern
from typing import Any, Final

from schemas.events import (
    ContainerStatus,
    GpuBindingEvent,
    GpuTopologyEvent,
    KubeEvent,
    NodeEvent,
    PodEvent,
    ResourceSliceEvent,
    Termination,
    Tick,
    XidEvent,
)
from schemas.ids import k8s_version
from schemas.incidents import Evidence, Incident
from schemas.keys import DRA, POD_RESOURCES, claim_gpus
from schemas.wellknown import POOL_LABELS, PRODUCT_LABEL
from streams.core import evidence as text
from streams.core import shortcuts
from streams.core.config import CoreSettings, XidRule
from streams.core.lifecycle import Step, held_until
from streams.core.rules import (
    chain,
    cuda,
    degraded,
    disruption,
    dra,
    fabric,
    not_ready,
    nvlink,
    oom,
    stalled,
    watchers,
    xid,
)
from streams.core.rules.gpuids import (
    MIG_SEPARATOR,
    dra_instance,
    join_blob,
    join_lookup,
    join_pair,
    join_pairs,
    pack_uuid,
    split_gpu_key,
    unpack_uuid,
)
from streams.core.rules.labels import sharing_of
from streams.core.rules.pods import pod_info
from streams.core.rules.registry import NODE_RULES
from streams.core.state import (
    NEVER,
    ContainerTrack,
    GpuResources,
    GpuTrack,
    NodeState,
    PodTrack,
    bound_pods,
    gpu_ref,
)
from streams.core.timeconv import to_seconds

_UNKNOWN_XID = XidRule()
_RECENT_XIDS: Final = 3
_RECENT_XID_SECONDS: Final = 1800.0
_RESET_WORDS: Final = ("reset", "reboot", "drain")
_LIVE_PHASES: Final = ("Pending", "Running")
_TERMINAL_PHASES: Final = ("Succeeded", "Failed")
_EVICTION_REASONS: Final = (
    "Evicted",
    "TaintManagerEviction",
    "Preempting",
    "DeviceTaintManagerEviction",
    "DeletionByDeviceTaintManager",
    "DeletionByTaintManager",
)
_TAINT_DELETIONS: Final = ("DeletionByDeviceTaintManager", "DeletionByTaintManager")
"""``DisruptionTarget`` reasons of the taint eviction controllers (a device's
``NoExecute`` taint, a node's): the pod is being evicted, as their ``...Eviction`` Event
says; the condition is written first and stays until the pod is gone."""
_CANCELLED: Final = "Cancelling deletion"
"""The taint eviction controllers' Event when a taint is lifted or tolerated in time
(same reason as the eviction): no failure."""
TOMBSTONE_SECONDS: Final = 3600.0
"""How long (event time) a forgotten pod's last version is remembered in
``NodeState.gone``: longer than any redelivery after a crash (the uncommitted tail of
a partition) or a watch cache lagging behind; a copy older than that of a pod deleted
that long ago is indistinguishable from a new pod and is applied."""
_MAX_GONE: Final = 256
"""At most this many tombstones per node (a mass deletion keeps the newest)."""
_SIGNAL_EXITS = {137: "SIGKILL", 143: "SIGTERM"}
"""Exit codes 128 + n of a process killed by signal n from *outside* it.

137 is SIGKILL: the kubelet after a failed liveness probe (its ``Unhealthy`` and
``Killing`` events say so), after a preStop hook or the termination grace ran out,
or an eviction; without the reason ``OOMKilled`` it is not a memory kill. 143 is
SIGTERM: the polite first half of the same kills, and of every pod deletion. CUDA
running out of memory is never one of them: it is an exception inside the process,
which exits on its own (1, or 134 on abort). So a signal exit is never counted as a
crash toward ``suspected_cuda_oom``, and a signal exit of a pod being deleted is not
a failure at all: it is the deletion.
"""


# -- pods ------------------------------------------------------------------------
def _on_pod(step: Step, ev: PodEvent) -> None:
    state = step.state
    key = f"{ev.namespace}/{ev.name}"
    track = state.pods.get(key)
    failure_at = -math.inf
    if track is not None and _successor(track, ev):
        # A finished pod never runs again: this is a new pod with the same name
        # (StatefulSet) whose predecessor's deletion we did not see. Events name pods
        # by name only: a late copy of the predecessor's failure Event must not fail
        # the successor, so the name's newest failure time carries over (``admits``).
        failure_at = track.failure_at
        _forget_pod(step, key, "pod replaced by a new pod of the same name")
        track = None
    fresh = track is None
    if track is None:
        gpus = sum(ev.gpu_requests.values()) or sum(ev.gpu_limits.values()) or claim_gpus(ev.claims)
        if gpus <= 0:
            return
        track = PodTrack(
            key=key, owner_kind=intern(ev.owner_kind), owner_name=intern(ev.owner_name)
        )
        if failure_at > -math.inf:
            # Only then: a float stored is an object of its own (24 bytes a pod), the
            # default is one shared by every track.
            track.failure_at = failure_at
        state.pods[key] = track
    track.version = max(track.version, step.version)
    if track.phase != ev.phase:
        track.phase = intern(ev.phase)
    if ev.claims or track.other_claims:
        other = _other_claims(ev)
        if other != track.other_claims:
            track.other_claims = other
    deleting = _deleting(ev)
    window = step.config.cuda_oom_window_seconds
    for status in ev.containers:
        ctr = _container(track, status.name)
        crash = ctr.crash
        if crash is not None and crash.restarts and crash.restarts[-1] < step.now - window:
            ctr.restarts = ()  # the crash window has passed: free it
        if not deleting:
            _count_unseen_restarts(step, ctr, status)
        for term in (status.last_terminated, status.terminated):
            if term is None or term.finished_at is None:
                continue
            finished = to_seconds(term.finished_at)
            if finished <= ctr.last_finished:
                continue
            ctr.last_finished = finished
            _on_termination(step, ev, key, track, ctr, term, finished, deleting)
    watchers.on_gpu_running(step, ev, key, fresh)
    disruption.note(step, disruption.of_pod_status(ev.reason, ev.message))
    _on_device_health(step, key, ev)
    reason = ""
    cond = ev.disruption
    if ev.reason in step.config.failure_reasons:
        reason = ev.reason
    elif cond is not None and cond.status == "True" and cond.reason in _TAINT_DELETIONS:
        reason = cond.reason  # a taint eviction controller is deleting it: evicted
    elif ev.phase == "Failed" and not deleting:
        # A deleted pod's kubelet moves it to a terminal phase (Failed once its
        # containers exit 143) before it goes: that is the deletion, not a failure.
        # A failure reason (Evicted, NodeLost, TaintManagerEviction...) still counts.
        reason = ev.reason or "Failed"
    if reason and not track.failed:
        track.failed = True
        role = "evicted" if reason in _EVICTION_REASONS else "failed"
        if cond is not None and reason == cond.reason:
            item = text.pod_disruption(ev, cond)
        else:
            item = text.pod_status(ev, f"{ev.phase or 'failed'}: {reason}")
        _on_pod_failure(step, key, track, item, role, taint=reason in chain.DEVICE_TAINT_EVICTIONS)
    if ev.op == "deleted":
        _forget_pod(step, key, "pod deleted")
    elif ev.phase == "Succeeded":
        _resolve_pod_incidents(step, key, "pod succeeded")
    else:
        nvlink.on_pod(step, key, ev)


def _other_claims(ev: PodEvent) -> tuple[str, ...]:
    """The pod's claims that ask for no GPU (:attr:`PodTrack.other_claims`), made ones
    only: a claim not made yet holds no device."""
    return tuple(f"{ev.namespace}/{c.claim}" for c in ev.claims if c.gpus <= 0 and c.claim)


def _on_device_health(step: Step, key: str, ev: PodEvent) -> None:
    """What the pod's containers say of their devices' health (``allocatedResourcesStatus``):
    a device first reported Unhealthy arms the eviction chain and waits for
    ``gpu_degraded``; a report that ends may end a fault."""
    state = step.state
    started, ended = dra.apply_health(state, key, ev, step.now)
    if started or ended:
        state.timers_dirty = True
        _device_faults(step, dra.UNHEALTHY, started)
    if ended:
        degraded.on_device_recovered(
            step,
            "no container reports the device Unhealthy any more",
            healthy=ev.op != "deleted",
        )


def _device_faults(step: Step, kind: str, names: list[str]) -> None:
    """Device faults that just began (a taint, an Unhealthy report): each arms the
    eviction chain on its GPU, and joins an open ``gpu_degraded``."""
    if not names:
        return
    for fault in dra.faults(step.state, step.config):
        if fault.kind == kind and fault.ident in names:
            chain.arm(step, fault.item, fault.key, fault.ref)
            degraded.on_device_fault(step, fault)


def _count_unseen_restarts(step: Step, ctr: ContainerTrack, status: ContainerStatus) -> None:
    """Restarts that ``restartCount`` shows but no update we saw carried (the
    rule counts restarts from restartCount).

    A reconnected watch, a relist or a coalescing API server can show ``restartCount`` 6 after
    a sighting at 0: five terminations went unseen, and counting observed exits alone misses
    that crash loop. ``ctr.restart_count`` is what is already accounted for.

    Traps: the first sight is a baseline, not a delta; unseen restarts take the class of the
    newest termination shown (none shown, nothing to say); their times are unknown, so they
    are stamped at the previous sighting; a smaller count re-baselines; no new termination, no
    unseen crash (the kubelet bumps the count when it starts the next instance, which made
    three crashes "5 restarts"). docs/detection.md, design notes: `_count_unseen_restarts`.
    """
    count = status.restart_count
    accounted, seen = ctr.restart_count, ctr.seen_at
    ahead = 1 if status.terminated is not None else 0
    if ctr.restart_count != count + ahead:
        ctr.restart_count = count + ahead
    ctr.seen_at = max(seen, step.now)  # a late (relisted) copy never moves it back
    if seen == -math.inf or count <= accounted:
        return
    last = status.last_terminated
    fresh = _is_fresh(last, ctr)
    if not fresh and not _is_fresh(status.terminated, ctr):
        return  # the rise is the restart of an exit already handled: nothing missed
    unseen = count - accounted - (1 if fresh else 0)
    newest = status.terminated or last
    if unseen <= 0 or newest is None or not _is_crash(newest):
        return
    cuda.on_unseen_restarts(step, ctr, unseen, seen)


def _is_fresh(term: Termination | None, ctr: ContainerTrack) -> bool:
    """A termination newer than the container's last handled one."""
    return (
        term is not None
        and term.finished_at is not None
        and to_seconds(term.finished_at) > ctr.last_finished
    )


def _is_crash(term: Termination) -> bool:
    """The process failed on its own: non-zero, not OOMKilled, not a signal from outside."""
    return (
        term.exit_code != 0
        and term.reason != "OOMKilled"
        and term.exit_code not in _SIGNAL_EXITS
        and not watchers.start_error(term)
    )


def _deleting(ev: PodEvent) -> bool:
    """Is this pod being deleted (deletionTimestamp set, or the watch's DELETED)?"""
    return ev.op == "deleted" or ev.deleted_at is not None


def _successor(track: PodTrack, ev: PodEvent) -> bool:
    """Is ``ev`` a new pod of the same name, not a later update of ``track``'s pod?

    No uid is kept (:class:`PodTrack`), so the phase decides: a pod's phase only moves
    forward, Pending -> Running -> Succeeded/Failed (kubernetes.io, "Pod Lifecycle").
    A live phase after the object itself said Succeeded/Failed is a successor.

    Trap: a failure *Event* alone (``TaintManagerEviction`` "Marking for deletion",
    ``Evicted``...) marks the track failed while the object is still Running: the
    updates that follow (the deletionTimestamp, the SIGTERM's exit) are the same pod.
    Taking them for a successor reset its containers, so the still-shown ``lastState``
    OOMKilled became a second ``host_oom_kill`` for one kill (seen in a simulated fleet:
    every NotReady taint eviction of a pod OOM-killed before). After such an Event
    only a return to Pending (which a pod never does) says a successor; a successor
    first seen Running is then taken for its predecessor until its phase says more.
    """
    if ev.phase not in _LIVE_PHASES:
        return False
    if track.phase in _TERMINAL_PHASES:
        return True
    return track.failed and ev.phase == "Pending" and track.phase not in ("", "Pending")


def _container(track: PodTrack, name: str) -> ContainerTrack:
    known = track.containers
    if not isinstance(known, tuple):  # see _known_container
        if known.name == name:
            return known
        known = (known,)
    for ctr in known:
        if ctr.name == name:
            return ctr
    ctr = ContainerTrack(name=intern(name))
    track.containers = (*known, ctr) if known else ctr
    return ctr


def _on_termination(
    step: Step,
    ev: PodEvent,
    key: str,
    track: PodTrack,
    ctr: ContainerTrack,
    term: Termination,
    finished: float,
    deleting: bool,
) -> None:
    if term.reason == "OOMKilled":
        ctr.oom_at = finished
        cuda.on_oom_killed(step, key, ctr)
        item = text.termination(ev, ctr.name, term)
        info = pod_info(key, track, "oom_killed", ctr.name)
        oom.on_container_oom(step, f"{key}/{ctr.name}", info, item, finished)
        return
    if term.exit_code == 0:
        return
    if deleting and disruption.planned(step):
        return  # the planned deletion's exit, whatever its code (a trainer's SIGTERM: 1)
    signal = _SIGNAL_EXITS.get(term.exit_code)
    if signal is not None and deleting:
        return  # the deletion's own SIGTERM (or SIGKILL after the grace): not a crash
    if signal is not None and ev.reason in step.config.failure_reasons:
        # The kill of a pod this very update says failed (Evicted, NodeLost...): the
        # pod's failure, with its reason and message, stands for it (offered below in
        # _on_pod). Offered alone, the SIGKILL of a node-memory-pressure eviction read
        # as an ordinary crash near a drop and joined the device chain (seen in a
        # simulated fleet), though the eviction's own words say host memory.
        return
    item = text.termination(ev, ctr.name, term)
    never_ran = watchers.start_error(term)
    if never_ran:
        watchers.on_start_error(step, ev, key, ctr.name, term)
    if _on_pod_failure(step, key, track, item, "failed", ctr.name):
        return
    if signal is not None or never_ran:
        # Killed from outside (probe, preStop, eviction), or never started (the runtime
        # failed it: exit 128): not the process running out of GPU memory.
        return
    cuda.on_crash(step, key, track, ctr, term, ev, finished)


def _on_pod_failure(
    step: Step,
    key: str,
    track: PodTrack | None,
    item: Evidence,
    role: str,
    container: str = "",
    *,
    taint: bool = False,
) -> bool:
    """Offer a GPU pod failure to the chain, then to a NotReady incident.

    ``taint``: the device taint eviction controller evicts it, which is a device fault
    of its own where no known one claims it (:func:`chain.arm_on_eviction`).
    Returns True when the failure joined a device chain (so it is not a CUDA OOM).
    """
    info = pod_info(key, track, role, container)
    if chain.on_failure(step, info, item):
        return True
    others = track.other_claims if track is not None else ()
    if taint and chain.arm_on_eviction(step, key, item, others):
        return True
    not_ready.on_failure(step, info, item)
    return False


def _resolve_pod_incidents(step: Step, key: str, note: str) -> None:
    prefix = f"{key}/"
    for inc in list(step.state.incidents.values()):
        mine = inc.subject == key if inc.type == nvlink.KIND else inc.subject.startswith(prefix)
        if mine and inc.type in (oom.KIND, cuda.KIND, cuda.FAULT_KIND, nvlink.KIND):
            step.resolve(inc, step.now, note)


def _forget_pod(step: Step, key: str, note: str) -> None:
    _resolve_pod_incidents(step, key, note)
    if dra.forget_pod(step.state, key):
        step.state.timers_dirty = True
        degraded.on_device_recovered(
            step, "no container reports the device Unhealthy any more", healthy=False
        )
    nvlink.forget(step.state, key)
    pods = step.state.pods
    track = pods.pop(key, None)
    if track is None:
        return
    # A dict never shrinks when entries leave: a node's pods come and go, and its dict
    # kept the table of its busiest hour (~10 bytes per tracked pod on the bench). Built
    # anew, it takes the smallest table for what it holds; a few entries, a rare event.
    step.state.pods = dict(pods.items())
    if track.version:
        _bury(step.state, ((key, track.version, step.now),))


def _bury(state: NodeState, graves: tuple[tuple[str, int, float], ...]) -> None:
    """Remember forgotten pods' last versions (``NodeState.gone``), newest last."""
    keys = {g[0] for g in graves}
    kept = tuple(g for g in state.gone if g[0] not in keys)
    state.gone = (*kept, *graves)[-_MAX_GONE:]


def _gone_version(state: NodeState, key: str) -> int:
    for pod, version, _ in state.gone:
        if pod == key:
            return version
    return 0


# -- nodes -----------------------------------------------------------------------
_SURVIVES_DELETION = frozenset(
    ("node_version", "gone", "applied_time", "applied_rank", "applied_id", "deadline")
)
"""What a node's deletion does not reset: how far this key has applied, and which
versions of which objects it has seen, so a late or redelivered copy of the node or of
one of its pods cannot bring them back. (``deadline`` is the engine's, recomputed.)"""


def _on_node(step: Step, ev: NodeEvent) -> None:
    state = step.state
    state.node_version = max(state.node_version, step.version)
    was = watchers.watchable(state)
    if ev.op == "deleted":
        not_ready.on_node_deleted(step)
        for inc in list(state.incidents.values()):
            step.resolve(inc, step.now, "node deleted")
        graves = tuple((k, t.version, step.now) for k, t in state.pods.items() if t.version)
        if graves:
            _bury(state, graves)
        fresh = NodeState(cluster=state.cluster, node=state.node)
        for field in NodeState.__struct_fields__:
            if field not in _SURVIVES_DELETION:
                setattr(state, field, getattr(fresh, field))
        state.timers_dirty = True
        return
    # A node's updates are mostly its heartbeat: the same labels, taints and counts. Each
    # field of the event is read once (a msgspec field is a generic attribute read from
    # compiled code), and state is written only when a value changes.
    labels = ev.labels
    sharing = sharing_of(labels)
    if sharing != state.sharing:
        state.sharing = sharing
    planned = disruption.of_node(ev)
    if planned != state.disruption:
        state.disruption = intern(planned)
    clique = fabric.domain_of(labels)
    if clique != state.clique:
        state.clique = clique
    if labels:
        _pool_and_product(state, labels)
    elif state.pool or state.product:
        state.pool = state.product = ""
    capacity = ev.capacity
    if capacity:
        allocatable = ev.allocatable
        text = _unallocatable(labels, capacity, allocatable)
        if text or state.resources is not None:
            _resources(state).unallocatable = text
        degraded.on_capacity(step, ev, sum(capacity.values()), sum(allocatable.values()))
    for cond in ev.conditions:
        if cond.type == "Ready":
            not_ready.on_ready(step, ev, cond)
    watchers.on_node(step, was)
    stalled.on_node(step, ev)


def _pool_and_product(state: NodeState, labels: dict[str, str]) -> None:
    """The node's pool (the first of ``POOL_LABELS`` present) and GPU product, written
    only when they change (interned: a pool's nodes share the strings)."""
    pool = ""
    for name in POOL_LABELS:
        pool = labels.get(name, "")
        if pool:
            break
    if pool != state.pool:
        state.pool = intern(pool)
    product = labels.get(PRODUCT_LABEL, "")
    if product != state.product:
        state.product = intern(product)


_MIG_STRATEGY_LABEL = "nvidia.com/mig.strategy"
_MIG_RESOURCE = "nvidia.com/mig-"


def _resources(state: NodeState) -> GpuResources:
    if state.resources is None:
        state.resources = GpuResources()
    return state.resources


def _unallocatable(
    labels: dict[str, str], capacity: dict[str, int], allocatable: dict[str, int]
) -> str:
    """The gap between capacity and allocatable, per GPU resource, in words; empty on a
    plain ``nvidia.com/gpu`` node (the summary then says "N of M GPUs").

    MIG, as NVIDIA's device plugin exposes it: the *mixed* strategy advertises one
    resource per profile (``nvidia.com/mig-1g.10gb: 7``); the *single* strategy
    advertises every instance as ``nvidia.com/gpu`` and GPU feature discovery appends
    the profile to the product label (``NVIDIA-A100-SXM4-40GB-MIG-1g.5gb``), while
    ``nvidia.com/gpu.count`` still counts physical GPUs. Either way "1 of 7 GPUs" on a
    one-GPU node is wrong: these are instances, of a profile.
    """
    strategy = labels.get(_MIG_STRATEGY_LABEL, "")
    # Only ``nvidia.com/gpu`` (or nothing) in capacity, tested without building a set.
    plain = not capacity or (len(capacity) == 1 and "nvidia.com/gpu" in capacity)
    if plain and strategy != "single":
        return ""
    parts = []
    for name in sorted(capacity):
        total = capacity[name]
        gap = total - allocatable.get(name, 0)
        if gap <= 0:
            continue
        if name.startswith(_MIG_RESOURCE):
            parts.append(f"{gap} of {total} MIG {name[len(_MIG_RESOURCE) :]} instances")
        elif name == "nvidia.com/gpu" and strategy == "single":
            product = labels.get("nvidia.com/gpu.product", "")
            profile = product.rsplit("-MIG-", 1)[1] + " " if "-MIG-" in product else ""
            gpus = labels.get("nvidia.com/gpu.count", "")
            on = f" of {gpus} GPU{'s' if gpus != '1' else ''}" if gpus else ""
            parts.append(f"{gap} of {total} MIG {profile}instances{on}")
        else:
            parts.append(f"{gap} of {total} {name}")
    return ", ".join(parts)


# -- Kubernetes events -------------------------------------------------------------
def _on_kube_event(step: Step, ev: KubeEvent) -> None:
    if ev.reason in ("OOMKilling", "SystemOOM"):
        oom.on_node_oom_event(step, text.kube_event(ev))
        return
    planned = disruption.of_event(ev)
    if planned:
        disruption.note(step, planned)  # an eviction through the API: no failure
        stalled.on_event(step)
        return
    watchers.on_kube_event(step, ev)
    obj = ev.involved
    if obj.kind != "Pod" or ev.reason not in step.config.failure_reasons:
        return
    if ev.message.startswith(_CANCELLED):
        return  # the taint was lifted or tolerated in time: the pod stays
    key = f"{obj.namespace}/{obj.name}"
    track = step.state.pods.get(key)
    if track is None:
        return
    track.failed = True
    track.failure_at = max(track.failure_at, step.now)
    role = "evicted" if ev.reason in _EVICTION_REASONS else "failed"
    taint = ev.reason in chain.DEVICE_TAINT_EVICTIONS
    _on_pod_failure(step, key, track, text.kube_event(ev), role, taint=taint)


# -- GPUs --------------------------------------------------------------------------
def _gpu(
    state: NodeState, bus_id: str, uuid: str, index: int | None, instance: int | None = None
) -> tuple[str, GpuTrack]:
    """The GPU (or MIG instance) these identifiers name, merging what sources know of it.

    Keyed by bus id; a GPU first named by uuid alone (``uuid:<uuid>``) moves under
    its bus id when a source reveals it. A MIG instance is its parent's key plus
    ``/GI<instance>`` (:data:`~streams.core.state.MIG_SEPARATOR`): every source names
    an instance by its parent GPU and instance id (``GpuBindingEvent.gpu_instance``,
    ``XidEvent.gpu_instance``), and records from before those fields spelled dcgm's
    ``gpu_uuid="<uuid>/GI<id>"``, read here the same way. Finding a GPU by uuid scans
    the node's few GPUs rather than keeping a second index per node; the parent and
    its instances share the parent's uuid, so the scan matches the instance too.
    A record naming a uuid without a bus id (dcgm-exporter's MIG binding) takes the
    bus id another record of the node told for that uuid (:func:`_bus_of`:
    NVML's binding or topology, which may have come first and left no GPU entry).
    """
    if instance is None and MIG_SEPARATOR in uuid:
        parent, found = split_gpu_key(uuid)
        if found is not None:
            uuid, instance = parent, found
    suffix = "" if instance is None else f"{MIG_SEPARATOR}{instance}"
    gpus = state.gpus
    gpu: GpuTrack | None
    packed = pack_uuid(uuid)
    told = bool(packed and bus_id)
    learned = False
    if packed and not bus_id:
        bus_id = _bus_of(state, packed)  # a MIG binding by the parent's uuid alone
    elif told:
        learned = not _joined(state, packed, bus_id)
    if bus_id:
        key = bus_id + suffix
        gpu = gpus.get(key)
        if gpu is None:
            old = f"uuid:{uuid}{suffix}" if uuid else ""
            gpu = gpus.pop(old, None) or GpuTrack()
            # Nodes of one type share their bus layout: interned, the ids cost nothing.
            key = intern(key)
            gpus[key] = gpu
            if uuid:
                _moved_profile(state, old, key)
                _rekey_by_bus(state, uuid, bus_id)
        elif learned:
            # The first record to map this uuid found the bus-keyed entry made already
            # (an XID naming only the bus): entries still keyed by the uuid join it.
            _rekey_by_bus(state, uuid, bus_id)
    elif uuid:
        key, gpu = next(
            (
                (k, g)
                for k, g in gpus.items()
                if g.uuid == packed and split_gpu_key(k)[1] == instance
            ),
            ("", None),
        )
        if gpu is None:
            key = f"uuid:{uuid}{suffix}"
            gpu = gpus[key] = GpuTrack()
    else:
        key = "unknown" + suffix
        gpu = gpus.get(key)
        if gpu is None:
            gpu = gpus[key] = GpuTrack()
    if packed and gpu.uuid != packed:
        if gpu.uuid:
            before = gpu.uuid, _bus_of(state, gpu.uuid)
            gpu.uuid = packed
            _keep_bus(state, *before)  # a GPU swapped in at this bus: the old one's join stays
        else:
            gpu.uuid = packed
    if learned:
        _learn_bus(state, packed, bus_id)
    elif bus_id and packed and state.gpu_joins and packed in state.gpu_joins:
        _drop_told_pair(state, packed, bus_id)
    if index is not None and gpu.index != index:
        gpu.index = index
    return key, gpu


_MAX_GPU_BUSES = 64
"""Explicit uuid -> bus pairs remembered per node: more than any board holds."""


def _bus_of(state: NodeState, packed: bytes) -> str:
    """The bus id a record of this node told for the GPU with this (packed) uuid, or "".

    The join is stored once: a GPU entry keyed by its bus id (``NodeState.gpus``) that
    carries the uuid says it, and ``NodeState.gpu_joins`` holds only the pairs no single
    entry says (a topology snapshot's GPUs with no entry, a GPU forgotten while idle, a
    uuid seen at two buses). An explicit pair wins: it is the newer word (see
    :func:`_learn_bus`). Trap: every change of an entry's key or uuid must keep the join
    it implied (:func:`_keep_bus`), or a later MIG binding named by the uuid alone lands
    under ``uuid:`` and an XID naming the bus misses its pods.
    """
    return _explicit_bus(state, packed) or _implied_bus(state, packed)


def _explicit_bus(state: NodeState, packed: bytes) -> str:
    """The bus id an explicit pair gives this uuid (``gpu_joins``, or an older
    snapshot's ``gpu_buses``), or ""."""
    for uuid, bus in state.gpu_buses:  # a snapshot of an older release
        if uuid == packed:
            return bus
    if state.gpu_joins and packed in state.gpu_joins:
        bus = join_lookup(state.gpu_joins, packed)
        if bus:
            return intern(bus)
    return ""


def _joined(state: NodeState, packed: bytes, bus_id: str) -> bool:
    """``_bus_of(state, packed) == bus_id``, cheaply in the usual case (every binding of a
    bound GPU asks): the whole GPU's own entry at ``bus_id`` carries the uuid and no
    explicit pair says otherwise. Exact because entries never imply two buses for one
    uuid without an explicit pair deciding (:func:`_learn_bus` stores one then, by the
    exact test)."""
    explicit = _explicit_bus(state, packed)
    if explicit:
        return explicit == bus_id
    entry = state.gpus.get(bus_id)
    if entry is not None and entry.uuid == packed:
        return True
    return _implied_bus(state, packed) == bus_id


def _implied_bus(state: NodeState, packed: bytes) -> str:
    """The one bus id the bus-keyed GPU entries carrying this uuid sit under; "" for none
    or for several (ambiguous: an explicit pair then decides)."""
    found = ""
    for key, gpu in state.gpus.items():
        if gpu.uuid != packed:
            continue
        parent = split_gpu_key(key)[0]
        if parent == "unknown" or parent.startswith("uuid:"):
            continue
        if found and found != parent:
            return ""
        found = parent
    return found


def _learn_bus(state: NodeState, packed: bytes, bus_id: str) -> bool:
    """Remember that the GPU with this uuid sits at ``bus_id`` (a MIG instance's parent
    too: instances share it); True when that is news. A GPU re-seated under another bus
    replaces its pair. Call it after the GPU's entry is keyed: a pair the entries imply
    already is not stored again. Trap: the exact test (:func:`_bus_of`), not
    :func:`_joined`'s shortcut: a GPU moved to another bus has two entries carrying its
    uuid until the old one goes, and only a pair stored now says which is current."""
    if _bus_of(state, packed) == bus_id:
        return False
    pairs = [*state.gpu_buses, *join_pairs(state.gpu_joins)]
    kept = [p for p in pairs if p[0] != packed]
    if _implied_bus(state, packed) != bus_id:
        kept = [*kept, (packed, bus_id)][-_MAX_GPU_BUSES:]
    if state.gpu_buses:
        state.gpu_buses = ()
    blob = join_blob(kept)
    if blob != state.gpu_joins:
        state.gpu_joins = blob
    return True


def _keep_bus(state: NodeState, packed: bytes, bus_id: str) -> None:
    """An entry that implied ``packed -> bus_id`` was just forgotten or given another
    uuid: keep the join as an explicit pair if no other entry implies it."""
    if packed and bus_id:
        _learn_bus(state, packed, bus_id)


def _drop_told_pair(state: NodeState, packed: bytes, bus_id: str) -> None:
    """An entry keyed at ``bus_id`` carries this uuid now: an explicit pair saying the same
    is redundant while no other entry implies another bus, so it goes. Without this, a GPU
    forgotten while idle and bound again kept its pair for good (on the bench, 2,850 of
    the 2,872 pairs left at the end: ~31 bytes per tracked pod). Every answer of
    :func:`_bus_of` stays the same, and every change that could drop the implied join
    stores it again (:func:`_keep_bus`). An older snapshot's ``gpu_buses`` are left to
    :func:`_learn_bus`."""
    if state.gpu_buses:
        return
    if join_lookup(state.gpu_joins, packed) != bus_id or _implied_bus(state, packed) != bus_id:
        return
    state.gpu_joins = join_blob([p for p in join_pairs(state.gpu_joins) if p[0] != packed])


def _rekey_by_bus(state: NodeState, uuid: str, bus_id: str) -> None:
    """A source just told this uuid's bus id: move the GPU's other entries still keyed
    by uuid (the parent, or sibling MIG instances dcgm-exporter named by the parent's
    uuid alone) under the bus id, so an XID that names only the bus finds them all."""
    gpus = state.gpus
    prefix = f"uuid:{uuid}"
    for old in [k for k in gpus if k == prefix or k.startswith(prefix + MIG_SEPARATOR)]:
        new = intern(bus_id + old[len(prefix) :])
        known = gpus.get(new)
        if known is None:
            gpus[new] = gpus.pop(old)
            _moved_profile(state, old, new)
        elif not known.pods:
            # An XID named the bus (and instance) before anything mapped the uuid: its
            # entry keeps the XID history and takes the binding's pods, so the next XID
            # of that instance names them.
            moved = gpus.pop(old)
            known.pods, known.kubelet = moved.pods, moved.kubelet
            if not known.uuid:
                known.uuid = moved.uuid
            _moved_profile(state, old, new)


def _moved_profile(state: NodeState, old: str, new: str) -> None:
    """A GPU changed keys: its MIG profile (``GpuResources.profiles``) follows it."""
    resources = state.resources
    if resources is not None and old in resources.profiles:
        profiles = dict(resources.profiles)
        profiles[new] = profiles.pop(old)
        resources.profiles = profiles


def _pod_key(state: NodeState, key: str) -> str:
    """The key string the pod is already stored under, so a binding holds no copy."""
    track = state.pods.get(key)
    return track.key if track is not None else key


def _idle_unseen(state: NodeState, ev: GpuBindingEvent) -> str:
    """The key of the GPU this binding names when it is the common case of an idle GPU
    with no entry (forgotten at its last idle binding), after applying what the full
    path would leave of it; "" (nothing done) in every other case.

    The full path's net effect there is the uuid -> bus pair moved to the end of
    ``gpu_joins`` (:func:`_drop_told_pair`, :func:`_keep_bus`), a profile following the
    new key (:func:`_moved_profile`). It holds only when the record names uuid and bus and
    no other entry carries or is keyed by the uuid: anything else takes the full path.
    Traps: the binding must leave the GPU idle (no pods, or pods not known), and a key whose
    parent would not read back as the bus id (``split_gpu_key``) is left alone.
    docs/detection.md, design notes: `_idle_unseen`.
    """
    if ev.pods_known and ev.pods:
        return ""
    bus_id, uuid, instance = ev.pci_bus_id, ev.gpu_uuid, ev.gpu_instance
    if not bus_id or not uuid or MIG_SEPARATOR in bus_id or MIG_SEPARATOR in uuid:
        return ""
    if bus_id == "unknown" or bus_id.startswith("uuid:"):
        return ""
    if instance is None:
        key = bus_id
    elif instance >= 0:
        key = f"{bus_id}{MIG_SEPARATOR}{instance}"
    else:
        return ""
    gpus = state.gpus
    if key in gpus or state.gpu_buses:
        return ""
    packed = pack_uuid(uuid)
    for k, g in gpus.items():
        if k.startswith("uuid:") or g.uuid == packed:
            return ""
    blob = _moved_last(state.gpu_joins, packed, bus_id)
    if blob is None:
        return ""
    if blob != state.gpu_joins:
        state.gpu_joins = blob
    key = intern(key)
    _moved_profile(state, f"uuid:{uuid}{key[len(bus_id) :]}", key)
    return key


def _moved_last(blob: bytes, packed: bytes, bus_id: str) -> bytes | None:
    """``join_blob`` of ``join_pairs(blob)`` without this uuid's pairs and with
    ``(packed, bus_id)`` appended, the last ``_MAX_GPU_BUSES`` kept (what
    :func:`_learn_bus` stores), spliced from the bytes; None when a field is too long for
    the format or the blob does not walk to its end (the full path then decides)."""
    pair = join_pair(packed, bus_id)
    if not pair:
        return None
    spans: list[tuple[int, int]] = []
    at, end = 0, len(blob)
    while at < end:
        own = blob[at]
        bus_at = at + 1 + own
        if bus_at >= end:
            return None
        stop = bus_at + 1 + blob[bus_at]
        if stop > end:
            return None
        if not (own == len(packed) and blob.startswith(packed, at + 1)):
            spans.append((at, stop))
        at = stop
    if len(spans) >= _MAX_GPU_BUSES:
        spans = spans[len(spans) - _MAX_GPU_BUSES + 1 :]
    return b"".join([*(blob[a:b] for a, b in spans), pair])


def _on_binding(step: Step, ev: GpuBindingEvent) -> None:
    state = step.state
    if ev.source == DRA:
        _on_dra_binding(step, ev)
        return
    if shortcuts.ENABLED:
        idle = _idle_unseen(state, ev)
        if idle:
            if ev.mig_profile:
                profiles = _resources(state).profiles
                if profiles.get(idle) != ev.mig_profile:
                    _resources(state).profiles = {**profiles, idle: intern(ev.mig_profile)}
            return
    key, gpu = _gpu(state, ev.pci_bus_id, ev.gpu_uuid, ev.gpu_index, ev.gpu_instance)
    if ev.mig_profile:
        profiles = _resources(state).profiles
        if profiles.get(key) != ev.mig_profile:
            _resources(state).profiles = {**profiles, key: intern(ev.mig_profile)}
    before = gpu.pods
    kubelet = ev.source == POD_RESOURCES
    # The kubelet's allocation is the ground truth of who holds the GPU: once it has bound
    # it, other sources' pods (dcgm-exporter's one pod of a shared GPU) do not replace it.
    if ev.pods_known and (kubelet or not gpu.kubelet):
        # One key per pod: two containers of one pod on one GPU (the kubelet lists each
        # container's devices) are one pod, not a shared GPU.
        keys = tuple(dict.fromkeys(_pod_key(state, f"{p.namespace}/{p.name}") for p in ev.pods))
        pods: str | tuple[str, ...] = keys[0] if len(keys) == 1 else keys
        if state.dra is not None and state.dra.holds:
            # What DRA holds stays: this source's word is about its own allocations.
            held = dra.held_pods(state, gpu.uuid, split_gpu_key(key)[1])
            if held:
                merged = tuple(dict.fromkeys((*keys, *held)))
                pods = merged[0] if len(merged) == 1 else merged
        if pods != gpu.pods:
            gpu.pods = pods
        if kubelet and not gpu.kubelet:
            gpu.kubelet = True
    _forget_idle(step, key, gpu)
    if before or gpu.pods:
        nvlink.on_binding(step, before, gpu.pods)


def _on_dra_binding(step: Step, ev: GpuBindingEvent) -> None:
    """A ``dra`` binding: the API server's record of which pods hold a device (allocated
    claims reserved for pods, joined with the slice that names its uuid and bus).

    Authoritative like the kubelet's, and kept apart (:attr:`DraState.holds`): another
    source's binding of the GPU that leaves these pods out does not unbind them, and this
    one replaces only the pods it bound itself. A MIG device, which DRA names by its
    ``MIG-`` uuid alone (no instance id), is a GPU key of its own under its parent
    (:func:`~streams.core.rules.gpuids.dra_instance`): two of one parent never overwrite
    each other, and an XID of the whole parent names both."""
    state = step.state
    instance = ev.gpu_instance
    if instance is None and ev.mig_uuid:
        instance = dra_instance(ev.mig_uuid)
    key, gpu = _gpu(state, ev.pci_bus_id, ev.gpu_uuid, ev.gpu_index, instance)
    if ev.mig_profile:
        profiles = _resources(state).profiles
        if profiles.get(key) != ev.mig_profile:
            _resources(state).profiles = {**profiles, key: intern(ev.mig_profile)}
    before = gpu.pods
    if ev.pods_known:
        keys = tuple(dict.fromkeys(_pod_key(state, f"{p.namespace}/{p.name}") for p in ev.pods))
        claims = tuple(intern(c) for c in ev.claims)
        version = dra.binding_version(ev.id)
        dropped = dra.hold(state, ev.device or key, gpu.uuid, instance, keys, claims, version)
        others = tuple(p for p in bound_pods(gpu) if p not in dropped)
        merged = tuple(dict.fromkeys((*others, *dra.held_pods(state, gpu.uuid, instance))))
        pods: str | tuple[str, ...] = merged[0] if len(merged) == 1 else merged
        if pods != gpu.pods:
            gpu.pods = pods
    _forget_idle(step, key, gpu)
    if before or gpu.pods:
        nvlink.on_binding(step, before, gpu.pods)


def _forget_idle(step: Step, key: str, gpu: GpuTrack) -> None:
    """Forget the entry of a GPU no pod holds and with no recent history."""
    state = step.state
    history = gpu.xid
    if not gpu.pods and (
        history is None or (history.fatal is None and history.last < step.now - _RECENT_XID_SECONDS)
    ):
        # An idle GPU with no recent history: nothing to attribute, so nothing to keep.
        # The uuid -> bus join the entry told is kept as an explicit pair (an explicit
        # pair of its uuid already wins over entries: then nothing changes).
        uuid = gpu.uuid
        told = _implied_bus(state, uuid) if uuid and not _explicit_bus(state, uuid) else ""
        del state.gpus[key]
        state.gpus = dict(state.gpus.items())  # the smallest table (_forget_pod)
        if told:
            _keep_bus(state, uuid, told)


def _on_slice(step: Step, ev: ResourceSliceEvent) -> None:
    """A ResourceSlice of a GPU driver on this node: the DRA inventory. A taint that
    begins arms the eviction chain; a taint lifted or a gone GPU listed again may end a
    fault; a device gone waits ``dra_absent_seconds`` (``gpu_degraded``'s timer)."""
    state = step.state
    tainted, ended = dra.apply_slice(state, ev, step.now)
    state.timers_dirty = True
    _device_faults(step, dra.TAINT, tainted)
    if ended:
        degraded.on_device_recovered(step, "the device is untainted and listed in its slice")


def _on_topology(step: Step, ev: GpuTopologyEvent) -> None:
    state = step.state
    for g in ev.gpus:
        packed = pack_uuid(g.gpu_uuid)
        if packed and g.pci_bus_id:
            # The snapshot maps uuids to bus ids (NVML): GPUs and MIG instances a binding
            # named by uuid alone move under their bus id, and later ones find it.
            news = _bus_of(state, packed) != g.pci_bus_id
            _rekey_by_bus(state, g.gpu_uuid, g.pci_bus_id)
            if news:
                _learn_bus(state, packed, g.pci_bus_id)
    nvlink.on_topology(step, ev)


def _on_xid(step: Step, ev: XidEvent) -> None:
    """One XID line: its class, its fault episode, then the rules.

    Episodes (docs/detection.md, how XIDs are counted): one fault is logged as several
    lines (one XID 13 as three, a hung GSP as an XID 119 every few minutes, one occurrence
    by the kernel log and by dcgm-exporter). A line less than ``xid_episode_gap_seconds`` (at least
    ``xid_coalesce_seconds``) after the previous line of its code on its GPU continues
    that episode: evidence, never counted again. ``xid_repeat`` and ``gpu_app_fault``
    count episodes.
    """
    state, config = step.state, step.config
    # SXid codes are NVSwitch codes, a different catalog: never read as GPU XIDs.
    rule = _UNKNOWN_XID if ev.sxid else config.xid.get(ev.code, _UNKNOWN_XID)
    bus, uuid = ev.pci_bus_id, ev.gpu_uuid
    if state.dra is not None and not ev.sxid and (not bus or not uuid):
        # The slices map uuid <-> bus id with no node agent: the kernel names the bus.
        bus, uuid = dra.identity(state, bus, uuid)
    key, gpu = _gpu(state, bus, uuid, ev.gpu_index, ev.gpu_instance)
    item = text.xid(ev, rule, unpack_uuid(gpu.uuid))
    if all(x.event_id != item.event_id for _, x in state.recent_xids):
        state.recent_xids = (*state.recent_xids[-_RECENT_XIDS + 1 :], (step.now, item))
    ref = gpu_ref(key, gpu, state)
    horizon = step.now - xid.episode_gap(config)
    episodes = xid.recent_episodes(state, key, horizon)
    last, quiet = episodes.get(ev.code, xid.NO_EPISODE)
    xid_class: str = rule.xid_class
    if rule.line_severity and xid_class != "info":
        word = fabric.severity_word(ev.message)
        # A report without the word (dcgm-exporter, NVML) just after a Nonfatal line of
        # the same code on the same GPU is that line seen by a second source.
        if word == "nonfatal" or (not word and quiet > horizon and quiet > last):
            xid_class = "info"
    workload = _workload_xid(config, rule, ev, episodes)
    if step.now >= gpu.last_xid:
        gpu.last_xid_app = workload
    gpu.last_xid = max(gpu.last_xid, step.now)
    degraded.on_xid(step, item, key, ref, fault=not workload)
    action = rule.action
    if xid_class == "follow-up":
        if ev.recovery_action:
            # XID 154 names the action: it asks for a reset / drain / reboot, or not.
            words = ev.recovery_action.lower()
            xid_class = "fatal" if any(w in words for w in _RESET_WORDS) else "info"
            action = f"The driver asks: {ev.recovery_action}."
            if xid_class == "info" and "none" in words.split():
                degraded.on_recovered(step, key)
        elif _follow(step, key, item, ev, episodes, horizon):
            xid_class = ""  # joined what the earlier XID on this GPU opened or armed
        elif ev.code == 154:
            xid_class = "info"  # a recovery action we cannot read, following nothing
        else:
            xid_class = "app"  # alone, a cleanup XID 45 is the application's teardown
    # Episode memory: the fault classes count (a reset-asking 154 is the driver's
    # request, not a fault of its own); info lines (Nonfatal NVLink) are remembered apart.
    counted = xid_class == "app" or (xid_class == "fatal" and rule.xid_class == "fatal")
    new_episode = last <= horizon
    if counted:
        xid.remember(step, key, ev.code, step.now, quiet)
    elif xid_class == "info" and rule.line_severity:
        xid.remember(step, key, ev.code, last, step.now)
    if xid_class == "fatal":
        chain.arm(step, item, key, ref, ev.code)
        if rule.xid_class == "fatal":
            xid.on_fatal(step, key, gpu, item, ev.code, new_episode)
        own = ev.code if rule.xid_class == "fatal" else None  # a 154: the GPU's state
        if not xid.repeating(step, key, own):  # an xid_repeat page already tells it
            degraded.on_fault(step, item, key, gpu, ev.code, action)
    elif xid_class == "app":
        xid.on_app(step, key, gpu, item, ev.code, new_episode)


def _workload_xid(
    config: CoreSettings, rule: XidRule, ev: XidEvent, episodes: dict[int, tuple[float, float]]
) -> bool:
    """Is this XID line the workload's, one the device plugin does not mark its GPU
    unhealthy for? An application-class code (13, 31, 43, 68...), or a cleanup XID 45
    that follows one on its GPU, or follows nothing (a follow-up takes the
    class of the XID it follows; NVIDIA/k8s-device-plugin internal/rm/health.go skips
    13, 31, 43, 45 and 68 as application errors). A 45 after a fatal XID is that
    fault's. An XID 154 is the driver's recovery action, never the workload's."""
    if rule.xid_class == "app":
        return True
    if rule.xid_class != "follow-up" or ev.code == 154 or ev.recovery_action:
        return False
    cause = _followed(config, ev, episodes)
    return cause is None or config.xid.get(cause, _UNKNOWN_XID).xid_class == "app"


def _followed(
    config: CoreSettings, ev: XidEvent, episodes: dict[int, tuple[float, float]]
) -> int | None:
    """The XID a follow-up line follows on its GPU: the one it names (``caused by
    previous Xid 149``) or the latest other XID there within the episode gap."""
    recent = {
        code: times
        for code, times in episodes.items()
        if config.xid.get(code, _UNKNOWN_XID).xid_class != "follow-up"
    }
    if ev.caused_by is not None and ev.caused_by in recent:
        return ev.caused_by
    return max(recent, key=lambda c: (max(recent[c]), c), default=None)


def _follow(
    step: Step,
    gpu_key: str,
    item: Evidence,
    ev: XidEvent,
    episodes: dict[int, tuple[float, float]],
    horizon: float,
) -> bool:
    """A follow-up XID (45, or a 154 that names no action) takes the class of the XID it
    follows on its GPU: the one it names (``caused by previous Xid 149``) or the latest
    other XID there within the episode gap. It joins what that XID opened or armed and
    never opens an incident of its own; returns False when it follows nothing recent.

    After a fatal XID it is evidence of the fault (chain, pending or open gpu_degraded,
    xid_repeat); after an application XID, of its gpu_app_fault (not counted); after a
    Nonfatal NVLink line it is recorded only.
    """
    config = step.config
    cause = _followed(config, ev, episodes)
    if cause is None:
        # Nothing recent: the incident an earlier XID of this GPU still holds, if any.
        for kind, subject in ((chain.KIND, chain.SUBJECT), (xid.APP, gpu_key)):
            inc = step.find(kind, subject)
            if inc is not None and (kind == xid.APP or gpu_key in inc.gpus):
                step.add_evidence(inc, item)
                return True
        return False
    last, quiet = episodes[cause]
    if quiet > last:
        return True  # it follows a Nonfatal / info line: recorded evidence only
    if config.xid.get(cause, _UNKNOWN_XID).xid_class == "app":
        inc = step.find(xid.APP, gpu_key)
        if inc is not None:
            step.add_evidence(inc, item)
        return True
    inc = step.find(chain.KIND, chain.SUBJECT)
    if inc is not None and gpu_key in inc.gpus:
        step.add_evidence(inc, item)
    degraded.on_follow(step, item)
    repeat = step.find(xid.REPEAT, f"{gpu_key}/{cause}")
    if repeat is not None:
        step.add_evidence(repeat, item)
    return True


_HANDLERS: dict[type[Any], Callable[[Step, Any], None]] = {
    PodEvent: _on_pod,
    NodeEvent: _on_node,
    KubeEvent: _on_kube_event,
    XidEvent: _on_xid,
    GpuBindingEvent: _on_binding,
    GpuTopologyEvent: _on_topology,
    ResourceSliceEvent: _on_slice,
}


def apply_event(
    state: NodeState, event: Any, now: float, config: CoreSettings, *, late: bool = False
) -> list[Incident] | None:
    """Apply one event at event time ``now``; return the incident revisions it caused,
    or None when it is stale: an older copy of its object (see :func:`admits`).

    ``late``: the event sorts at or before the last one this key applied.
    """
    kind = type(event)
    if kind is PodEvent:
        # Most records: the pod's key built and its track found once, for the version
        # check and the routine shortcut both.
        version = event.resource_version or k8s_version(event.id)
        key = f"{event.namespace}/{event.name}"
        if event.monitor:
            return _monitor_pod(state, event, key, now, version, config, late)
        track = state.pods.get(key)
        if not _admits_pod(state, key, track, version, late):
            return None
        _prune(state, now, config)
        if (
            track is not None
            and shortcuts.ENABLED
            and not _reports_pending(state)
            and _routine_track(track, event, now, version, config)
        ):
            return []
        handler: Callable[[Step, Any], None] = _on_pod
    else:
        versioned = kind is NodeEvent or kind is ResourceSliceEvent
        version = (event.resource_version or k8s_version(event.id)) if versioned else 0
        if not admits(state, event, config, version, late=late):
            return None
        found = _HANDLERS.get(kind)
        if found is None:
            return []
        handler = found
        _prune(state, now, config)
    step = Step(state, config, now)
    step.version = version  # parsed once: the handlers record it
    handler(step, event)
    fabric.defer(step)
    return step.finish()


def _monitor_pod(
    state: NodeState,
    ev: PodEvent,
    key: str,
    now: float,
    version: int,
    config: CoreSettings,
    late: bool,
) -> list[Incident] | None:
    """A GPU monitoring pod's record (``PodEvent.monitor``): never a GPU pod, whatever it
    requests; ``monitoring_gap`` alone reads it (:mod:`streams.core.rules.watchers`).
    No version is kept for it (a few bytes on every GPU node): one behind the key's
    position is stale, and an older copy in order cannot lower its restart count."""
    if late:
        return None
    step = Step(state, config, now)
    step.version = version
    watchers.on_pod(step, ev, key)
    return step.finish()


def apply_heartbeat(
    state: NodeState, tick: Tick, now: float, config: CoreSettings
) -> tuple[list[Incident], bool] | None:
    """A node agent's heartbeat at event time ``now`` (the engine's side channel: the
    key's position does not move): the revisions it caused and whether the state is
    worth writing down (``watchers.on_heartbeat``); None when it changed nothing."""
    read = tick.read_at
    heard = to_seconds(read) if read is not None else now
    step = Step(state, config, now)
    said = watchers.on_heartbeat(step, tick, heard)
    if said == watchers.UNCHANGED:
        return None
    return step.finish(), said == watchers.NEWS


def _routine_pod(
    state: NodeState, ev: PodEvent, now: float, version: int, config: CoreSettings
) -> bool:
    """Apply a pod update no rule has anything to read in, if it is one (a shortcut).

    Most pod updates are routine (conditions or probes moved): the full path
    (:func:`_on_pod`) would change only the pod's version and the containers' ``seen_at``;
    this does exactly that and returns True, without a step or an incident walk.

    Trap: anything a rule reads goes down the full path (False, nothing changed): an unknown
    pod or container, a phase change, a finished, failed or deleted pod, a failure reason, an
    unaccounted restart count or termination, a crash window to free. The differential tests
    (tests/streams/core/test_differential.py) hold the two paths to the same incidents.
    docs/detection.md, design notes: `_routine_pod`.
    """
    track = state.pods.get(f"{ev.namespace}/{ev.name}")
    if _reports_pending(state):
        return False
    return track is not None and _routine_track(track, ev, now, version, config)


def _routine_track(
    track: PodTrack, ev: PodEvent, now: float, version: int, config: CoreSettings
) -> bool:
    """:func:`_routine_pod` once the pod's track is found (the engine's path).

    Most pod records end here, so each field is read once (a compiled core reads an
    event's or a track's field through a generic attribute lookup, the larger part of
    this function's cost), and the usual one-container pod builds no list."""
    phase = ev.phase
    if (
        track.failed
        or track.phase != phase
        or phase not in _LIVE_PHASES
        or ev.reason
        or ev.op == "deleted"
        or ev.deleted_at is not None
        or ev.disruption is not None
        or ((ev.claims or track.other_claims) and _other_claims(ev) != track.other_claims)
    ):
        return False
    known = track.containers
    statuses = ev.containers
    if not statuses or not known:
        return False
    if len(statuses) == 1:
        status = statuses[0]
        ctr = _known_container(known, status.name)
        if ctr is None or not _routine_status(ctr, status, now, config):
            return False
        if status.devices and _reports_unhealthy(status):
            return False
        track.version = max(track.version, version)
        ctr.seen_at = max(ctr.seen_at, now)
        return True
    seen: list[ContainerTrack] = []
    for status in statuses:
        ctr = _known_container(known, status.name)
        if ctr is None or not _routine_status(ctr, status, now, config):
            return False
        if status.devices and _reports_unhealthy(status):
            return False
        seen.append(ctr)
    track.version = max(track.version, version)
    for ctr in seen:
        ctr.seen_at = max(ctr.seen_at, now)
    return True


def _reports_pending(state: NodeState) -> bool:
    """Does a container of the node report a device Unhealthy, or are GPU containers
    failing to start there? Then every pod update takes the full path: one that no
    longer reports it ends the report, one that runs ends the failed starts."""
    reports = state.dra
    if reports is not None and reports.unhealthy:
        return True
    return state.watch is not None and watchers.starting(state)


def _reports_unhealthy(status: ContainerStatus) -> bool:
    """Does the container report a device Unhealthy (a rule reads that: the full path)?"""
    return any(health.health == "Unhealthy" for health in status.devices)


def _routine_status(
    ctr: ContainerTrack, status: ContainerStatus, now: float, config: CoreSettings
) -> bool:
    """Does ``status`` show ``ctr`` as the full path left it (see :func:`_routine_pod`)?
    (The crash window is read only for a container with crashes in it.)"""
    if ctr.seen_at == -math.inf:
        return False
    terminated = status.terminated
    if ctr.restart_count != status.restart_count + (terminated is not None):
        return False
    crash = ctr.crash
    if crash is not None:
        restarts = crash.restarts
        if restarts and restarts[-1] < now - config.cuda_oom_window_seconds:
            return False
    last = status.last_terminated
    if last is None and terminated is None:
        return True
    handled = ctr.last_finished
    for term in (last, terminated):
        done = None if term is None else term.finished_at
        if done is not None and to_seconds(done) > handled:
            return False
    return True


def _known_container(
    known: ContainerTrack | tuple[ContainerTrack, ...], name: str
) -> ContainerTrack | None:
    # Asked as "a tuple?": ``isinstance`` of a msgspec class answers a non-match (the
    # tuple of a many-container pod) through the metaclass, hundreds of instructions.
    if not isinstance(known, tuple):
        return known if known.name == name else None
    for ctr in known:
        if ctr.name == name:
            return ctr
    return None


def admits(
    state: NodeState, event: Any, config: CoreSettings, version: int = 0, *, late: bool
) -> bool:
    """Does this event bring news about its own object? (No evidence is lost to a relist.)

    In order, everything is news except an older (or the same) version of an applied object.
    Behind the key's position (``late``), only a newer version is: after a relist, objects
    changed meanwhile arrive with older times, and skipping them would lose a device
    incident's failures. ``version`` is the resourceVersion (:func:`schemas.ids.k8s_version`).

    Traps: an unknown version (0) orders nothing; a pod never seen is news even late, one
    forgotten lately (``NodeState.gone``) is not; a late node copy is news only when newer than
    the node's version, a late Event only when it reports a new failure of a tracked pod
    (:func:`_seen_since`); late XIDs, bindings and node OOMs stay stale (their sources deliver
    in order). docs/detection.md, design notes: `admits`.
    """
    kind = type(event)
    if kind is PodEvent:
        key = f"{event.namespace}/{event.name}"
        return _admits_pod(state, key, state.pods.get(key), version, late)
    if kind is NodeEvent:
        if version and state.node_version:
            return version > state.node_version
        # Late and unversioned: news only if this key never saw the node object.
        return not late or (version > 0 and state.capacity < 0 and not state.ready)
    if kind is ResourceSliceEvent:
        # A slice is a snapshot from a watch that relists, like a node: a newer version
        # is news even late (its taint must not be lost to a pod record read first).
        dra_state = state.dra
        known = dra_state.versions.get(event.name, 0) if dra_state is not None else 0
        if version and known:
            return version > known
        return not late or version > 0
    if not late:
        return True
    if kind is GpuBindingEvent and event.source == DRA:
        return dra.admits_late_binding(state, event.device, event.id)
    if kind is KubeEvent and event.involved.kind == "Pod":
        if event.reason not in config.failure_reasons:
            return False
        track = state.pods.get(f"{event.involved.namespace}/{event.involved.name}")
        # Not failed *now*, not a copy of a failure Event already applied (a pod that
        # restarted after its Evicted looks healthy again, and the redelivered Evicted
        # would fail it twice), and not older than what the pod's own status has shown
        # since (two Hypothesis counterexamples of the property tests).
        if track is None or track.failed:
            return False
        when = to_seconds(event.time)
        return when > track.failure_at and not _seen_since(track, when)
    return False


def _admits_pod(
    state: NodeState, key: str, track: PodTrack | None, version: int, late: bool
) -> bool:
    """:func:`admits` for a pod, given its key and its track (None: not tracked)."""
    if not version:
        return not late
    if track is not None:
        return version > track.version if track.version else not late
    return version > _gone_version(state, key)


def _seen_since(track: PodTrack, when: float) -> bool:
    """Did an update applied already show one of the pod's containers at or after
    ``when``? Then a late Event of ``when`` is older news: it is about the pod before
    that update (a predecessor of the same name, replaced by the running pod since), and
    applying it now would mark the running pod failed (a redelivered ``Evicted``, found
    by test_properties' redelivery property). Trap: a real eviction is not lost by it:
    the kubelet also writes it in the pod's own status (phase Failed, reason Evicted),
    which a later update brings."""
    ctrs = track.containers
    items = ctrs if isinstance(ctrs, tuple) else (ctrs,)
    return any(ctr.seen_at >= when for ctr in items)


def _prune(state: NodeState, now: float, config: CoreSettings) -> None:
    """Drop look-back memories that can no longer matter (cheap when there are none).

    Runs for every event of a node: each memory is read once, and the configuration
    only when there is a failure to age (attribute reads are most of its cost)."""
    failures = state.recent_failures
    if failures:
        # A drop trusted only once it persisted looks back from its own, earlier, time.
        lookback = now - config.eviction_lookback_seconds - config.drop_persist_seconds
        if failures[0][0] < lookback:
            state.recent_failures = tuple(f for f in failures if f[0] >= lookback)
    gone = state.gone
    if gone and gone[0][2] < now - TOMBSTONE_SECONDS:
        state.gone = tuple(g for g in gone if g[2] >= now - TOMBSTONE_SECONDS)
    xids = state.recent_xids
    if xids and xids[0][0] < now - _RECENT_XID_SECONDS:
        horizon = now - _RECENT_XID_SECONDS
        state.recent_xids = tuple(x for x in xids if x[0] >= horizon)


def apply_timer(state: NodeState, now: float, config: CoreSettings) -> list[Incident]:
    """Fire everything due at or before ``now``, in a fixed order."""
    step = Step(state, config, now)
    for rule in NODE_RULES:  # registry order: part of the output
        if rule.on_timer is not None:
            rule.on_timer(step)
    due = sorted(
        (inc for inc in state.incidents.values() if inc.resolve_at <= now),
        key=lambda inc: (inc.resolve_at, inc.id),
    )
    for inc in due:
        step.resolve(inc, inc.resolve_at, "quiet for the rule's window")
    step.release_held()
    fabric.defer(step)
    state.timers_dirty = True
    return step.finish()


def next_deadline(state: NodeState, config: CoreSettings) -> float:
    """The earliest event time at which :func:`apply_timer` has something to do."""
    found = NEVER
    for rule in NODE_RULES:
        if rule.deadline is not None:
            found = min(found, rule.deadline(state, config))
    for inc in state.incidents.values():
        found = min(found, inc.resolve_at, held_until(inc, config))
    return found if found > -math.inf else NEVER
