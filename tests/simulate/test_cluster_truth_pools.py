"""The cluster truth in a mixed cluster: an untied pending pod starves only by a failing
node group that may offer what it asks for."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gputriage.simulate.cluster_truth import ClusterTruth
from schemas.events import AutoscalerEvent, PodRef

T0 = datetime(2025, 3, 3, 8, 0, tzinfo=UTC)
DRA_GROUP = "eks-gpu-p5-48xlarge-dra-1"
OTHER_GROUP = "eks-gpu-p4d-24xlarge-2"


def _record(n: int, minutes: float, action: str, group: str, *pods: str) -> AutoscalerEvent:
    return AutoscalerEvent(
        id=f"as-{n}",
        cluster="c1",
        time=T0 + timedelta(minutes=minutes),
        action=action,
        reason="quota" if action == "scale_up_failed" else "",
        node_group=group,
        pods=tuple(PodRef(namespace=p.split("/")[0], name=p.split("/")[1]) for p in pods),
    )


def _starved(failing: str) -> list[str]:
    """A DRA pod tied to the DRA group, an untied nvidia.com/gpu pod pending beside it,
    and ``failing`` failing three times: the owners starved."""
    truth = ClusterTruth(timedelta(seconds=2))
    for pod, resource in (("ml/dra-0", "gpu.nvidia.com"), ("ml/dp-0", "nvidia.com/gpu")):
        truth.pending(
            cluster="c1",
            pod=pod,
            owner=f"Job/ml/{pod.split('/')[1]}",
            owner_label=f"Job/{pod.split('/')[1]}",
            created=T0,
            at=T0,
            unschedulable=True,
            resource=resource,
        )
    truth.autoscaler(_record(0, 0.5, "scale_up_planned", DRA_GROUP, "ml/dra-0"))
    for k in range(3):
        truth.autoscaler(_record(k + 1, 6 + 6 * k, "scale_up_failed", failing))
    found = truth.expected(lambda fault: f"{fault}-1", T0 + timedelta(hours=1))
    return sorted(t.owner for t in found if t.type == "gpu_pods_starved")


def test_a_dra_pool_failing_starves_its_own_pods_not_the_device_plugins() -> None:
    assert _starved(DRA_GROUP) == ["Job/dra-0"]


def test_a_group_nothing_is_known_of_may_starve_an_untied_pod() -> None:
    assert _starved(OTHER_GROUP) == ["Job/dp-0"]
