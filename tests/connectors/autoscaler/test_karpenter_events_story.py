"""Karpenter's Events alone tell the core a story: which NodePool a pod waits on, and why.

``Nominated`` (``Pod should schedule on: nodeclaim/<nodepool>-xxxxx``) ties the pod to the
NodePool its NodeClaim was generated from; ``InsufficientCapacityError`` on that NodeClaim
(``NodeClaim <name> event: <cloud error>``) is a failed scale-up of the same NodePool. A
consolidation's Events (``Disrupting Node: Underutilized``, ``Evicted pod: Underutilized``)
are planned work and raise nothing. Messages: kubernetes-sigs/karpenter
``provisioning/scheduling/events.go``, ``nodeclaim/lifecycle/events.go``,
``disruption/events/events.go``, ``terminator/events/events.go`` (tests/data/autoscaler/
ca_real/SOURCES.md); the EC2 error text as quoted in aws/karpenter-provider-aws#4346.
"""

from __future__ import annotations

from typing import Any

from connectors.autoscaler.kube_events import autoscaler_event
from connectors.k8s.slim import slim_object
from schemas.codec import AnyEvent
from schemas.events import KubeEvent
from tests.core_helpers import of_type
from tests.core_helpers import run as run_in_order
from tests.factories import Cluster, at

QUOTA = (
    "creating instance, insufficient capacity, with fleet error(s), VcpuLimitExceeded: You "
    "have requested more vCPU capacity than your current vCPU limit of 96 allows for the "
    "instance bucket that the specified instance type belongs to."
)


def karpenter_event(reason: str, message: str, t: float, kind: str, name: str) -> AnyEvent:
    namespace = "ml" if kind == "Pod" else ""
    obj: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {
            "name": f"{name}.{reason}.{t}",
            "namespace": namespace or "default",
            "uid": f"uid-{name}-{reason}-{t}",
            "resourceVersion": str(int(t) + 1),
        },
        "involvedObject": {"kind": kind, "namespace": namespace, "name": name},
        "reason": reason,
        "message": message,
        "type": "Warning" if "Error" in reason else "Normal",
        "source": {"component": "karpenter"},
        "lastTimestamp": at(t).isoformat().replace("+00:00", "Z"),
    }
    slim = slim_object(obj, "added", cluster="c1")
    assert isinstance(slim, KubeEvent)
    record = autoscaler_event(slim)
    assert record is not None
    return record


def test_nominated_pods_starve_when_their_nodepool_is_out_of_quota() -> None:
    c = Cluster()
    for k in range(2):
        c.pending(f"trainer-{k}", 5 + k, namespace="ml", owner=("Job", "trainer"), created=k)
    records: list[AnyEvent] = [
        karpenter_event(
            "Nominated",
            f"Pod should schedule on: nodeclaim/gpu-h100-{claim}",
            20 + k,
            "Pod",
            f"trainer-{k}",
        )
        for k, claim in enumerate(("x7k2p", "q9w8z"))
    ]
    for t, claim in ((60, "x7k2p"), (400, "m5n4b"), (750, "r5t6x")):
        message = f"NodeClaim gpu-h100-{claim} event: {QUOTA}"
        records.append(
            karpenter_event(
                "InsufficientCapacityError", message, t, "NodeClaim", f"gpu-h100-{claim}"
            )
        )
    c.tick(1800)
    revisions = run_in_order(sorted([*c.events, *records], key=lambda e: e.time))
    (starved,) = of_type(revisions, "gpu_pods_starved")
    opened = next(r for r in revisions if r.id == starved.id and r.status == "open")
    assert opened.severity == "page"
    assert opened.attributes["node_groups"] == "gpu-h100"
    assert opened.attributes["reason"] == "quota"
    assert opened.attributes["match"] == "named"


def test_a_consolidation_told_by_events_raises_nothing() -> None:
    c = Cluster()
    c.node("ip-10-0-1-2", 0, capacity=8, alloc=8)
    c.pod("ip-10-0-1-2", "trainer-0", 1, namespace="ml")
    records = [
        karpenter_event(
            "DisruptionTerminating", "Disrupting Node: Underutilized", 60, "Node", "ip-10-0-1-2"
        ),
        karpenter_event(
            "DisruptionLaunching", "Launching NodeClaim: Underutilized", 55, "Node", "ip-10-0-1-2"
        ),
        karpenter_event("Evicted", "Evicted pod: Underutilized", 61, "Pod", "trainer-0"),
    ]
    assert {(r.action, r.reason) for r in records} == {("scale_down", "")}  # type: ignore[union-attr]
    c.tick(3600)
    assert run_in_order(sorted([*c.events, *records], key=lambda e: e.time)) == []
