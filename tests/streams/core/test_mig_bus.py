"""MIG: an instance's XID names its pod, whichever record told the parent's bus id first.

dcgm-exporter's MIG binding names the instance by its parent GPU's uuid and its GPU
instance id, often with no PCI bus id; the kernel's ``Xid (PCI:0000:07:00 GPU-I:05)``
names the bus and the instance, no uuid. Something else of the node maps one to the
other: NVML's identity binding (bus id + uuid, pods unknown) or the topology snapshot
(NVML: every GPU's uuid and bus id). Before, only a mapping that arrived *after* the
binding joined them: NVML's identity, coming first, left no trace (a GPU entry with no
pods is dropped), and a topology record was never used for identity at all, so the XID
of instance 5 named no pod.
"""

from __future__ import annotations

import msgspec

from schemas.events import XidEvent
from tests.core_helpers import of_type, run
from tests.factories import Cluster

NODE = "a100-mig-01"
BUS = "0000:07:00.0"
UUID = "GPU-9d33a6b1-2f0c-4bb0-8c1d-3e5f6a7b8c9d"
MIG5 = "MIG-0c8d2b11-5a4e-4d3c-9b2a-1f0e9d8c7b6a"


def node(c: Cluster) -> None:
    c.node(NODE, 0, capacity=2, alloc=2)
    c.pod(NODE, "infer-a", 1)
    c.pod(NODE, "infer-b", 1)


def dcgm_bindings(c: Cluster, t: float) -> None:
    """dcgm-exporter's bindings of instances 3 and 5: the parent's uuid, no bus id."""
    for instance, pod in ((3, "infer-a"), (5, "infer-b")):
        ev = c.bind(NODE, t, UUID, "", [pod])
        c.events[-1] = msgspec.structs.replace(ev, gpu_instance=instance, mig_profile="1g.5gb")


def nvml_identity(c: Cluster, t: float) -> None:
    """NVML's identity binding of instance 5: bus id, uuid, instance, MIG uuid; no pods."""
    ev = c.bind(NODE, t, UUID, BUS, [], pods_known=False)
    c.events[-1] = msgspec.structs.replace(ev, gpu_instance=5, mig_uuid=MIG5, mig_profile="1g.5gb")


def kernel_xid(c: Cluster, t: float, code: int, instance: int) -> XidEvent:
    """``NVRM: Xid (PCI:0000:07:00 GPU-I:05): 43, ...``: bus id and instance, no uuid."""
    ev = msgspec.structs.replace(c.xid(NODE, t, code, bus=BUS), gpu_instance=instance)
    c.events[-1] = ev
    return ev


def named(c: Cluster) -> list[tuple[str, str]]:
    (fault,) = of_type(run(c.events), "gpu_app_fault")
    return [(p.name, p.role) for p in fault.pods]


def test_nvml_identity_before_the_binding_still_joins_the_xid_to_the_pod() -> None:
    """Failed before: NVML's identity came first and was dropped (no pods); the binding
    that followed stayed keyed by uuid, the XID by bus: the fault named no pod."""
    c = Cluster("prod")
    node(c)
    nvml_identity(c, 2)
    dcgm_bindings(c, 3)
    kernel_xid(c, 60, 43, 5)
    assert named(c) == [("infer-b", "bound")]


def test_a_topology_snapshot_before_the_binding_gives_the_bus() -> None:
    """Failed before: the topology's uuid -> bus map was not used for identity."""
    c = Cluster("prod")
    node(c)
    c.topology(NODE, 2, {}, uuids=(UUID,), buses=(BUS,))
    dcgm_bindings(c, 3)
    kernel_xid(c, 60, 43, 5)
    assert named(c) == [("infer-b", "bound")]


def test_a_topology_snapshot_after_the_binding_gives_the_bus() -> None:
    """Failed before: the bindings stayed keyed by uuid after the snapshot."""
    c = Cluster("prod")
    node(c)
    dcgm_bindings(c, 2)
    c.topology(NODE, 3, {}, uuids=(UUID,), buses=(BUS,))
    kernel_xid(c, 60, 31, 3)
    assert named(c) == [("infer-a", "bound")]


def test_nvml_identity_after_the_binding_still_joins() -> None:
    """Regression guard (held before): NVML's identity after the binding re-keys it."""
    c = Cluster("prod")
    node(c)
    dcgm_bindings(c, 2)
    nvml_identity(c, 3)
    kernel_xid(c, 60, 43, 5)
    assert named(c) == [("infer-b", "bound")]


def test_an_xid_before_any_mapping_does_not_hide_the_pod_from_the_next() -> None:
    """Failed before: the first XID (bus id only) made an entry of its own for instance 5;
    when NVML later mapped the uuid, the binding keyed by uuid could not move under the
    bus id (taken), and every later XID of instance 5 still named no pod."""
    c = Cluster("prod")
    node(c)
    dcgm_bindings(c, 2)
    kernel_xid(c, 60, 43, 5)
    nvml_identity(c, 70)
    kernel_xid(c, 30 * 60, 43, 5)
    (fault,) = of_type(run(c.events), "gpu_app_fault")
    assert ("infer-b", "bound") in [(p.name, p.role) for p in fault.pods]
