"""The router: the cluster key gets a copy of a record only when what it reads changed.

Each test routes an object's history through one router, as one producer publishes it,
and checks which records also went to the cluster key. The property that no skipped copy
was news is the differential test's (tests/streams/core/test_differential.py: the same
incidents with a copy of every record).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from connectors.kafka.producer import EventProducer
from schemas.codec import AnyEvent
from schemas.events import NodeEvent, PodClaim, PodEvent, ResourceSliceEvent, SliceDevice, Taint
from schemas.keys import POD_RESOURCES, REFRESH_SECONDS, Router, correlation_key, is_copy
from schemas.topics import topic_layout
from schemas.types import Op
from tests.factories import Cluster, at, term

N = "gpu-node-01"


def copies(router: Router, *events: AnyEvent) -> list[bool]:
    """For each event, whether the router also sent the cluster key a copy of it."""
    out = []
    for event in events:
        routed = router.route(event)
        assert routed[0] is event
        out.append(len(routed) == 2)
    return out


def test_a_running_pod_is_copied_when_it_starts_and_ends_not_on_each_update() -> None:
    c = Cluster()
    router = Router()
    sent = copies(
        router,
        c.pod(N, "train-0", 0, phase="Pending", gpus=4),  # first sight on its node
        c.pod(N, "train-0", 10, gpus=4),  # running: holds 4 GPUs
        c.pod(N, "train-0", 20, gpus=4, restarts=1, last=term(19)),  # a restart: same
        c.pod(N, "train-0", 30, gpus=4, restarts=1, last=term(19)),  # a probe: same
        c.pod(N, "train-0", 40, gpus=4, phase="Succeeded"),  # holds none
        c.pod(N, "train-0", 41, gpus=4, phase="Succeeded", op="deleted"),
        c.pod(N, "train-0", 50, gpus=4),  # a successor of the same name: first sight
    )
    assert sent == [True, True, False, False, True, False, True]
    assert router.copies == 4
    assert router.skipped == 3


def test_a_pending_pod_is_the_cluster_keys_own_and_its_scheduling_is_copied() -> None:
    c = Cluster()
    router = Router()
    pending = c.pending("wait-0", 0)
    assert router.route(pending) == (pending,)
    assert correlation_key(pending) == c.name
    assert copies(router, c.pending("wait-0", 5)) == [False]
    # Its first record with a node tells the cluster key it left pending, even before
    # it runs; the next with the same placement does not.
    scheduled = c.pod(N, "wait-0", 9, phase="Pending")
    assert copies(router, scheduled, c.pod(N, "wait-0", 9.5, phase="Pending")) == [True, False]


def test_the_copy_is_slim_and_keeps_the_originals_identity() -> None:
    c = Cluster()
    pod = c.pod(N, "train-0", 0, gpus=2, restarts=3, last=term(-1))
    original, copy = Router().route(pod)
    assert isinstance(copy, PodEvent)
    assert is_copy(copy)
    assert not is_copy(original)
    assert (copy.id, copy.time, copy.node, copy.phase) == (pod.id, pod.time, N, "Running")
    assert copy.gpu_requests == pod.gpu_requests
    assert copy.containers == ()
    assert pod.containers
    assert correlation_key(copy) == c.name
    assert correlation_key(original) == f"{c.name}/{N}"


def test_a_node_is_copied_when_its_labels_readiness_or_taints_change() -> None:
    c = Cluster()
    router = Router()
    sharing = {"nvidia.com/gpu.sharing-strategy": "time-slicing"}
    removal = (Taint(key="karpenter.sh/disrupted", effect="NoSchedule"),)
    sent = copies(
        router,
        c.node(N, 0),
        c.node(N, 10),  # a heartbeat: nothing the cluster key reads moved
        c.node(N, 20, alloc=7),  # allocatable is the node key's business
        c.node(N, 30, alloc=7, ready="Unknown"),
        c.node(N, 40, alloc=7, ready="Unknown", labels=sharing),
        c.node(N, 50, alloc=7, ready="Unknown", labels=sharing, taints=removal),
        c.node(N, 60, alloc=7, ready="Unknown", labels=sharing, taints=removal, op="deleted"),
        c.node(N, 70),  # a new node of the same name: first sight
    )
    assert sent == [True, False, False, True, True, True, True, True]


def test_a_binding_is_copied_when_the_gpu_becomes_bound_or_free() -> None:
    c = Cluster()
    router = Router()
    gpu = ("GPU-0a", "0000:18:00.0")
    sent = copies(
        router,
        c.bind(N, 0, *gpu, []),  # first report of the GPU: the node is reported
        c.bind(N, 10, *gpu, ["train-0"]),
        c.bind(N, 20, *gpu, ["train-0"]),  # the same scrape again
        c.bind(N, 30, *gpu, ["train-1"]),  # another pod: still one bound GPU
        c.bind(N, 40, *gpu, []),
        c.bind(N, 50, "GPU-0b", "0000:2a:00.0", ["train-1"]),  # another GPU
    )
    assert sent == [True, True, False, False, True, True]


def test_bindings_the_cluster_key_does_not_read_are_never_copied() -> None:
    c = Cluster()
    router = Router()
    nvml = c.bind(N, 0, "GPU-0a", "0000:18:00.0", [], pods_known=False)
    kubelet = c.bind(N, 1, "GPU-0a", "0000:18:00.0", ["train-0"])
    kubelet = msgspec.structs.replace(kubelet, source=POD_RESOURCES)
    assert copies(router, nvml, kubelet) == [False, False]


def test_a_new_router_sends_every_objects_first_record_again() -> None:
    """A restarted producer remembers nothing: it sends each object once more, which is
    how a pod the cluster key still holds as pending is released after a restart."""
    c = Cluster()
    history: list[AnyEvent] = [
        c.pod(N, "train-0", 0, gpus=2),
        c.node(N, 1),
        c.bind(N, 2, "GPU-0a", "", ["x"]),
    ]
    first = Router()
    assert copies(first, *history) == [True, True, True]
    assert copies(first, *history) == [False, False, False]
    assert copies(Router(), *history) == [True, True, True]


def test_a_failed_send_forgets_what_the_router_sent() -> None:
    """A copy the router counts as sent may be lost when a send fails: the producer starts
    a new router, so the next record of each object goes to the cluster key again."""
    c = Cluster()
    pod = c.pod(N, "train-0", 0, gpus=2)
    producer = EventProducer({"bootstrap_servers": "127.0.0.1:9"}, topic_layout())
    assert copies(producer.router, pod) == [True]
    with pytest.raises(RuntimeError, match="not started"):
        asyncio.run(producer.send_many([c.pod(N, "train-0", 5, gpus=2)]))
    assert copies(producer.router, c.pod(N, "train-0", 9, gpus=2)) == [True]


def test_a_record_behind_the_newest_is_copied_and_then_forgotten() -> None:
    """The cluster key drops a copy that sorts behind its position (a relisted object
    stamped with its own older time): the router cannot know whether it was applied, so
    the object's next record is copied whatever it says."""
    c = Cluster()
    router = Router()
    sent = copies(
        router,
        c.pod(N, "train-0", 0, gpus=8),
        c.pod("gpu-node-02", "other", 1000, gpus=1),
        c.pod(N, "train-0", 900, gpus=8, phase="Succeeded"),  # behind: copied, forgotten
        c.pod(N, "train-0", 1100, gpus=8, phase="Succeeded", op="deleted"),  # so: copied
    )
    assert sent == [True, True, True, True]


def test_an_unchanged_object_is_copied_again_after_the_refresh_period() -> None:
    """A processor whose state was reset learns unchanged facts within REFRESH_SECONDS."""
    c = Cluster()
    router = Router()
    half = REFRESH_SECONDS / 2
    sent = copies(
        router,
        c.node(N, 0),
        c.node(N, half),
        c.node(N, REFRESH_SECONDS),  # a refresh
        c.node(N, REFRESH_SECONDS + half),
    )
    assert sent == [True, False, True, False]


def test_the_routers_memory_forgets_objects_not_seen_for_two_refresh_periods() -> None:
    c = Cluster()
    router = Router()
    for i in range(100):
        router.route(c.bind(f"gone-{i}", 0, f"GPU-{i}", "", ["x"]))
    assert len(router) == 100
    late = 2 * REFRESH_SECONDS + 1
    pods = [c.pod(N, f"p{i % 50}", late + i / 1e3) for i in range(1 << 16)]
    for pod in pods:
        router.route(pod)
    assert len(router) == 50  # the bindings of nodes long gone are forgotten


def test_a_pod_holding_gpus_by_claim_is_copied_and_again_when_its_claims_change() -> None:
    """A DRA pod requests no GPU resource: its claims make it a GPU pod. The copy keeps
    them (the cluster key counts their GPUs), and a change of them is news: the
    connector learns a claim's GPUs from the claim (or its template) after the pod."""
    c = Cluster()
    router = Router()
    unknown = PodClaim(name="gpu", claim="pod1-gpu-h6vrt", template="single-gpu")
    known = msgspec.structs.replace(unknown, gpus=1, device_class="gpu.nvidia.com")

    def claimed(t: float, claim: PodClaim, **kw: Any) -> PodEvent:
        pod = c.pod(N, "pod1", t, gpus=0, namespace="gpu-test1", **kw)
        return msgspec.structs.replace(pod, claims=(claim,))

    first = claimed(0, unknown)
    routed = router.route(first)
    assert len(routed) == 2
    copy = routed[1]
    assert isinstance(copy, PodEvent)
    assert copy.claims == (unknown,)
    assert copies(
        router,
        claimed(10, unknown),  # same
        claimed(20, known),  # its claim's GPUs are known now
        claimed(30, known, restarts=1, last=term(29)),  # a restart: same
        claimed(40, known, phase="Succeeded"),  # holds none
    ) == [False, True, False, True]


def test_a_monitoring_pod_is_never_copied_to_the_cluster_key() -> None:
    """The GPU operator's DRA dcgm-exporter claims every GPU with admin access: its pod has
    claims, yet holds no GPU a cluster rule may count, whatever its claims say."""
    c = Cluster()
    router = Router()
    claim = PodClaim(name="gpus", claim="dcgm-exporter-gpus", gpus=8, device_class="gpu.nvidia.com")
    workload = msgspec.structs.replace(c.pod(N, "train", 0, gpus=0), claims=(claim,))
    exporter = msgspec.structs.replace(
        workload, name="nvidia-dcgm-exporter-x7k2p", monitor="dcgm-exporter"
    )
    assert copies(router, workload, exporter) == [True, False]


def test_a_dra_node_without_gpu_capacity_is_a_gpu_node_by_the_operators_label() -> None:
    """No device plugin, no ``nvidia.com/gpu``: the GPU operator's ``gpu.present`` label
    says it is a GPU node, and the cluster key hears when it goes NotReady."""
    c = Cluster()
    router = Router()

    def dra_node(t: float, ready: str = "True", present: bool = True) -> NodeEvent:
        labels = {"nvidia.com/gpu.present": "true"} if present else {}
        node = c.node(N, t, ready=ready, labels=labels)
        return msgspec.structs.replace(node, capacity={}, allocatable={})

    assert copies(router, dra_node(0), dra_node(10), dra_node(20, "Unknown")) == [
        True,
        False,
        True,
    ]
    assert copies(Router(), dra_node(30, present=False)) == [False]


def _bare_dra_node(
    c: Cluster, t: float, labels: dict[str, str] | None = None, **kw: Any
) -> NodeEvent:
    """A DRA node's record with no GPU capacity and, unless ``labels``, no GPU label (NFD
    and NVIDIA's DRA driver, no GPU operator)."""
    node = c.node(N, t, labels=labels or {}, **kw)
    return msgspec.structs.replace(node, capacity={}, allocatable={})


def _gpu_slice(c: Cluster, t: float, node: str = N, op: Op = "modified") -> ResourceSliceEvent:
    """The one slice of NVIDIA's DRA driver on ``node`` (tests/data/dra's shape)."""
    return ResourceSliceEvent(
        id=f"k8s:uid-slice-{node}:{int(t) + 1}",
        cluster=c.name,
        time=at(t),
        node=node,
        op=op,
        name=f"{node}-gpu.nvidia.com-x7k2p",
        driver="gpu.nvidia.com",
        pool=node,
        devices=(SliceDevice(name="gpu-0", uuid="GPU-3f5e8a12-6b4c-4d8e-9a17-0c2b7e91d4a6"),),
    )


def test_a_dra_node_a_gpu_slice_names_is_a_gpu_node_until_it_is_deleted() -> None:
    """No capacity, no label: the slice of a GPU driver says it is a GPU node (as the
    connector's GPU filter keeps it), and its NotReady and deletion reach the cluster key.
    A slice deleted (a DRA plugin restart) does not unmake it; the node's deletion does."""
    c = Cluster()
    router = Router()
    assert copies(router, _bare_dra_node(c, 0)) == [False], "nothing says GPU yet"
    assert copies(router, _gpu_slice(c, 1)) == [False], "a slice is the node key's alone"
    assert copies(
        router,
        _bare_dra_node(c, 10),
        _bare_dra_node(c, 20),
        _gpu_slice(c, 25, op="deleted"),
        _bare_dra_node(c, 30, ready="Unknown"),
        _bare_dra_node(c, 40, ready="Unknown", op="deleted"),
        _bare_dra_node(c, 50),  # a new node of the same name, no slice yet
    ) == [True, False, False, True, True, False]


def test_nfd_marks_a_gpu_node_and_the_operators_false_does_not() -> None:
    """Node Feature Discovery's NVIDIA PCI label (10de: NVIDIA's vendor id) is what
    NVIDIA's DRA driver chart schedules on; the GPU operator writes ``gpu.present=false``
    on a node whose GPUs left."""
    c = Cluster()
    nfd = {"feature.node.kubernetes.io/pci-10de.present": "true"}
    classed = {"feature.node.kubernetes.io/pci-0302_10de.present": "true"}
    gone = {"nvidia.com/gpu.present": "false"}
    assert copies(Router(), _bare_dra_node(c, 0, nfd)) == [True]
    assert copies(Router(), _bare_dra_node(c, 0, classed)) == [True]
    assert copies(Router(), _bare_dra_node(c, 0, gone)) == [False]
