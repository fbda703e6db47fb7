"""``[connect.autoscaler]``: the settings of ``gputriage connect autoscaler``, declared once.

The CLI's options are generated from this struct (:mod:`gputriage.cli.options`).

Trap: ``format = "karpenter"`` is also a preset (:meth:`AutoscalerSettings.preset`):
the selector and the status ConfigMap then default to Karpenter's, but only where they
were left at cluster-autoscaler's defaults; a value given for them wins.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from connectors.prometheus import MetricsPort
from connectors.publish import HEARTBEAT_SECONDS
from connectors.settings import (
    Brokers,
    BufferSize,
    Cluster,
    HeartbeatSeconds,
    InCluster,
    Kubeconfig,
    KubeContext,
    SilenceTimeoutSeconds,
    check_kube_access,
)

KARPENTER_SELECTOR: Final = "app.kubernetes.io/name=karpenter"
"""The label of the Karpenter chart's pods: ``format = "karpenter"``'s default selector."""


class AutoscalerSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which autoscaler pods ``connect autoscaler`` follows, and how."""

    cluster: Cluster = None
    namespace: Annotated[str, msgspec.Meta(description="Namespace of the autoscaler's pods.")] = (
        "kube-system"
    )
    selector: Annotated[
        str,
        msgspec.Meta(
            description="Label selector of the autoscaler's pods (Karpenter: "
            f"{KARPENTER_SELECTOR}).",
            extra={"metavar": "LABELS"},
        ),
    ] = "app=cluster-autoscaler"
    container: Annotated[
        str,
        msgspec.Meta(description="The container to follow (default: each pod's first container)."),
    ] = ""
    format: Annotated[
        Literal["auto", "klog", "karpenter"],
        msgspec.Meta(
            description="cluster-autoscaler's klog, Karpenter's JSON/console lines, or per line by "
            "content. karpenter is also a preset: selector app.kubernetes.io/name=karpenter and "
            "no status ConfigMap, unless given."
        ),
    ] = "auto"
    cloud: Annotated[
        Literal["", "aws", "gce", "azure"],
        msgspec.Meta(description="The cloud to record when a line shows none."),
    ] = ""
    kubeconfig: Kubeconfig = None
    context: KubeContext = None
    in_cluster: InCluster = False
    state_path: Annotated[
        str | None,
        msgspec.Meta(
            description="Keep each followed container's last line here, so a restart resumes "
            "after it (without one, a restart reads each container's log from its start).",
            extra={"metavar": "FILE", "path": {"dir_okay": False}},
        ),
    ] = None
    status_configmap: Annotated[
        str,
        msgspec.Meta(
            description="Watch this status ConfigMap in the namespace too ('' for none: Karpenter "
            "has none).",
            extra={"metavar": "NAME"},
        ),
    ] = "cluster-autoscaler-status"
    brokers: Brokers = None
    metrics_port: MetricsPort | None = 9468
    heartbeat_seconds: HeartbeatSeconds = HEARTBEAT_SECONDS
    buffer_size: Annotated[
        BufferSize,
        msgspec.Meta(
            description="Lines held while the broker is slow or down; then the log streams wait."
        ),
    ] = 10_000
    poll_interval_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=0.1,
            le=3600,
            description="Seconds between listings of the pods (new replicas, restarts, deletions).",
        ),
    ] = 10.0
    silence_timeout_seconds: Annotated[
        SilenceTimeoutSeconds,
        msgspec.Meta(description="Reconnect a log stream that sent nothing for this many seconds."),
    ] = 300.0

    def __post_init__(self) -> None:
        check_kube_access(self.in_cluster, self.kubeconfig, self.context)

    def preset(self) -> AutoscalerSettings:
        """These settings with the Karpenter preset applied where ``format`` asks for it."""
        if self.format != "karpenter":
            return self
        plain = AutoscalerSettings()
        return msgspec.structs.replace(
            self,
            selector=KARPENTER_SELECTOR if self.selector == plain.selector else self.selector,
            status_configmap=""  # Karpenter writes no status ConfigMap
            if self.status_configmap == plain.status_configmap
            else self.status_configmap,
        )
