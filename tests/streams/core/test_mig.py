"""MIG instances are GPUs of their own, joined across sources.

A MIG-partitioned GPU is several isolated GPU instances, each bound to its own pod.
Every source names an instance the same way: its parent GPU (bus id and/or uuid) and
its GPU instance id: the kernel's ``Xid (PCI:0000:07:00 GPU-I:05)``, dcgm-exporter's
``GPU_I_ID``, NVML's ``nvmlDeviceGetGpuInstanceId`` (``connectors/`` fill
``gpu_instance``; see tests/connectors/test_mig_identity.py). The core keys an instance
as ``<parent>/GI<id>`` (``streams.core.state.MIG_SEPARATOR``).

The old core keyed GPUs by bus id or uuid alone: all instances of one GPU merged
into the parent, the last binding's pod won, and an XID of instance 5 blamed the pod
of instance 3.
"""

from __future__ import annotations

import msgspec

from schemas.events import PodRef, XidEvent
from tests.core_helpers import of_type, run
from tests.factories import Cluster, term

NODE = "a100-mig-01"
BUS = "0000:07:00.0"
UUID = "GPU-9d33a6b1-2f0c-4bb0-8c1d-3e5f6a7b8c9d"
MIG5 = "MIG-0c8d2b11-5a4e-4d3c-9b2a-1f0e9d8c7b6a"


def bind_instance(
    c: Cluster, t: float, instance: int, pods: list[str], *, bus: str = "", profile: str = "1g.5gb"
) -> None:
    """dcgm-exporter's binding of one MIG instance: the parent's uuid (its bus id only
    when the exporter has the label), the instance id and profile, the pod."""
    ev = c.bind(NODE, t, UUID, bus, pods)
    c.events[-1] = msgspec.structs.replace(ev, gpu_instance=instance, mig_profile=profile)


def xid(c: Cluster, t: float, code: int, instance: int | None, *, uuid: str = "") -> XidEvent:
    """A kernel XID on the parent's bus id, naming the instance (``GPU-I:NN``) or not."""
    ev = c.xid(NODE, t, code, bus=BUS, uuid=uuid)
    ev = msgspec.structs.replace(ev, gpu_instance=instance)
    c.events[-1] = ev
    return ev


def mig_node() -> Cluster:
    """One A100 with two 1g.5gb instances (3 and 5), one pod each, and NVML's identity
    binding of instance 5 (bus id + uuid + instance + MIG uuid, pods unknown)."""
    c = Cluster("prod")
    c.node(NODE, 0, capacity=2, alloc=2)
    c.pod(NODE, "infer-a", 1)
    c.pod(NODE, "infer-b", 1)
    bind_instance(c, 2, 3, ["infer-a"])
    bind_instance(c, 2, 5, ["infer-b"])
    nvml = c.bind(NODE, 3, UUID, BUS, [], pods_known=False)
    c.events[-1] = msgspec.structs.replace(
        nvml, gpu_instance=5, mig_uuid=MIG5, mig_profile="1g.5gb"
    )
    return c


def test_an_xid_naming_a_gpu_instance_names_the_pod_of_that_instance() -> None:
    """XID 94 (contained ECC error) on ``GPU-I:05``: the workload of instance 5 is told,
    as the one bound pod, with the instance and its profile; instance 3's pod is not
    named (MIG isolates it). The kmsg XID has only the bus id, dcgm's binding only the
    uuid: NVML's identity binding of the instance joins them."""
    c = mig_node()
    xid(c, 60, 94, 5)
    (fault,) = of_type(run(c.events), "gpu_app_fault")
    assert [(p.name, p.role) for p in fault.pods] == [("infer-b", "bound")]
    (gpu,) = fault.gpus
    assert (gpu.pci_bus_id, gpu.uuid, gpu.gpu_instance, gpu.mig_profile) == (
        BUS,
        UUID,
        5,
        "1g.5gb",
    )


def test_an_xid_of_the_whole_gpu_makes_every_mig_pod_a_candidate() -> None:
    """XID 13 with no ``GPU-I`` (the driver could not attribute it): it is the parent
    GPU's, and any of its instances' pods may be the one; all are candidates, none is
    named as *the* bound pod."""
    c = mig_node()
    xid(c, 60, 13, None)
    (fault,) = of_type(run(c.events), "gpu_app_fault")
    assert sorted((p.name, p.role) for p in fault.pods) == [
        ("infer-a", "candidate"),
        ("infer-b", "candidate"),
    ]


def test_records_from_before_gpu_instance_still_join() -> None:
    """Wire compatibility: dcgm connectors before ``gpu_instance`` spelled an instance
    ``gpu_uuid="<uuid>/GI<id>"`` with no bus id. Read the same way, the old binding and
    a new XID naming instance 5 (by uuid, from NVML's enrichment) meet."""
    c = Cluster("prod")
    c.node(NODE, 0, capacity=2, alloc=2)
    c.pod(NODE, "infer-a", 1)
    c.pod(NODE, "infer-b", 1)
    c.bind(NODE, 2, f"{UUID}/GI3", "", ["infer-a"])
    c.bind(NODE, 2, f"{UUID}/GI5", "", ["infer-b"])
    xid(c, 60, 94, 5, uuid=UUID)
    (fault,) = of_type(run(c.events), "gpu_app_fault")
    assert [p.name for p in fault.pods] == ["infer-b"]


def test_a_fault_of_the_parent_gpu_takes_the_pods_of_its_instances_into_the_chain() -> None:
    """XID 79 names no instance: the whole GPU fell off the bus, and with it every MIG
    instance. The pods of both instances crash at once: both are bound to the chain's
    GPU (through their instances), so both join the device chain."""
    c = mig_node()
    xid(c, 60, 79, None)
    c.node(NODE, 62, capacity=2, alloc=0)
    c.pod(NODE, "infer-a", 65, phase="Failed", current=term(64))
    c.pod(NODE, "infer-b", 65, phase="Failed", current=term(64))
    (chain,) = of_type(run(c.events), "device_unhealthy_eviction")
    assert sorted(p.name for p in chain.pods) == ["infer-a", "infer-b"]


def test_an_instance_fault_does_not_take_a_sibling_instances_pod() -> None:
    """A fatal XID attributed to instance 5 arms the chain for instance 5. The pod of
    instance 3 crashing long after is not that device's doing (its binding is known
    and differs): it does not join; the instance-5 pod does."""
    c = mig_node()
    xid(c, 60, 95, 5)
    c.pod(NODE, "infer-b", 61, phase="Failed", current=term(60))
    c.pod(NODE, "infer-a", 400, phase="Failed", current=term(399))
    (chain,) = of_type(run(c.events), "device_unhealthy_eviction")
    assert [p.name for p in chain.pods] == ["infer-b"]
    (gpu,) = chain.gpus
    assert gpu.gpu_instance == 5


def test_a_mig_node_degraded_counts_instances_of_a_profile_not_gpus() -> None:
    """One A100 in MIG *mixed* strategy advertises ``nvidia.com/mig-1g.5gb: 7``. When the
    device plugin marks one instance unhealthy, "1 of 7 GPUs on the node" is false (the
    node has one GPU): say 1 of 7 MIG 1g.5gb instances."""
    c = Cluster("prod")
    labels = {"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.count": "1"}
    ev = c.node(NODE, 0, labels=labels)
    mig = {"nvidia.com/mig-1g.5gb": 7}
    c.events[-1] = msgspec.structs.replace(ev, capacity=mig, allocatable=mig)
    ev = c.node(NODE, 60, labels=labels)
    c.events[-1] = msgspec.structs.replace(
        ev, capacity=mig, allocatable={"nvidia.com/mig-1g.5gb": 6}
    )
    c.tick(60 + 400)
    (degraded,) = of_type(run(c.events), "gpu_degraded")
    assert degraded.summary.startswith("1 of 7 MIG 1g.5gb instances on a100-mig-01"), (
        degraded.summary
    )


def test_the_single_strategy_names_the_profile_from_the_product_label() -> None:
    """Under the *single* strategy every instance is an ``nvidia.com/gpu`` and only GPU
    feature discovery's product label says they are MIG instances (``...-MIG-1g.5gb``),
    with ``nvidia.com/gpu.count`` still the physical GPUs."""
    c = Cluster("prod")
    labels = {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia.com/gpu.count": "1",
    }
    c.node(NODE, 0, capacity=7, alloc=7, labels=labels)
    c.node(NODE, 60, capacity=7, alloc=5, labels=labels)
    c.tick(60 + 400)
    (degraded,) = of_type(run(c.events), "gpu_degraded")
    assert degraded.summary.startswith("2 of 7 MIG 1g.5gb instances of 1 GPU on a100-mig-01"), (
        degraded.summary
    )


def test_the_kubelets_sharers_of_a_time_sliced_gpu_are_not_undone_by_dcgm() -> None:
    """The kubelet's pod-resources binding names both pods holding replicas of a
    time-sliced GPU; dcgm-exporter's next binding names one of them (it keeps one pod per
    GPU, NVIDIA/dcgm-exporter#151). An XID must still name both as candidates."""
    c = Cluster()
    for name in ("nb-a", "nb-b"):
        c.pod(NODE, name, 1)
    kubelet = c.bind(NODE, 2, UUID, BUS, ["nb-a", "nb-b"])
    c.events[-1] = msgspec.structs.replace(kubelet, source="pod-resources", shared=True)
    dcgm = c.bind(NODE, 3, UUID, BUS, ["nb-b"])
    c.events[-1] = msgspec.structs.replace(dcgm, source="dcgm-exporter")
    xid(c, 60, 31, None)
    (fault,) = of_type(run(c.events), "gpu_app_fault")
    assert sorted(p.name for p in fault.pods) == ["nb-a", "nb-b"]
    assert "candidates" in fault.summary


def test_without_the_kubelet_the_last_binding_still_decides() -> None:
    """No pod-resources source on the node: dcgm-exporter's bindings are all there is, and
    its newer one replaces the older (a pod ended, another took the GPU)."""
    c = Cluster()
    for name in ("old", "new"):
        c.pod(NODE, name, 1)
    c.bind(NODE, 2, UUID, BUS, ["old"])
    c.bind(NODE, 3, UUID, BUS, ["new"])
    xid(c, 60, 31, None)
    (fault,) = of_type(run(c.events), "gpu_app_fault")
    assert [p.name for p in fault.pods] == ["new"]


def test_two_containers_of_one_pod_on_one_gpu_are_one_pod_not_a_shared_gpu() -> None:
    """The kubelet lists devices per container: a pod whose two containers got replicas
    of one GPU is still its only pod, and no co-tenant is suspected."""
    c = Cluster()
    c.pod(NODE, "p", 1)
    ev = c.bind(NODE, 2, UUID, BUS, [])
    containers = tuple(PodRef(namespace="ns", name="p", container=n) for n in ("a", "b"))
    c.events[-1] = msgspec.structs.replace(ev, pods=containers, source="pod-resources")
    xid(c, 60, 31, None)
    (fault,) = of_type(run(c.events), "gpu_app_fault")
    assert [p.name for p in fault.pods] == ["p"]
    assert "candidates" not in fault.summary
