"""The simulated autoscaler: its node groups and its records, as the connectors make them.

Records are never built here: a cluster-autoscaler klog line or a Karpenter JSON line is
written as the autoscaler writes it and read by the connector's own parser
(:func:`connectors.autoscaler.lines.parse_line`), and an autoscaler Kubernetes Event
becomes both its ``k8s_event.v1`` and the ``autoscaler.v1`` its ``derive`` hook adds. So the
stream holds what the connectors would publish, and a parser change shows in it. The
lines follow real ones (cited in ``tests/data/autoscaler/SOURCES.md``); the timings follow
the cluster-autoscaler FAQ (10 s scan, 5 min back-off doubling to 30 min).

Trap: a line that states no fact (the parser returns nothing) is a bug in the story, so
:func:`klog_records` raises instead of emitting nothing.
docs/replay.md, design notes: the simulated autoscaler.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from connectors.autoscaler.kube_events import derive
from connectors.autoscaler.lines import LineContext, parse_line
from gputriage.simulate.model import Cluster, NodeGroup
from schemas import codec
from schemas.events import AutoscalerEvent, KubeEvent

INSTANCE_TYPE = "node.kubernetes.io/instance-type"
SCAN_INTERVAL = 10.0
"""cluster-autoscaler's ``--scan-interval`` default (seconds)."""
BACKOFF_INITIAL = 300.0
"""``--initial-node-group-backoff-duration`` default (seconds); doubles per failure."""
BACKOFF_MAX = 1800.0
"""``--max-node-group-backoff-duration`` default (seconds)."""

CA_POD = "kube-system/cluster-autoscaler-6d9c8b7f5-x7k2p"
"""The autoscaler pod whose log the connector follows (part of every record's id)."""

QUOTA = (
    "VcpuLimitExceeded",
    "Launching a new EC2 instance.  Status Reason: Could not launch On-Demand Instances. "
    "VcpuLimitExceeded - You have requested more vCPU capacity than your current vCPU "
    "limit of {limit} allows for the instance bucket that the specified instance type "
    "belongs to. Please visit http://aws.amazon.com/contact-us/ec2-request to request an "
    "adjustment to this limit. Launching EC2 instance failed.",
)
CAPACITY = (
    "InsufficientInstanceCapacity",
    "Launching a new EC2 instance.  Status Reason: Could not launch On-Demand Instances. "
    "InsufficientInstanceCapacity - We currently do not have sufficient {itype} capacity "
    "in the Availability Zone you requested ({zone}). Our system will be working on "
    "provisioning additional capacity. Launching EC2 instance failed.",
)
"""(code, description) of the ASG failures: a vCPU quota (EC2's message, as quoted in
kubernetes/kops#15778) and a zone without capacity (a stockout)."""


def group_name(cluster: str, instance_type: str) -> str:
    """An EKS managed node group's ASG name: ``eks-gpu-p5-48xlarge-<uuid-ish>``, derived
    from the cluster and type without the rng (the fleet's bytes do not depend on it)."""
    digest = hashlib.sha256(f"{cluster}/{instance_type}".encode()).hexdigest()
    kind = instance_type.replace(".", "-")
    return f"eks-gpu-{kind}-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:28]}"


def node_groups(cluster: Cluster, instance_types: list[str]) -> list[NodeGroup]:
    """One group per GPU instance type the cluster runs, sized by its nodes."""
    groups = []
    for itype in instance_types:
        size = sum(
            1 for n in cluster.nodes if n.labels["node.kubernetes.io/instance-type"] == itype
        )
        groups.append(NodeGroup(group_name(cluster.name, itype), itype, size, max(size * 2, 16)))
    return groups


def klog_records(
    cluster: Cluster, at: datetime, where: str, message: str, severity: str = "I"
) -> tuple[AutoscalerEvent, ...]:
    """The records the connector reads in one cluster-autoscaler klog line at ``at``."""
    stamp = at.strftime("%m%d %H:%M:%S") + f".{at.microsecond:06d}"
    return _parse(cluster, f"{severity}{stamp}       1 {where}] {message}", "klog", at)


def karpenter_records(
    cluster: Cluster, at: datetime, record: dict[str, object]
) -> tuple[AutoscalerEvent, ...]:
    """The records the connector reads in one Karpenter JSON log line at ``at``."""
    stamp = at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"
    line = codec.dumps({"level": "ERROR", "time": stamp, **record}).decode()
    return _parse(cluster, line, "karpenter", at)


def _parse(cluster: Cluster, line: str, fmt: str, at: datetime) -> tuple[AutoscalerEvent, ...]:
    cluster.log_lines += 1
    ctx = LineContext(
        cluster=cluster.name,
        reference=at,  # klog has no year: the line's own moment gives it
        source=CA_POD if fmt == "klog" else "kube-system/karpenter-5c6d7b9f4-q8m2n",
        cloud="aws",
        fmt=fmt,  # type: ignore[arg-type]
    )
    records = parse_line(line, ctx, cluster.log_lines)
    if isinstance(records, codec.RecordError) or not records:
        raise ValueError(f"the autoscaler parser reads no record in {line!r}: {records!r}")
    return records


def derived(event: KubeEvent) -> tuple[AutoscalerEvent, ...]:
    """What the k8s connector adds after an autoscaler's Event (its ``derive`` hook)."""
    return derive(event)


def go_time(at: datetime) -> str:
    """A time as Go's ``time.Time.String()`` prints it ("Disabling scale-up ... until T")."""
    return at.strftime("%Y-%m-%d %H:%M:%S") + f".{at.microsecond:06d}118 +0000 UTC m=+7204.5"
