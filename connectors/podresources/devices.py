"""The kubelet's device ids -> GPUs, and two pod-resources snapshots -> ``gpu_binding.v1`` (pure).

Pod-resources says which container holds which device id; what an id means depends on the
device plugin: a uuid, a ``MIG-`` uuid, a time-sliced replica ``<id>::<n>``, an NVML index
(``deviceIDStrategy=index``) or GKE's ``nvidia<minor>``. Every pod holding a replica of one
GPU goes on one binding with ``shared=True`` (dcgm-exporter keeps only one of them, which is
why this source exists). The first snapshot binds every GPU it knows (the ground truth
clears what another source left); later ones send only changes. Ids hash the poll.

Traps: a ``MIG-`` uuid alone does not name its parent (the node's NVML map resolves it;
without it the instance cannot meet an XID's ``GPU-I:NN``); ids that resolve to no uuid (an
index without the map, a GKE minor) get no binding, only a count; the kubelet lists devices
of pods that ended, so a device under two pods names both, never one dropped on a guess.
Each plugin's spelling: docs/connectors.md, design notes.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import msgspec

from connectors.settings import MIG_PREFIXES
from schemas.events import GpuBindingEvent, PodRef
from schemas.ids import hashed_id
from schemas.keys import POD_RESOURCES

SOURCE: Final = POD_RESOURCES
"""The ``source`` of every binding this module makes (:attr:`GpuBindingEvent.source`)."""
RESOURCES: Final = ("nvidia.com/gpu", "nvidia.com/gpu.shared")
"""Extended resources whose devices are GPUs (``gpu.shared``: time-slicing renamed)."""
PREFIXES: Final = MIG_PREFIXES
"""Resource name prefixes of MIG devices (one spelling for every family)."""
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
