"""The node labels, taints and kubelet words that both the router and the core's rules read.

Why here: the router (:class:`schemas.keys.Router`) copies a node to the cluster key only
when what a cluster rule reads of it changes, so it must know exactly the names those
rules read; the rules live in ``streams.core``, which the schemas may not import. Declared
once here, both sides read the same names.
"""

from __future__ import annotations

from typing import Final

CLIQUE_LABEL: Final = "nvidia.com/gpu.clique"
"""GPU feature discovery's NVLink domain of a node (``<cluster uuid>.<clique id>``)."""
GPU_PRESENT_LABEL: Final = "nvidia.com/gpu.present"
"""The GPU operator's mark of a node with an NVIDIA GPU, whatever advertises it: a DRA node
has no ``nvidia.com/gpu`` capacity (no device plugin), and is a GPU node by this. The
operator writes ``"false"`` on a node whose GPUs left: only ``"true"`` says GPU."""
NFD_GPU_LABELS: Final = (
    "feature.node.kubernetes.io/pci-10de.present",
    "feature.node.kubernetes.io/pci-0302_10de.present",
    "feature.node.kubernetes.io/pci-0300_10de.present",
)
"""Node Feature Discovery's marks of an NVIDIA PCI display or 3D controller (10de is
NVIDIA's PCI vendor id; the class-qualified forms are NFD's default label fields, the
vendor-only one the GPU operator's configuration). The GPU operator labels exactly these
nodes ``gpu.present=true``, and NVIDIA's DRA driver chart schedules its kubelet plugin on
them first: a cluster with NFD and the DRA driver but no operator has GPU nodes that no
other label marks. Citations: tests/data/dra/SOURCES.md."""
SHARING_LABEL: Final = "nvidia.com/gpu.sharing-strategy"
"""The device plugin's sharing strategy (``time-slicing``, ``mps``, ``none``)."""
REPLICAS_LABEL: Final = "nvidia.com/gpu.replicas"
"""How many pods share one GPU under the device plugin's sharing (``1``: none)."""

KARPENTER_DISRUPTED: Final = "karpenter.sh/disrupted"
"""Karpenter v1's NoSchedule taint on a node it disrupts."""
KARPENTER_DISRUPTION: Final = "karpenter.sh/disruption"
"""Karpenter v0.32-v0.37's taint key; its value ``disrupting`` marks a disrupted node."""
AUTOSCALER_DELETING: Final = "ToBeDeletedByClusterAutoscaler"
"""cluster-autoscaler's NoSchedule taint on a node it scales down (before the drain)."""
OUT_OF_SERVICE: Final = "node.kubernetes.io/out-of-service"
"""An administrator's mark of a node shut down for good (non-graceful shutdown)."""

REMOVAL_TAINTS: Final = frozenset(
    (KARPENTER_DISRUPTED, KARPENTER_DISRUPTION, AUTOSCALER_DELETING, OUT_OF_SERVICE)
)
"""The taints that can say a node is being removed, not merely cordoned
(``streams.core.rules.disruption`` words each; ``karpenter.sh/disruption`` only with the
value ``disrupting``). A cordon or a health controller's taint is not one of them."""

POOL_LABELS: Final = (
    "karpenter.sh/nodepool",
    "eks.amazonaws.com/nodegroup",
    "cloud.google.com/gke-nodepool",
    "kubernetes.azure.com/agentpool",
    "agentpool",
    "alpha.eksctl.io/nodegroup-name",
)
"""The labels that name a node's pool, first present wins: Karpenter's NodePool, an EKS
managed node group, a GKE node pool, an AKS agent pool (both spellings), an eksctl group.
The fleet view groups GPUs and incidents by it; a node with none is in pool ``""``."""
PRODUCT_LABEL: Final = "nvidia.com/gpu.product"
"""GPU feature discovery's product name (``NVIDIA-H100-80GB-HBM3``)."""

GPU_HEALTH_CONDITION: Final = "GPUHealthy"
"""The node condition ``gputriage writeback`` sets by default (opt-in): ``True`` while no
page-level GPU hardware incident is open on the node, ``False`` while one is (the polarity
of EKS's ``AcceleratedHardwareReady``, which repair systems read); the core's
``remediation_stalled`` reads it as a mark like any other tool's."""

GPU_FAULT_TYPES: Final = (
    "device_unhealthy_eviction",
    "gpu_degraded",
    "xid_repeat",
    "gpu_fault_crash_loop",
)
"""The node incident types that say a GPU itself is faulty: a page of these takes the
GPUs it names out of service (one that names none, every GPU of its node: which GPU could
not be told). The fleet gauge and ``gputriage status`` count by it; ``gputriage
writeback`` marks nodes for these and the fabric's ``nvlink_domain_fault``, which is
cluster-scoped and says the NVLink fabric, not a GPU, is at fault."""

MONITOR_ROLES: Final = ("dcgm-exporter", "device-plugin", "dra-plugin", "node-agent")
"""The GPU monitoring components whose pods the k8s connector publishes
(:attr:`schemas.events.PodEvent.monitor`): without them running the node is blind, or
its GPUs are not advertised."""
SOURCE_FAMILIES: Final = ("kmsg", "journal", "dcgm", "nvml", "pod-resources")
"""The node sources whose heartbeats say they are alive (:attr:`schemas.events.Tick.source`)."""

SHUTTING_DOWN: Final = "node is shutting down"
"""The kubelet's Ready message during a graceful node shutdown (compared lower-cased)."""


def labelled_gpu_node(labels: dict[str, str]) -> bool:
    """Do a node's labels say it has an NVIDIA GPU, whatever advertises it (the GPU
    operator's ``gpu.present=true``, or NFD's PCI label)? The router and the k8s
    connector's GPU filter decide a GPU node by this one test, so the cluster key hears
    of every node the connector keeps."""
    if labels.get(GPU_PRESENT_LABEL) == "true":
        return True
    return any(labels.get(name) == "true" for name in NFD_GPU_LABELS)
