"""Builders for typed events in tests: terse, explicit, and always valid records.

Each builder takes event time as seconds after ``T0`` so scenarios read like a
timeline. Event ids come from a per-``Cluster`` counter: deterministic and unique.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from schemas.codec import AnyEvent
from schemas.events import (
    ContainerStatus,
    GpuBindingEvent,
    KubeEvent,
    NodeCondition,
    NodeEvent,
    ObjectRef,
    PodEvent,
    PodRef,
    Termination,
    Tick,
    XidEvent,
)

T0 = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
GPU = "nvidia.com/gpu"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


class Cluster:
    """Accumulates the events of one scenario."""

    def __init__(self, name: str = "c1") -> None:
        self.name = name
        self.events: list[AnyEvent] = []
        self._n = 0

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}-{self._n:06d}"

    def node(
        self,
        node: str,
        t: float,
        *,
        capacity: int = 8,
        alloc: int = 8,
        ready: str = "True",
        labels: dict[str, str] | None = None,
        op: str = "modified",
    ) -> NodeEvent:
        ev = NodeEvent(
            id=self._id("node"),
            cluster=self.name,
            time=at(t),
            node=node,
            op=op,  # type: ignore[arg-type]
            capacity={GPU: capacity},
            allocatable={GPU: alloc},
            conditions=(NodeCondition(type="Ready", status=ready),),
            labels=labels or {},
        )
        self.events.append(ev)
        return ev

    def pod(
        self,
        node: str,
        name: str,
        t: float,
        *,
        phase: str = "Running",
        reason: str = "",
        gpus: int = 1,
        container: str = "main",
        last: Termination | None = None,
        current: Termination | None = None,
        restarts: int = 0,
        namespace: str = "ns",
        op: str = "modified",
        owner: tuple[str, str] = ("Job", "job"),
        uid: str = "",
    ) -> PodEvent:
        ev = PodEvent(
            id=self._id("pod"),
            cluster=self.name,
            time=at(t),
            node=node,
            op=op,  # type: ignore[arg-type]
            namespace=namespace,
            name=name,
            uid=uid or f"uid-{name}",
            phase=phase,
            reason=reason,
            gpu_requests={GPU: gpus} if gpus else {},
            owner_kind=owner[0],
            owner_name=owner[1],
            containers=(
                ContainerStatus(
                    name=container, restart_count=restarts, terminated=current, last_terminated=last
                ),
            ),
        )
        self.events.append(ev)
        return ev

    def xid(
        self,
        node: str,
        t: float,
        code: int,
        *,
        bus: str = "0000:9b:00.0",
        uuid: str = "",
        recovery_action: str = "",
        sxid: bool = False,
    ) -> XidEvent:
        ev = XidEvent(
            id=self._id("xid"),
            cluster=self.name,
            time=at(t),
            node=node,
            code=code,
            pci_bus_id=bus,
            gpu_uuid=uuid,
            recovery_action=recovery_action,
            sxid=sxid,
        )
        self.events.append(ev)
        return ev

    def bind(
        self,
        node: str,
        t: float,
        uuid: str,
        bus: str,
        pods: list[str],
        namespace: str = "ns",
        *,
        pods_known: bool = True,
    ) -> GpuBindingEvent:
        ev = GpuBindingEvent(
            id=self._id("bind"),
            cluster=self.name,
            time=at(t),
            node=node,
            gpu_uuid=uuid,
            pci_bus_id=bus,
            pods=tuple(PodRef(namespace=namespace, name=p) for p in pods),
            pods_known=pods_known,
        )
        self.events.append(ev)
        return ev

    def kube(
        self,
        node: str,
        t: float,
        reason: str,
        *,
        kind: str = "Pod",
        name: str = "",
        namespace: str = "ns",
        message: str = "",
    ) -> KubeEvent:
        ev = KubeEvent(
            id=self._id("kev"),
            cluster=self.name,
            time=at(t),
            node=node,
            reason=reason,
            message=message,
            type="Warning",
            involved=ObjectRef(kind=kind, name=name or node, namespace=namespace),
        )
        self.events.append(ev)
        return ev

    def tick(self, t: float) -> Tick:
        ev = Tick(id=self._id("tick"), cluster=self.name, time=at(t))
        self.events.append(ev)
        return ev


def term(t: float, reason: str = "Error", code: int = 1, message: str = "") -> Termination:
    return Termination(reason=reason, exit_code=code, finished_at=at(t), message=message)
