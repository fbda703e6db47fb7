"""The node key on DRA nodes: GPUs that are claimed, not counted.

On a node of NVIDIA's DRA driver (``gpu.nvidia.com``) there is no device plugin:
``nvidia.com/gpu`` is absent or 0, pods hold GPUs through ResourceClaims, and the
ResourceSlices are the node's GPU inventory (device name, uuid, bus id, taints). The
records are shaped as the k8s connector emits them (the contract: ``resource_slice.v1``
per slice with each device's effective taints, ``gpu_binding.v1`` with ``source="dra"``
per allocated device, pods with their claims, ``DisruptionTarget`` and
``allocatedResourcesStatus``), with the names and values of tests/data/dra (SOURCES.md
there says where each comes from).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
import pytest

from gputriage.demo.events import at
from schemas.events import (
    ClaimDevice,
    ClaimRequest,
    ContainerStatus,
    DeviceHealth,
    DeviceTaint,
    GpuBindingEvent,
    KubeEvent,
    NodeEvent,
    ObjectRef,
    PodClaim,
    PodCondition,
    PodEvent,
    PodRef,
    ResourceClaimEvent,
    ResourceSliceEvent,
    SliceDevice,
    Taint,
    Termination,
)
from schemas.incidents import Incident
from schemas.keys import DRA, POD_RESOURCES
from schemas.types import Op
from streams.core import Correlator
from streams.core.snapshot import decode_state, encode_state
from streams.core.state import NodeState
from tests.core_helpers import config, feed, final, of_type, run
from tests.factories import Cluster, term

MIN = 60.0
NODE = "gpu-a100-node-01"
"""The node of tests/data/dra/resourceslice_gpu_node.json."""
SLICE = "gpu-a100-node-01-gpu.nvidia.com-x7k2p"
DRIVER = "gpu.nvidia.com"
GPUS = {
    "gpu-0": ("GPU-3f5e8a12-6b4c-4d8e-9a17-0c2b7e91d4a6", "0000:17:00.0"),
    "gpu-1": ("GPU-13719f71-412c-d11e-b236-a262f530a4fc", "0000:65:00.0"),
    "gpu-2": ("GPU-8c2d4e6f-1a3b-4c5d-8e7f-9a0b1c2d3e4f", "0000:ca:00.0"),
    "gpu-3": ("GPU-b7a1c9d3-5e2f-4a6b-8c0d-e1f2a3b4c5d6", "0000:e3:00.0"),
}
"""Device name -> (uuid, bus id), as the fixture's slice lists them."""
PRODUCT = "NVIDIA A100 80GB PCIe"
NS = "gpu-test1"
POD = "pod1"
CLAIM = "pod1-gpu-h6vrt"
CLAIM_UID = "e1d2c3b4-a596-4877-8f60-5a4b3c2d1e0f"
"""tests/data/dra/resourceclaim_allocated.json: the claim of pod1, allocated gpu-2."""
XID_TAINT = DeviceTaint(key="gpu.nvidia.com/xid", value="79", effect="NoSchedule")
"""tests/data/dra/resourceslice_device_taint.json: the driver's own taint of gpu-2."""
RULE_TAINT = DeviceTaint(
    key="example.com/gpu-fault", value="xid-79", effect="NoExecute", rule="evict-gpu-2-xid-79"
)
"""tests/data/dra/devicetaintrule.json, applied by the connector to gpu-2."""
EVICTED = "Device Taint manager: deleting due to NoExecute taint"
"""The DisruptionTarget message of the device taint eviction controller (messages.md §2)."""

MIG_NODE = "gpu-gh200-node-01"
MIG_PARENT = "GPU-a4f34abc-7715-3560-dcea-7238b9611a45"
MIG_BUS = "0009:01:00.0"
MIGS = {
    "gpu-0-mig-1g12gb-19-0": "MIG-4d806f22-346a-5a1d-ac01-86b505cdf485",
    "gpu-0-mig-1g12gb-19-1": "MIG-8949ea7d-9166-53ce-9bac-6c58262addf9",
}
"""tests/data/dra/resourceslice_mig.json: two 1g.12gb devices of one GH200."""


class Dra(Cluster):
    """The factories' timeline, plus the records of a DRA node."""

    def slice(
        self,
        t: float,
        *,
        node: str = NODE,
        taints: dict[str, tuple[DeviceTaint, ...]] | None = None,
        devices: Iterable[str] | None = None,
        generation: int = 1,
        op: Op = "modified",
        name: str = SLICE,
    ) -> ResourceSliceEvent:
        """The node's one slice of its pool (pool = node name), listing ``devices`` (all
        four by default) with their ``taints``."""
        taints = taints or {}
        listed = tuple(
            SliceDevice(
                name=dev,
                uuid=GPUS[dev][0],
                pci_bus_id=GPUS[dev][1],
                product=PRODUCT,
                type="gpu",
                taints=taints.get(dev, ()),
            )
            for dev in (GPUS if devices is None else devices)
        )
        ev = ResourceSliceEvent(
            id=self._k8s_id(f"slice-{name}"),
            cluster=self.name,
            time=at(t),
            node=node,
            op=op,
            name=name,
            driver=DRIVER,
            pool=node,
            generation=generation,
            devices=listed,
            resource_version=self._n,
        )
        self.events.append(ev)
        return ev

    def claim(self, t: float, device: str, pods: tuple[str, ...], *, name: str = CLAIM) -> None:
        """The ResourceClaim record (the core may ignore it) and the connector's ``dra``
        binding of its device (``pods=()``: released)."""
        uid = CLAIM_UID if name == CLAIM else f"uid-{name}"
        claim = ResourceClaimEvent(
            id=self._k8s_id(uid),
            cluster=self.name,
            time=at(t),
            node=NODE if pods else "",
            namespace=NS,
            name=name,
            uid=uid,
            requests=(ClaimRequest(name="gpu", device_class=DRIVER),),
            devices=(ClaimDevice(request="gpu", driver=DRIVER, pool=NODE, device=device),)
            if pods
            else (),
            reserved_for=tuple(PodRef(namespace=NS, name=p) for p in pods),
            gpus=1,
            resource_version=self._n,
        )
        self.events.append(claim)
        self.dra_bind(t, device, pods, claims=(f"{NS}/{name}",) if pods else ())

    def dra_bind(
        self,
        t: float,
        device: str,
        pods: tuple[str, ...],
        *,
        node: str = NODE,
        claims: tuple[str, ...] = (),
        uuid: str = "",
        bus: str = "",
        mig_uuid: str = "",
        profile: str = "",
    ) -> GpuBindingEvent:
        """The k8s connector's join of an allocated device: ``source="dra"``."""
        ev = GpuBindingEvent(
            id=f"dra:{node}:{device}:{CLAIM_UID}:{self._id('rv')}",
            cluster=self.name,
            time=at(t),
            node=node,
            gpu_uuid=uuid or GPUS[device][0],
            pci_bus_id=bus or GPUS[device][1],
            device=device,
            mig_uuid=mig_uuid,
            mig_profile=profile,
            pods=tuple(PodRef(namespace=NS, name=p) for p in pods),
            claims=claims,
            shared=len(pods) > 1,
            source=DRA,
        )
        self.events.append(ev)
        return ev

    def dra_pod(
        self,
        t: float,
        *,
        name: str = POD,
        node: str = NODE,
        phase: str = "Running",
        gpus: int = 1,
        health: str = "Unknown",
        device: str = "gpu-2",
        disruption: PodCondition | None = None,
        deleted: float | None = None,
        op: Op = "modified",
        last: Termination | None = None,
    ) -> PodEvent:
        """A pod holding GPUs only through its claim (no ``nvidia.com/gpu`` request), with
        its container's ``allocatedResourcesStatus`` for the claim's device."""
        claim = CLAIM if name == POD else f"{name}-gpu"
        uid = CLAIM_UID if name == POD else f"uid-{claim}"
        ev = PodEvent(
            id=self._k8s_id(f"uid-{name}"),
            cluster=self.name,
            time=at(t),
            node=node,
            op=op,
            namespace=NS,
            name=name,
            uid=f"uid-{name}",
            phase=phase,
            owner_kind="Job",
            owner_name="job",
            containers=(
                ContainerStatus(
                    name="ctr",
                    state="running" if phase == "Running" else "",
                    last_terminated=last,
                    devices=(
                        DeviceHealth(
                            resource="claim:gpu/gpu",
                            device=f"k8s.gpu.nvidia.com/claim={uid}-{device}",
                            health=health,
                        ),
                    ),
                ),
            ),
            claims=(
                PodClaim(
                    name="gpu",
                    claim=claim,
                    template="single-gpu",
                    gpus=gpus,
                    device_class=DRIVER,
                ),
            ),
            disruption=disruption,
            deleted_at=None if deleted is None else at(deleted),
            resource_version=self._n,
        )
        self.events.append(ev)
        return ev

    def dra_node(self, t: float, *, gpus: int | None = 0, node: str = NODE) -> NodeEvent:
        """The Node object of a DRA node: ``nvidia.com/gpu`` 0/0 (``gpus=0``) or absent
        (``None``)."""
        if gpus is not None:
            return self.node(node, t, capacity=gpus, alloc=gpus)
        ev = self.node(node, t)
        ev = msgspec.structs.replace(ev, capacity={}, allocatable={})
        self.events[-1] = ev
        return ev

    def taint_eviction(
        self, t: float, *, name: str = POD, message: str = "Marking for deletion"
    ) -> KubeEvent:
        """The device taint eviction controller's Event on the pod (messages.md §2)."""
        ev = KubeEvent(
            id=self._id("kev"),
            cluster=self.name,
            time=at(t),
            node=NODE,
            reason="DeviceTaintManagerEviction",
            message=message,
            type="Normal",
            involved=ObjectRef(kind="Pod", name=name, namespace=NS),
            source="device-taint-eviction-controller",
        )
        self.events.append(ev)
        return ev


def dra_node(c: Dra | None = None) -> Dra:
    """A DRA node with its slice, and pod1 holding gpu-2 through its claim."""
    c = c or Dra("prod")
    c.dra_node(0)
    c.slice(1)
    c.dra_pod(5)
    c.claim(6, "gpu-2", (POD,))
    c.dra_pod(8)
    return c


def pods_of(inc: Incident) -> dict[str, str]:
    return {f"{p.namespace}/{p.name}": p.role for p in inc.pods}


def types(revisions: list[Incident]) -> list[str]:
    return sorted(inc.type for inc in final(revisions).values())


# -- the inventory ----------------------------------------------------------------------
def test_a_slice_gives_the_nodes_gpu_inventory_and_claim_records_are_carried() -> None:
    c = dra_node()
    correlator = Correlator(config())
    for ev in c.events:
        feed(correlator, ev)
    correlator.flush()
    state = correlator.keys[f"prod/{NODE}"]
    assert isinstance(state, NodeState)
    assert state.dra is not None
    assert sorted(state.dra.devices) == sorted(GPUS)
    assert state.dra.devices["gpu-2"].bus == "0000:ca:00.0"
    assert state.dra.holds["gpu-2"].pods == (f"{NS}/{POD}",)
    assert state.dra.holds["gpu-2"].claims == (f"{NS}/{CLAIM}",)
    assert decode_state(encode_state(state)) == state, "the snapshot carries the DRA facts"


def test_a_newer_pool_generation_supersedes_and_an_older_one_is_stale() -> None:
    c = Dra("prod")
    c.dra_node(0)
    c.slice(1, generation=2)
    c.slice(2, generation=1, devices=("gpu-0",))  # a stale copy: ignored
    c.slice(3, generation=3, devices=("gpu-0", "gpu-1", "gpu-2", "gpu-3"), name="other-slice")
    correlator = Correlator(config())
    for ev in c.events:
        feed(correlator, ev)
    correlator.flush()
    state = correlator.keys[f"prod/{NODE}"]
    assert isinstance(state, NodeState)
    assert state.dra is not None
    assert list(state.dra.slices) == ["other-slice"], "the older generation's slice is gone"
    assert all(d.gone is None for d in state.dra.devices.values())
    assert all(d.slice == "other-slice" for d in state.dra.devices.values())


# -- attribution through DRA bindings ---------------------------------------------------------
def _app_fault_pods(c: Dra, t: float) -> dict[str, str]:
    c.xid(NODE, t, 13, bus=GPUS["gpu-2"][1])
    [inc] = of_type(run(c.events), "gpu_app_fault")
    return pods_of(inc)


def test_an_xid_by_bus_names_the_pod_whose_claim_holds_the_gpu() -> None:
    c = dra_node()
    assert _app_fault_pods(c, 10 * MIN) == {f"{NS}/{POD}": "bound"}
    [inc] = of_type(run(c.events), "gpu_app_fault")
    assert inc.attributes["claims"] == f"{NS}/{CLAIM}"


def test_the_slice_names_the_uuid_of_a_gpu_the_kernel_names_by_bus() -> None:
    c = Dra("prod")
    c.dra_node(0)
    c.slice(1)
    c.xid(NODE, 10 * MIN, 79, bus=GPUS["gpu-3"][1])
    c.tick(30 * MIN)
    [inc] = of_type(run(c.events), "gpu_degraded")
    assert [(g.uuid, g.pci_bus_id) for g in inc.gpus] == [GPUS["gpu-3"]]
    assert inc.attributes["dra_devices"] == "gpu-3"


def test_dcgm_exporter_leaving_the_claimed_pod_out_does_not_unbind_it() -> None:
    """dcgm-exporter reads pod-resources, which may not list DRA devices: its binding of
    the GPU says no pod. The API server's allocation stands."""
    c = Dra("prod")
    c.dra_pod(5)
    c.dra_bind(6, "gpu-2", (POD,), claims=(f"{NS}/{CLAIM}",))
    c.bind(NODE, 30, GPUS["gpu-2"][0], GPUS["gpu-2"][1], [], namespace=NS)
    assert _app_fault_pods(c, 10 * MIN) == {f"{NS}/{POD}": "bound"}


def test_the_kubelets_binding_leaving_the_claimed_pod_out_does_not_unbind_it() -> None:
    c = Dra("prod")
    c.dra_pod(5)
    c.dra_bind(6, "gpu-2", (POD,), claims=(f"{NS}/{CLAIM}",))
    kubelet = c.bind(NODE, 30, GPUS["gpu-2"][0], GPUS["gpu-2"][1], [], namespace=NS)
    c.events[-1] = msgspec.structs.replace(kubelet, source=POD_RESOURCES)
    assert _app_fault_pods(c, 10 * MIN) == {f"{NS}/{POD}": "bound"}


def test_a_released_claim_unbinds_only_its_own_pods() -> None:
    """dcgm-exporter named another pod of the GPU (time-slicing): the claim's release
    takes its own pod away, not dcgm-exporter's."""
    c = Dra("prod")
    c.dra_pod(5)
    c.pod(NODE, "other", 5, namespace=NS)
    c.dra_bind(6, "gpu-2", (POD,), claims=(f"{NS}/{CLAIM}",))
    c.bind(NODE, 30, GPUS["gpu-2"][0], GPUS["gpu-2"][1], ["other"], namespace=NS)
    c.dra_bind(60, "gpu-2", ())
    assert _app_fault_pods(c, 10 * MIN) == {f"{NS}/other": "bound"}


def _mig_stream() -> Dra:
    c = Dra("prod")
    for n, (device, uuid) in enumerate(MIGS.items()):
        name = f"infer-{n}"
        c.dra_pod(5, name=name, node=MIG_NODE, device=device)
        c.dra_bind(
            6,
            device,
            (name,),
            node=MIG_NODE,
            claims=(f"{NS}/{name}-gpu",),
            uuid=MIG_PARENT,
            bus=MIG_BUS,
            mig_uuid=uuid,
            profile="1g.12gb",
        )
    return c


def test_two_mig_devices_of_one_parent_keep_their_own_pods() -> None:
    """DRA names a MIG device by its MIG- uuid, no GPU instance id: two of one parent
    must not overwrite each other, and a device-level XID of the parent names both."""
    c = _mig_stream()
    c.xid(MIG_NODE, 10 * MIN, 13, bus=MIG_BUS)
    [inc] = of_type(run(c.events), "gpu_app_fault")
    assert set(pods_of(inc)) == {f"{NS}/infer-0", f"{NS}/infer-1"}


def test_an_xid_naming_an_instance_dra_cannot_place_names_its_siblings_as_candidates() -> None:
    """The kernel's ``GPU-I:05`` names an instance id DRA never says: which MIG device it
    is cannot be told, so the pods of the parent's MIG devices are candidates, not none."""
    c = _mig_stream()
    ev = c.xid(MIG_NODE, 10 * MIN, 13, bus=MIG_BUS)
    c.events[-1] = msgspec.structs.replace(ev, gpu_instance=5)
    [inc] = of_type(run(c.events), "gpu_app_fault")
    assert pods_of(inc) == {f"{NS}/infer-0": "candidate", f"{NS}/infer-1": "candidate"}


def test_a_fatal_xid_of_the_mig_parent_names_every_mig_devices_pods() -> None:
    c = _mig_stream()
    c.xid(MIG_NODE, 10 * MIN, 79, bus=MIG_BUS)
    c.tick(30 * MIN)
    [inc] = of_type(run(c.events), "gpu_degraded")
    assert set(pods_of(inc)) == {f"{NS}/infer-0", f"{NS}/infer-1"}
    assert all(g.gpu_instance is None for g in inc.gpus), "no made-up instance id published"


def test_xid_repeat_names_the_claims_pod() -> None:
    c = dra_node()
    for n in range(5):
        c.xid(NODE, (20 + 30 * n) * MIN, 79, bus=GPUS["gpu-2"][1])
    [inc] = of_type(run(c.events), "xid_repeat")
    assert pods_of(inc) == {f"{NS}/{POD}": "bound"}
    assert inc.attributes["dra_devices"] == "gpu-2"
    assert inc.attributes["claims"] == f"{NS}/{CLAIM}"


def test_a_two_gpu_claim_over_pcie_is_a_multi_gpu_pod_without_nvlink() -> None:
    c = Dra("prod")
    c.dra_node(0)
    c.slice(1)
    c.dra_pod(5, gpus=2)
    for device in ("gpu-0", "gpu-1"):
        c.dra_bind(6, device, (POD,), claims=(f"{NS}/{CLAIM}",))
    c.topology(
        NODE,
        7,
        {(0, 1): "SYS", (0, 2): "SYS", (0, 3): "SYS", (1, 2): "SYS", (1, 3): "SYS", (2, 3): "SYS"},
        buses=tuple(bus for _, bus in GPUS.values()),
    )
    [inc] = of_type(run(c.events), "multi_gpu_pod_without_nvlink")
    assert pods_of(inc) == {f"{NS}/{POD}": "bound"}
    assert {g.pci_bus_id for g in inc.gpus} == {GPUS["gpu-0"][1], GPUS["gpu-1"][1]}


# -- gpu_degraded on DRA nodes --------------------------------------------------------------
def test_a_device_the_driver_taints_is_degraded_until_the_taint_is_lifted() -> None:
    c = dra_node()
    c.slice(10 * MIN, generation=2, taints={"gpu-2": (XID_TAINT,)})
    c.tick(20 * MIN)
    c.slice(40 * MIN, generation=3)
    c.tick(45 * MIN)
    out = run(c.events)
    [inc] = of_type(out, "gpu_degraded")
    assert [i.status for i in out if i.id == inc.id] == ["open", "resolved"]
    assert inc.first_seen == at(10 * MIN)
    assert [(g.uuid, g.pci_bus_id) for g in inc.gpus] == [GPUS["gpu-2"]]
    assert pods_of(inc) == {f"{NS}/{POD}": "candidate"}
    assert inc.attributes["dra_devices"] == "gpu-2"
    assert inc.attributes["claims"] == f"{NS}/{CLAIM}"
    opened = next(i for i in out if i.id == inc.id)
    assert "gpu.nvidia.com/xid=79:NoSchedule" in opened.summary
    assert "gpu-2" in opened.summary
    assert f"{NS}/{CLAIM}" in opened.summary
    assert opened.attributes["device_faults"] == "gpu-2: tainted gpu.nvidia.com/xid=79:NoSchedule"
    assert "untainted" in inc.attributes["resolution"]


def test_a_taint_of_effect_none_is_no_fault() -> None:
    c = dra_node()
    quiet = DeviceTaint(key="gpu.nvidia.com/unmonitored", effect="None")
    c.slice(10 * MIN, generation=2, taints={"gpu-2": (quiet,)})
    c.tick(30 * MIN)
    assert run(c.events) == []


def test_a_claims_device_reported_unhealthy_is_degraded_until_healthy() -> None:
    c = dra_node()
    c.dra_pod(10 * MIN, health="Unhealthy")
    c.dra_pod(12 * MIN, health="Unhealthy")  # a routine update still says it
    c.tick(20 * MIN)
    c.dra_pod(30 * MIN, health="Healthy")
    c.tick(31 * MIN)
    out = run(c.events)
    [inc] = of_type(out, "gpu_degraded")
    assert [i.status for i in out if i.id == inc.id] == ["open", "resolved"]
    assert [(g.uuid, g.pci_bus_id) for g in inc.gpus] == [GPUS["gpu-2"]]
    assert pods_of(inc) == {f"{NS}/{POD}": "candidate"}
    assert inc.attributes["claims"] == f"{NS}/{CLAIM}"
    assert inc.resolved_at == at(30 * MIN)


def test_a_device_plugin_gpu_reported_unhealthy_is_degraded() -> None:
    """allocatedResourcesStatus exists for device-plugin resources too: the resource id
    is the GPU's uuid."""
    c = Dra("prod")
    c.node("dp-node", 0)
    uuid, bus = GPUS["gpu-1"]
    c.pod("dp-node", "train", 5)
    c.bind("dp-node", 6, uuid, bus, ["train"])
    ev = c.pod("dp-node", "train", 10 * MIN)
    [ctr] = ev.containers
    health = DeviceHealth(resource="nvidia.com/gpu", device=uuid, health="Unhealthy")
    c.events[-1] = msgspec.structs.replace(
        ev, containers=(msgspec.structs.replace(ctr, devices=(health,)),)
    )
    c.tick(20 * MIN)
    [inc] = of_type(run(c.events), "gpu_degraded")
    assert [(g.uuid, g.pci_bus_id) for g in inc.gpus] == [(uuid, bus)]
    assert pods_of(inc) == {"ns/train": "candidate"}


def test_a_gpu_gone_from_the_slices_for_five_minutes_is_degraded_until_it_is_back() -> None:
    c = dra_node()
    c.slice(10 * MIN, generation=2, devices=("gpu-0", "gpu-1", "gpu-3"))
    c.tick(14 * MIN)  # 4 min: not yet
    c.tick(20 * MIN)
    c.slice(30 * MIN, generation=3)
    c.tick(31 * MIN)
    out = run(c.events)
    [inc] = of_type(out, "gpu_degraded")
    assert [i.status for i in out if i.id == inc.id] == ["open", "resolved"]
    opened = next(i for i in out if i.id == inc.id)
    assert opened.last_seen == at(10 * MIN)
    assert opened.first_seen == at(10 * MIN)
    assert "gone from its ResourceSlices" in opened.attributes["device_faults"]
    assert [(g.uuid, g.pci_bus_id) for g in inc.gpus] == [GPUS["gpu-2"]]
    assert pods_of(inc) == {f"{NS}/{POD}": "candidate"}
    assert inc.resolved_at == at(30 * MIN)


def _xid_and_taint(c: Dra, t: float, device: str, generation: int) -> None:
    """An XID 79 on an idle GPU, then the driver's own health check taints its device
    (``gpu.nvidia.com/xid=79``, NoSchedule) a second later."""
    c.xid(NODE, t, 79, bus=GPUS[device][1])
    c.slice(t + 1, generation=generation, taints={device: (XID_TAINT,)})


def test_the_driver_lifting_its_taint_resolves_the_ticket_its_xid_opened() -> None:
    """On a DRA node the driver's taint is its health check: lifted, the GPU is healthy
    again, as allocatable coming back is on a device-plugin node (which resolves a ticket
    its fatal XID opened). Kept open for the XID's quiet day instead, the node's next
    fault joined it and opened no ticket of its own."""
    c = dra_node()
    _xid_and_taint(c, 10 * MIN, "gpu-3", generation=2)
    c.tick(16 * MIN)
    c.slice(24 * MIN, generation=3)
    c.tick(25 * MIN)
    _xid_and_taint(c, 120 * MIN, "gpu-0", generation=4)
    c.tick(126 * MIN)
    out = run(c.events)
    first, second = sorted(of_type(out, "gpu_degraded"), key=lambda i: i.first_seen)
    assert (first.status, first.resolved_at) == ("resolved", at(24 * MIN))
    assert "untainted" in first.attributes["resolution"]
    assert [g.pci_bus_id for g in first.gpus] == [GPUS["gpu-3"][1]]
    assert second.status != "resolved"
    assert second.first_seen == at(120 * MIN)
    assert [g.pci_bus_id for g in second.gpus] == [GPUS["gpu-0"][1]]
    assert "tainted gpu.nvidia.com/xid=79:NoSchedule" in second.attributes["device_faults"]


def test_a_gpu_listed_again_resolves_the_ticket_its_xid_opened() -> None:
    c = dra_node()
    c.xid(NODE, 10 * MIN, 79, bus=GPUS["gpu-3"][1])
    c.slice(10 * MIN + 1, generation=2, devices=("gpu-0", "gpu-1", "gpu-2"))
    c.tick(16 * MIN)
    c.slice(30 * MIN, generation=3)
    c.tick(31 * MIN)
    [inc] = of_type(run(c.events), "gpu_degraded")
    assert (inc.status, inc.resolved_at) == ("resolved", at(30 * MIN))


def test_a_report_that_ends_with_its_pod_keeps_the_xids_ticket_open() -> None:
    """An Unhealthy report ends when its pod is deleted: that says nothing of the GPU, so
    the ticket its fatal XID opened keeps the XID's quiet deadline."""
    c = dra_node()
    c.xid(NODE, 10 * MIN, 79, bus=GPUS["gpu-2"][1])
    c.dra_pod(10 * MIN + 1, health="Unhealthy")
    c.tick(16 * MIN)
    c.dra_pod(20 * MIN, health="Unhealthy", op="deleted", deleted=20 * MIN)
    c.tick(30 * MIN)
    [inc] = of_type(run(c.events), "gpu_degraded")
    assert inc.status != "resolved"
    assert inc.attributes["xids"] == "79"


def test_a_gpu_gone_from_a_node_being_removed_is_its_teardown() -> None:
    c = dra_node()
    c.node(NODE, 9 * MIN, capacity=0, alloc=0, taints=(Taint(key="karpenter.sh/disrupted"),))
    c.slice(10 * MIN, op="deleted")
    c.tick(40 * MIN)
    assert of_type(run(c.events), "gpu_degraded") == []


def test_a_deleted_node_takes_its_devices_with_it() -> None:
    c = dra_node()
    c.slice(10 * MIN, op="deleted")
    c.node(NODE, 11 * MIN, capacity=0, alloc=0, op="deleted")
    c.tick(40 * MIN)
    assert run(c.events) == []


# -- the eviction chain ------------------------------------------------------------------------
COND = PodCondition(status="True", reason="DeletionByDeviceTaintManager", message=EVICTED)
"""The device taint eviction controller's DisruptionTarget condition (messages.md §2)."""


def _one_page_on_gpu2(out: list[Incident]) -> Incident:
    """The one incident of ``out``: the chain's page naming pod1 evicted, gpu-2 (uuid and
    bus) and the claim holding it."""
    assert types(out) == ["device_unhealthy_eviction"], "one page, no second ticket"
    [inc] = of_type(out, "device_unhealthy_eviction")
    assert inc.severity == "page"
    assert pods_of(inc) == {f"{NS}/{POD}": "evicted"}
    assert [(g.uuid, g.pci_bus_id) for g in inc.gpus] == [GPUS["gpu-2"]]
    assert inc.attributes["dra_devices"] == "gpu-2"
    assert inc.attributes["claims"] == f"{NS}/{CLAIM}"
    return inc


def test_a_noexecute_rule_evicts_the_claims_pod_one_page_names_device_claim_and_pod() -> None:
    c = dra_node()
    c.slice(10 * MIN, generation=2, taints={"gpu-2": (RULE_TAINT,)})
    c.taint_eviction(10 * MIN + 1)
    c.dra_pod(10 * MIN + 2, disruption=COND, deleted=10 * MIN + 2)
    c.dra_pod(10 * MIN + 40, disruption=COND, deleted=10 * MIN + 2, op="deleted")
    c.claim(10 * MIN + 41, "gpu-2", ())
    c.tick(40 * MIN)
    inc = _one_page_on_gpu2(run(c.events))
    texts = [e.text for e in inc.evidence]
    assert any("evict-gpu-2-xid-79" in t and "NoExecute" in t for t in texts)
    assert any("DeviceTaintManagerEviction" in t for t in texts)
    assert inc.first_seen == at(10 * MIN)
    assert "DRA device taint" in inc.summary


def test_the_disruption_condition_alone_joins_the_chain() -> None:
    c = dra_node()
    c.slice(10 * MIN, generation=2, taints={"gpu-2": (RULE_TAINT,)})
    c.dra_pod(10 * MIN + 2, disruption=COND, deleted=10 * MIN + 2)
    [inc] = of_type(run(c.events), "device_unhealthy_eviction")
    assert pods_of(inc) == {f"{NS}/{POD}": "evicted"}
    assert any(EVICTED in e.text for e in inc.evidence)


def _evicted(c: Dra, t: float, *, event: bool = True, name: str = POD) -> None:
    """The device taint eviction controller evicts the pod: its Event (unless not
    ``event``), the DisruptionTarget condition with the deletion, the pod gone, its claim
    released."""
    device = "gpu-2" if name == POD else "gpu-0"
    if event:
        c.taint_eviction(t, name=name)
    c.dra_pod(t + 1, name=name, device=device, disruption=COND, deleted=t + 1)
    c.dra_pod(t + 30, name=name, device=device, disruption=COND, deleted=t + 1, op="deleted")
    claim = CLAIM if name == POD else f"{name}-gpu"
    c.claim(t + 31, device, (), name=claim)


@pytest.mark.parametrize("event", [True, False], ids=["event", "condition"])
def test_an_eviction_whose_taint_the_core_never_saw_pages_the_pods_gpu(event: bool) -> None:
    """A v1alpha3 DeviceTaintRule with a CEL selector (the connector cannot apply it),
    or a slice record lost: no taint reaches the node key, but the device taint eviction
    controller evicts only for a NoExecute taint of a device the pod's claims hold. Its
    word arms the chain on the GPUs the pod holds by DRA binding: one page, naming the
    device, the claim and the pod."""
    c = dra_node()
    _evicted(c, 10 * MIN, event=event)
    c.tick(40 * MIN)
    inc = _one_page_on_gpu2(run(c.events))
    assert inc.first_seen == at(10 * MIN if event else 10 * MIN + 1)
    assert "NoExecute device taint" in inc.summary
    assert "gpu-2" in inc.summary
    assert inc.status == "resolved", "no fault known: the page ends with its window"


def test_one_unseen_rule_evicting_two_pods_is_one_page_naming_both_devices() -> None:
    """A rule that selects two devices (pod1's gpu-2, pod2's gpu-0): each eviction names
    its own pod's device, and the two are one page."""
    c = dra_node()
    c.dra_pod(9, name="pod2", device="gpu-0")
    c.claim(9, "gpu-0", ("pod2",), name="pod2-gpu")
    _evicted(c, 10 * MIN)
    _evicted(c, 10 * MIN + 2, name="pod2")
    c.tick(40 * MIN)
    events = sorted(c.events, key=lambda e: e.time)  # the two evictions interleave
    [inc] = of_type(run(events), "device_unhealthy_eviction")
    assert pods_of(inc) == {f"{NS}/{POD}": "evicted", f"{NS}/pod2": "evicted"}
    assert sorted(g.pci_bus_id for g in inc.gpus) == sorted((GPUS["gpu-0"][1], GPUS["gpu-2"][1]))
    assert sorted(inc.attributes["dra_devices"].split(",")) == ["gpu-0", "gpu-2"]


@pytest.mark.parametrize("delay", [-1.0, 3.0, 45.0])
def test_a_taint_seen_near_its_eviction_gives_exactly_one_page(delay: float) -> None:
    """The rule's taint reaches the node key a second before the eviction, or after it
    (the slice and the pod are separate watches): one page either way."""
    c = dra_node()
    c.slice(10 * MIN + delay, generation=2, taints={"gpu-2": (RULE_TAINT,)})
    _evicted(c, 10 * MIN)
    c.slice(20 * MIN, generation=3)
    c.tick(60 * MIN)
    out = run(sorted(c.events, key=lambda e: e.time))
    assert types(out) == ["device_unhealthy_eviction"]
    [inc] = of_type(out, "device_unhealthy_eviction")
    assert pods_of(inc) == {f"{NS}/{POD}": "evicted"}
    assert [(g.uuid, g.pci_bus_id) for g in inc.gpus] == [GPUS["gpu-2"]]
    assert any("evict-gpu-2-xid-79" in e.text for e in inc.evidence)
    assert "DRA device taint" in inc.summary


def test_the_node_taint_managers_eviction_of_a_claim_pod_is_no_device_fault() -> None:
    """``TaintManagerEviction`` / ``DeletionByTaintManager`` are the node's taints (a
    NotReady node's ``node.kubernetes.io/unreachable``): the pod's GPUs are not blamed."""
    c = dra_node()
    marking = f"Marking for deletion Pod {NS}/{POD}"  # the node's (messages.md §2)
    c.kube(NODE, 10 * MIN, "TaintManagerEviction", name=POD, namespace=NS, message=marking)
    node_taint = PodCondition(
        status="True",
        reason="DeletionByTaintManager",
        message="Taint manager: deleting due to NoExecute taint",
    )
    c.dra_pod(10 * MIN + 1, disruption=node_taint, deleted=10 * MIN + 1)
    c.dra_pod(10 * MIN + 30, disruption=node_taint, deleted=10 * MIN + 1, op="deleted")
    c.tick(40 * MIN)
    assert of_type(run(c.events), "device_unhealthy_eviction") == []


def test_a_device_taint_eviction_of_a_pod_holding_another_drivers_device_blames_no_gpu() -> None:
    """The pod also holds a NIC by claim (another driver: no binding, no slice here). The
    eviction says one of its devices is tainted, not which: the GPU is not paged."""
    c = dra_node()
    nic = PodClaim(name="nic", claim="pod1-nic-9xk2q", template="rdma-nic")
    _evicted(c, 10 * MIN)
    for k, ev in enumerate(c.events):
        if isinstance(ev, PodEvent):
            c.events[k] = msgspec.structs.replace(ev, claims=(*ev.claims, nic))
    c.tick(40 * MIN)
    assert of_type(run(c.events), "device_unhealthy_eviction") == []


def test_a_cancelled_taint_eviction_fails_nobody() -> None:
    c = dra_node()
    c.slice(10 * MIN, generation=2, taints={"gpu-2": (RULE_TAINT,)})
    c.taint_eviction(10 * MIN + 1, message="Cancelling deletion")
    c.slice(10 * MIN + 30, generation=3)
    c.tick(40 * MIN)
    assert of_type(run(c.events), "device_unhealthy_eviction") == []


def test_an_unhealthy_report_arms_the_chain_and_the_pods_crash_joins() -> None:
    c = dra_node()
    c.dra_pod(10 * MIN, health="Unhealthy")
    c.dra_pod(
        11 * MIN,
        phase="Failed",
        health="Unhealthy",
        last=term(11 * MIN, "Error", 1, "CUDA error: an uncorrectable ECC error was encountered"),
    )
    out = run(c.events)
    [inc] = of_type(out, "device_unhealthy_eviction")
    assert pods_of(inc) == {f"{NS}/{POD}": "failed"}
    assert "device reported Unhealthy" in inc.summary


def test_a_taint_on_another_gpu_does_not_take_this_pods_eviction() -> None:
    """The pod's claim holds gpu-2; gpu-0 is tainted: a node-pressure eviction of pod1
    is not gpu-0's casualty."""
    c = dra_node()
    c.slice(10 * MIN, generation=2, taints={"gpu-0": (XID_TAINT,)})
    c.kube(NODE, 10 * MIN + 5, "Evicted", name=POD, namespace=NS, message="The node had condition")
    c.tick(13 * MIN)
    assert of_type(run(c.events), "device_unhealthy_eviction") == []


# -- a mixed cluster ---------------------------------------------------------------------------
def test_a_mixed_cluster_pages_each_nodes_fault_on_its_own_node() -> None:
    c = dra_node()
    c.node("dp-node", 0)
    c.pod("dp-node", "train", 5)
    c.bind("dp-node", 6, GPUS["gpu-0"][0], "0000:9b:00.0", ["train"])
    c.xid("dp-node", 10 * MIN, 79, bus="0000:9b:00.0")
    c.node("dp-node", 10 * MIN + 5, alloc=7)
    c.kube("dp-node", 10 * MIN + 6, "Evicted", name="train", message="DeviceFailed")
    c.slice(10 * MIN, generation=2, taints={"gpu-2": (RULE_TAINT,)})
    c.taint_eviction(10 * MIN + 1)
    out = run(c.events)
    pages = {inc.node: inc for inc in of_type(out, "device_unhealthy_eviction")}
    assert set(pages) == {NODE, "dp-node"}
    assert pods_of(pages[NODE]) == {f"{NS}/{POD}": "evicted"}
    assert pods_of(pages["dp-node"]) == {"ns/train": "evicted"}
    assert "claims" not in pages["dp-node"].attributes
    assert of_type(out, "gpu_degraded") == []
