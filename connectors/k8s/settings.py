"""``[connect.k8s]``: the settings of ``gputriage connect k8s``, each declared once.

The CLI's options are generated from this struct (:mod:`gputriage.cli.options`): a
field's description is its help text, its ``Meta`` range the option's. Only msgspec
is imported: every command loads the settings.
"""

from __future__ import annotations

from typing import Annotated, Final

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

MONITOR_ROLE_NAMES: Final = ("dcgm-exporter", "device-plugin", "dra-plugin", "node-agent")
""":data:`schemas.wellknown.MONITOR_ROLES`, repeated here because this module imports only
msgspec (a test holds the two equal)."""

MONITOR_SELECTORS: Final = (
    "dcgm-exporter:app=nvidia-dcgm-exporter",
    "dcgm-exporter:app=nvidia-dcgm-exporter-dra",
    "dcgm-exporter:app.kubernetes.io/name=dcgm-exporter",
    "device-plugin:app=nvidia-device-plugin-daemonset",
    "device-plugin:app.kubernetes.io/name=nvidia-device-plugin",
    "dra-plugin:app=nvidia-dra-driver-kubelet-plugin",
    "dra-plugin:dra-driver-nvidia-gpu-component=kubelet-plugin",
    "dra-plugin:nvidia-dra-driver-gpu-component=kubelet-plugin",
    "node-agent:app.kubernetes.io/name=gputriage,app.kubernetes.io/component=node-agents",
    "node-agent:app.kubernetes.io/name=gputriage,app.kubernetes.io/component=gpu-agents",
)
"""The pod labels of the GPU monitoring components, ``ROLE:KEY=VALUE[,KEY=VALUE...]`` (every
pair must match; the first entry that matches names the role). The GPU operator's
dcgm-exporter (plain and DRA), device plugin and DRA kubelet plugin; the standalone Helm
charts of dcgm-exporter, k8s-device-plugin and the DRA driver (its current and its legacy
component label); our own node agents (deploy/base/node-agents.yaml). Sources:
tests/data/monitors/SOURCES.md. Trap: the k8s-device-plugin chart gives its GPU feature
discovery and MPS daemon pods the device plugin's labels, so they read as ``device-plugin``."""

MonitorSelector = tuple[str, tuple[tuple[str, str], ...]]
"""A role and the label pairs a pod must all carry to be that role's."""


def parse_monitor_selectors(entries: tuple[str, ...]) -> tuple[MonitorSelector, ...]:
    """``ROLE:KEY=VALUE[,KEY=VALUE...]`` entries parsed; ``ValueError`` names the bad one."""
    parsed: list[MonitorSelector] = []
    for entry in entries:
        role, colon, labels = entry.partition(":")
        if not colon or role not in MONITOR_ROLE_NAMES:
            roles = ", ".join(MONITOR_ROLE_NAMES)
            raise ValueError(f"{entry!r} does not start with a role ({roles}) and ':'")
        pairs: list[tuple[str, str]] = []
        for pair in labels.split(","):
            key, equals, value = (part.strip() for part in pair.partition("="))
            if not equals or not key:
                raise ValueError(f"{entry!r}: {pair!r} is not KEY=VALUE")
            pairs.append((key, value))
        parsed.append((role, tuple(pairs)))
    return tuple(parsed)


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
    monitor_selectors: Annotated[
        tuple[str, ...],
        msgspec.Meta(
            description="Labels of a GPU monitoring pod, published with its role although it "
            "holds no GPU: ROLE:KEY=VALUE[,KEY=VALUE...] (roles: dcgm-exporter, device-plugin, "
            "dra-plugin, node-agent).",
            extra={"option": "--monitor-selector", "metavar": "ROLE:LABELS"},
        ),
    ] = MONITOR_SELECTORS
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
        try:
            parse_monitor_selectors(self.monitor_selectors)
        except ValueError as exc:
            raise ValueError(f"monitor_selectors: {exc}") from None
