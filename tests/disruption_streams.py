"""Streams of planned disruption for the core's tests: a GPU node taken away on purpose.

Each builder writes, on a :class:`tests.factories.Cluster`, the records a real cluster
shows: the taint the disrupting component sets (its source names it), the Events it
writes with their exact reason and message, the pods' deletion (deletionTimestamp, the
SIGTERM exit, gone), the device plugin leaving with the node (allocatable to 0), and the
node's end. Strings are the components' own (see :mod:`streams.core.rules.disruption`
for the source file of each).
"""

from __future__ import annotations

from schemas.codec import AnyEvent
from schemas.events import Taint
from tests.factories import Cluster, term

KARPENTER_V1 = (Taint(key="karpenter.sh/disrupted", effect="NoSchedule"),)
KARPENTER_V0 = (Taint(key="karpenter.sh/disruption", value="disrupting", effect="NoSchedule"),)
CORDON = (Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule"),)
SOFT_SCALE_DOWN = (
    Taint(
        key="DeletionCandidateOfClusterAutoscaler", value="1733457600", effect="PreferNoSchedule"
    ),
)
SCALE_DOWN = (
    *SOFT_SCALE_DOWN,
    Taint(key="ToBeDeletedByClusterAutoscaler", value="1733458200", effect="NoSchedule"),
)
NODE = "ip-10-0-12-34.ec2.internal"
PODS = tuple(f"train-{k}" for k in range(4))


def timeline(c: Cluster) -> list[AnyEvent]:
    """The scenario's records in event-time order (the builders write each object's
    history at once; a stable sort keeps records of one instant in writing order)."""
    return sorted(c.events, key=lambda e: e.time)


def gpu_node(c: Cluster, node: str = NODE, pods: tuple[str, ...] = PODS) -> None:
    """A healthy 8-GPU node running ``pods`` (2 GPUs each), dcgm-exporter binding them."""
    c.node(node, 0)
    for k, pod in enumerate(pods):
        c.pod(node, pod, 1, gpus=2)
        for g in (2 * k, 2 * k + 1):
            c.bind(node, 2, f"GPU-{g:08x}", f"0000:{0x18 + g:02x}:00.0", [pod])


def unbound(c: Cluster, node: str, t: float, pods: tuple[str, ...] = PODS) -> None:
    """dcgm-exporter's next scrape after ``pods`` went: their GPUs hold no pod."""
    for k in range(len(pods)):
        for g in (2 * k, 2 * k + 1):
            c.bind(node, t, f"GPU-{g:08x}", f"0000:{0x18 + g:02x}:00.0", [])


def deleted(c: Cluster, node: str, pod: str, t: float, *, code: int = 143) -> None:
    """The pod deleted at ``t`` (an eviction through the API): deletionTimestamp, its
    container's exit to SIGTERM (``code``: 1 for a trainer that handles it), then gone."""
    c.pod(node, pod, t, gpus=2, deleted_at=t)
    c.pod(
        node, pod, t + 20, gpus=2, phase="Failed", deleted_at=t, current=term(t + 18, "Error", code)
    )
    c.pod(node, pod, t + 21, gpus=2, phase="Failed", deleted_at=t, op="deleted")


def karpenter_consolidation(
    c: Cluster,
    t: float,
    *,
    node: str = NODE,
    pods: tuple[str, ...] = PODS,
    taints: tuple[Taint, ...] = KARPENTER_V1,
    evicted: str = "Evicted pod: Underutilized",
    end: float = 300.0,
) -> None:
    """Karpenter consolidates ``node`` at ``t``: taint, ``DisruptionTerminating``, one
    ``Evicted`` Event per pod (``evicted``: the message; ``Evicted pod`` before v1.2),
    the pods deleted (one trainer exits 1 on SIGTERM), the device plugin gone with the
    node (allocatable 0), the kubelet gone (Unknown), then the node deleted at ``t + end``."""
    c.node(node, t, taints=taints)
    c.kube(
        node,
        t + 1,
        "DisruptionTerminating",
        kind="Node",
        name=node,
        namespace="",
        message="Disrupting Node: Underutilized",
        warning=False,
        source="karpenter",
    )
    for k, pod in enumerate(pods):
        c.kube(
            node, t + 5 + k, "Evicted", name=pod, message=evicted, warning=False, source="karpenter"
        )
        deleted(c, node, pod, t + 5 + k, code=1 if k == 0 else 143)
    c.node(node, t + 90, alloc=0, taints=taints)
    c.node(node, t + end - 60, alloc=0, ready="Unknown", taints=taints)
    c.node(node, t + end, alloc=0, ready="Unknown", taints=taints, op="deleted")


def kubectl_drain(c: Cluster, t: float, *, node: str = NODE, pods: tuple[str, ...] = PODS) -> None:
    """``kubectl drain`` for a GPU driver upgrade: cordon, evictions through the API (the
    kubelet's ``Killing`` Events, no ``Evicted``), the driver and device plugin down six
    minutes (allocatable 0), back, then uncordon."""
    c.node(node, t, taints=CORDON)
    for k, pod in enumerate(pods):
        c.kube(
            node,
            t + 2 + k,
            "Killing",
            name=pod,
            message="Stopping container main",
            warning=False,
            source="kubelet",
        )
        deleted(c, node, pod, t + 2 + k, code=1 if k == 0 else 143)
    unbound(c, node, t + 45, pods)
    c.node(node, t + 60, alloc=0, taints=CORDON)
    c.node(node, t + 420, taints=CORDON)
    c.node(node, t + 480)


def autoscaler_scale_down(
    c: Cluster, t: float, *, node: str = NODE, pods: tuple[str, ...] = PODS
) -> None:
    """cluster-autoscaler scales an underused node down: the soft taint ten minutes
    before, then ``ToBeDeletedByClusterAutoscaler``, its ``ScaleDown`` Events, the drain,
    the device plugin gone with the node, and the node deleted."""
    c.node(node, t - 600, taints=SOFT_SCALE_DOWN)
    c.node(node, t, taints=SCALE_DOWN)
    c.kube(
        node,
        t + 1,
        "ScaleDown",
        kind="Node",
        name=node,
        namespace="",
        message="marked the node as toBeDeleted/unschedulable",
        warning=False,
        source="cluster-autoscaler",
    )
    for k, pod in enumerate(pods):
        c.kube(
            node,
            t + 2 + k,
            "ScaleDown",
            name=pod,
            message="deleting pod for node scale down",
            warning=False,
            source="cluster-autoscaler",
        )
        deleted(c, node, pod, t + 2 + k, code=1)
    c.node(node, t + 60, alloc=0, taints=SCALE_DOWN)
    c.node(node, t + 200, alloc=0, ready="Unknown", taints=SCALE_DOWN)
    c.node(node, t + 400, alloc=0, ready="Unknown", taints=SCALE_DOWN, op="deleted")


def plugin_restart(c: Cluster, t: float, *, node: str = NODE) -> None:
    """The device plugin restarts (an upgrade): its GPUs de-register and re-register,
    allocatable 8 -> 0 -> 8 within a minute, while the pods keep running."""
    c.node(node, t, alloc=0)
    c.node(node, t + 40)
