"""The core's state, as msgspec Structs so it can live in a changelog-backed table.

Size matters: a 5,000-node cluster tracks ~150k pods, and the bar is 1 KB of state per tracked pod.
Hence: only GPU pods are tracked; per-container history is a few floats, not copies of events;
evidence is kept only once an incident exists (plus a handful of recent XIDs per node, for an hour);
strings that repeat across events (pod keys, owner names, GPU uuids and bus ids) are stored once
(assigned only when they change, interned when many records share them: owners, phases, reasons),
however often they arrive; collections that are usually empty are tuples defaulting to the shared
``()``, replaced (not mutated) on the rare change; leaf structs skip the GC header.

Trap: never iterate a ``set`` of strings when producing output. String hashing is randomised per
process, so set order differs between two replays of the same file; every collection here that is
iterated is a ``dict`` or a ``list``.
"""

from __future__ import annotations

import math
from typing import Any, Generic, TypeVar

import msgspec

from schemas.incidents import Evidence, GpuRef, PodInfo
from schemas.types import Severity
from streams.core.rules.gpuids import (
    MIG_SEPARATOR,
    is_dra_instance,
    split_gpu_key,
    unpack_uuid,
)

NEVER = math.inf
"""A deadline that never comes."""
T = TypeVar("T")


class _Side(Generic[T]):
    """A field of a rare side struct, read and written as if it were its owner's own.

    ``slot`` is the owner's field holding the side struct (None while it has none),
    ``field`` the side struct's field, ``make`` its type. Reading one of an owner without
    the struct gives the field's default; setting a default there allocates nothing; a
    write that leaves every field at its default frees the struct again. So the rules read
    ``ctr.restarts`` or ``gpu.fatal`` as before, and the many containers and GPUs with no
    history pay one slot. Traps: the owner is a plain (uncompiled) msgspec Struct, so these
    are ordinary descriptors to compiled callers; an unannotated class attribute, so not a
    msgspec field."""

    __slots__ = ("_default", "_field", "_make", "_slot")

    def __init__(self, slot: str, field: str, make: type[msgspec.Struct]) -> None:
        self._slot, self._field, self._make = slot, field, make
        self._default = getattr(make(), field)

    def __get__(self, owner: Any, kind: Any = None) -> T:
        side = getattr(owner, self._slot)
        value: T = self._default if side is None else getattr(side, self._field)
        return value

    def __set__(self, owner: Any, value: T) -> None:
        side = getattr(owner, self._slot)
        if side is None:
            if value != self._default:
                setattr(owner, self._slot, self._make(**{self._field: value}))
            return
        setattr(side, self._field, value)
        if value == self._default and side == self._make():
            setattr(owner, self._slot, None)


class CrashTrack(msgspec.Struct, gc=False, omit_defaults=True):
    """What a container's crashes and OOM kills leave (``suspected_cuda_oom``): kept off
    :class:`ContainerTrack`, which every container of every tracked pod has, because few
    containers ever crash (three slots per container cost ~22 bytes per tracked pod).
    Read and write it through the container's properties of the same names."""

    restarts: tuple[float, ...] = ()
    oom_at: float = -math.inf
    cuda_log: bool = False


class ContainerTrack(msgspec.Struct, gc=False, omit_defaults=True):
    """What we remember about one container of a tracked pod.

    ``restarts``, ``oom_at`` and ``cuda_log`` are properties over :attr:`crash`, None until
    the first of them is set: reading one of a container that never crashed gives its
    default, setting one to its default there allocates nothing. Snapshots of releases that
    kept them flat here are read by :mod:`streams.core.snapshot` (``_migrate``).
    """

    name: str
    last_finished: float = -math.inf
    """finishedAt of the newest termination already handled (dedupes repeats)."""
    restart_count: int = 0
    """Restarts already accounted for: the last ``restartCount`` seen, plus one while
    the container's current state is a termination (see ``node._count_unseen_restarts``)."""
    seen_at: float = -math.inf
    """Event time of the last update that showed this container; -inf: not yet (the
    next ``restartCount`` is a baseline, not a delta)."""
    crash: CrashTrack | None = None
    """The rare crash history (:class:`CrashTrack`); None for a container that has none."""

    restarts = _Side[tuple[float, ...]]("crash", "restarts", CrashTrack)
    """Non-zero, non-OOM terminations inside the CUDA-OOM window."""
    oom_at = _Side[float]("crash", "oom_at", CrashTrack)
    """finishedAt of the container's latest ``OOMKilled`` termination."""
    cuda_log = _Side[bool]("crash", "cuda_log", CrashTrack)
    """A termination message in the current window said ``CUDA out of memory``."""


class PodTrack(msgspec.Struct, gc=False, omit_defaults=True):
    """A GPU pod on this node.

    No uid is kept (it would cost 40 bytes a pod): a same-named successor is told
    apart by its predecessor having finished (see ``node._successor``).
    """

    key: str
    """Its own ``namespace/name`` key (the dict's key object): bindings point at it."""
    owner_kind: str
    owner_name: str
    phase: str = ""
    failed: bool = False
    containers: ContainerTrack | tuple[ContainerTrack, ...] = ()
    """The one container itself in the usual case (a 1-tuple would add 48 bytes)."""
    failure_at: float = -math.inf
    """Event time of the newest failure Event (``Evicted``, ``DeviceFailed``...) applied to
    this pod: a late copy of it (a redelivery, an Events relist) is no news, although the
    pod may have restarted and no longer look failed (``node.admits``)."""
    version: int = 0
    """The newest resourceVersion applied (:func:`schemas.ids.k8s_version`); 0: unknown.
    An event of this pod at or below it is an older copy (a redelivery, a stale watch
    cache) and is skipped; one above it is applied even when it sorts behind the node's
    position (a relist's copy, stamped with the object's own older times)."""
    multi: int = 0
    """A pod requesting more than one GPU: the GPUs requested in the low 8 bits, above
    them a 56-bit hash of the pod's uid (its incident's anchor); 0 for the usual pod
    (``multi_gpu_pod_without_nvlink``, see ``streams.core.rules.nvlink``). On the track,
    not in a per-node dict by pod key: a dict entry cost ~65 bytes per multi-GPU pod,
    this slot 8 per pod. Last, with a default: older snapshots restore with 0 (and
    their :attr:`NodeState.multi_gpu`)."""
    other_claims: tuple[str, ...] = ()
    """``namespace/name`` of the pod's ResourceClaims that ask for no GPU (another
    driver's device: a NIC, a compute domain's channel; or a GPU class the connector
    does not know, which its DRA bindings then name). A device taint eviction of the pod
    may be such a device's taint, not its GPUs' (``chain.arm_on_eviction``). Last, with
    a default: older snapshots restore with none."""


class GpuXid(msgspec.Struct, gc=False, omit_defaults=True):
    """What XIDs left on one GPU: kept off :class:`GpuTrack` (every GPU of every node has
    one; few ever log an XID, and three slots each cost ~45 bytes per tracked pod). Read
    and write it through the GPU's properties ``last_xid``, ``last_xid_app``, ``fatal``."""

    last: float = -math.inf
    app: bool = False
    fatal: dict[int, list[Evidence]] | None = None


class GpuTrack(msgspec.Struct, gc=False, omit_defaults=True):
    """One GPU (or MIG instance) of this node, as bindings and XIDs reveal it.

    Its key in :attr:`NodeState.gpus` is the canonical PCI bus id (or
    ``uuid:<uuid>`` until a source tells the bus id), so the bus id is not
    stored twice. ``last_xid``, ``last_xid_app`` and ``fatal`` are properties over
    :attr:`xid`, None until the GPU's first XID. Snapshots of releases that kept them
    flat here are read by :mod:`streams.core.snapshot` (``_migrate``).
    """

    uuid: bytes = b""
    """Packed by :func:`streams.core.rules.gpuids.pack_uuid`; read it with
    :func:`~streams.core.rules.gpuids.unpack_uuid`."""
    index: int | None = None
    pods: str | tuple[str, ...] = ()
    """Pods holding the GPU now (``namespace/name`` keys), from the last binding: the
    key itself for the usual single pod (a 1-tuple would cost 48 bytes per GPU)."""
    kubelet: bool = False
    """``pods`` came from the kubelet (a ``pod-resources`` binding): from then on another
    source's binding no longer replaces them (dcgm-exporter keeps one pod of a time-sliced
    GPU, NVIDIA/dcgm-exporter#151, and would undo the kubelet's list of every sharer)."""
    xid: GpuXid | None = None
    """The GPU's XID history (:class:`GpuXid`); None while it has logged none."""

    last_xid = _Side[float]("xid", "last", GpuXid)
    """Event time of the latest XID of any class on this GPU."""
    last_xid_app = _Side[bool]("xid", "app", GpuXid)
    """That latest XID was the workload's (an application-class code, or a cleanup XID
    45 after one): the device plugin marks no GPU unhealthy for it."""
    fatal = _Side[dict[int, list[Evidence]] | None]("xid", "fatal", GpuXid)
    """Per fatal code, the first line of each of its last ``xid_repeat_count`` episodes."""


def bound_pods(gpu: GpuTrack) -> tuple[str, ...]:
    """The pod keys bound to ``gpu``, whichever way they are stored."""
    pods = gpu.pods
    return (pods,) if isinstance(pods, str) else pods


def pods_on(state: NodeState, key: str, gpu: GpuTrack) -> tuple[str, ...]:
    """Pods a fault of the GPU stored under ``key`` concerns.

    A whole GPU's own binding; for a MIG parent, also every pod bound to one of its
    instances (an XID that names no instance, 79 or 48, is the whole GPU's: all its
    MIG pods are candidates). A MIG instance's own pods only: its siblings run on
    isolated slices.
    """
    pods = bound_pods(gpu)
    parent, instance = split_gpu_key(key)
    if instance is not None:
        if pods or state.dra is None or is_dra_instance(instance):
            return pods
        # An instance no source bound, on a GPU whose MIG devices DRA names by uuid alone
        # (no instance id): which of them the XID's ``GPU-I:NN`` is cannot be told, so each
        # of their pods is a candidate.
        prefix = parent + MIG_SEPARATOR
        return tuple(
            dict.fromkeys(
                p
                for k, g in state.gpus.items()
                if k.startswith(prefix) and is_dra_instance(split_gpu_key(k)[1])
                for p in bound_pods(g)
            )
        )
    prefix = key + MIG_SEPARATOR
    more = [
        p
        for k, g in state.gpus.items()
        if k.startswith(prefix)
        or (g.uuid and g.uuid == gpu.uuid and k != key and MIG_SEPARATOR in k)
        for p in bound_pods(g)
    ]
    return tuple(dict.fromkeys((*pods, *more))) if more else pods


def gpu_ref(key: str, gpu: GpuTrack, state: NodeState | None = None) -> GpuRef:
    """The published identity of the GPU (or MIG instance) stored under ``key``; the
    node's ``state`` adds a MIG instance's profile."""
    parent, instance = split_gpu_key(key)
    bus = "" if parent.startswith("uuid:") or parent == "unknown" else parent
    if instance is None:
        return GpuRef(uuid=unpack_uuid(gpu.uuid), pci_bus_id=bus, index=gpu.index)
    resources = state.resources if state is not None else None
    return GpuRef(
        uuid=unpack_uuid(gpu.uuid),
        pci_bus_id=bus,
        index=gpu.index,
        gpu_instance=None if is_dra_instance(instance) else instance,
        mig_profile=resources.profiles.get(key, "") if resources is not None else "",
    )


class GpuResources(msgspec.Struct, omit_defaults=True):
    """Per-node MIG facts, kept off :class:`GpuTrack` (35k GPUs in a big cluster: a slot
    each for a profile almost none of them has costs 15 bytes per tracked pod)."""

    unallocatable: str = ""
    """What is unallocatable, per GPU resource, when counting "GPUs" would mislead: a MIG
    node (``1 of 7 MIG 1g.10gb instances``; a one-GPU node must not read "1 of 7
    GPUs"), several GPU resources. Empty with no gap (see ``node._unallocatable``)."""
    profiles: dict[str, str] = {}
    """MIG profile (``1g.10gb``) by GPU key (``<parent>/GI<id>``), from the bindings."""


class NodeTopology(msgspec.Struct, gc=False, omit_defaults=True):
    """The node's GPU topology, from its latest ``gpu_topology.v1`` snapshot (replaced
    whole by each one: a link that failed must not linger), and what it implies.

    Compact on purpose: an 8-GPU node's snapshot is 28 pairs and 8 GPUs, and as structs it
    was the largest item of the state (~3 KB a node, ~880 B per tracked pod). As three
    interned strings, every node of one board shares them (all HGX H100 nodes print the
    same matrix): what a node pays is this struct and its snapshot's id. Read them with
    :mod:`streams.core.rules.nvlink` (``links_of``, ``gpus_of``, ``islands_of``).
    """

    links: str = ""
    """Each GPU pair once, ``src < dst`` (NVML indices), by pair: ``0-1:NV18 0-2:SYS``.
    The code as the matrix prints it (``NV#``: that many bonded NVLinks)."""
    gpus: str = ""
    """Each GPU by index: ``index:numa:bus id`` (numa -1 and bus id empty where unknown):
    ``0:0:0000:18:00.0``. Uuids are not kept: the bus id identifies a GPU on its node as
    well, and ``nvidia-smi topo`` prints none."""
    islands: str = ""
    """NVLink islands: the connected components of the GPUs over NVLink pairs, each sorted,
    ordered by their first index, a GPU with no NVLink an island of its own: ``0-1-2-3-4-5-6-7``
    on an HGX board, ``0 1 2 3`` on a PCIe box. Kept for the rules that need it (stragglers:
    a job across islands waits on its slowest link)."""
    source: str = ""
    event_id: str = ""
    """The snapshot's id and event time: the incidents' evidence."""
    time: float = -math.inf


class OpenIncident(msgspec.Struct, omit_defaults=True):
    """An incident that is open (or just resolved), with everything needed to publish it."""

    id: str
    type: str
    subject: str
    severity: Severity
    first_seen: float
    last_seen: float
    summary: str = ""
    action: str = ""
    revision: int = 0
    gpus: dict[str, GpuRef] = {}
    pods: dict[str, PodInfo] = {}
    evidence: list[Evidence] = []
    evidence_omitted: int = 0
    attributes: dict[str, str] = {}
    resolve_at: float = NEVER
    count: int = 0
    """Type-specific occurrence count (restarts, kills, XIDs)."""
    published_at: float = -math.inf
    """Event time of the newest published revision (``open`` or ``updated``)."""
    published_severity: str = ""
    """The severity that revision carried: a change of severity is published at once."""
    held: bool = False
    """Changes wait to be published: at most one ``updated`` revision per
    ``revision_interval_seconds`` (a timer at ``published_at`` plus the interval)."""


class OomState(msgspec.Struct, gc=False, omit_defaults=True):
    """``host_oom_kill``'s state slice (:mod:`streams.core.rules.oom` owns it): the
    worked example of a rule keeping its state in a struct of its own, not in flat
    :class:`NodeState` fields. A node holds one only while an event waits."""

    pending: tuple[tuple[float, Evidence], ...] = ()
    """Node ``OOMKilling`` events not yet matched to a container: (event time, the Event)."""


class DraDevice(msgspec.Struct, gc=False, omit_defaults=True):
    """One GPU-driver device of the node's ResourceSlices, as the newest slice listing it
    said (:mod:`streams.core.rules.dra`). Kept after it leaves the slices, with ``gone``
    set, until its GPU is listed again: a DRA plugin restart deletes and republishes its
    slices, and only a GPU gone longer than ``dra_absent_seconds`` is a fault."""

    uuid: bytes = b""
    """Its ``uuid`` attribute, packed (:func:`streams.core.rules.gpuids.pack_uuid`):
    ``GPU-...``, or ``MIG-...`` for a MIG device."""
    parent: bytes = b""
    """A MIG device's ``parentUUID``, packed; empty for a whole GPU."""
    bus: str = ""
    product: str = ""
    type: str = ""
    profile: str = ""
    taints: tuple[str, ...] = ()
    """Its effective ``NoSchedule``/``NoExecute`` taints in words (``key=value:Effect``,
    ``(rule <name>)`` added for a DeviceTaintRule's); a taint of effect ``None`` is none.
    Empty for a healthy device."""
    slice: str = ""
    """The slice that lists it (its name)."""
    seen: float = -math.inf
    """Event time of the newest slice record that listed it."""
    gone: float | None = None
    """Event time it left the node's slices; None while listed."""
    fault: Evidence | None = None
    """The record that tainted it, or that it left the slices in (the incident's
    evidence); None while it is listed untainted."""
    since: float = -math.inf
    """Event time its taint began."""
    checked: bool = False
    """``gpu_degraded`` has judged its current fault (told it, or left it to a chain)."""


class DraHold(msgspec.Struct, gc=False, omit_defaults=True):
    """Which pods hold one DRA device, by the connector's ``dra`` binding of it: the API
    server's allocation, kept apart from the other sources' pods so that a binding of
    dcgm-exporter or the kubelet that leaves them out does not unbind them."""

    uuid: bytes
    """The GPU it is part of (packed; the parent's for a MIG device)."""
    instance: int | None = None
    """The instance of its GPU key (:data:`streams.core.rules.dra.PSEUDO_BASE` and up for
    a MIG device, which DRA names by uuid alone); None for a whole GPU."""
    pods: tuple[str, ...] = ()
    claims: tuple[str, ...] = ()
    """``namespace/name`` of the ResourceClaims through which ``pods`` hold it."""


class DeviceReport(msgspec.Struct, gc=False, omit_defaults=True):
    """A device some container's ``allocatedResourcesStatus`` reports ``Unhealthy``."""

    pods: tuple[str, ...]
    """The pods (``namespace/name``) whose containers report it so now."""
    since: float
    item: Evidence
    resource: str = ""
    """The kubelet's resource name (``nvidia.com/gpu``, ``claim:gpu/gpu``)."""
    checked: bool = False
    """``gpu_degraded`` has judged it (as :attr:`DraDevice.checked`)."""


class DraState(msgspec.Struct, omit_defaults=True):
    """What the node's ResourceSlices, DRA bindings and the kubelet's device health say
    (:mod:`streams.core.rules.dra`). On :attr:`NodeState.dra`, None on a node none of
    them ever named: a device-plugin node pays one slot."""

    devices: dict[str, DraDevice] = {}
    """By device name (``gpu-2``, ``gpu-0-mig-1g12gb-19-0``). Trap: names are unique
    within one driver's pool; a node has one GPU driver pool (its own name)."""
    slices: dict[str, tuple[str, int]] = {}
    """Slice name -> (``driver/pool``, pool generation) of the slices applied."""
    pools: dict[str, int] = {}
    """``driver/pool`` -> the newest generation seen: a slice of an older one is stale."""
    versions: dict[str, int] = {}
    """Slice name -> the resourceVersion applied: an older or equal copy is stale, a newer
    one is news even late (:func:`streams.core.node.admits`)."""
    bound: dict[str, int] = {}
    """Device name -> the version (etcd revision, the last part of its id) of the ``dra``
    binding applied, kept after a release: a late binding is news only when newer."""
    holds: dict[str, DraHold] = {}
    """By DRA device name: the pods and claims holding it (``dra`` bindings)."""
    unhealthy: dict[str, DeviceReport] = {}
    """Devices reported ``Unhealthy``, by the kubelet's id: the DRA device name for a
    claim's device, the GPU uuid (or ``MIG-`` uuid) for a device plugin's."""


class MonitorPod(msgspec.Struct, gc=False, omit_defaults=True):
    """A GPU monitoring pod on the node (dcgm-exporter, device plugin, DRA plugin, node
    agent): never a GPU pod (:attr:`NodeState.pods` never holds one), only what its
    crash loops need (:mod:`streams.core.rules.watchers`). Three slots, two of them shared
    objects in the usual case: every GPU node runs a few of these for ever."""

    role: str
    """Its :data:`schemas.wellknown.MONITOR_ROLES` name (interned)."""
    restarts: int = -1
    """The highest sum of its containers' ``restartCount`` seen; -1 before the first
    sight (a baseline, not a rise). The highest, not the last: a copy of an older version
    (a redelivery) shows fewer, and must not make the next one look like a restart."""
    crashes: tuple[float, ...] = ()
    """Event times its restart count rose, within ``monitoring_restart_window_seconds``."""


class FailedStart(msgspec.Struct, array_like=True, gc=False):
    """A GPU container start that failed (``StartError``, ``ContainerCannotRun``). An
    array, so a snapshot written before ``owner`` existed (four items) still decodes."""

    when: float
    """Event time."""
    pod: str
    """``namespace/name``."""
    gpu: bool
    """The message names the NVIDIA container stack."""
    line: Evidence
    owner: str = ""
    """``Kind/name`` of the pod's controller; empty for a pod without one (its own)."""


class WatchState(msgspec.Struct, omit_defaults=True):
    """What ``monitoring_gap`` keeps of the node's monitoring pods and of its GPU pods'
    failed starts (:mod:`streams.core.rules.watchers`); None on a node with neither, so a
    node pays one slot for it."""

    monitors: dict[int, MonitorPod] = {}
    """The node's monitoring pods by a 64-bit hash of ``namespace/name``
    (``streams.core.rules.mismatch.pod_hash``: stable across processes): a pod's key
    string cost twice its track, on every GPU node, for good."""
    start_errors: tuple[FailedStart, ...] = ()
    """GPU container starts that failed within ``monitoring_start_error_window_seconds``,
    or while their burst's incident is open."""


class NodeState(msgspec.Struct, tag_field="kind", tag="node_state.v1", omit_defaults=True):
    """Everything the core knows about one ``cluster/node`` key."""

    cluster: str
    node: str
    capacity: int = -1
    """Sum of GPU resources in capacity; -1 until a node event says."""
    allocatable: int = -1
    resources: GpuResources | None = None
    """What a MIG (or several-GPU-resource) node needs beyond a GPU count; None on a
    plain ``nvidia.com/gpu`` node, so the common node pays one slot for it."""
    ready: str = ""
    sharing: str = ""
    """``time-slicing`` or ``mps`` when GPUs are shared between pods; else empty."""
    pods: dict[str, PodTrack] = {}
    """GPU pods by ``namespace/name``."""
    gpus: dict[str, GpuTrack] = {}
    """GPUs by canonical PCI bus id (or ``uuid:<uuid>`` until the bus id is known)."""
    recent_xids: tuple[tuple[float, Evidence], ...] = ()
    """The node's latest three XIDs of any class (half an hour at most): gpu_degraded evidence."""
    recent_failures: tuple[tuple[float, PodInfo, Evidence], ...] = ()
    """GPU pod failures within the eviction look-back, for a chain armed just after."""
    chain_until: float = -math.inf
    """device_unhealthy_eviction: pod failures until this time join the chain."""
    chain_anchor: str = ""
    chain_triggers: tuple[Evidence, ...] = ()
    chain_gpus: tuple[tuple[str, GpuRef], ...] = ()
    chain_codes: tuple[int, ...] = ()
    drop_pending: tuple[float, Evidence] | None = None
    """An allocatable drop not yet trusted (no fatal XID, not yet ``drop_persist_seconds``
    old): its event time and change; None when none is pending. One field per node (not
    two, not per pod): the bar is bytes per tracked pod."""
    degraded_since: float | None = None
    degraded_evidence: Evidence | None = None
    degraded_checked: bool = False
    oom: OomState | tuple[tuple[float, Evidence], ...] | None = msgspec.field(
        default=None, name="oom_pending"
    )
    """``host_oom_kill``'s slice (:mod:`streams.core.rules.oom`); None while nothing waits.
    Written under the name of the flat field it replaced, ``oom_pending``, which held the
    waiting events as a bare tuple: a snapshot of the previous release decodes to that
    tuple (an array on the wire, the slice a map: msgspec tells them apart), which
    :meth:`__post_init__` turns into the slice. No slot added, nothing lost on upgrade."""
    not_ready_pending: tuple[float, Evidence] | None = None
    """gpu_node_not_ready in its grace: the event time the node left Ready=True with
    running GPU pods and the condition change that did it (the incident's anchor); None
    when Ready or nothing is pending. One field per node, nothing per pod."""
    # -- XID episodes and hardware faults: two fields, kept together -----------------------
    xid_episodes: tuple[tuple[str, int, float, float], ...] = ()
    """XID codes seen on this node's GPUs within ``xid_episode_gap_seconds``: (GPU key,
    code, event time of the last line of its current fault episode, of its last line
    recorded as info: a ``Nonfatal`` NVLink line), -inf where none. Two floats per
    recent code; an entry goes when its gap has passed (a timer), so a quiet node keeps
    nothing. Per node, not per GPU: no slot on the many GPUs that never log an XID."""
    fault_draft: OpenIncident | None = None
    """The ``gpu_degraded`` a fatal XID (or an XID 154 asking for a reset) will open if no
    eviction chain reports it within ``degraded_after_seconds`` of its first line: built
    as the XIDs arrive, never published until then; None when no fault is pending."""
    incidents: dict[str, OpenIncident] = {}
    """Open incidents by ``type|subject``."""
    node_version: int = 0
    """The newest resourceVersion of the Node object applied; 0: unknown (as for pods)."""
    gone: tuple[tuple[str, int, float], ...] = ()
    """Pods forgotten lately (deleted, replaced, their node deleted): ``(pod key, last
    resourceVersion, event time forgotten)``, kept ``node.TOMBSTONE_SECONDS``. Without
    them a late copy of a deleted pod (a redelivery after a crash) would bring it back."""
    deadline: float = NEVER
    """The earliest timer of this key; recomputed when ``timers_dirty``."""
    timers_dirty: bool = False
    applied_time: float = -math.inf
    applied_rank: int = 0
    applied_id: str = ""
    """The last event applied, in engine order: anything at or before it is stale."""
    topology: NodeTopology | None = None
    """The node's GPU topology (``gpu_topology.v1``); None until a snapshot arrives.
    Last, with a default: snapshots written before it restore with None."""
    multi_gpu: dict[str, int] | None = None
    """Multi-GPU pods by ``namespace/name``, as releases before :attr:`PodTrack.multi`
    wrote them (the same int): still read, moved onto the track at the pod's next full
    update, dropped with the pod; None once empty (an empty dict per node cost 64
    bytes). Nothing adds to it any more."""
    gpu_buses: tuple[tuple[bytes, str], ...] = ()
    """Parent GPU uuid (packed) -> bus id pairs as releases before :attr:`gpu_joins`
    wrote them: read (before ``gpu_joins``) until the next pair is learned, which moves
    them there. Nothing writes this shape any more; last, with a default."""
    disruption: str = ""
    """The planned disruption the node object says it is under (a Karpenter or
    cluster-autoscaler taint, a cordon, a graceful shutdown), in words; empty for none
    (``streams.core.rules.disruption``)."""
    disruption_seen: tuple[float, str] | None = None
    """The last Event or pod status that said the node is being disrupted on purpose
    (Karpenter's ``Evicted pod``, the autoscaler's ``ScaleDown``): its time and words."""
    clique: str = ""
    """The NVLink domain this node's GPUs are in: its whole
    ``nvidia.com/gpu.clique`` label (``streams.core.rules.fabric``); empty on a node
    without one, which the domain rule leaves exactly as it was. Last, with a default:
    snapshots written before it restore with none."""
    gpu_joins: bytes = b""
    """Parent GPU uuid -> bus id, for the GPUs whose join no entry of :attr:`gpus` tells
    (an entry keyed by its bus id and carrying the uuid does): from any record that
    named both (an NVML binding, a topology snapshot). A MIG binding from dcgm-exporter
    carries the parent's uuid and often no bus id, the kernel's XID only the bus id: this
    joins them whichever arrives first. One bytes object per node, not a tuple of pairs
    (a pair and its uuid cost ~100 bytes per GPU): each pair is the packed uuid and the
    bus id, each behind its length in one byte
    (:func:`streams.core.rules.gpuids.join_pairs`). Bounded; last, with a default."""
    dra: DraState | None = None
    """The node's DRA devices, who holds them, and the devices containers report
    Unhealthy (:mod:`streams.core.rules.dra`); None on a node none of them named. Last,
    with a default: snapshots written before it restore with None."""

    pool: str = ""
    """The node's pool: the first of :data:`schemas.wellknown.POOL_LABELS` its labels
    carry (interned); empty for none. Node incidents name it (``pool``), the fleet view
    groups by it. Last, with a default: older snapshots restore with none."""
    product: str = ""
    """Its GPU product (:data:`schemas.wellknown.PRODUCT_LABEL`, interned); empty when
    unlabelled. Node incidents name it (``gpu_product``)."""
    heard: tuple[tuple[str, float], ...] = ()
    """``monitoring_gap``: each monitoring source family heard on this node (a node
    agent's heartbeat, :class:`schemas.events.Tick` with ``source``) and when, rounded
    down to ``monitoring_resolution_seconds``; restarted when the node becomes watchable
    again. Empty on a node no heartbeat named: a family never heard gives nothing. A few
    pairs, replaced (not mutated) as they move."""
    watch: WatchState | None = None
    """``monitoring_gap``'s monitoring pods and failed GPU starts; None while it has none."""
    repair: tuple[tuple[str, float, Evidence], ...] = ()
    """``remediation_stalled``: the ``core.repair_conditions`` the node carries now
    (``Type=Status``), each with the event time the core first saw it so (never the
    condition's own transition time) and the record that showed it. Empty on a healthy
    node, and while it is being removed."""

    def __post_init__(self) -> None:
        # msgspec runs this after decoding a snapshot too: the one migration of a field
        # that moved into a rule's slice (cheap: one type test per new or restored key).
        if isinstance(self.oom, tuple):
            self.oom = OomState(pending=self.oom) if self.oom else None


class PendingPod(msgspec.Struct, omit_defaults=True):
    """A GPU pod the scheduler has not placed (cluster key: it has no node yet)."""

    namespace: str
    name: str
    owner_kind: str = ""
    owner_name: str = ""
    gpus: int = 0
    """GPU devices requested (``nvidia.com/gpu`` and MIG resources, summed)."""
    resource: str = ""
    """The GPU resource it asks for (the first, when several)."""
    since: float = 0.0
    """Pending since: its creation time, else the first record of it."""
    unschedulable: Evidence | None = None
    """Why the scheduler could not place it (the condition or a ``FailedScheduling``
    Event); None until one says so: a pod merely waiting for its first attempt is not
    starved."""
    groups: tuple[str, ...] = ()
    """Node groups an autoscaler record tied to this pod (a plan naming it)."""
    unfit: Evidence | None = None
    """The autoscaler's latest verdict that no node group can fit this pod (a
    ``NotTriggerScaleUp`` whose reasons are all of configuration, no backoff, no max
    size; Karpenter's "could not schedule pod"); None when none stands
    (``streams.core.rules.starved``)."""
    unfit_groups: tuple[str, ...] = ()
    """Node groups an autoscaler record says cannot fit this pod (cluster-autoscaler's
    "can't be scheduled on <group>, predicate failed")."""


class GroupTrack(msgspec.Struct, omit_defaults=True):
    """One node group's recent scale-up failures (``scale_up_failure``, ``gpu_pods_starved``)."""

    attempts: tuple[float, ...] = ()
    """Event times of the failed attempts counted within ``scale_up_window_seconds``
    (records of one attempt within ``scale_up_attempt_gap_seconds`` count once)."""
    reason: str = ""
    """The most telling reason seen (quota over capacity over max_size, timeout, other)."""
    cloud: str = ""
    cloud_code: str = ""
    until: float = -math.inf
    """Backoff: no scale-up before this event time."""
    gpu: bool = False
    """Known to be a GPU node group (its name, or a GPU pod tied to it)."""
    evidence: list[Evidence] = []
    """The latest failure lines (a few)."""
    last: float = -math.inf
    """The last failure record's time (any, counted or not)."""
    offers: tuple[str, ...] = ()
    """The GPU resources (``nvidia.com/gpu``, a MIG profile, a DRA device class) of every
    pod an autoscaler record tied to the group while it was tracked: what its nodes give.
    A few at most (bounded by ``streams.core.rules.starved``)."""


class NodeTally(msgspec.Struct, omit_defaults=True, array_like=True):
    """One GPU node in the cross-source count (``allocation_mismatch``)."""

    requested: int = 0
    """GPUs requested by the running GPU pods on it (Kubernetes' view)."""
    bound: str = ""
    """The GPUs dcgm-exporter reports with a pod label (the device's view): 16 hex digits
    (a 64-bit hash) of each GPU key, concatenated. A string, not a tuple of keys: 2,000
    nodes of 8 GPUs would otherwise hold 16,000 uuid strings in this one key's state
    (and its snapshot). Not 16 bits: one collision in a fleet is a node that disagrees
    forever (``streams.core.rules.mismatch._DIGITS``)."""
    shared: bool = False
    """Time-sliced or MPS (by its labels): its counts cannot agree, it is left out."""
    reported: bool = False
    """A pod-aware binding source has reported this node: without one (no dcgm-exporter
    there, ever) the node is left out rather than counted as all-unbound."""
    unreachable: bool = False
    """Its ``Ready`` condition is False or Unknown: its dcgm-exporter cannot be scraped,
    so its last bindings are stale while its pods are failed NodeLost: left out."""
    digits: int = 4
    """Hex digits per GPU in :attr:`bound`. New tallies use 16; the default is the 4 of
    the snapshots written before (2026-12-02): the struct is array-like, so an old
    snapshot lacks this last field, and reading its 4-digit keys as 16-digit ones would
    count a quarter of the GPUs bound and page a false ``allocation_mismatch`` after an
    upgrade. Such a tally keeps 4 digits until it is empty, then takes 16."""
    leaving: bool = False
    """Its node object says it is being removed on purpose (a Karpenter or autoscaler
    taint, out of service, shutting down): its pods are evicted and its dcgm-exporter
    goes with it, so its counts say nothing: left out
    (:func:`streams.core.rules.disruption.removing`). Last: array-like."""


class FabricLine(msgspec.Struct, gc=False, omit_defaults=True):
    """One NVLink fabric XID (``streams.core.rules.fabric``) of a domain's current fault,
    as the cluster key holds it: where, what, and the line as evidence."""

    time: float
    node: str
    bus: str
    uuid: str
    code: int
    item: Evidence
    fatal: bool = True
    """False for a ``Nonfatal`` line: it names an affected node, never the root."""


class FabricFault(msgspec.Struct, omit_defaults=True):
    """A domain's current NVLink fault: its lines while they keep coming less than
    ``fabric_window_seconds`` apart. The root is chosen when the first line's window
    closes (``closes``); the incident is ``incident`` (a ``state.incidents`` key) from
    then on, empty before."""

    start: float
    last: float
    closes: float
    lines: list[FabricLine] = []
    incident: str = ""


class ClusterState(msgspec.Struct, tag_field="kind", tag="cluster_state.v1", omit_defaults=True):
    """Everything the core knows about one ``cluster`` key: pending GPU pods, the
    autoscaler's node groups, and the cross-source GPU count per node
    (``streams.core.cluster``). Fed by cluster-scoped records and by the copies of pod,
    node and binding records the producer routes here (:class:`schemas.keys.Router`)."""

    cluster: str
    node: str = ""
    """Always empty: incidents of this key are cluster-scoped (they name nodes inside)."""
    events: int = 0
    pending: dict[str, PendingPod] = {}
    """GPU pods not yet scheduled, by ``namespace/name``."""
    groups: dict[str, GroupTrack] = {}
    """Node groups with failures within ``scale_up_window_seconds``."""
    placed: dict[int, tuple[str, int]] = {}
    """Running GPU pods by a 64-bit hash of ``namespace/name``: (node, GPUs requested)."""
    tallies: dict[str, NodeTally] = {}
    """GPU nodes by name."""
    witness: dict[str, Evidence] = {}
    """The record that last changed a disagreeing node's count (the incident's evidence),
    kept only while the node disagrees."""
    revised_at: float = -math.inf
    """When ``allocation_mismatch`` was last revised (revisions are at least
    ``mismatch_after_seconds`` apart while it stays open)."""
    disagree: dict[str, float] = {}
    """Nodes whose counts disagree, not yet for ``mismatch_after_seconds``: since when."""
    settled: dict[str, int] = {}
    """Nodes that have disagreed for ``mismatch_after_seconds``: their share (counted)."""
    settled_total: int = 0
    """The sum of ``settled``, kept as it changes (no walk over the nodes per record)."""
    settled_from: dict[str, float] = {}
    """When each settled node began to disagree: the earliest of those settled when the
    incident opens is its first_seen (one kept for the set would outlive its node)."""
    agreed_since: float = NEVER
    """While the incident is open: since when the sum is back at or below the threshold
    (it resolves once that has lasted ``mismatch_after_seconds``)."""
    settled_changed: bool = False
    """The set of settled nodes changed since the incident last said it."""
    starved_dirty: bool = False
    """Something ``gpu_pods_starved`` reads changed since it last looked (pending pods,
    failures): the rule walks the pending pods only then. False whenever state is
    written (the rules run before), so never in a snapshot."""
    incidents: dict[str, OpenIncident] = {}
    """Open incidents by ``type|subject``."""
    checked_at: float = -math.inf
    """The event time the rules last ran at: thresholds reached by then are not timers."""
    deadline: float = NEVER
    timers_dirty: bool = False
    applied_time: float = -math.inf
    applied_rank: int = 0
    applied_id: str = ""
    cliques: dict[str, str] = {}
    """GPU nodes in an NVLink domain, by name: their domain (the whole
    ``nvidia.com/gpu.clique`` label, from the node copies). Nodes without one: absent."""
    fabric: dict[str, FabricFault] = {}
    """Each NVLink domain's current fault, by domain; gone once it has no line within
    ``fabric_window_seconds`` and its incident (if any) is opened."""
    fabric_nonfatal: dict[str, float] = {}
    """``node|code`` -> event time of that node's last ``Nonfatal`` line of a fabric code,
    kept ``xid_episode_gap_seconds``: a wordless report (dcgm-exporter) of the same code
    soon after is that line seen by a second source, as on the node key."""


KeyState = NodeState | ClusterState
