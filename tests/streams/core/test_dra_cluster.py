"""The cluster key on DRA nodes: ``allocation_mismatch`` counts the GPUs pods hold by claim.

Records are shaped as the k8s connector emits them (schemas/events.py, the DRA contract).

Names and values come from tests/data/dra/ (a pod ``pod1`` of namespace ``gpu-test1``
holding the template claim ``single-gpu`` of device class ``gpu.nvidia.com``, the
allocated ResourceClaim ``pod1-gpu-h6vrt``, the ResourceSlice of ``gpu-a100-node-01``
with its four A100s). A pod holds GPUs only through ``claims`` (no ``gpu_requests``);
each of its GPU devices is bound twice: by dcgm-exporter (``source="dcgm-exporter"``) and
by the connector's DRA join (``source="dra"``, the claim named, the device ``gpu-<n>``).
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from schemas.codec import AnyEvent, encode
from schemas.events import (
    ContainerStatus,
    DeviceHealth,
    GpuBindingEvent,
    NodeEvent,
    PodClaim,
    PodCondition,
    PodEvent,
    PodRef,
    ResourceSliceEvent,
    SliceDevice,
)
from schemas.incidents import Incident
from schemas.keys import DRA
from schemas.types import Op
from streams.core import CoreSettings, Correlator
from streams.core.snapshot import decode_state, encode_state
from streams.core.state import ClusterState
from tests.core_helpers import config, feed, of_type
from tests.core_helpers import run as run_in_order
from tests.factories import Cluster, at

DATA = Path(__file__).parents[2] / "data" / "dra"
GPU_CLASS = "gpu.nvidia.com"
"""The device class (and driver) of NVIDIA's DRA driver for full GPUs."""
DCGM = "dcgm-exporter"


def slice_gpus(node: str, count: int = 4) -> list[tuple[str, str, str]]:
    """``(device, uuid, bus)`` of ``count`` GPUs of a DRA node: the fixture slice's four
    A100s (gpu-a100-node-01), and composed uuids and buses of the same form past them or
    on another node (a node's own uuids: no two nodes share one)."""
    spec = json.loads((DATA / "resourceslice_gpu_node.json").read_text())["spec"]
    real = [
        (
            d["name"],
            d["attributes"]["uuid"]["string"],
            d["attributes"]["resource.kubernetes.io/pciBusID"]["string"],
        )
        for d in spec["devices"]
    ]
    out: list[tuple[str, str, str]] = []
    for n in range(count):
        if node == spec["nodeName"] and n < len(real):
            out.append(real[n])
            continue
        tag = sum(node.encode()) % 0xFFFF
        out.append(
            (
                f"gpu-{n}",
                f"GPU-{tag:04x}{n:04x}-6b4c-4d8e-9a17-0c2b7e91d4a6",
                f"0000:{0x17 + n:02x}:00.0",
            )
        )
    return out


def template_claim(pod: str, gpus: int = 1, *, created: bool = True) -> PodClaim:
    """A claim the claim controller makes for the pod alone from the ``single-gpu``
    ResourceClaimTemplate (``<pod>-gpu-<5 random>``; empty until it is made)."""
    return PodClaim(
        name="gpu",
        claim=f"{pod}-gpu-h6vrt" if created else "",
        template="single-gpu",
        gpus=gpus,
        device_class=GPU_CLASS,
    )


def shared_claim(name: str = "single-gpu", pod_claim: str = "shared-gpu") -> PodClaim:
    """A ResourceClaim the pod names itself (``resourceClaimName``), which other pods may
    name too: NVIDIA's quickstart gpu-test3 has two pods name ``single-gpu`` for one GPU
    (NVIDIA/k8s-dra-driver-gpu demo/specs/quickstart/v1/gpu-test3.yaml @ 22407113)."""
    return PodClaim(name=pod_claim, claim=name, gpus=1, device_class=GPU_CLASS)


def nic_claim(pod: str) -> PodClaim:
    """A claim of another driver (a NIC): no GPU (``gpus`` 0, no GPU device class)."""
    return PodClaim(name="nic", claim=f"{pod}-nic-9xk2q", template="rdma-nic")


def dra_pod(
    c: Cluster,
    node: str,
    name: str,
    t: float,
    claims: tuple[PodClaim, ...],
    *,
    phase: str = "Running",
    namespace: str = "gpu-test1",
    op: Op = "modified",
    owner: tuple[str, str] = ("Job", "job"),
    gpus: int = 0,
) -> PodEvent:
    """A scheduled pod holding GPUs by ``claims`` (and ``gpus`` requested the old way),
    with the kubelet's ``allocatedResourcesStatus`` of its GPU claims (``Unknown``: no
    health report, the normal case with NVIDIA's driver)."""
    base = c.pod(node, name, t, phase=phase, namespace=namespace, op=op, owner=owner, gpus=gpus)
    devices = tuple(
        DeviceHealth(
            resource=f"claim:{claim.name}/gpu",
            device=f"k8s.gpu.nvidia.com/claim=e1d2c3b4-a596-4877-8f60-5a4b3c2d1e0f-gpu-{k}",
            health="Unknown",
        )
        for k, claim in enumerate(claims)
        if claim.gpus > 0
    )
    ev = msgspec.structs.replace(
        base, claims=claims, containers=(ContainerStatus(name="ctr", devices=devices),)
    )
    c.events[-1] = ev
    return ev


def pending_dra_pod(
    c: Cluster,
    name: str,
    t: float,
    claims: tuple[PodClaim, ...],
    message: str,
    *,
    namespace: str = "gpu-test1",
    owner: tuple[str, str] = ("Job", "job"),
    created: float = 0,
) -> PodEvent:
    """A pod the scheduler has not placed, ``message`` its ``PodScheduled=False``
    (``Unschedulable``) condition's."""
    base = c.pending(name, t, gpus=0, created=created, namespace=namespace, owner=owner)
    ev = msgspec.structs.replace(
        base,
        claims=claims,
        scheduled=PodCondition(status="False", reason="Unschedulable", message=message),
    )
    c.events[-1] = ev
    return ev


def dcgm_bind(
    c: Cluster, node: str, t: float, uuid: str, bus: str, pods: list[str], ns: str = "gpu-test1"
) -> GpuBindingEvent:
    """dcgm-exporter's binding of one GPU (its pod labels): the only count of bound."""
    ev = msgspec.structs.replace(c.bind(node, t, uuid, bus, pods, ns), source=DCGM)
    c.events[-1] = ev
    return ev


def dra_bind(
    c: Cluster,
    node: str,
    t: float,
    device: tuple[str, str, str],
    pods: list[str],
    claim: str,
    ns: str = "gpu-test1",
) -> GpuBindingEvent:
    """The connector's DRA binding of one device: the claim's ``reservedFor`` pods joined
    with the slice's uuid and bus (``pods=[]``: released)."""
    name, uuid, bus = device
    ev = GpuBindingEvent(
        id=f"dra:{node}:{name}:e1d2c3b4-{claim}:{len(c.events)}",
        cluster=c.name,
        time=at(t),
        node=node,
        gpu_uuid=uuid,
        pci_bus_id=bus,
        device=name,
        pods=tuple(PodRef(namespace=ns, name=p) for p in pods),
        claims=(f"{ns}/{claim}",) if pods else (),
        pods_known=True,
        shared=len(pods) > 1,
        source=DRA,
    )
    c.events.append(ev)
    return ev


MISMATCH = "allocation_mismatch"


def run(events: list[AnyEvent], cfg: CoreSettings | None = None) -> list[Incident]:
    """Routed as the producer routes them, in event-time order."""
    return run_in_order(sorted(events, key=lambda e: e.time), cfg)


def dra_node_running(
    c: Cluster, node: str, t: float, gpus: int = 8, *, prefix: str = "worker"
) -> list[tuple[str, str, str]]:
    """A DRA node (``nvidia.com/gpu`` 0/0: no device plugin) whose ``gpus`` GPUs are each
    held by a one-GPU template claim of a running pod, bound by dcgm-exporter and by DRA."""
    c.node(node, t, capacity=0, alloc=0)
    devices = slice_gpus(node, gpus)
    for k, device in enumerate(devices):
        pod = f"{prefix}-{node[-2:]}-{k}"
        dra_pod(c, node, pod, t + 1, (template_claim(pod),))
        dra_bind(c, node, t + 2, device, [pod], f"{pod}-gpu-h6vrt")
        dcgm_bind(c, node, t + 30, device[1], device[2], [pod])
    return devices


def test_a_dra_node_whose_plugins_and_dcgm_restart_in_an_upgrade_is_no_mismatch() -> None:
    """Eight pods hold the node's eight GPUs by claim: requested 8, not 0, so dcgm-exporter's
    8 bound agree. The upgrade restarts the device plugin (the node's ``nvidia.com/gpu``
    stays 0/0), the DRA plugin and dcgm-exporter (its GPUs without pods for 40 s)."""
    c = Cluster()
    node = "gpu-h100-node-03"
    devices = dra_node_running(c, node, 0)
    c.node(node, 900, capacity=0, alloc=0)  # the device plugin restarts: still nothing
    for _name, uuid, bus in devices:
        dcgm_bind(c, node, 910, uuid, bus, [])
    for k, (_name, uuid, bus) in enumerate(devices):
        dcgm_bind(c, node, 950, uuid, bus, [f"worker-03-{k}"])
    c.tick(4000)
    assert of_type(run(c.events, config(mismatch_threshold=0)), MISMATCH) == []


def test_eight_claimed_gpus_on_two_nodes_agree_with_dcgm_and_dra_bindings_count_not() -> None:
    """Four GPUs claimed on each of two nodes: dcgm-exporter binds 8, DRA binds the same 8
    again. Counting DRA's as bound (or the claims as nothing) made a "16 GPUs" ticket."""
    c = Cluster()
    dra_node_running(c, "gpu-a100-node-01", 0, 4)
    dra_node_running(c, "gpu-a100-node-02", 0, 4)
    c.tick(4000)
    revisions = run(c.events, config(mismatch_threshold=0))
    assert of_type(revisions, MISMATCH) == []


def test_a_dra_binding_that_reaches_the_cluster_key_is_not_dcgms() -> None:
    """A record written by another router (a dump, an older producer) may carry DRA
    bindings to the cluster key: they still do not count as bound. Here DCGM lost every
    pod on the node; the DRA bindings that say the GPUs are held must not hide it."""
    c = Cluster()
    node = "gpu-a100-node-01"
    devices = dra_node_running(c, node, 0, 4)
    dra_node_running(c, "gpu-a100-node-02", 0, 4)
    for _name, uuid, bus in devices:
        dcgm_bind(c, node, 100, uuid, bus, [])
    for k, device in enumerate(devices):
        pod = f"worker-01-{k}"
        held = dra_bind(c, node, 120, device, [pod], f"{pod}-gpu-h6vrt")
        c.events.append(msgspec.structs.replace(held, scope="cluster"))
    c.tick(1000)
    (ticket,) = of_type(run(c.events, config(mismatch_threshold=0)), MISMATCH)
    assert ticket.attributes["nodes"] == node
    assert "gpu-a100-node-01 (4 requested, 0 bound)" in ticket.summary


def test_dcgm_seeing_7_of_8_claimed_gpus_for_long_enough_is_a_ticket() -> None:
    c = Cluster()
    node = "gpu-h100-node-03"
    devices = dra_node_running(c, node, 0)
    _name, uuid, bus = devices[5]
    dcgm_bind(c, node, 200, uuid, bus, [])  # a GPU dcgm-exporter no longer ties to its pod
    c.tick(200 + 299)
    assert of_type(run(c.events, config(mismatch_threshold=0)), MISMATCH) == []  # brief
    c.tick(1200)
    (ticket,) = of_type(run(c.events, config(mismatch_threshold=0)), MISMATCH)
    assert ticket.status == "open"
    assert ticket.attributes["nodes"] == node
    assert (ticket.attributes["requested"], ticket.attributes["bound"]) == ("8", "7")
    assert f"{node} (8 requested, 7 bound)" in ticket.summary


def test_one_claim_two_pods_reserve_is_one_gpu_from_the_first_pod_to_the_last() -> None:
    """gpu-test3: pods pod1 and pod2 name the ResourceClaim ``single-gpu``; the one GPU
    is bound once by dcgm-exporter (with both pods). Counted per pod it was 2 against 1 on
    each such node; here it is one GPU while either pod runs, none after."""
    c = Cluster()
    ns = "gpu-test3"
    nodes = [f"gpu-a100-node-{n:02d}" for n in range(1, 7)]
    for node in nodes:
        c.node(node, 0, capacity=0, alloc=0)
        device = slice_gpus(node, 1)[0]
        pods = [f"pod1-{node[-2:]}", f"pod2-{node[-2:]}"]
        for pod in pods:
            dra_pod(c, node, pod, 1, (shared_claim(),), namespace=ns)
        dra_bind(c, node, 2, device, pods, "single-gpu", ns)
        dcgm_bind(c, node, 30, device[1], device[2], pods, ns)
        dra_pod(c, node, pods[0], 1000, (shared_claim(),), namespace=ns, phase="Succeeded")
        dcgm_bind(c, node, 1030, device[1], device[2], pods[1:], ns)
    c.tick(3000)
    assert of_type(run(c.events, config(mismatch_threshold=0)), MISMATCH) == []
    # The GPU still counts while pod2 holds it: dcgm-exporter losing it is a disagreement.
    node = nodes[0]
    device = slice_gpus(node, 1)[0]
    dcgm_bind(c, node, 3000, device[1], device[2], [], ns)
    c.tick(4000)
    (ticket,) = of_type(run(c.events, config(mismatch_threshold=0)), MISMATCH)
    assert f"{node} (1 requested, 0 bound)" in ticket.summary
    # pod2 ends too: the claim holds nothing, and the counts agree again.
    dra_pod(c, node, f"pod2-{node[-2:]}", 4100, (shared_claim(),), namespace=ns, op="deleted")
    c.tick(6000)
    (ticket,) = of_type(run(c.events, config(mismatch_threshold=0)), MISMATCH)
    assert ticket.status == "resolved"


def test_claims_of_other_drivers_hold_no_gpu() -> None:
    """A pod with a GPU claim and a NIC claim holds one GPU; a pod with a NIC claim alone
    holds none, whatever its claim is called."""
    c = Cluster()
    node = "gpu-a100-node-01"
    c.node(node, 0, capacity=0, alloc=0)
    device = slice_gpus(node, 1)[0]
    dra_pod(c, node, "pod1", 1, (template_claim("pod1"), nic_claim("pod1")))
    dra_pod(c, node, "nic-only", 1, (nic_claim("nic-only"),))
    standalone_nic = msgspec.structs.replace(nic_claim("x"), template="", claim="rdma-shared")
    dra_pod(c, node, "nic-shared", 1, (standalone_nic,))
    dcgm_bind(c, node, 30, device[1], device[2], ["pod1"])
    c.tick(3000)
    assert of_type(run(c.events, config(mismatch_threshold=0)), MISMATCH) == []


def _cluster_incidents(revisions: list[Incident]) -> list[Incident]:
    return [r for r in revisions if r.node == ""]


def test_claims_allocated_and_released_as_pods_come_and_go_give_nothing() -> None:
    """Three hours of one-GPU jobs on a DRA node: each pod waits seconds for its claim,
    which is then allocated and reserved (bound by DRA at once, by dcgm-exporter at its
    next scrape) and released when the pod ends; the next pod takes the device."""
    c = Cluster()
    node = "gpu-a100-node-01"
    devices = slice_gpus(node, 4)
    c.node(node, 0, capacity=0, alloc=0)
    for k, device in enumerate(devices):
        for run_no in range(12):
            t = 10 + 900 * run_no + 7 * k
            pod = f"job-{k}-{run_no}"
            claim = f"{pod}-gpu-h6vrt"
            pending_dra_pod(c, pod, t + 1, (template_claim(pod, created=False),), "", created=t)
            dra_pod(c, node, pod, t + 3, (template_claim(pod),), phase="Pending")
            dra_bind(c, node, t + 3, device, [pod], claim)
            dra_pod(c, node, pod, t + 5, (template_claim(pod),))
            dcgm_bind(c, node, t + 30, device[1], device[2], [pod])
            end = t + 880
            dra_pod(c, node, pod, end, (template_claim(pod),), phase="Succeeded")
            dra_bind(c, node, end + 1, device, [], claim)
            dra_pod(c, node, pod, end + 2, (template_claim(pod),), phase="Succeeded", op="deleted")
            dcgm_bind(c, node, end + 15, device[1], device[2], [])
    c.tick(12 * 900 + 3600)
    assert _cluster_incidents(run(c.events, config(mismatch_threshold=0))) == []


def test_a_dra_plugin_restart_and_a_mixed_cluster_in_steady_state_give_nothing() -> None:
    """A device-plugin node (nvidia.com/gpu 8/8, pods requesting it, the kubelet's and
    dcgm-exporter's bindings) beside two DRA nodes (nvidia.com/gpu 0/0, pods holding GPUs
    by claim). The DRA plugin of one restarts with its dcgm-exporter: the slice goes to
    the node's key, and here the claims' DRA bindings are sent again as the slice returns,
    and dcgm-exporter reports the GPUs without pods for a minute."""
    c = Cluster()
    legacy = "gpu-node-dp-0"
    c.node(legacy, 0, capacity=8, alloc=8)
    for g in range(8):
        c.pod(legacy, f"dp-{g}", 1)
        uuid, bus = f"GPU-dp0-{g}", f"0000:{0x10 + g:02x}:00.0"
        dcgm_bind(c, legacy, 30, uuid, bus, [f"dp-{g}"], "ns")
        kubelet = c.bind(legacy, 2, uuid, bus, [f"dp-{g}"])
        c.events[-1] = msgspec.structs.replace(kubelet, source="pod-resources")
    for node in ("gpu-a100-node-01", "gpu-a100-node-02"):
        dra_node_running(c, node, 0, 4)
    node = "gpu-a100-node-01"
    devices = slice_gpus(node, 4)
    for _name, uuid, bus in devices:
        dcgm_bind(c, node, 3001, uuid, bus, [])
    for k, device in enumerate(devices):
        pod = f"worker-01-{k}"
        dra_bind(c, node, 3030, device, [pod], f"{pod}-gpu-h6vrt")
        dcgm_bind(c, node, 3060, device[1], device[2], [pod])
    for t in range(600, 14400, 600):  # hours of steady state: nodes and pods relisted
        c.node(legacy, t, capacity=8, alloc=8)
        for n in ("gpu-a100-node-01", "gpu-a100-node-02"):
            c.node(n, t, capacity=0, alloc=0)
    c.tick(14400)
    assert _cluster_incidents(run(c.events, config(mismatch_threshold=0))) == []


def test_a_lost_dra_node_is_not_a_dcgm_disagreement() -> None:
    """DRA nodes have no ``nvidia.com/gpu`` at all; the GPU operator's ``gpu.present``
    label makes them GPU nodes to the cluster key. Two go NotReady (the kubelet gone)
    and their pods are failed NodeLost while dcgm-exporter, unreachable, last said 8
    bound: the outage is gpu_node_not_ready's, not an allocation_mismatch."""
    c = Cluster()
    present = {"nvidia.com/gpu.present": "true"}
    nodes = ("gpu-a100-node-01", "gpu-a100-node-02")
    for node in nodes:
        dra_node_running(c, node, 0, 4)
        for k, ev in enumerate(c.events):
            if isinstance(ev, NodeEvent) and ev.node == node:
                c.events[k] = msgspec.structs.replace(
                    ev, capacity={}, allocatable={}, labels=present
                )
    for node in nodes:
        lost = c.node(node, 100, ready="Unknown", labels=present)
        c.events[-1] = msgspec.structs.replace(lost, capacity={}, allocatable={})
        for k in range(4):
            pod = f"worker-{node[-2:]}-{k}"
            dra_pod(c, node, pod, 400, (template_claim(pod),), phase="Failed")
    c.tick(5000)
    assert of_type(run(c.events), MISMATCH) == []


def gpu_slice(c: Cluster, node: str, t: float) -> ResourceSliceEvent:
    """The node's one slice of NVIDIA's DRA driver (pool = node name), its four GPUs."""
    ev = ResourceSliceEvent(
        id=f"k8s:uid-slice-{node}:{len(c.events) + 1}",
        cluster=c.name,
        time=at(t),
        node=node,
        name=f"{node}-gpu.nvidia.com-x7k2p",
        driver=GPU_CLASS,
        pool=node,
        devices=tuple(
            SliceDevice(name=name, uuid=uuid, pci_bus_id=bus, type="gpu")
            for name, uuid, bus in slice_gpus(node, 4)
        ),
    )
    c.events.append(ev)
    return ev


NFD_NVIDIA = {"feature.node.kubernetes.io/pci-10de.present": "true"}
"""Node Feature Discovery's mark of an NVIDIA PCI device, which NVIDIA's DRA driver chart
schedules its kubelet plugin on (tests/data/dra/SOURCES.md)."""


@pytest.mark.parametrize("mark", ["slice", "nfd"])
def test_a_lost_dra_node_no_operator_labels_is_not_a_dcgm_disagreement(mark: str) -> None:
    """NVIDIA's DRA driver with NFD and no GPU operator: no ``gpu.present`` label. Its GPU
    slice (or NFD's NVIDIA label) makes it a GPU node to the cluster key: lost, it is
    gpu_node_not_ready's outage, not an allocation_mismatch; deleted, the cluster key
    forgets its count (an autoscaled fleet's nodes come and go for months)."""
    c = Cluster()
    labels = NFD_NVIDIA if mark == "nfd" else {}
    nodes = ("gpu-a100-node-01", "gpu-a100-node-02")
    for node in nodes:
        if mark == "slice":
            gpu_slice(c, node, 0)
        dra_node_running(c, node, 0, 4)
        for k, ev in enumerate(c.events):
            if isinstance(ev, NodeEvent) and ev.node == node:
                c.events[k] = msgspec.structs.replace(
                    ev, capacity={}, allocatable={}, labels=labels
                )
    for node in nodes:
        lost = c.node(node, 100, ready="Unknown", labels=labels)
        c.events[-1] = msgspec.structs.replace(lost, capacity={}, allocatable={})
        for k in range(4):
            pod = f"worker-{node[-2:]}-{k}"
            dra_pod(c, node, pod, 400, (template_claim(pod),), phase="Failed")
    c.tick(5000)
    out = run(c.events)
    assert of_type(out, MISMATCH) == []
    assert sorted(i.node for i in of_type(out, "gpu_node_not_ready")) == list(nodes)

    for node in nodes:
        gone = c.node(node, 6000, ready="Unknown", labels=labels, op="deleted")
        c.events[-1] = msgspec.structs.replace(gone, capacity={}, allocatable={})
    correlator = Correlator(config())
    for ev in sorted(c.events, key=lambda e: e.time):
        feed(correlator, ev)
    correlator.flush()
    cluster = correlator.keys[c.name]
    assert isinstance(cluster, ClusterState)
    assert not set(nodes) & set(cluster.tallies), "a deleted node's count is dropped"
    assert not any(n in nodes for n, _ in cluster.placed.values())


def test_shared_claim_holds_survive_a_snapshot_and_restore() -> None:
    """A worker restored from its snapshot mid-stream (a claim two pods reserve, held by
    both) ends with the incident the uninterrupted one makes: the holds and each claim's
    holders and GPUs are in the cluster key's state, not in memory beside it."""
    c = Cluster()
    ns = "gpu-test3"
    node = "gpu-a100-node-01"
    device = slice_gpus(node, 1)[0]
    c.node(node, 0, capacity=0, alloc=0)
    for pod in ("pod1", "pod2"):
        dra_pod(c, node, pod, 1, (shared_claim(),), namespace=ns)
    dcgm_bind(c, node, 30, device[1], device[2], ["pod1", "pod2"], ns)
    c.tick(600)
    cut = len(c.events)
    dra_pod(c, node, "pod1", 1000, (shared_claim(),), namespace=ns, op="deleted")
    dcgm_bind(c, node, 1100, device[1], device[2], [], ns)  # dcgm-exporter loses pod2
    c.tick(3000)
    cfg = config(mismatch_threshold=0)
    whole = run(c.events, cfg)
    (ticket,) = of_type(whole, MISMATCH)
    assert f"{node} (1 requested, 0 bound)" in ticket.summary

    before = Correlator(cfg, track_dirty=True)
    for event in c.events[:cut]:
        feed(before, event)
    before.flush()
    after = Correlator(cfg)
    for _, state in before.take_dirty():
        after.restore(decode_state(encode_state(state)))
    resumed: list[Incident] = []
    for event in c.events[cut:]:
        resumed.extend(feed(after, event))
    resumed.extend(after.flush())
    assert [encode(i) for i in resumed] == [encode(i) for i in whole]


def test_a_dcgm_exporter_that_does_not_map_claims_is_not_a_disagreement() -> None:
    """dcgm-exporter ties claim-held GPUs to pods only with ``--kubernetes-enable-dra``
    (off by default): on gpu-a100-node-02 it reports the four GPUs without pods from its
    first scrape, as it does there forever. That is its configuration, not an outage: no
    ticket for it. On gpu-a100-node-01 it did tie them, then lost them: that is one."""
    c = Cluster()
    dra_node_running(c, "gpu-a100-node-01", 0, 4)
    blind = "gpu-a100-node-02"
    c.node(blind, 0, capacity=0, alloc=0)
    for k, device in enumerate(slice_gpus(blind, 4)):
        pod = f"worker-02-{k}"
        dra_pod(c, blind, pod, 1, (template_claim(pod),))
        dra_bind(c, blind, 2, device, [pod], f"{pod}-gpu-h6vrt")
        dcgm_bind(c, blind, 30, device[1], device[2], [])
    c.tick(3000)
    assert of_type(run(c.events, config(mismatch_threshold=0)), MISMATCH) == []
    for _name, uuid, bus in slice_gpus("gpu-a100-node-01", 4):
        dcgm_bind(c, "gpu-a100-node-01", 3000, uuid, bus, [])
    c.tick(5000)
    (ticket,) = of_type(run(c.events, config(mismatch_threshold=0)), MISMATCH)
    assert ticket.attributes["nodes"] == "gpu-a100-node-01"
    assert "gpu-a100-node-01 (4 requested, 0 bound)" in ticket.summary
