"""Builders for typed events in tests: terse, explicit, and always valid records.

Each builder takes event time as seconds after ``T0`` so scenarios read like a
timeline. Event ids come from a per-``Cluster`` counter: deterministic and unique.
Pods and nodes get Kubernetes-shaped ids (``k8s:<uid>:<n>``, the counter as their
resourceVersion, see :func:`schemas.ids.k8s_event_id`), so the core's per-object
version rule (an older copy of an object is stale) is exercised by every test.

The records themselves are built by :mod:`gputriage.demo.events`, shared with the
demo scenario and the bench generator; this module only adds the tests' timeline
(seconds after ``T0``), their id counter and their terse defaults. Two of those
defaults differ from the shared builders' on purpose and are passed explicitly, so
the tests' records are the same as before the move: pods have no GPU limits, and
container state is left unknown (``""``).
"""

from __future__ import annotations

from gputriage.demo import events as build
from gputriage.demo.events import GPU, T0, at
from schemas.codec import AnyEvent
from schemas.events import (
    AutoscalerEvent,
    GpuBindingEvent,
    GpuTopologyEvent,
    KubeEvent,
    NodeEvent,
    PodCondition,
    PodEvent,
    PodRef,
    Taint,
    Termination,
    Tick,
    XidEvent,
)
from schemas.ids import k8s_event_id
from schemas.types import Op

__all__ = ["GPU", "T0", "Cluster", "at", "term"]


class Cluster:
    """Accumulates the events of one scenario."""

    def __init__(self, name: str = "c1") -> None:
        self.name = name
        self.events: list[AnyEvent] = []
        self._n = 0

    def _id(self, prefix: str) -> str:
        self._n += 1
        return f"{prefix}-{self._n:06d}"

    def _k8s_id(self, uid: str, version: int | None = None) -> str:
        """A Kubernetes object's id, ``k8s:<uid>:<resourceVersion>``, as the connector
        makes it: the version grows with every event built, as etcd's revision does
        (``version`` overrides it, to build an older copy of an object)."""
        self._n += 1
        return k8s_event_id(uid, str(self._n if version is None else version))

    def node(
        self,
        node: str,
        t: float,
        *,
        capacity: int = 8,
        alloc: int = 8,
        ready: str = "True",
        labels: dict[str, str] | None = None,
        op: Op = "modified",
        version: int | None = None,
        taints: tuple[Taint, ...] = (),
    ) -> NodeEvent:
        """``taints``: the node's ``spec.taints`` (a cordon, Karpenter's or the
        autoscaler's disruption taint)."""
        ev = build.node_event(
            id=self._k8s_id(f"node-{node}", version),
            cluster=self.name,
            time=at(t),
            node=node,
            op=op,
            capacity=capacity,
            allocatable=alloc,
            ready=build.ready_condition(ready),
            labels=labels,
            taints=taints,
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
        waiting: str = "",
        namespace: str = "ns",
        op: Op = "modified",
        owner: tuple[str, str] = ("Job", "job"),
        uid: str = "",
        deleted_at: float | None = None,
        version: int | None = None,
    ) -> PodEvent:
        """``deleted_at``: the pod's deletionTimestamp (seconds after ``T0``), set from
        the moment it is deleted until it is gone (``op="deleted"``). ``version``: the
        resourceVersion in its id (default: the next of this cluster's counter).
        ``waiting``: the container's ``state.waiting`` reason (``CrashLoopBackOff``)."""
        ev = build.pod_event(
            id=self._k8s_id(uid or f"uid-{name}", version),
            cluster=self.name,
            time=at(t),
            node=node,
            op=op,
            namespace=namespace,
            name=name,
            uid=uid,
            phase=phase,
            reason=reason,
            gpus=gpus,
            limits=False,
            owner=owner,
            containers=(
                build.container(
                    container,
                    restarts=restarts,
                    state="waiting" if waiting else "",
                    reason=waiting,
                    current=current,
                    last=last,
                ),
            ),
            deleted_at=None if deleted_at is None else at(deleted_at),
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
        ev = build.xid_event(
            id=self._id("xid"),
            cluster=self.name,
            time=at(t),
            node=node,
            code=code,
            bus=bus,
            uuid=uuid,
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
        index: int | None = None,
    ) -> GpuBindingEvent:
        ev = build.binding_event(
            id=self._id("bind"),
            cluster=self.name,
            time=at(t),
            node=node,
            uuid=uuid,
            bus=bus,
            pods=(PodRef(namespace=namespace, name=p) for p in pods),
            pods_known=pods_known,
            index=index,
        )
        self.events.append(ev)
        return ev

    def topology(
        self,
        node: str,
        t: float,
        links: dict[tuple[int, int], str],
        *,
        numa: tuple[int | None, ...] = (),
        uuids: tuple[str, ...] = (),
        buses: tuple[str, ...] = (),
    ) -> GpuTopologyEvent:
        """The node's ``gpu_topology.v1`` snapshot (:func:`gputriage.demo.events.hgx_links`,
        :func:`~gputriage.demo.events.pcie_links` build ``links``)."""
        ev = build.topology_event(
            id=self._id("topo"),
            cluster=self.name,
            time=at(t),
            node=node,
            links=links,
            numa=numa,
            uuids=uuids,
            buses=buses,
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
        warning: bool = True,
        source: str = "",
    ) -> KubeEvent:
        """``warning=False`` for a ``Normal`` Event (Karpenter's and the autoscaler's
        eviction notices); ``source``: the reporting component."""
        ev = build.kube_event(
            id=self._id("kev"),
            cluster=self.name,
            time=at(t),
            node=node,
            reason=reason,
            message=message,
            warning=warning,
            kind=kind,
            name=name or node,
            namespace=namespace,
            source=source,
        )
        self.events.append(ev)
        return ev

    def pending(
        self,
        name: str,
        t: float,
        *,
        gpus: int = 1,
        created: float | None = None,
        message: str = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
        unschedulable: bool = True,
        namespace: str = "ns",
        owner: tuple[str, str] = ("Job", "job"),
        op: Op = "modified",
        deleted_at: float | None = None,
    ) -> PodEvent:
        """A GPU pod the scheduler has not placed (no node: the cluster key)."""
        ev = build.pod_event(
            id=self._k8s_id(f"uid-{name}"),
            cluster=self.name,
            time=at(t),
            name=name,
            namespace=namespace,
            op=op,
            phase="Pending",
            gpus=gpus,
            limits=False,
            owner=owner,
            scheduled=PodCondition(status="False", reason="Unschedulable", message=message)
            if unschedulable
            else None,
            created_at=at(t if created is None else created),
            deleted_at=None if deleted_at is None else at(deleted_at),
        )
        self.events.append(ev)
        return ev

    def autoscaler(
        self,
        t: float,
        action: str,
        group: str,
        *,
        reason: str = "",
        code: str = "",
        pods: tuple[str, ...] = (),
        namespace: str = "ns",
        until: float | None = None,
        cloud: str = "aws",
    ) -> AutoscalerEvent:
        ev = AutoscalerEvent(
            id=self._id("ca"),
            cluster=self.name,
            time=at(t),
            action=action,
            node_group=group,
            reason=reason,
            cloud=cloud,
            cloud_code=code,
            message=f"{action} {group} {reason} {code}".strip(),
            pods=tuple(PodRef(namespace=namespace, name=p) for p in pods),
            until=None if until is None else at(until),
        )
        self.events.append(ev)
        return ev

    def tick(self, t: float) -> Tick:
        ev = Tick(id=self._id("tick"), cluster=self.name, time=at(t))
        self.events.append(ev)
        return ev


def term(t: float, reason: str = "Error", code: int = 1, message: str = "") -> Termination:
    """A termination that finished ``t`` seconds after ``T0``."""
    return build.termination(at(t), reason, code, message)
