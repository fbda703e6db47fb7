"""``[writeback]``: the settings of ``gputriage writeback``, each declared once.

Pod and node Events are on by default (informational, least risk); node conditions and
taints are opt-in (``mark_nodes``), bounded by a breaker and a rate limit. The CLI's
options are generated from this struct (:mod:`gputriage.cli.options`). Only msgspec is
imported: every command loads the settings.

Traps: ``fault_status`` must differ from the healthy status the clear writes (checked);
``NoExecute`` evicts every pod without a toleration, so it is never the default.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from connectors.prometheus import MetricsAddr, MetricsPort
from connectors.settings import InCluster, Kubeconfig, KubeContext, check_kube_access
from schemas.wellknown import GPU_FAULT_TYPES, GPU_HEALTH_CONDITION

HARDWARE_TYPES: Final = (*GPU_FAULT_TYPES, "nvlink_domain_fault")
"""The incident types that say a node's GPU hardware is at fault: the node fault types
(:data:`~schemas.wellknown.GPU_FAULT_TYPES`, the fleet gauge's too) and the NVLink domain's
(its nodes' GPUs cannot reach each other); a node is marked only while one of them is open
at page severity."""

ConditionStatus = Literal["True", "False"]


class WritebackSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What ``gputriage writeback`` writes to Kubernetes, and its bounds."""

    cluster: Annotated[
        str,
        msgspec.Meta(
            max_length=253,
            description="Act only on incidents of this cluster (default: [connect.k8s] "
            "cluster; required with --mark-nodes).",
        ),
    ] = ""
    kubeconfig: Kubeconfig = None
    context: KubeContext = None
    in_cluster: InCluster = False
    pod_events: Annotated[
        bool, msgspec.Meta(description="Write an Event on each pod an incident names.")
    ] = True
    node_events: Annotated[
        bool, msgspec.Meta(description="Write an Event on the node of a node-level incident.")
    ] = True
    keep_events: Annotated[
        bool,
        msgspec.Meta(description="Keep an incident's pod Events after it resolves (else deleted)."),
    ] = False
    event_refresh_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=0,
            le=86_400,
            description="A revision that changes neither an Event's words nor its pods bumps "
            "the Events at most this often (0: every revision).",
        ),
    ] = 600.0
    mark_nodes: Annotated[
        bool,
        msgspec.Meta(
            description="Set a node condition while a page-level hardware incident is open."
        ),
    ] = False
    condition_type: Annotated[
        str,
        msgspec.Meta(
            min_length=1,
            max_length=316,
            pattern=r"^([a-z0-9.-]+/)?[A-Za-z0-9][-A-Za-z0-9_.]*$",
            description="The node condition's type (e.g. AcceleratedHardwareReady for "
            "Karpenter/EKS repair).",
        ),
    ] = GPU_HEALTH_CONDITION
    fault_status: Annotated[
        ConditionStatus,
        msgspec.Meta(
            description="The condition's status while a fault is open (True for NPD/NVSentinel-"
            "style types)."
        ),
    ] = "False"
    hardware_types: Annotated[
        tuple[str, ...],
        msgspec.Meta(
            description="Incident type that marks a node (page severity only).",
            extra={"option": "--hardware-type", "metavar": "TYPE"},
        ),
    ] = HARDWARE_TYPES
    taint: Annotated[
        Literal["", "NoSchedule", "NoExecute"],
        msgspec.Meta(
            description="Also taint marked nodes gputriage.io/gpu-fault with this effect "
            "(empty: no taint)."
        ),
    ] = ""
    max_marked_nodes: Annotated[
        int,
        msgspec.Meta(ge=0, le=100_000, description="Breaker: at most this many nodes marked."),
    ] = 10
    max_pool_fraction: Annotated[
        float,
        msgspec.Meta(
            ge=0, le=1, description="Breaker: at most this fraction of a node pool marked."
        ),
    ] = 0.2
    writes_per_second: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            le=10_000,
            description="API writes per second (sustained; Events and node marks each).",
        ),
    ] = 5.0
    write_burst: Annotated[
        int, msgspec.Meta(ge=1, le=10_000, description="API writes allowed in a burst.")
    ] = 10
    resync_seconds: Annotated[
        float,
        msgspec.Meta(
            gt=0,
            le=86_400,
            description="Reconcile the node marks this often (a failed clear, a mark removed "
            "by hand); a failed pass retries sooner, with backoff.",
        ),
    ] = 60.0
    dry_run: Annotated[
        bool, msgspec.Meta(description="Print each write (one line) and write nothing.")
    ] = False
    leader_election: Annotated[
        bool,
        msgspec.Meta(description="Only the holder of a coordination.k8s.io Lease writes."),
    ] = False
    lease_namespace: Annotated[
        str | None,
        msgspec.Meta(description="Namespace of the Lease (default: the pod's own, in-cluster)."),
    ] = None
    lease_name: Annotated[str, msgspec.Meta(min_length=1, description="Name of the Lease.")] = (
        "gputriage-writeback"
    )
    identity: Annotated[
        str | None,
        msgspec.Meta(
            description="This replica's name (Lease holder, Events' reportingInstance; "
            "default: $POD_NAME, else $HOSTNAME)."
        ),
    ] = None
    request_timeout_seconds: Annotated[
        float, msgspec.Meta(gt=0, le=600, description="Deadline of one API request.")
    ] = 10.0
    metrics_port: MetricsPort | None = 9471
    metrics_addr: MetricsAddr = "0.0.0.0"

    def __post_init__(self) -> None:
        check_kube_access(self.in_cluster, self.kubeconfig, self.context)
