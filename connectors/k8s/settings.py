"""``[connect.k8s]``: the settings of ``gputriage connect k8s``, each declared once.

The CLI's options are generated from this struct (:mod:`gputriage.cli.options`): a
field's description is its help text, its ``Meta`` range the option's. Only msgspec
is imported: every command loads the settings.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from connectors.prometheus import MetricsPort
from connectors.publish import HEARTBEAT_SECONDS
from connectors.settings import (
    GPU_DEVICE_CLASSES,
    GPU_DRIVERS,
    MIG_PREFIXES,
    Brokers,
    BufferSize,
    Cluster,
    GpuDeviceClasses,
    GpuDrivers,
    GpuResourcePrefixes,
    GpuResources,
    HeartbeatSeconds,
    InCluster,
    Kubeconfig,
    KubeContext,
    SilenceTimeoutSeconds,
    check_kube_access,
)

GPU_RESOURCES = ("nvidia.com/gpu",)
"""The extended resources counted as GPUs unless told otherwise."""
GPU_PREFIXES = MIG_PREFIXES


class K8sSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What ``connect k8s`` watches (pods, nodes, Events, DRA objects) and how."""

    cluster: Cluster = None
    namespace: Annotated[
        str | None,
        msgspec.Meta(description="Watch pods and Events of one namespace (default: all)."),
    ] = None
    kubeconfig: Kubeconfig = None
    context: KubeContext = None
    in_cluster: InCluster = False
    keep_all: Annotated[
        bool,
        msgspec.Meta(
            description="Keep every pod, node and Event, not only GPU ones and the Events "
            "involving them."
        ),
    ] = False
    resources: GpuResources = GPU_RESOURCES
    resource_prefixes: GpuResourcePrefixes = GPU_PREFIXES
    gpu_drivers: GpuDrivers = GPU_DRIVERS
    gpu_device_classes: GpuDeviceClasses = GPU_DEVICE_CLASSES
    brokers: Brokers = None
    metrics_port: MetricsPort | None = 9466
    heartbeat_seconds: HeartbeatSeconds = HEARTBEAT_SECONDS
    buffer_size: Annotated[
        BufferSize,
        msgspec.Meta(
            description="Events held while the broker is slow or down; then the watch waits."
        ),
    ] = 10_000
    silence_timeout_seconds: Annotated[
        SilenceTimeoutSeconds,
        msgspec.Meta(
            description="Reconnect a watch that sent nothing (not even a bookmark) for this many "
            "seconds."
        ),
    ] = 300.0
    leader_election: Annotated[
        bool,
        msgspec.Meta(
            description="Only the holder of a coordination.k8s.io Lease works "
            "(run several replicas)."
        ),
    ] = False
    lease_namespace: Annotated[
        str | None,
        msgspec.Meta(description="Namespace of the Lease (default: the pod's own, in-cluster)."),
    ] = None
    lease_name: Annotated[str, msgspec.Meta(description="Name of the Lease.")] = (
        "gputriage-connect-k8s"
    )
    identity: Annotated[
        str | None,
        msgspec.Meta(description="This replica's name in the Lease (default: $HOSTNAME_pid)."),
    ] = None

    def __post_init__(self) -> None:
        check_kube_access(self.in_cluster, self.kubeconfig, self.context)
