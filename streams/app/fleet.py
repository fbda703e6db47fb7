"""The fleet tally: GPUs in and out of service per cluster, pool and product, and open
incidents per cluster, type and severity, from the core's key states (pure: no clock).

A GPU is **healthy** when it is in the capacity of a Ready node and no open page-level
hardware incident of that node takes it (:func:`gpus_taken`: those it names, or, naming
none, every GPU of the node: which one could not be told). Every GPU of a node whose Ready
is ``False`` or ``Unknown`` is unhealthy. Traps: a DRA node advertises no
``nvidia.com/gpu``: its GPUs are its listed DRA devices, one per physical GPU (a MIG device
counts as its parent). A MIG node under the mixed strategy advertises instances: its
capacity, and a fault naming one instance, count instances; a fault of the whole GPU
counts one, never more than the node has. An allocatable drop only a ticket names (a
``gpu_degraded`` not escalated) leaves the GPU healthy: the gauge says "no page took it
out of service", kube-state-metrics says "allocatable". The walk is O(keys): callers
sample it (the workers, once a second at most).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from schemas.incidents import GpuRef
from schemas.wellknown import GPU_FAULT_TYPES
from streams.core.state import NodeState

PAGE: Final = "page"
NODE_NOT_READY: Final = "gpu_node_not_ready"
"""Takes the whole node through its Ready condition (the gauge reads Ready itself;
``gputriage status`` has only the incident)."""
NOT_READY: Final = frozenset(("False", "Unknown"))
"""Ready condition statuses that take all of a node's GPUs out of service."""

GpuKey = tuple[str, str, str, str]
"""``(cluster, pool, product, state)``: a ``gputriage_fleet_gpus`` series."""
GpuId = tuple[str, int | None]
"""One GPU or MIG instance: see :func:`gpu_identity`."""
IncidentKey = tuple[str, str, str]
"""``(cluster, type, severity)``: a ``gputriage_open_incidents`` series."""


class Tally(msgspec.Struct):
    """One round's counts, keyed by the gauges' label values."""

    gpus: dict[GpuKey, int] = {}
    incidents: dict[IncidentKey, int] = {}


def out_of_service(kind: str, severity: str) -> bool:
    """Does an open incident of this type and severity take the GPUs it names out of service?"""
    return severity == PAGE and kind in GPU_FAULT_TYPES


def gpu_identity(ref: GpuRef) -> GpuId:
    """One GPU (or MIG instance) however many identifiers a record gave: the first known
    of uuid, bus id, index, with the MIG instance. Two refs of one GPU, one with a uuid
    and one without, still count twice: records rarely name a GPU both ways."""
    ident = ref.uuid or ref.pci_bus_id or ("" if ref.index is None else f"index:{ref.index}")
    return ident, ref.gpu_instance


def node_gpus(state: NodeState) -> int:
    """GPUs of the node: its capacity, or on a DRA node (no capacity) its listed physical
    GPUs; 0 for a node never seen with any (not a GPU node, or deleted)."""
    if state.capacity > 0:
        return state.capacity
    dra = state.dra
    if dra is None:
        return 0
    physical = {
        device.parent or device.uuid or name
        for name, device in dra.devices.items()
        if device.gone is None
    }
    return len(physical)


def gpus_taken(kind: str, severity: str, refs: Iterable[GpuRef]) -> frozenset[GpuId] | None:
    """The GPUs an open incident takes out of service: those it names (empty: none), or
    None for every GPU of its node. None for ``gpu_node_not_ready``, and for a page-level
    hardware incident that names no GPU: the fault is on the node, which GPU could not be
    told (a ref without uuid, bus id or index names none either). The one rule of both
    the fleet gauge and ``gputriage status``."""
    if kind == NODE_NOT_READY:
        return None
    if not out_of_service(kind, severity):
        return frozenset()
    named = frozenset(gpu_identity(ref) for ref in refs) - {("", None)}
    return named or None


def unhealthy_gpus(state: NodeState, total: int) -> int:
    """GPUs of the node out of service (at most ``total``)."""
    if state.ready in NOT_READY:
        return total
    named: set[GpuId] = set()
    for incident in state.incidents.values():
        taken = gpus_taken(incident.type, incident.severity, incident.gpus.values())
        if taken is None:
            return total
        named |= taken
    return min(total, len(named))


def tally(states: Iterable[object]) -> Tally:
    """Count every key's GPUs and open incidents (a node without pool or product
    labels counts under ``""``)."""
    out = Tally(gpus={}, incidents={})
    gpus, incidents = out.gpus, out.incidents
    for state in states:
        cluster: str = getattr(state, "cluster", "")
        for incident in getattr(state, "incidents", {}).values():
            key = (cluster, incident.type, incident.severity)
            incidents[key] = incidents.get(key, 0) + 1
        if not isinstance(state, NodeState):
            continue
        total = node_gpus(state)
        if total <= 0:
            continue
        pool, product = state.pool, state.product
        bad = unhealthy_gpus(state, total)
        for health, count in (("healthy", total - bad), ("unhealthy", bad)):
            key4 = (cluster, pool, product, health)
            gpus[key4] = gpus.get(key4, 0) + count
    return out
