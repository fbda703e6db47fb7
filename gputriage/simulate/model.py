"""The simulated cluster's mutable model: clusters, nodes, GPUs, workloads, pods.

The scenarios change these objects and the record builders of
:mod:`gputriage.simulate.fleet` snapshot them into typed events, so a record always
says what the model holds at its time. ``busy`` marks an object a scenario owns: the
others leave it alone, so two faults never tell overlapping stories on one object.
"""

from __future__ import annotations

from datetime import datetime

from gputriage.demo.events import container
from gputriage.simulate.catalogue import Template
from schemas.events import ContainerStatus, PodCondition, Termination


class NodeGroup:
    """An autoscaler node group (an ASG of one GPU instance type): what a scale-up grows."""

    __slots__ = ("busy", "instance_type", "max_size", "name", "quiet_after", "size")

    def __init__(self, name: str, instance_type: str, size: int, max_size: int) -> None:
        self.name = name
        self.instance_type = instance_type
        self.size = size
        self.max_size = max_size
        self.busy = False
        self.quiet_after = 0.0
        """Stream seconds after which a new failure story may start on this group (so
        two stories never tell one ``scale_up_failure`` between them)."""


class Cluster:
    __slots__ = ("domain", "groups", "log_lines", "name", "nodes", "pods", "region", "rv")

    def __init__(self, name: str, region: str, domain: str, rv: int) -> None:
        self.name = name
        self.region = region
        self.domain = domain
        self.rv = rv
        self.nodes: list[Node] = []
        self.pods: list[Pod] = []
        self.groups: list[NodeGroup] = []
        self.log_lines = 0
        """Lines of the cluster-autoscaler log so far (each record's id names its line)."""


class Gpu:
    __slots__ = ("bus_id", "index", "pod", "reported", "uuid")

    def __init__(self, index: int, gpu_uuid: str, bus_id: str) -> None:
        self.index = index
        self.uuid = gpu_uuid
        self.bus_id = bus_id
        self.pod: Pod | None = None
        self.reported: Pod | None = None
        """The pod the last emitted binding named: what the core can know holds it."""


class Node:
    __slots__ = (
        "allocatable",
        "binding_seq",
        "blind",
        "boot_id",
        "bound_at",
        "busy",
        "capacity",
        "cluster",
        "cpu_restarts",
        "gpus",
        "kmsg_seq",
        "labels",
        "last",
        "name",
        "pcie",
        "ready",
        "uid",
    )

    def __init__(self, cluster: Cluster, name: str, uid: str, boot_id: str) -> None:
        self.cluster = cluster
        self.name = name
        self.uid = uid
        self.boot_id = boot_id
        self.kmsg_seq = 0
        self.binding_seq = 0
        self.gpus: list[Gpu] = []
        self.labels: dict[str, str] = {}
        self.capacity = 8
        self.allocatable = 8
        self.ready = "True"
        self.busy = False
        self.blind = False
        """dcgm-exporter lost the kubelet's pod mapping: its bindings name no pod."""
        self.bound_at: datetime | None = None
        """When the node's last binding record was emitted (one scrape, one answer)."""
        self.cpu_restarts = 0
        """Restarts of the node's node-exporter pod (a CPU-only pod: noise)."""
        self.last: object = None
        """The node's last emitted record (what a relist sends again)."""
        self.pcie = False
        """A PCIe-only box (no NVLink between its GPUs), of streams that start with the
        connectors' snapshot (:attr:`~gputriage.simulate.spec.StreamSpec.snapshot`)."""


class Workload:
    __slots__ = ("gpus", "left", "owner", "template")

    def __init__(self, template: Template, owner: str, gpus: int, left: int) -> None:
        self.template = template
        self.owner = owner
        self.gpus = gpus
        self.left = left


class Pod:
    __slots__ = (
        "busy",
        "cluster",
        "containers",
        "created_at",
        "deleting",
        "gpus",
        "last",
        "message",
        "name",
        "node",
        "phase",
        "pid",
        "pool_index",
        "reason",
        "restarts",
        "scheduled",
        "uid",
        "workload",
    )

    def __init__(
        self, cluster: Cluster, workload: Workload, name: str, uid: str, created_at: datetime
    ) -> None:
        self.cluster = cluster
        self.workload = workload
        self.name = name
        self.uid = uid
        self.created_at = created_at
        self.node: Node | None = None
        self.gpus: tuple[int, ...] = ()
        self.phase = "Pending"
        self.reason = ""
        self.message = ""
        self.restarts = 0
        self.containers: tuple[ContainerStatus, ...] = ()
        self.scheduled: PodCondition | None = None
        self.pid = 0
        self.busy = False
        self.pool_index = -1
        self.last: object = None
        """The pod's last emitted record (what a relist sends again)."""
        self.deleting: datetime | None = None
        """The deletion timestamp once the pod is marked for deletion."""

    @property
    def main(self) -> str:
        return self.workload.template.containers[0]

    def set_main(
        self,
        state: str,
        reason: str = "",
        terminated: Termination | None = None,
        last: Termination | None = None,
        *,
        keep_last: bool = True,
    ) -> None:
        """Rebuild the container statuses: the main container as given, sidecars as they were."""
        names = self.workload.template.containers
        if keep_last and last is None and self.containers:
            last = self.containers[0].last_terminated
        main = container(
            names[0],
            restarts=self.restarts,
            state=state,
            reason=reason,
            current=terminated,
            last=last,
        )
        side_state = "running" if state in {"running", "waiting"} else state
        side_reason = "" if side_state == "running" else reason
        sidecars = tuple(container(n, state=side_state, reason=side_reason) for n in names[1:])
        self.containers = (main, *sidecars)
