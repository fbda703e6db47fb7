"""Pending for a reason no node group can fix is not starvation by the autoscaler.

A GPU pod pending because it asks for something no node group offers (affinity to a
GPU product nobody has, a taint it does not tolerate) is not starved by some other
group's quota or capacity failure: growing that group would not place it. The
autoscaler says so itself (``NotTriggerScaleUp`` listing only reasons of configuration,
no ``in backoff``). Such pods get a ticket of their own (``gpu_pods_unschedulable``)
naming the scheduler's and the autoscaler's words; they never match a failing group.

The autoscaler's records go through the connector that makes them live
(:func:`connectors.autoscaler.kube_events.autoscaler_event`), from real messages:

* ``pod didn't trigger scale-up: 8 node(s) had taint {plural.sh/capacityType: SPOT},
  that the pod didn't tolerate, 13 node(s) didn't match Pod's node affinity`` and the
  scheduler's ``0/5 nodes are available: 5 node(s) didn't match Pod's node
  affinity/selector.`` (a Kubeflow GPU notebook: https://github.com/pluralsh/
  plural-artifacts/issues/137);
* ``pod didn't trigger scale-up: 1 node(s) didn't match Pod's node affinity/selector, 1
  node(s) had taint {k8s.dask.org_dedicated: worker}, that the pod didn't tolerate, 1 in
  backoff after failed scale-up`` (https://github.com/2i2c-org/infrastructure/issues/2185);
* ``pod didn't trigger scale-up (it wouldn't fit if a new node is added)``
  (https://github.com/kubernetes/autoscaler/issues/1291);
* Karpenter's ``Failed to schedule pod, incompatible with nodepool "default", ...``
  (format string, as in tests/data/autoscaler/events.jsonl ``ev-fmt-karpenter-failedscheduling``).
"""

from __future__ import annotations

import msgspec

from connectors.autoscaler.kube_events import autoscaler_event
from schemas.codec import AnyEvent
from schemas.incidents import Incident
from tests.core_helpers import of_type
from tests.core_helpers import run as run_in_order
from tests.factories import Cluster

STARVED = "gpu_pods_starved"
UNFIT = "gpu_pods_unschedulable"
SCALE_UP = "scale_up_failure"
GROUP = "eks-gpu-g5-12xlarge-2f9c1e"
SCHEDULER = "0/5 nodes are available: 5 node(s) didn't match Pod's node affinity/selector."
NO_GROUP_FITS = (
    "pod didn't trigger scale-up: 8 node(s) had taint {plural.sh/capacityType: SPOT}, that "
    "the pod didn't tolerate, 13 node(s) didn't match Pod's node affinity"
)
IN_BACKOFF = (
    "pod didn't trigger scale-up: 1 node(s) didn't match Pod's node affinity/selector, 1 "
    "node(s) had taint {k8s.dask.org_dedicated: worker}, that the pod didn't tolerate, 1 in "
    "backoff after failed scale-up"
)
OLD_BARE = "pod didn't trigger scale-up (it wouldn't fit if a new node is added)"
KARPENTER = (
    'Failed to schedule pod, incompatible with nodepool "default", daemonset overhead='
    '{"cpu":"675m","memory":"390Mi","pods":"6"}, incompatible requirements, label '
    '"nodegroup" does not have known values'
)


def run(events: list[AnyEvent]) -> list[Incident]:
    return run_in_order(sorted(events, key=lambda e: e.time))


def said(c: Cluster, t: float, pod: str, reason: str, message: str, source: str) -> None:
    """An autoscaler's Event on a pending pod, as the k8s connector publishes it: the
    ``k8s_event.v1`` and the ``autoscaler.v1`` record it derives."""
    ev = c.kube(
        "", t, reason, name=pod, namespace="ml", message=message, warning=False, source=source
    )
    record = autoscaler_event(ev)
    assert record is not None
    c.events.append(record)


def quota(c: Cluster, times: list[float], group: str = GROUP) -> None:
    for t in times:
        c.autoscaler(t, "scale_up_failed", group, reason="quota", code="VcpuLimitExceeded")


def test_a_pod_no_group_can_fit_is_not_starved_by_another_groups_quota() -> None:
    """A notebook pinned to a GPU product no group offers, while an unrelated GPU group
    hits its quota three times: the group's own ``scale_up_failure`` pages, the notebook
    is no part of it. It gets a ticket of its own, with both components' words."""
    c = Cluster()
    c.pending("notebook-0", 5, namespace="ml", owner=("StatefulSet", "notebook"), message=SCHEDULER)
    said(c, 20, "notebook-0", "NotTriggerScaleUp", NO_GROUP_FITS, "cluster-autoscaler")
    quota(c, [60, 400, 750])
    c.tick(3600)
    revisions = run(c.events)
    assert of_type(revisions, STARVED) == []
    assert [i.attributes["node_group"] for i in of_type(revisions, SCALE_UP)] == [GROUP]
    [ticket] = of_type(revisions, UNFIT)
    assert (ticket.severity, ticket.status) == ("ticket", "open")
    assert [p.name for p in ticket.pods] == ["notebook-0"]
    assert ticket.attributes["autoscaler"] == NO_GROUP_FITS
    assert SCHEDULER in ticket.attributes["scheduler"]
    assert ticket.first_seen.timestamp() - c.events[0].time.timestamp() == 0


def test_the_old_message_with_no_reasons_is_no_verdict() -> None:
    """``pod didn't trigger scale-up (it wouldn't fit if a new node is added)`` lists no
    reason: old releases say it when the only fitting group is at its max size too. It
    lifts nothing and blames nothing: that pod starves on the failing group as before,
    while the one with a listed verdict does not."""
    c = Cluster()
    c.pending("notebook-0", 5, namespace="ml", owner=("StatefulSet", "notebook"), message=SCHEDULER)
    said(c, 20, "notebook-0", "NotTriggerScaleUp", NO_GROUP_FITS, "cluster-autoscaler")
    c.pending("trainer-0", 5, namespace="ml", owner=("Job", "trainer"))
    said(c, 20, "trainer-0", "NotTriggerScaleUp", OLD_BARE, "cluster-autoscaler")
    quota(c, [60, 400, 750])
    c.tick(3600)
    revisions = run(c.events)
    assert [{p.name for p in i.pods} for i in of_type(revisions, STARVED)] == [{"trainer-0"}]
    assert [{p.name for p in i.pods} for i in of_type(revisions, UNFIT)] == [{"notebook-0"}]


def test_the_verdict_lifted_by_a_backoff_makes_the_pod_starved_again() -> None:
    """The latest word wins: "1 in backoff after failed scale-up" says a group would fit
    the pod and cannot grow now. Its ticket resolves, and the failing group starves it."""
    c = Cluster()
    c.pending("notebook-0", 5, namespace="ml", owner=("StatefulSet", "notebook"), message=SCHEDULER)
    said(c, 20, "notebook-0", "NotTriggerScaleUp", NO_GROUP_FITS, "cluster-autoscaler")
    quota(c, [60, 400, 750])
    said(c, 900, "notebook-0", "NotTriggerScaleUp", IN_BACKOFF, "cluster-autoscaler")
    quota(c, [1000])
    c.tick(3600)
    revisions = run(c.events)
    [ticket] = of_type(revisions, UNFIT)
    assert ticket.status == "resolved"
    assert ticket.resolved_at is not None
    assert ticket.resolved_at.timestamp() - c.events[0].time.timestamp() == 895
    [starved] = of_type(revisions, STARVED)
    assert starved.attributes["node_groups"] == GROUP


def test_a_karpenter_incompatible_pod_matches_no_failing_group() -> None:
    """Karpenter weighs every NodePool at once: "incompatible with nodepool" is its
    verdict that none can take the pod, whichever pool it names."""
    c = Cluster()
    c.pending("api-0", 5, namespace="ml", owner=("ReplicaSet", "api"), message=SCHEDULER)
    said(c, 20, "api-0", "FailedScheduling", KARPENTER, "karpenter")
    quota(c, [60, 400, 750], group="gpu-h100")
    c.tick(3600)
    revisions = run(c.events)
    assert of_type(revisions, STARVED) == []
    [ticket] = of_type(revisions, UNFIT)
    assert ticket.attributes["autoscaler"].startswith("Failed to schedule pod, incompatible")


def test_a_group_that_cannot_fit_the_pod_is_never_its_group() -> None:
    """cluster-autoscaler's "Pod ml/trainer-0 can't be scheduled on <group>, predicate
    failed" (an ``unschedulable``/``config`` record naming the group) says that group
    cannot fit the pod: its quota failures do not starve it. Another failing GPU group
    still may."""
    c = Cluster()
    c.pending("trainer-0", 5, namespace="ml", owner=("Job", "trainer"))
    c.autoscaler(20, "unschedulable", GROUP, reason="config", pods=("trainer-0",), namespace="ml")
    quota(c, [60, 400, 750])
    c.tick(3600)
    assert of_type(run(c.events), STARVED) == []
    quota(c, [100, 500, 900], group="eks-gpu-p4d-other")
    [starved] = of_type(run(c.events), STARVED)
    assert starved.attributes["node_groups"] == "eks-gpu-p4d-other"


def test_a_mig_pod_is_not_starved_by_a_whole_gpu_groups_failures() -> None:
    """What a group offers is known from the pods tied to it: a group that grows for
    ``nvidia.com/gpu`` pods does not offer a ``nvidia.com/mig-1g.10gb`` device, so its
    failures starve the whole-GPU Job tied to it, not an untied MIG pod."""
    c = Cluster()
    c.pending("trainer-0", 5, namespace="ml", owner=("Job", "trainer"))
    ev = c.pending("infer-0", 5, namespace="ml", owner=("ReplicaSet", "infer"))
    c.events[-1] = msgspec.structs.replace(ev, gpu_requests={"nvidia.com/mig-1g.10gb": 1})
    c.autoscaler(20, "scale_up_planned", GROUP, pods=("trainer-0",), namespace="ml")
    quota(c, [60, 400, 750])
    c.tick(3600)
    starved = of_type(run(c.events), STARVED)
    assert [{p.name for p in i.pods} for i in starved] == [{"trainer-0"}]
