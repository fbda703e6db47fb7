"""The fleet tally: GPUs in and out of service per cluster, pool and product, and open
incidents per cluster, type and severity, from the core's key states (pure: no clock).

A GPU is **healthy** when it is in the capacity of a Ready node and no open page-level
hardware incident of that node names it (:data:`HARDWARE_TYPES`, severity ``page``).
Every GPU of a node whose Ready condition is ``False`` or ``Unknown`` is unhealthy.
Traps: a DRA node advertises no ``nvidia.com/gpu`` (capacity 0 or unknown): its GPUs
are its listed DRA devices, one per physical GPU (a MIG device counts as its parent).
A MIG node under the device plugin's mixed strategy advertises instances, not GPUs:
its capacity, and a fault naming one instance, count instances; a fault of the whole
GPU counts one, never more than the node has. An allocatable drop that only a ticket
names (a ``gpu_degraded`` not escalated) leaves the GPU healthy here: the gauge says
"no page took it out of service", kube-state-metrics says "allocatable". The walk is
O(keys): callers sample it (the workers, once a second at most).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from schemas.incidents import GpuRef
from streams.core.state import NodeState

HARDWARE_TYPES: Final = (
    "device_unhealthy_eviction",
    "gpu_degraded",
    "xid_repeat",
    "gpu_fault_crash_loop",
)
"""Node incident types that say a GPU itself is faulty: at severity ``page`` the GPUs
they name are out of service (``gpu_fault_crash_loop`` only where configured a page).
``gpu_node_not_ready`` takes the whole node through its Ready condition instead; the
cluster-scoped ``nvlink_domain_fault`` names GPUs of many nodes whose own incidents say
it (as ``info``: the fabric, not the GPU)."""
PAGE: Final = "page"
NOT_READY: Final = frozenset(("False", "Unknown"))
"""Ready condition statuses that take all of a node's GPUs out of service."""

GpuKey = tuple[str, str, str, str]
"""``(cluster, pool, product, state)``: a ``gputriage_fleet_gpus`` series."""
IncidentKey = tuple[str, str, str]
"""``(cluster, type, severity)``: a ``gputriage_open_incidents`` series."""


class Tally(msgspec.Struct):
    """One round's counts, keyed by the gauges' label values."""

    gpus: dict[GpuKey, int] = {}
    incidents: dict[IncidentKey, int] = {}


def out_of_service(kind: str, severity: str) -> bool:
    """Does an open incident of this type and severity take the GPUs it names out of service?"""
    return severity == PAGE and kind in HARDWARE_TYPES


def gpu_identity(ref: GpuRef) -> tuple[str, int | None]:
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


def unhealthy_gpus(state: NodeState, total: int) -> int:
    """GPUs of the node out of service (at most ``total``)."""
    if state.ready in NOT_READY:
        return total
    named: set[tuple[str, int | None]] = set()
    for incident in state.incidents.values():
        if out_of_service(incident.type, incident.severity):
            named.update(gpu_identity(ref) for ref in incident.gpus.values())
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
