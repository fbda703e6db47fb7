"""The kubelet's device ids -> GPUs, and two pod-resources snapshots -> ``gpu_binding.v1`` (pure).

The kubelet's pod-resources API (``List``) says which container holds which device id of which
extended resource; ``GetAllocatableResources`` which device ids the node offers at all. The
ids are whatever the device plugin advertised, so what one *means* depends on the plugin:

* NVIDIA/k8s-device-plugin, default ``deviceIDStrategy=uuid``: a whole GPU is its uuid
  (``GPU-8f2c...``); a MIG device (``migStrategy`` single: under ``nvidia.com/gpu``; mixed:
  under ``nvidia.com/mig-<profile>``) its ``MIG-...`` uuid; drivers before R470 spelled
  that ``MIG-GPU-<parent uuid>/<gi>/<ci>``, which names its parent and GPU instance itself.
* **Time-slicing** (and MPS): the plugin advertises N replicas of one GPU, each
  ``<id>::<n>`` (``NewAnnotatedID`` in the plugin's internal/rm/devices.go), under
  ``nvidia.com/gpu`` or, with ``renameByDefault``, ``nvidia.com/gpu.shared``. Every pod holding
  a replica shares the one GPU, so they all go on *one* binding of that GPU with
  ``shared=True``: a fault on it concerns each of them (dcgm-exporter keeps only one of them,
  NVIDIA/dcgm-exporter#151, which is why this source exists).
* ``deviceIDStrategy=index`` (Bottlerocket's default): ids are NVML indices (``3``), MIG
  devices ``<gpu index>:<mig index>``. A whole GPU is resolved to its uuid through the NVML
  map when one is given (:class:`GpuMap`); a MIG index is never resolved (the MIG index is
  not the GPU instance id).
* GKE's own plugin (GoogleCloudPlatform/container-engine-accelerators): ``nvidia<minor>``,
  time-shared ``nvidia<minor>/vgpu<n>``. A device minor is not an NVML index, so these are
  never guessed at.

**Trap: a ``MIG-`` uuid alone does not name its parent GPU.** Every source names a MIG
instance by (parent GPU, GPU instance id) (:class:`schemas.events.GpuBindingEvent`), and that
is what an XID carries (``GPU-I:03``). With the node's NVML map (``connect podresources`` reads
it when a driver is there, :class:`GpuMap`), a ``MIG-`` uuid becomes parent uuid, bus id, index
and ``gpu_instance``. Without it, the binding carries the ``MIG-`` uuid in ``mig_uuid`` *and*
``gpu_uuid`` (the spelling NVML records had before ``gpu_instance`` existed, which the core
keys as a GPU of its own): it can never be merged with another GPU, but an XID naming the
instance will not find its pod. Ids that resolve to no uuid at all (an index without the map,
GKE's minors) get no binding (counted: :attr:`Snapshot.unresolved`): a binding without a uuid
or bus id would name "some GPU" and merge with every other such one.

**Trap: the kubelet lists devices it no longer has.** Pods that ended keep their entries
until the kubelet's device manager forgets them (kubernetes/kubernetes#119423), so one
physical device id may appear under two pods. Nothing in the API says which one is gone;
both are listed (an XID then names both as candidates), never one dropped on a guess.

**Diffing**: the first snapshot binds every GPU it knows (allocated or allocatable, pods or
none: pod-resources is the ground truth, so an empty binding clears what another source left);
later ones send a binding only when a GPU's pods, sharing or identity changed, and an empty one
when a GPU with pods vanished. Ids hash cluster, node, the GPU's key, its pods, the poll number
and the poll's time: the same polls give the same ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import msgspec

from schemas.events import GpuBindingEvent, PodRef
from schemas.ids import hashed_id
from schemas.keys import POD_RESOURCES

SOURCE: Final = POD_RESOURCES
"""The ``source`` of every binding this module makes (:attr:`GpuBindingEvent.source`)."""
RESOURCES: Final = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
"""Extended resources whose devices are GPUs (``gpu.shared``: time-slicing renamed)."""
PREFIXES: Final = ("nvidia.com/mig-",)
"""Resource name prefixes of MIG devices (the mixed strategy: ``nvidia.com/mig-1g.10gb``)."""
REPLICA: Final = "::"
"""NVIDIA's time-slicing replica separator (``<uuid>::<n>``)."""

_LEGACY_MIG: Final = re.compile(r"MIG-(GPU-[0-9A-Fa-f-]+)/(\d+)/(\d+)")
_GKE: Final = re.compile(r"nvidia\d+(/vgpu\d+)?")
_INDEX: Final = re.compile(r"\d+")


@dataclass(frozen=True)
class GpuInfo:
    """What the node's NVML says of one GPU or MIG device (:class:`GpuMap`)."""

    uuid: str
    """The GPU's uuid; a MIG device's *parent's*."""
    pci_bus_id: str = ""
    index: int | None = None
    gpu_instance: int | None = None
    mig_uuid: str = ""
    mig_profile: str = ""


@dataclass(frozen=True)
class GpuMap:
    """The NVML view that resolves device ids: ``MIG-`` uuids and indices to GPUs.

    Built by the CLI from :mod:`connectors.nvml` (this package must not import it: the source
    families are independent); empty where there is no driver (then see the module's traps).
    """

    by_uuid: Mapping[str, GpuInfo] = field(default_factory=dict)
    """Whole GPUs by ``GPU-`` uuid and MIG devices by ``MIG-`` uuid."""
    by_index: Mapping[int, GpuInfo] = field(default_factory=dict)
    """Whole GPUs by NVML index."""

    @classmethod
    def of(cls, gpus: Iterable[GpuInfo]) -> GpuMap:
        by_uuid: dict[str, GpuInfo] = {}
        by_index: dict[int, GpuInfo] = {}
        for g in gpus:
            if g.mig_uuid:
                by_uuid[g.mig_uuid] = g
                continue
            by_uuid[g.uuid] = g
            if g.index is not None:
                by_index[g.index] = g
        return cls(by_uuid=by_uuid, by_index=by_index)


class Identity(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU or MIG instance as a binding names it (the parent's ids for an instance)."""

    gpu_uuid: str
    pci_bus_id: str = ""
    gpu_index: int | None = None
    gpu_instance: int | None = None
    mig_uuid: str = ""
    mig_profile: str = ""

    @property
    def key(self) -> str:
        """Unique per GPU / instance on the node: what the diff state and event ids use."""
        if self.gpu_instance is not None:
            return f"{self.gpu_uuid}/GI{self.gpu_instance}"
        return self.mig_uuid or self.gpu_uuid


@dataclass(frozen=True)
class Device:
    """One device id of a GPU resource, as the kubelet lists it."""

    resource: str
    device_id: str


def is_gpu_resource(
    name: str, resources: Iterable[str] = RESOURCES, prefixes: Iterable[str] = PREFIXES
) -> bool:
    return name in resources or any(name.startswith(p) for p in prefixes)


def resolve(device: Device, gpus: GpuMap) -> tuple[Identity, bool] | None:
    """The GPU ``device`` is, and whether it is a shared replica; None when it cannot be told."""
    raw = device.device_id.strip()
    base, sep, _ = raw.partition(REPLICA)
    shared = bool(sep)
    if _GKE.fullmatch(base):
        return None  # a device minor, not an NVML index (the module)
    profile = device.resource.rpartition("/mig-")[2] if "/mig-" in device.resource else ""
    legacy = _LEGACY_MIG.fullmatch(base)
    if legacy is not None:
        parent = gpus.by_uuid.get(legacy.group(1))
        return Identity(
            gpu_uuid=legacy.group(1),
            pci_bus_id=parent.pci_bus_id if parent else "",
            gpu_index=parent.index if parent else None,
            gpu_instance=int(legacy.group(2)),
            mig_uuid=base,
            mig_profile=profile,
        ), shared
    if base.startswith("MIG-"):
        found = gpus.by_uuid.get(base)
        if found is None:  # the parent is unknown: see the module's trap
            return Identity(gpu_uuid=base, mig_uuid=base, mig_profile=profile), shared
        return Identity(
            gpu_uuid=found.uuid,
            pci_bus_id=found.pci_bus_id,
            gpu_index=found.index,
            gpu_instance=found.gpu_instance,
            mig_uuid=base,
            mig_profile=profile or found.mig_profile,
        ), shared
    if base.startswith("GPU-"):
        gpu = gpus.by_uuid.get(base)
        return Identity(
            gpu_uuid=base,
            pci_bus_id=gpu.pci_bus_id if gpu else "",
            gpu_index=gpu.index if gpu else None,
        ), shared
    if _INDEX.fullmatch(base):
        by_index = gpus.by_index.get(int(base))
        if by_index is None:
            return None
        return Identity(
            gpu_uuid=by_index.uuid, pci_bus_id=by_index.pci_bus_id, gpu_index=by_index.index
        ), shared
    return None  # "<gpu index>:<mig index>", or a plugin this module does not know


@dataclass(frozen=True)
class Holding:
    """One container holding one device id (a ``List`` entry)."""

    pod: PodRef
    device: Device


@dataclass
class Snapshot:
    """One poll, resolved: per GPU key its identity, pods and whether it is shared."""

    gpus: dict[str, Identity] = field(default_factory=dict)
    pods: dict[str, set[PodRef]] = field(default_factory=dict)
    shared: set[str] = field(default_factory=set)
    unresolved: set[str] = field(default_factory=set)
    """Device ids that name no GPU this source can tell (the module): no binding."""

    def add(self, device: Device, gpus: GpuMap, pod: PodRef | None = None) -> None:
        found = resolve(device, gpus)
        if found is None:
            self.unresolved.add(device.device_id)
            return
        identity, shared = found
        key = identity.key
        known = self.gpus.get(key)
        if known is None or _richer(identity, known):
            self.gpus[key] = identity
        holders = self.pods.setdefault(key, set())
        if pod is not None:
            holders.add(pod)
        if shared:
            self.shared.add(key)


def _richer(new: Identity, old: Identity) -> bool:
    """Keep the spelling that knows more (a mixed-strategy profile, a bus id)."""
    return (bool(new.mig_profile), bool(new.pci_bus_id)) > (
        bool(old.mig_profile),
        bool(old.pci_bus_id),
    )


def snapshot(holdings: Iterable[Holding], allocatable: Iterable[Device], gpus: GpuMap) -> Snapshot:
    """The GPUs of one poll: every allocatable one (maybe without pods) and every held one."""
    snap = Snapshot()
    for device in allocatable:
        snap.add(device, gpus)
    for holding in holdings:
        snap.add(holding.device, gpus, holding.pod)
    return snap


class Bound(msgspec.Struct, frozen=True, kw_only=True):
    """The binding last sent for one GPU (the diff's memory)."""

    identity: Identity
    pods: tuple[PodRef, ...] = ()
    shared: bool = False


class PodResourcesState(msgspec.Struct, kw_only=True):
    """What :func:`diff` remembers between polls (JSON-serialisable)."""

    polls: int = 0
    bound: dict[str, Bound] = {}


class DiffResult(msgspec.Struct, frozen=True, kw_only=True):
    state: PodResourcesState
    events: tuple[GpuBindingEvent, ...]
    unresolved: int = 0


def _order(pod: PodRef) -> tuple[str, str, str]:
    return (pod.namespace, pod.name, pod.container)


def diff(
    state: PodResourcesState | None,
    snap: Snapshot,
    *,
    cluster: str,
    node: str,
    time: datetime,
) -> DiffResult:
    """The bindings that turn ``state`` (None: the first poll) into ``snap``, at ``time``."""
    old = state or PodResourcesState()
    first = state is None or old.polls == 0
    seq = old.polls + 1
    stamp = time.isoformat()
    bound: dict[str, Bound] = {}
    events: list[GpuBindingEvent] = []
    for key in sorted(snap.gpus):
        pods = tuple(sorted(snap.pods.get(key, ()), key=_order))
        now = Bound(identity=snap.gpus[key], pods=pods, shared=key in snap.shared)
        bound[key] = now
        if first or old.bound.get(key) != now:
            events.append(_event(key, now, cluster, node, time, seq, stamp))
    for key in sorted(old.bound):
        gone = old.bound[key]
        if key not in bound and gone.pods:
            unbound = msgspec.structs.replace(gone, pods=())
            events.append(_event(key, unbound, cluster, node, time, seq, stamp))
    return DiffResult(
        state=PodResourcesState(polls=seq, bound=bound),
        events=tuple(events),
        unresolved=len(snap.unresolved),
    )


def _event(
    key: str, b: Bound, cluster: str, node: str, time: datetime, seq: int, stamp: str
) -> GpuBindingEvent:
    pods = ",".join(f"{p.namespace}/{p.name}/{p.container}" for p in b.pods)
    i = b.identity
    return GpuBindingEvent(
        id=hashed_id("podres", cluster, node, key, pods, b.shared, seq, stamp),
        cluster=cluster,
        time=time,
        node=node,
        gpu_uuid=i.gpu_uuid,
        pci_bus_id=i.pci_bus_id,
        gpu_index=i.gpu_index,
        mig_profile=i.mig_profile,
        pods=b.pods,
        gpu_instance=i.gpu_instance,
        mig_uuid=i.mig_uuid,
        shared=b.shared,
        source=SOURCE,
    )
