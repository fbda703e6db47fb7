"""Builders of simulated events: the one place that knows how a fake pod, node, XID... looks.

The tests, the demo scenario and the simulator make events of a cluster that does not
exist; they carried three drifting copies of the same knowledge (a GPU request's resource
name, a zero-GPU pod having no request, a device name from a GPU index), now kept here
once. It lives in the installed ``gputriage.demo`` package because ``examples/`` and
``bench/`` import only installed packages. Ids, time units and defaults that differ on
purpose stay with each caller: ids are part of the bytes, and no stream's records changed
when they moved here.

Traps: a pod asking for 0 GPUs has an *empty* ``gpu_requests`` (any key reads as "a GPU
pod"), while a node's allocatable 0 is a real reading; ``pci_bus_id`` must be canonical or
an XID and a binding never join (the builders refuse others); structs are frozen but their
dicts are not: never mutate one after passing it. docs/development.md, design notes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Final

from schemas.events import (
    ContainerStatus,
    GpuBindingEvent,
    GpuNumaAffinity,
    GpuPairLink,
    GpuTopologyEvent,
    KubeEvent,
    NodeCondition,
    NodeEvent,
    ObjectRef,
    PodCondition,
    PodEvent,
    PodRef,
    Taint,
    Termination,
    XidEvent,
)
from schemas.pci import canonical_bus_id
from schemas.types import Op

GPU: Final = "nvidia.com/gpu"
"""The extended resource whole GPUs are requested by (MIG profiles have their own)."""

T0: Final = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
"""Time zero of the tests and of the demo scenario (the bench starts elsewhere: its
start is part of its cached file names and of its bytes)."""


def at(seconds: float, start: datetime = T0) -> datetime:
    """``start`` plus ``seconds``: event time on a scenario's timeline."""
    return start + timedelta(seconds=seconds)


def gpu_request(count: int) -> dict[str, int]:
    """A pod's GPU requests (or limits) for ``count`` whole GPUs: empty for 0, not ``{GPU: 0}``."""
    return {GPU: count} if count else {}


def termination(
    finished_at: datetime, reason: str = "Error", code: int = 1, message: str = ""
) -> Termination:
    """A container termination; ``message`` is what ``FallbackToLogsOnError`` would keep."""
    return Termination(reason=reason, exit_code=code, finished_at=finished_at, message=message)


def container(
    name: str,
    *,
    restarts: int = 0,
    state: str = "",
    reason: str = "",
    current: Termination | None = None,
    last: Termination | None = None,
) -> ContainerStatus:
    """One container status: ``current`` is ``state.terminated``, ``last`` is
    ``lastState.terminated`` (a restarted container's previous exit)."""
    return ContainerStatus(
        name=name,
        restart_count=restarts,
        state=state,
        reason=reason,
        terminated=current,
        last_terminated=last,
    )


def pod_event(
    *,
    id: str,
    cluster: str,
    time: datetime,
    name: str,
    namespace: str,
    node: str = "",
    op: Op = "modified",
    uid: str = "",
    phase: str = "Running",
    reason: str = "",
    message: str = "",
    gpus: int = 1,
    limits: bool = True,
    owner: tuple[str, str] = ("", ""),
    containers: tuple[ContainerStatus, ...] = (),
    scheduled: PodCondition | None = None,
    created_at: datetime | None = None,
    deleted_at: datetime | None = None,
) -> PodEvent:
    """A pod requesting ``gpus`` whole GPUs, owned by ``owner`` (kind, name).

    ``uid`` defaults to ``uid-NAME``, so a pod's updates share one uid as a real
    pod's do. ``limits`` sets ``gpu_limits`` equal to the requests, as Kubernetes
    requires for extended resources; the tests' pods are built without them.
    """
    requests = gpu_request(gpus)
    return PodEvent(
        id=id,
        cluster=cluster,
        time=time,
        node=node,
        op=op,
        namespace=namespace,
        name=name,
        uid=uid or f"uid-{name}",
        phase=phase,
        reason=reason,
        message=message,
        gpu_requests=requests,
        gpu_limits=requests if limits else {},
        owner_kind=owner[0],
        owner_name=owner[1],
        containers=containers,
        scheduled=scheduled,
        created_at=created_at,
        deleted_at=deleted_at,
    )


def ready_condition(status: str = "True", reason: str = "", message: str = "") -> NodeCondition:
    """A node's ``Ready`` condition: ``True``, ``False`` or ``Unknown`` (kubelet silent)."""
    return NodeCondition(type="Ready", status=status, reason=reason, message=message)


def node_event(
    *,
    id: str,
    cluster: str,
    time: datetime,
    node: str,
    op: Op = "modified",
    capacity: int = 8,
    allocatable: int | None = None,
    ready: NodeCondition | None = None,
    conditions: tuple[NodeCondition, ...] = (),
    labels: dict[str, str] | None = None,
    taints: tuple[Taint, ...] = (),
) -> NodeEvent:
    """A node with ``capacity`` GPUs, ``allocatable`` of them healthy (all by default).

    ``ready`` (default: a bare ``Ready=True``) comes first, then ``conditions``.
    Both GPU counts are written even when 0: see the module's traps.
    """
    return NodeEvent(
        id=id,
        cluster=cluster,
        time=time,
        node=node,
        op=op,
        capacity={GPU: capacity},
        allocatable={GPU: capacity if allocatable is None else allocatable},
        conditions=(ready or ready_condition(), *conditions),
        labels=labels or {},
        taints=taints,
    )


def kube_event(
    *,
    id: str,
    cluster: str,
    time: datetime,
    node: str,
    reason: str,
    kind: str,
    name: str,
    warning: bool,
    namespace: str = "",
    uid: str = "",
    message: str = "",
    source: str = "",
    count: int = 1,
) -> KubeEvent:
    """A Kubernetes Event about the ``kind`` object ``namespace/name``.

    ``warning`` has no default: the schema's default type is ``Normal``, while
    almost every simulated event of interest is a ``Warning``, and a builder that
    picked either would be wrong for someone without saying so.
    """
    return KubeEvent(
        id=id,
        cluster=cluster,
        time=time,
        node=node,
        reason=reason,
        message=message,
        type="Warning" if warning else "Normal",
        involved=ObjectRef(kind=kind, name=name, namespace=namespace, uid=uid),
        source=source,
        count=count,
    )


def _canonical(bus: str) -> str:
    if bus and canonical_bus_id(bus) != bus:
        raise ValueError(f"bus id {bus!r} is not canonical (want {canonical_bus_id(bus)!r})")
    return bus


def device_name(index: int | None) -> str:
    """The device node of GPU ``index`` (``nvidia3``), empty when the index is unknown."""
    return "" if index is None else f"nvidia{index}"


def xid_event(
    *,
    id: str,
    cluster: str,
    time: datetime,
    node: str,
    code: int,
    bus: str = "",
    uuid: str = "",
    index: int | None = None,
    pid: int | None = None,
    process: str = "",
    message: str = "",
    source: str = "kmsg",
    sxid: bool = False,
    recovery_action: str = "",
    caused_by: int | None = None,
) -> XidEvent:
    """XID ``code`` on the GPU at canonical ``bus`` (and/or ``uuid``) of ``node``.

    Raises :class:`ValueError` for a non-canonical bus id. ``uuid`` empty is what
    the kernel log alone knows; the core then maps the bus id through bindings.
    """
    return XidEvent(
        id=id,
        cluster=cluster,
        time=time,
        node=node,
        code=code,
        pci_bus_id=_canonical(bus),
        gpu_uuid=uuid,
        gpu_index=index,
        pid=pid,
        process=process,
        message=message,
        source=source,
        sxid=sxid,
        recovery_action=recovery_action,
        caused_by=caused_by,
    )


def binding_event(
    *,
    id: str,
    cluster: str,
    time: datetime,
    node: str,
    uuid: str,
    bus: str = "",
    index: int | None = None,
    pods: Iterable[PodRef] = (),
    pods_known: bool = True,
) -> GpuBindingEvent:
    """Which ``pods`` hold GPU ``uuid`` now (none: unbound); the device name follows ``index``.

    Raises :class:`ValueError` for a non-canonical bus id.
    """
    return GpuBindingEvent(
        id=id,
        cluster=cluster,
        time=time,
        node=node,
        gpu_uuid=uuid,
        pci_bus_id=_canonical(bus),
        gpu_index=index,
        device=device_name(index),
        pods=tuple(pods),
        pods_known=pods_known,
    )


def nvlinks_of(link_type: str) -> int:
    """The bonded NVLink count of a matrix code: 18 for ``NV18``, 0 for PCIe codes."""
    digits = link_type[2:] if link_type.startswith("NV") else ""
    return int(digits) if digits.isdigit() else 0


def hgx_links(count: int = 8) -> dict[tuple[int, int], str]:
    """An HGX baseboard (reference §4.1): NVSwitch joins every pair with 18 NVLinks."""
    return {(a, b): "NV18" for a in range(count) for b in range(a + 1, count)}


def pcie_links(count: int = 8, per_socket: int = 4) -> dict[tuple[int, int], str]:
    """A PCIe-only box of two sockets: pairs under one PCIe switch are ``PIX``, other
    pairs of one socket ``NODE``, pairs across the sockets ``SYS`` (the matrix of a
    typical 8-GPU L40S / A10 server)."""
    links = {}
    for a in range(count):
        for b in range(a + 1, count):
            if a // per_socket != b // per_socket:
                links[(a, b)] = "SYS"
            else:
                links[(a, b)] = "PIX" if a // 2 == b // 2 else "NODE"
    return links


def topology_event(
    *,
    id: str,
    cluster: str,
    time: datetime,
    node: str,
    links: Mapping[tuple[int, int], str],
    numa: Sequence[int | None] = (),
    uuids: Sequence[str] = (),
    buses: Sequence[str] = (),
    source: str = "nvidia-smi",
) -> GpuTopologyEvent:
    """A node's whole ``gpu_topology.v1`` snapshot: ``links`` by GPU index pair (the
    matrix codes), and per GPU its NUMA node, uuid and bus id where given (index order).

    Raises :class:`ValueError` for a non-canonical bus id.
    """
    count = max((max(pair) + 1 for pair in links), default=0)
    count = max(count, len(numa), len(uuids), len(buses))
    gpus = tuple(
        GpuNumaAffinity(
            gpu=i,
            numa_node=numa[i] if i < len(numa) else None,
            gpu_uuid=uuids[i] if i < len(uuids) else "",
            pci_bus_id=_canonical(buses[i]) if i < len(buses) else "",
        )
        for i in range(count)
    )
    pairs = tuple(
        GpuPairLink(src_gpu=min(pair), dst_gpu=max(pair), link_type=code, nvlinks=nvlinks_of(code))
        for pair, code in sorted(links.items(), key=lambda item: sorted(item[0]))
    )
    return GpuTopologyEvent(
        id=id, cluster=cluster, time=time, node=node, gpus=gpus, links=pairs, source=source
    )
