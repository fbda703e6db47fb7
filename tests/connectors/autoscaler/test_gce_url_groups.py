"""A GCE node group is a URL: every Event and line names it whole, so a quota story pages.

cluster-autoscaler names a GCE MIG by its URL (``Mig.Id()``: ``https://www.googleapis.com/
compute/v1/projects/P/zones/Z/instanceGroups/N``) in the pods' ``TriggeredScaleUp``, in
``FailedToScaleUpGroup`` (``Scale-up failed for group %s: %v``, executor.go) and in
``ScaleUpFailed`` (``Failed adding %v nodes to group %v due to %v; source errors: %v``,
clusterstate.go). The failure must name the very group the pods were tied to, or the core
never joins them: a group cut at the URL's first ``:`` is ``https``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from connectors.autoscaler.kube_events import autoscaler_event
from connectors.autoscaler.lines import LineContext, parse_line
from connectors.k8s.slim import slim_object
from schemas.codec import AnyEvent
from schemas.events import AutoscalerEvent, KubeEvent
from tests.core_helpers import of_type
from tests.core_helpers import run as run_in_order
from tests.factories import Cluster, at

MIG = (
    "https://www.googleapis.com/compute/v1/projects/ml-prod/zones/us-central1-a/"
    "instanceGroups/gke-train-l4-pool-4f2a9c1e-grp"
)
TRIGGERED = f"pod triggered scale-up: [{{{MIG} 0->3 (max: 8)}}]"
QUOTA_ERROR = (
    "Instance 'gke-train-l4-pool-4f2a9c1e-abcd' creation failed: Quota 'NVIDIA_L4_GPUS' "
    "exceeded.  Limit: 0.0 in region us-central1."
)
FAILED_TO_SCALE = (
    f"Scale-up failed for group {MIG}: googleapi: Error 403: Quota 'NVIDIA_L4_GPUS' "
    "exceeded.  Limit: 0.0 in region us-central1., quotaExceeded"
)
SCALE_UP_FAILED = (
    f"Failed adding 3 nodes to group {MIG} due to OutOfResource.QUOTA_EXCEEDED; "
    f"source errors: {QUOTA_ERROR}"
)
TIMED_OUT = f"Nodes added to group {MIG} failed to register within 15m2.1s"


def event(
    reason: str, message: str, t: float, kind: str = "Pod", name: str = "trainer-0"
) -> KubeEvent:
    """The Event as the API server sends it, slimmed as the k8s connector does."""
    namespace = "ml" if kind == "Pod" else "kube-system"
    obj: dict[str, Any] = {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {
            "name": f"{name}.{reason}.{t}",
            "namespace": namespace,
            "uid": f"uid-{name}-{reason}-{t}",
            "resourceVersion": str(int(t) + 1),
        },
        "involvedObject": {"kind": kind, "namespace": namespace, "name": name},
        "reason": reason,
        "message": message,
        "type": "Normal" if reason == "TriggeredScaleUp" else "Warning",
        "source": {"component": "cluster-autoscaler"},
        "lastTimestamp": at(t).isoformat().replace("+00:00", "Z"),
    }
    slim = slim_object(obj, "added", cluster="c1")
    assert isinstance(slim, KubeEvent)
    return slim


def record(ev: KubeEvent) -> AutoscalerEvent:
    got = autoscaler_event(ev)
    assert got is not None
    return got


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("FailedToScaleUpGroup", FAILED_TO_SCALE),
        ("ScaleUpFailed", SCALE_UP_FAILED),
        ("ScaleUpTimedOut", TIMED_OUT),
    ],
)
def test_the_failure_names_the_group_the_pods_triggered(reason: str, message: str) -> None:
    triggered = record(event("TriggeredScaleUp", TRIGGERED, 10))
    failed = record(event(reason, message, 60, "ConfigMap", "cluster-autoscaler-status"))
    assert triggered.node_group == failed.node_group == MIG
    assert failed.cloud == "gce"


@pytest.mark.parametrize(
    "text",
    [
        f"  Warning  FailedToScaleUpGroup  7s (x12 over 60m)  cluster-autoscaler  "
        f"{FAILED_TO_SCALE}",
        f"89s   Warning   ScaleUpFailed   configmap/cluster-autoscaler-status   {SCALE_UP_FAILED}",
        FAILED_TO_SCALE,
        "I1130 10:01:00.000000       1 event_sink_logging_wrapper.go:48] Event(v1.ObjectRef"
        'erence{Kind:"ConfigMap", Namespace:"kube-system", Name:"cluster-autoscaler-status", '
        f"UID:\"u\"}}): type: 'Warning' reason: 'FailedToScaleUpGroup' {FAILED_TO_SCALE}",
    ],
)
def test_a_pasted_failure_keeps_the_url_whole(text: str) -> None:
    ctx = LineContext(cluster="c1", reference=datetime(2026, 11, 30, tzinfo=UTC))
    result = parse_line(text, ctx, 1)
    assert isinstance(result, tuple)
    (failed,) = result
    assert (failed.action, failed.reason, failed.node_group) == ("scale_up_failed", "quota", MIG)


def test_a_gce_quota_story_told_by_events_pages_naming_the_mig() -> None:
    """Three L4 pods pending, each told ``TriggeredScaleUp`` into the MIG; the MIG's
    scale-up fails for quota three times (``FailedToScaleUpGroup`` and ``ScaleUpFailed``
    on the status ConfigMap): one page, its pods tied to the group by name."""
    c = Cluster()
    for k in range(3):
        c.pending(f"trainer-{k}", 5 + k, namespace="ml", owner=("Job", "trainer"), created=k)
    records: list[AnyEvent] = [
        record(event("TriggeredScaleUp", TRIGGERED, 20 + k, name=f"trainer-{k}")) for k in range(3)
    ]
    for t, reason, message in (
        (60, "FailedToScaleUpGroup", FAILED_TO_SCALE),
        (400, "ScaleUpFailed", SCALE_UP_FAILED),
        (750, "FailedToScaleUpGroup", FAILED_TO_SCALE),
    ):
        records.append(record(event(reason, message, t, "ConfigMap", "cluster-autoscaler-status")))
    c.tick(1800)
    revisions = run_in_order(sorted([*c.events, *records], key=lambda e: e.time))
    (starved,) = {i.id: i for i in of_type(revisions, "gpu_pods_starved")}.values()
    opened = next(r for r in revisions if r.id == starved.id and r.status == "open")
    assert opened.severity == "page"
    assert opened.attributes["node_groups"] == MIG
    assert opened.attributes["reason"] == "quota"
    assert opened.attributes["match"] == "named"
    assert {p.name for p in opened.pods} == {"trainer-0", "trainer-1", "trainer-2"}
