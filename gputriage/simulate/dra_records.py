"""The DRA pool's objects and the records the k8s connector makes of them.

A DRA node has no ``nvidia.com/gpu`` resource: its GPUs are the devices of its
ResourceSlice (driver ``gpu.nvidia.com``, pool = node name, devices ``gpu-<minor>``),
and a pod holds them through a ResourceClaim. The builders here write exactly what the
connector publishes for such objects (``resource_slice.v1`` with the effective taints,
``resource_claim.v1``, ``pod.v1`` with ``claims``, and the ``dra`` bindings it joins
from an allocated claim and its slice), never anything it cannot produce.

Traps: every record is built with a placeholder resourceVersion (:data:`RV`), numbered
once the pool's records are in time order (:func:`number`), so an object's versions grow
with its time whatever order the stories were written in; a ``dra`` binding's id names
its claim's version (:data:`CLAIM_RV`), filled in the same pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

import msgspec

from gputriage.demo.events import container
from schemas.codec import AnyEvent
from schemas.events import (
    ClaimDevice,
    ClaimRequest,
    ContainerStatus,
    DeviceHealth,
    DeviceTaint,
    GpuBindingEvent,
    NodeEvent,
    PodClaim,
    PodCondition,
    PodEvent,
    PodRef,
    ResourceClaimEvent,
    ResourceSliceEvent,
    SliceDevice,
    Termination,
)
from schemas.keys import DRA

DRIVER: Final = "gpu.nvidia.com"
"""NVIDIA's DRA driver name, also its GPU device class."""
CLAIM_NAME: Final = "gpu"
"""The pod's name for its claim (``spec.resourceClaims[].name``) and the claim's request."""
RV: Final = "{rv}"
"""Placeholder of a record's resourceVersion in its id, numbered by :func:`number`."""
CLAIM_RV: Final = "{claim_rv}"
"""Placeholder of the claim's resourceVersion in a ``dra`` binding's id."""
CDI_CLASS: Final = "k8s.gpu.nvidia.com/claim"
"""The CDI kind NVIDIA's plugin names a claim's devices with (the kubelet's resourceID)."""


@dataclass
class DraGpu:
    """One GPU of a DRA node: its slice device and who holds it."""

    minor: int
    uuid: str
    bus: str
    pod: DraPod | None = None
    gone: bool = False
    """Missing from the node's slice (fell off the bus, not yet back)."""
    taint: DeviceTaint | None = None
    broken: bool = False
    """Faulty until reset: no new claim is allocated on it."""

    @property
    def device(self) -> str:
        return f"gpu-{self.minor}"


@dataclass
class DraNode:
    """A node of the DRA pool."""

    cluster: str
    name: str
    uid: str
    product: str
    labels: dict[str, str]
    zero: bool
    """``nvidia.com/gpu`` reported 0/0 (a device plugin left installed, advertising nothing);
    otherwise the resource is absent."""
    slice_uid: str
    slice_name: str
    dcgm_maps_claims: bool = True
    """dcgm-exporter runs with ``--kubernetes-enable-dra`` (off by default): without it,
    its bindings name no pod for a GPU held by claim."""
    gpus: list[DraGpu] = field(default_factory=list)
    generation: int = 1
    scrape_seq: int = 0
    free_at: float = 0.0
    """Stream seconds from which a fault or noise story may start on it."""

    def free(self) -> list[DraGpu]:
        """GPUs a new claim can be allocated: present, untainted, sound, unheld."""
        return [
            g
            for g in self.gpus
            if g.pod is None and not g.gone and g.taint is None and not g.broken
        ]


@dataclass
class DraPod:
    """A pod that holds GPUs only through its claim (made from a template)."""

    cluster: str
    namespace: str
    name: str
    uid: str
    owner_kind: str
    owner: str
    containers: tuple[str, ...]
    gpus: int
    created: datetime
    claim: str
    claim_uid: str
    node: DraNode | None = None
    held: tuple[DraGpu, ...] = ()
    phase: str = "Pending"
    scheduled: PodCondition | None = None
    disruption: PodCondition | None = None
    deleting: datetime | None = None
    ends_at: float = math.inf
    """Stream seconds when it completes, unless a story ends it first."""
    term: Termination | None = None
    """The main container's termination, once it has terminated (kept by later records)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def template(self) -> str:
        return f"{self.owner}-{CLAIM_NAME}"


def product_name(label: str) -> str:
    """The ``productName`` attribute of a GPU whose feature-discovery label is ``label``."""
    return label.replace("-", " ")


def slice_event(node: DraNode, time: datetime, *, op: str = "modified") -> ResourceSliceEvent:
    """The node's slice as the connector publishes it: present devices, effective taints."""
    devices = tuple(
        SliceDevice(
            name=g.device,
            uuid=g.uuid,
            pci_bus_id=g.bus,
            product=node.product,
            type="gpu",
            taints=(g.taint,) if g.taint is not None else (),
        )
        for g in node.gpus
        if not g.gone
    )
    return ResourceSliceEvent(
        id=f"k8s:{node.slice_uid}:{RV}",
        cluster=node.cluster,
        time=time,
        node=node.name,
        op="added" if op == "added" else "deleted" if op == "deleted" else "modified",
        name=node.slice_name,
        driver=DRIVER,
        pool=node.name,
        generation=node.generation,
        devices=devices,
    )


def claim_event(
    pod: DraPod, time: datetime, *, allocated: bool, op: str = "modified"
) -> ResourceClaimEvent:
    """The pod's claim: unallocated, or allocated on its node's devices and reserved for it."""
    node = pod.node if allocated else None
    return ResourceClaimEvent(
        id=f"k8s:{pod.claim_uid}:{RV}",
        cluster=pod.cluster,
        time=time,
        node=node.name if node is not None else "",
        op="added" if op == "added" else "deleted" if op == "deleted" else "modified",
        namespace=pod.namespace,
        name=pod.claim,
        uid=pod.claim_uid,
        requests=(ClaimRequest(name=CLAIM_NAME, device_class=DRIVER, count=pod.gpus),),
        devices=tuple(
            ClaimDevice(request=CLAIM_NAME, driver=DRIVER, pool=node.name, device=g.device)
            for g in pod.held
        )
        if node is not None
        else (),
        reserved_for=(PodRef(namespace=pod.namespace, name=pod.name),) if node is not None else (),
        gpus=pod.gpus,
    )


def dra_binding(
    node: DraNode, gpu: DraGpu, pod: DraPod | None, claim: DraPod, time: datetime
) -> GpuBindingEvent:
    """The connector's join of ``claim``'s allocation with the slice: ``pod`` holds ``gpu``
    (bind), or None when the claim no longer holds it (unbind: no pods, no claims)."""
    return GpuBindingEvent(
        id=f"dra:{node.name}:{gpu.device}:{claim.claim_uid}:{CLAIM_RV}",
        cluster=node.cluster,
        time=time,
        node=node.name,
        gpu_uuid=gpu.uuid,
        pci_bus_id=gpu.bus,
        device=gpu.device,
        pods=(PodRef(namespace=pod.namespace, name=pod.name),) if pod is not None else (),
        claims=(f"{pod.namespace}/{pod.claim}",) if pod is not None else (),
        pods_known=True,
        source=DRA,
    )


def dcgm_binding(node: DraNode, gpu: DraGpu, time: datetime) -> GpuBindingEvent:
    """dcgm-exporter's scrape of one GPU: the same record as on a device-plugin node, naming
    the claim's pod only where the exporter maps DRA claims (:attr:`DraNode.dcgm_maps_claims`)."""
    node.scrape_seq += 1
    pod = gpu.pod if node.dcgm_maps_claims else None
    return GpuBindingEvent(
        id=f"dcgm/{node.uid}/{gpu.minor}/{node.scrape_seq}",
        cluster=node.cluster,
        time=time,
        node=node.name,
        gpu_uuid=gpu.uuid,
        pci_bus_id=gpu.bus,
        gpu_index=gpu.minor,
        device=f"nvidia{gpu.minor}",
        pods=(PodRef(namespace=pod.namespace, name=pod.name, container=pod.containers[0]),)
        if pod is not None
        else (),
    )


def pod_event(
    pod: DraPod,
    time: datetime,
    *,
    op: str = "modified",
    state: str = "",
    reason: str = "",
    terminated: Termination | None = None,
) -> PodEvent:
    """The pod as the connector slims it: no GPU request, its claim, its devices' health
    (``Unknown``: NVIDIA's DRA driver reports none to the kubelet)."""
    node = pod.node
    if terminated is not None:
        pod.term = terminated
    elif state == "terminated":
        terminated = pod.term
    devices = (
        tuple(
            DeviceHealth(
                resource=f"claim:{CLAIM_NAME}/{CLAIM_NAME}",
                device=f"{CDI_CLASS}={pod.claim_uid}-{g.device}",
                health="Unknown",
            )
            for g in pod.held
        )
        if state in {"running", "terminated"}
        else ()
    )
    main = msgspec.structs.replace(
        container(pod.containers[0], state=state, reason=reason, current=terminated),
        devices=devices,
    )
    side: tuple[ContainerStatus, ...] = tuple(
        container(n, state=state if state != "terminated" else "terminated", reason=reason)
        for n in pod.containers[1:]
    )
    return PodEvent(
        id=f"k8s:{pod.uid}:{RV}",
        cluster=pod.cluster,
        time=time,
        node=node.name if node is not None else "",
        op="added" if op == "added" else "deleted" if op == "deleted" else "modified",
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        phase=pod.phase,
        owner_kind=pod.owner_kind,
        owner_name=pod.owner,
        containers=(main, *side),
        scheduled=pod.scheduled,
        created_at=pod.created,
        deleted_at=pod.deleting,
        claims=(
            PodClaim(
                name=CLAIM_NAME,
                claim=pod.claim,
                template=pod.template,
                gpus=pod.gpus,
                device_class=DRIVER,
            ),
        ),
        disruption=pod.disruption,
    )


def number(records: list[tuple[float, int, AnyEvent]], first_rv: int) -> list[AnyEvent]:
    """The records in time order, each Kubernetes object's id and resourceVersion numbered
    from ``first_rv`` in that order, and each ``dra`` binding's id naming its claim's."""
    rv = first_rv
    claims: dict[str, int] = {}
    out: list[AnyEvent] = []
    for _, _, record in sorted(records, key=lambda r: (r[0], r[1])):
        event = record
        if isinstance(event, GpuBindingEvent):
            if CLAIM_RV in event.id:
                uid = event.id.rsplit(":", 2)[1]
                event = msgspec.structs.replace(
                    event, id=event.id.replace(CLAIM_RV, str(claims[uid]))
                )
        elif RV in event.id:
            rv += 1
            event = msgspec.structs.replace(event, id=event.id.replace(RV, str(rv)))
            if isinstance(event, ResourceClaimEvent):
                claims[event.uid] = rv
            if isinstance(event, PodEvent | NodeEvent | ResourceClaimEvent | ResourceSliceEvent):
                event = msgspec.structs.replace(event, resource_version=rv)
        out.append(event)
    return out
