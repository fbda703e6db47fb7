"""Correlation keys: which records must meet in one worker (part of the topic contract).

Every raw record is keyed ``cluster/node`` (node-scoped) or ``cluster`` (cluster-scoped),
and every raw topic has the same partition count, so all signals about one node meet in
one worker. Producers and the processor must agree byte for byte, hence it lives with the
schemas. The cluster rules need node-scoped facts, so the producer sends the cluster key a
slimmed copy (``scope = "cluster"``) of records that change them (:class:`Router`); the
replay routes the same way.

Traps: changing this function or a running deployment's partition count re-homes keys
(fresh state, no rolling upgrade); a copy keeps the original's id and time, so the engine
tells them apart by key, never id; only GPU pods, GPU nodes, pod-aware bindings and fabric
XIDs are copied, and only on change: every copy lands on the cluster's one partition.
docs/detection.md, design notes: correlation keys.
"""

from __future__ import annotations

import math
from typing import Any, Final

import msgspec

from schemas.codec import AnyEvent
from schemas.events import (
    GpuBindingEvent,
    NodeEvent,
    PodClaim,
    PodEvent,
    ResourceSliceEvent,
    Taint,
    XidEvent,
)
from schemas.progress import DEFAULT_GRACE_SECONDS
from schemas.timeconv import to_seconds
from schemas.wellknown import (
    CLIQUE_LABEL,
    REMOVAL_TAINTS,
    REPLICAS_LABEL,
    SHARING_LABEL,
    SHUTTING_DOWN,
    labelled_gpu_node,
)

POD_RESOURCES: Final = "pod-resources"
"""The ``source`` of the kubelet's bindings (:attr:`GpuBindingEvent.source`)."""
DRA: Final = "dra"
"""The ``source`` of the bindings the k8s connector joins from allocated ResourceClaims and
ResourceSlices: like the kubelet's, they are not dcgm-exporter's, and are not copied to
the cluster key (``allocation_mismatch`` counts DCGM's alone)."""

FABRIC_XIDS: Final = frozenset(range(144, 150))
"""The NVLink5 XIDs a fault in a multi-node NVLink domain spreads as: 144 (SAW), 145
(RLW), 146 (TLW), 147 (TREX), 148 (NVLPW), 149 (NETIR). NVIDIA's catalog gives each of
them a remote impact (``Remote: PacketLoss``); 150 (MSE) is ``Local: Fatal; Remote:
None``, a fault of its GPU alone, and is not copied. Copied to the cluster key whatever
the node's labels (the producer does not know them): the rule there reads the node's
NVLink domain from the node copies, and ignores a node in none."""


def key_of(cluster: str, node: str = "") -> str:
    """The correlation key of a node (``cluster/node``) or of a cluster (``cluster``)."""
    return f"{cluster}/{node}" if node else cluster


def is_copy(event: AnyEvent) -> bool:
    """Is this the copy a :class:`Router` made for the cluster key?"""
    return getattr(event, "scope", "node") == "cluster"


def key_node(event: AnyEvent) -> str:
    """The node part of the event's key: its node, or ``""`` for the cluster key."""
    node: str = getattr(event, "node", "")
    if node and getattr(event, "scope", "node") == "cluster":
        return ""
    return node


def correlation_key(event: AnyEvent) -> str:
    """``cluster/node`` for node-scoped events, ``cluster`` for cluster-scoped ones."""
    return key_of(event.cluster, key_node(event))


_NVIDIA_GPU: Final = "nvidia.com/gpu"
_NVIDIA_MIG: Final = "nvidia.com/mig-"
_FINISHED: Final = frozenset(("Succeeded", "Failed"))


def gpu_devices(requests: dict[str, int], claims: tuple[PodClaim, ...] = ()) -> tuple[int, str]:
    """``(devices, first resource)`` of a pod's NVIDIA GPUs, which dcgm-exporter binds one by
    one: whole GPUs and MIG devices requested, plus the GPU devices its DRA claims ask for
    (``resource`` is then the claim's device class when no resource is requested)."""
    count, resource = 0, ""
    for name, value in requests.items():
        if name == _NVIDIA_GPU or name.startswith(_NVIDIA_MIG):
            count += value
            if not resource or name < resource:
                resource = name
    for claim in claims:
        if claim.gpus > 0:
            count += claim.gpus
            if not resource:
                resource = claim.device_class
    return count, resource


def claim_gpus(claims: tuple[PodClaim, ...]) -> int:
    """GPU devices a pod asks for through its DRA claims."""
    return sum(c.gpus for c in claims if c.gpus > 0)


def finished(ev: PodEvent) -> bool:
    """Deleted, being deleted, or done: the pod holds nothing any more."""
    return ev.op == "deleted" or ev.deleted_at is not None or ev.phase in _FINISHED


def holds_gpus(ev: PodEvent) -> bool:
    """Does this scheduled pod count in the cross-source GPU count? While it runs with
    whole GPUs (a fractional share is left out: its GPU's count cannot agree)."""
    return ev.phase == "Running" and not finished(ev) and ev.gpu_share is None


_PodView = tuple[str, int] | tuple[str, int, tuple[PodClaim, ...]]
_NodeView = tuple[bool, dict[str, str], tuple[tuple[str, bool], ...], tuple[Taint, ...]]
_PENDING: Final = ("", 0)

CLUSTER_LABELS: Final = (CLIQUE_LABEL, REPLICAS_LABEL, SHARING_LABEL)
"""The node labels a cluster-scoped rule reads: the NVLink domain (``nvlink_domain_fault``)
and whether the node's GPUs are shared (``allocation_mismatch`` leaves such nodes out).
A node copy carries these alone, and a change of another label is not copied: GPU nodes'
labels move for reasons of their own (a remediation controller's state label, feature
discovery's). Of the taints, the view keeps :data:`~schemas.wellknown.REMOVAL_TAINTS`
(a cordon or a health controller's taint is not read there); of the Ready message, only
whether it says :data:`~schemas.wellknown.SHUTTING_DOWN` (a NotReady node's message moves
with every update: "PLEG is not healthy: pleg was last seen active 3m0.2s ago"). Trap: a
cluster rule that reads another label must add it here, or its changes never reach the
cluster key (the router's property test changes labels no rule reads, and fails then)."""

REFRESH_SECONDS: Final = 6 * 3600.0
"""An object whose view has not changed is copied again once this much of its own event
time has passed since its last copy: a safety net for a cluster key whose state was lost
while the producers kept running (restart the connectors with a fresh processor state to
have everything at once). Six hours: a copy of every busy object every 30 min doubled
the cluster key's input on the benchmark stream."""
BEHIND_SECONDS: Final = DEFAULT_GRACE_SECONDS
"""A record this much older than the newest one routed may reach the cluster key behind
the watermark, and behind that key's position, where the engine drops it as stale: the
default ``core.grace_seconds`` (closer records are reordered by the engine, never
dropped). Trap: under a smaller grace, a record between it and this far behind can be
dropped and not copied again until the object's view changes or its refresh is due."""
_SWEEP_EVERY: Final = 1 << 16
"""Records between sweeps of the router's memory (entries not copied for two refresh
periods go: a node that left the fleet, a GPU no source names any more)."""
MAX_SLICE_NODES: Final = 1 << 16
"""Nodes named by GPU drivers' ResourceSlices remembered at most (the least recently
named go first): a node's deletion forgets it, this bounds the ones whose deletion was
never routed (a producer down meanwhile). Far above a cluster's node count."""


class Router:
    """Routes each event to its key, and sends the cluster key the facts it needs only
    when they change: the producer remembers what it sent.

    The cluster-scoped rules read little of the node-scoped records (a pod's node and GPUs,
    what dcgm-exporter binds, whether a GPU node is shared, ready, being removed, its NVLink
    domain); copying every GPU pod update made one partition carry half of the engine's
    events. So a router remembers, per object, the view it last sent and copies a slimmed
    record only when that view changes, keeping the original's id and time.

    Traps: one router per producer and one per replay, so the replay makes the same copies as
    the producer did live; a new router resends every object's first record (harmless, and
    nothing is lost after a restart); a record older than the newest routed is copied but not
    remembered (the cluster key may drop it as stale); an unchanged object is copied again
    after :data:`REFRESH_SECONDS`. Memory, and why not node summaries: docs/detection.md.
    """

    __slots__ = (
        "_bindings",
        "_newest",
        "_nodes",
        "_pods",
        "_routed",
        "_slice_nodes",
        "copies",
        "skipped",
    )

    def __init__(self) -> None:
        self._pods: dict[tuple[str, str, str], tuple[_PodView, float]] = {}
        self._nodes: dict[tuple[str, str], tuple[_NodeView, float]] = {}
        self._bindings: dict[tuple[str, str, str, int | None], tuple[bool, float]] = {}
        self._slice_nodes: dict[tuple[str, str], None] = {}
        """``(cluster, node)`` of the nodes a GPU driver's ResourceSlice named: GPU nodes
        with no GPU capacity (DRA) and perhaps no GPU label. Forgotten on the node's
        deletion, not its slices' (a DRA plugin restart deletes and re-creates them), as
        the k8s connector's GPU filter keeps such a node (``GpuFilter._slice_nodes``)."""
        self._newest = -math.inf
        """The newest event time routed: a record behind it may reach the cluster key
        behind that key's position, where the engine drops it as stale."""
        self._routed = 0
        self.copies = 0
        """Copies sent to the cluster key."""
        self.skipped = 0
        """Records whose copy was not sent: their view had not changed."""

    def __len__(self) -> int:
        """Objects remembered (pods, nodes, GPUs): bounded by the sweeps."""
        return len(self._pods) + len(self._nodes) + len(self._bindings)

    def route(self, event: AnyEvent) -> tuple[AnyEvent, ...]:
        """The event, and its copy for the cluster key when the cluster-scoped rules
        need one (the first record of an object, or a change of its view)."""
        self._routed += 1
        if self._routed % _SWEEP_EVERY == 0:
            self._sweep()
        kind = type(event)
        copy: AnyEvent | None
        if kind is PodEvent:
            copy = self._pod(event)  # type: ignore[arg-type]
        elif kind is NodeEvent:
            copy = self._node(event)  # type: ignore[arg-type]
        elif kind is GpuBindingEvent:
            copy = self._binding(event)  # type: ignore[arg-type]
        elif kind is XidEvent:
            copy = self._xid(event)  # type: ignore[arg-type]
        elif kind is ResourceSliceEvent:
            self._slice(event)  # type: ignore[arg-type]
            return (event,)
        else:
            return (event,)
        if copy is None:
            return (event,)
        self.copies += 1
        return (event, copy)

    def _news(
        self,
        memory: dict[Any, tuple[Any, float]],
        key: Any,
        view: Any,
        ev: AnyEvent,
        gone: bool,
    ) -> bool:
        """Is ``view`` news for the cluster key (so the record is copied)? Remembers it.

        News: the object's first record, a changed view, or an unchanged one last copied
        :data:`REFRESH_SECONDS` ago. A record more than :data:`BEHIND_SECONDS` older
        than the newest one routed is copied when it is news, but not remembered: the
        cluster key may drop it as stale (it sorts behind that key's position, e.g. a
        relisted object stamped with its own older time), so the object's next record
        must be copied whatever it says. ``gone``: the record deletes the object (the
        caller reads it: a binding has no ``op``, and a ``getattr`` with a default that
        misses raises and swallows an AttributeError, ~0.6k instructions a record)."""
        when = to_seconds(ev.time)
        last = memory.pop(key, None) if gone else memory.get(key)
        news = last is None or last[0] != view or when - last[1] >= REFRESH_SECONDS
        if when < self._newest - BEHIND_SECONDS:
            if last is not None and not gone:
                del memory[key]
        else:
            self._newest = max(self._newest, when)
            if news and not gone:
                memory[key] = (view, when)
        if not news:
            self.skipped += 1
        return news

    def _sweep(self) -> None:
        """Forget what was last copied two refresh periods ago (bounded memory)."""
        horizon = self._newest - 2 * REFRESH_SECONDS
        memories: tuple[dict[Any, tuple[Any, float]], ...] = (
            self._pods,
            self._nodes,
            self._bindings,
        )
        for memory in memories:
            stale = [key for key, (_, sent) in memory.items() if sent < horizon]
            for key in stale:
                del memory[key]

    def _pod(self, ev: PodEvent) -> PodEvent | None:
        """Runs for every GPU pod record (most of a stream): kept to a few lookups. A pod
        holding GPUs only through DRA claims is a GPU pod; its view (and copy) keeps its
        claims, so the cluster key counts a claim's GPUs and sees a claim change."""
        requests = ev.gpu_requests
        claims = ev.claims
        if not (requests or ev.gpu_share or claims) or ev.scope == "cluster" or ev.monitor:
            return None  # a monitoring pod (an exporter's admin claim included) holds no GPU
        key = (ev.cluster, ev.namespace, ev.name)
        node = ev.node
        gone = ev.op == "deleted"
        held = 0
        if (
            node
            and ev.phase == "Running"
            and not gone
            and ev.deleted_at is None
            and ev.gpu_share is None
        ):  # holds_gpus(ev), inline; the usual pod asks for one resource: no walk
            held = requests.get(_NVIDIA_GPU, 0) if len(requests) == 1 and not claims else 0
            if held <= 0:
                held = gpu_devices(requests, claims)[0]
        # A DRA pod's view names its claims: which pods share a claim is counted there.
        view: _PodView = (node, held, claims) if claims else (node, held)
        news = self._news(self._pods, key, view, ev, gone)
        if not node or not news:  # pending: this record is the cluster key's own
            return None
        return msgspec.structs.replace(
            ev,
            scope="cluster",
            containers=(),
            scheduled=None,
            disruption=None,
            gpu_limits={},
            created_at=None,
            reason="",
            owner_kind="",
            owner_name="",
        )

    def _xid(self, ev: XidEvent) -> XidEvent | None:
        if ev.code not in FABRIC_XIDS or ev.sxid or ev.scope == "cluster":
            return None
        return msgspec.structs.replace(ev, scope="cluster")

    def _slice(self, ev: ResourceSliceEvent) -> None:
        """A GPU driver's ResourceSlice (the connector publishes no other driver's) names
        a GPU node: remember it, as the most recently named (:data:`MAX_SLICE_NODES`)."""
        if not ev.node or ev.op == "deleted" or ev.scope == "cluster":
            return
        memory = self._slice_nodes
        key = (ev.cluster, ev.node)
        memory.pop(key, None)  # re-inserted last: the least recently named go first
        memory[key] = None
        if len(memory) > MAX_SLICE_NODES:
            del memory[next(iter(memory))]

    def _node(self, ev: NodeEvent) -> NodeEvent | None:
        """The view of a GPU node: deleted or not, the labels in :data:`CLUSTER_LABELS`,
        Ready's status and whether its message says the node shuts down, the taints in
        :data:`REMOVAL_TAINTS`; the copy carries exactly these (and the whole Ready
        condition), so what the cluster key reads of it is what the view compared.

        A GPU node: one with a GPU resource, labelled as one (the GPU operator's
        ``gpu.present=true``, NFD's NVIDIA PCI label:
        :func:`~schemas.wellknown.labelled_gpu_node`), or named by a GPU driver's
        ResourceSlice (a DRA node has no ``nvidia.com/gpu`` at all, and without the GPU
        operator no ``gpu.present``), as the k8s connector's GPU filter keeps it. Trap:
        a node routed before its first slice is copied from its next record on (the
        connector lists slices before nodes)."""
        if ev.scope == "cluster":
            return None
        key = (ev.cluster, ev.node)
        gone = ev.op == "deleted"
        named = key in self._slice_nodes
        if gone and named:
            del self._slice_nodes[key]
        if not (ev.capacity or named or labelled_gpu_node(ev.labels)):  # not a GPU node
            if gone:
                self._nodes.pop(key, None)
            return None
        ready = tuple(  # every Ready condition, as the rules read them (one, in practice)
            (c.status, SHUTTING_DOWN in c.message.lower())
            for c in ev.conditions
            if c.type == "Ready"
        )
        labels = ev.labels
        read = {name: labels[name] for name in CLUSTER_LABELS if name in labels}
        taints = tuple(t for t in ev.taints if t.key in REMOVAL_TAINTS)
        view = (gone, read, ready, taints)
        if not self._news(self._nodes, key, view, ev, gone):
            return None
        return msgspec.structs.replace(
            ev,
            scope="cluster",
            allocatable={},
            conditions=tuple(c for c in ev.conditions if c.type == "Ready"),
            labels=read,
            taints=taints,
        )

    def _binding(self, ev: GpuBindingEvent) -> GpuBindingEvent | None:
        # The cluster key's only binding reader is allocation_mismatch, which compares the
        # requests with what *DCGM* reports: the kubelet's own bindings (pod-resources) agree
        # with the requests by construction and would hide every DCGM outage it exists for.
        if ev.scope == "cluster" or not ev.pods_known or ev.source in (POD_RESOURCES, DRA):
            return None
        key = (ev.cluster, ev.node, ev.gpu_uuid or ev.pci_bus_id, ev.gpu_instance)
        if not self._news(self._bindings, key, bool(ev.pods), ev, False):
            return None
        return msgspec.structs.replace(
            ev, scope="cluster", device="", mig_profile="", mig_uuid="", gpu_index=None
        )
