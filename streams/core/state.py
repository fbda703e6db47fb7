"""The core's state, as msgspec Structs so it can live in a changelog-backed table.

Size matters: a 5,000-node cluster tracks ~150k pods, and the bar is 1 KB of
state per tracked pod. Hence: only GPU pods are tracked; per-container history
is a few floats, not copies of events; evidence is kept only once an incident
exists (plus a handful of recent XIDs per node); repeated strings (namespaces,
owner names, phases) are interned by the handlers.

Trap: never iterate a ``set`` of strings when producing output. String hashing
is randomised per process, so set order differs between two replays of the same
file; every collection here that is iterated is a ``dict`` or a ``list``.
"""

from __future__ import annotations

import math

import msgspec

from schemas.events import PodRef
from schemas.incidents import Evidence, GpuRef, PodInfo
from schemas.types import Severity

NEVER = math.inf
"""A deadline that never comes."""


class ContainerTrack(msgspec.Struct, gc=False):
    """What we remember about one container of a tracked pod."""

    name: str
    last_finished: float = -math.inf
    """finishedAt of the newest termination already handled (dedupes repeats)."""
    last_reason: str = ""
    last_exit: int = 0
    restarts: list[float] = []
    """Non-zero, non-OOM terminations inside the CUDA-OOM window."""
    oom_at: float = -math.inf
    cuda_log: bool = False
    """A termination message in the current window said ``CUDA out of memory``."""


class PodTrack(msgspec.Struct):
    """A GPU pod on this node."""

    uid: str
    gpus: int
    owner_kind: str
    owner_name: str
    phase: str = ""
    failed: bool = False
    containers: list[ContainerTrack] = []


class GpuTrack(msgspec.Struct):
    """One GPU (or MIG instance) of this node, as bindings and XIDs reveal it."""

    uuid: str = ""
    bus_id: str = ""
    index: int | None = None
    pods: tuple[PodRef, ...] = ()
    """Pods holding the GPU now, from the last binding event."""
    last_xid: float = -math.inf
    """Event time of the latest XID of any class on this GPU."""
    fatal: dict[int, list[Evidence]] = {}
    """Per fatal code, the evidence of the last ``xid_repeat_count`` occurrences."""

    def ref(self) -> GpuRef:
        return GpuRef(uuid=self.uuid, pci_bus_id=self.bus_id, index=self.index)


class OpenIncident(msgspec.Struct):
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


class NodeState(msgspec.Struct):
    """Everything the core knows about one ``cluster/node`` key."""

    cluster: str
    node: str
    capacity: int = -1
    """Sum of GPU resources in capacity; -1 until a node event says."""
    allocatable: int = -1
    ready: str = ""
    sharing: str = ""
    """``time-slicing`` or ``mps`` when GPUs are shared between pods; else empty."""
    pods: dict[str, PodTrack] = {}
    """GPU pods by ``namespace/name``."""
    gpus: dict[str, GpuTrack] = {}
    """GPUs by canonical PCI bus id (or ``uuid:<uuid>`` until the bus id is known)."""
    uuid_index: dict[str, str] = {}
    recent_xids: list[Evidence] = []
    recent_failures: list[tuple[float, str, PodInfo, Evidence]] = []
    """GPU pod failures within the eviction look-back, for a chain armed just after."""
    chain_until: float = -math.inf
    """device_unhealthy_eviction: pod failures until this time join the chain."""
    chain_anchor: str = ""
    chain_triggers: list[Evidence] = []
    chain_gpus: dict[str, GpuRef] = {}
    chain_codes: list[int] = []
    degraded_since: float | None = None
    degraded_evidence: Evidence | None = None
    degraded_checked: bool = False
    oom_pending: list[tuple[float, Evidence]] = []
    """Node ``OOMKilling`` events not yet matched to a container."""
    incidents: dict[str, OpenIncident] = {}
    """Open incidents by ``type|subject``."""
    deadline: float = NEVER
    """The earliest timer of this key; recomputed when ``timers_dirty``."""
    timers_dirty: bool = False


class ClusterState(msgspec.Struct):
    """Cluster-scoped state (pending pods, autoscaler). Room for the cluster-scoped
    incident types (``gpu_pods_starved``, ``scale_up_failure``, ``allocation_mismatch``);
    today it only counts what it is sent."""

    cluster: str
    events: int = 0
    deadline: float = NEVER
    timers_dirty: bool = False


KeyState = NodeState | ClusterState
