"""``gpu_pods_starved`` and ``scale_up_failure`` for pods that ask for GPUs by DRA claim.

The scheduler's messages are composed from its format strings (tests/data/dra/messages.md:
``NoNodeAvailableMsg = "0/%v nodes are available"``, per-node reasons counted as
``"%v %v"``; the DRA plugin's ``cannot allocate all claims`` and ``waiting for dynamic
resource controller to create the resourceclaim %q``), not captured from a cluster.
"""

from __future__ import annotations

import msgspec

from schemas.events import PodRef
from streams.core.rules.starved import CLAIM_SHORTAGE, shortage
from tests.core_helpers import of_type
from tests.factories import Cluster
from tests.streams.core.test_dra_cluster import (
    dra_pod,
    nic_claim,
    pending_dra_pod,
    run,
    template_claim,
)

GROUP = "eks-gpu-p4d-dra-2f9c1e"
STARVED = "gpu_pods_starved"
SCALE_UP = "scale_up_failure"
NO_ROOM = (
    "0/3 nodes are available: 3 cannot allocate all claims. preemption: 0/3 nodes are "
    "available: 3 No preemption victims found for incoming pod."
)
NOT_MADE = (
    "0/3 nodes are available: waiting for dynamic resource controller to create the "
    'resourceclaim "{pod}-gpu-h6vrt". preemption: 0/3 nodes are available: 3 No preemption '
    "victims found for incoming pod."
)
OWNER = ("Job", "trainer")


def _failures(c: Cluster, times: list[float]) -> None:
    for t in times:
        c.autoscaler(t, "scale_up_failed", GROUP, reason="quota", code="VcpuLimitExceeded")


def test_pods_whose_gpu_claims_cannot_be_allocated_starve_and_leave_when_scheduled() -> None:
    c = Cluster()
    pods = [f"trainer-{k}" for k in range(2)]
    for k, pod in enumerate(pods):
        claims = (template_claim(pod, 4),)
        pending_dra_pod(c, pod, 5 + k, claims, NO_ROOM, owner=OWNER, created=k)
    _failures(c, [60, 400, 750])
    for k, pod in enumerate(pods):  # the quota is raised: they run on a new node
        dra_pod(c, "gpu-a100-node-07", pod, 1800 + k, (template_claim(pod, 4),), owner=OWNER)
    c.tick(7200)
    revisions = run(c.events)
    (starved,) = of_type(revisions, STARVED)
    opened = next(r for r in revisions if r.id == starved.id)
    assert (opened.status, opened.severity) == ("open", "page")
    assert opened.attributes["gpus_requested"] == "8"
    assert opened.attributes["resource"] == "gpu.nvidia.com"
    assert opened.attributes["node_groups"] == GROUP
    assert {p.name for p in opened.pods} == set(pods)
    assert any("cannot allocate all claims" in e.text for e in opened.evidence)
    assert starved.status == "resolved"
    assert "scheduled on gpu-a100-node-07" in starved.attributes["resolution"]


def test_a_claim_not_yet_made_for_a_few_seconds_is_nothing() -> None:
    """The claim controller makes the pod's claim from its template seconds after the pod:
    the scheduler waits, then places it. The failing group is not its concern."""
    c = Cluster()
    _failures(c, [0, 300, 600])
    for k in range(3):
        pod = f"trainer-{k}"
        t = 700 + 10 * k
        not_made = (template_claim(pod, created=False),)
        pending_dra_pod(c, pod, t, not_made, NOT_MADE.format(pod=pod), owner=OWNER, created=t)
        dra_pod(c, "gpu-a100-node-01", pod, t + 3, (template_claim(pod),), owner=OWNER)
    c.tick(7200)
    assert of_type(run(c.events), STARVED) == []


def test_a_claim_the_controller_never_makes_is_not_a_node_groups_failure() -> None:
    """The claim controller is down for an hour: the pod waits on its claim object, not on
    GPUs, and no scale-up could place it. The group's quota failures are their own
    ticket; the pod is not starved by them."""
    c = Cluster()
    pod = "trainer-0"
    not_made = (template_claim(pod, created=False),)
    for t in (5, 300, 900, 1500):
        pending_dra_pod(c, pod, t, not_made, NOT_MADE.format(pod=pod), owner=OWNER)
    _failures(c, [60, 400, 750])
    c.tick(3600)
    revisions = run(c.events)
    assert of_type(revisions, STARVED) == []
    assert [i.attributes["node_group"] for i in of_type(revisions, SCALE_UP)] == [GROUP]


def test_a_pod_pending_on_a_claim_of_another_driver_is_not_a_gpu_pod() -> None:
    c = Cluster()
    pending_dra_pod(c, "nic-0", 5, (nic_claim("nic-0"),), NO_ROOM, owner=("Job", "nic"))
    _failures(c, [60, 400, 750])
    c.tick(3600)
    assert of_type(run(c.events), STARVED) == []


DP_GROUP = "eks-gpu-p4d-dp-7a1b2c"


def test_a_mixed_cluster_starves_each_pods_own_pool_only() -> None:
    """A DRA pool and a device-plugin pool. The autoscaler ties each pending pod to its
    pool; the DRA pool hits its NodePool limits three times: the DRA pods starve (a ticket
    naming max size), the device-plugin pod, tied to a pool that grows, does not."""
    c = Cluster()
    for k in range(2):
        pod = f"trainer-{k}"
        pending_dra_pod(c, pod, 5, (template_claim(pod, 8),), NO_ROOM, owner=OWNER, created=0)
    c.pending("dp-0", 5, gpus=8, namespace="gpu-test1", owner=("Job", "dp"), created=0)
    c.autoscaler(20, "scale_up_planned", GROUP, pods=("trainer-0",), namespace="gpu-test1")
    c.autoscaler(20, "scale_up_planned", DP_GROUP, pods=("dp-0",), namespace="gpu-test1")
    for t in (60, 400, 750):
        c.autoscaler(t, "max_size_reached", GROUP, reason="max_size")
    c.tick(3600)
    revisions = run(c.events)
    (starved,) = of_type(revisions, STARVED)
    assert {(p.owner_name, p.namespace) for p in starved.pods} == {("trainer", "gpu-test1")}
    assert (starved.severity, starved.attributes["reason"]) == ("ticket", "max_size")
    assert starved.attributes["node_groups"] == GROUP
    assert starved.attributes["resource"] == "gpu.nvidia.com"


def test_a_dra_pod_is_not_starved_by_a_pool_known_to_offer_nvidia_com_gpu() -> None:
    """An untied DRA pod matches the failing GPU pools that may offer its device class:
    not the one whose pending pods ask for ``nvidia.com/gpu`` (a device-plugin pool has
    no ResourceSlices to allocate a claim from)."""
    c = Cluster()
    pending_dra_pod(c, "trainer-0", 5, (template_claim("trainer-0"),), NO_ROOM, owner=OWNER)
    c.pending("dp-0", 5, gpus=1, namespace="gpu-test1", owner=("Job", "dp"), created=0)
    c.autoscaler(20, "scale_up_planned", DP_GROUP, pods=("dp-0",), namespace="gpu-test1")
    for t in (60, 400, 750):
        c.autoscaler(t, "scale_up_failed", DP_GROUP, reason="quota", code="VcpuLimitExceeded")
    c.tick(3600)
    (starved,) = of_type(run(c.events), STARVED)
    assert [p.name for p in starved.pods] == ["dp-0"]


def test_dra_pods_no_pool_can_fit_are_told_how_a_dra_pool_scales_from_zero() -> None:
    c = Cluster()
    pending_dra_pod(c, "trainer-0", 5, (template_claim("trainer-0"),), NO_ROOM, owner=OWNER)
    verdict = "pod didn't trigger scale-up: 1 node(s) didn't match Pod's node affinity"
    record = c.autoscaler(20, "unschedulable", "", reason="config", pods=("trainer-0",))
    c.events[-1] = msgspec.structs.replace(
        record, message=verdict, pods=(PodRef(namespace="gpu-test1", name="trainer-0"),)
    )
    c.tick(3600)
    (unfit,) = of_type(run(c.events), "gpu_pods_unschedulable")
    assert "cannot allocate all claims" in unfit.attributes["scheduler"]
    assert "DRA claim" in unfit.action
    assert "ResourceSlices" in unfit.action


def test_the_schedulers_dra_words_for_no_room_are_a_shortage_and_a_claim_on_its_way_not() -> None:
    for words in CLAIM_SHORTAGE:
        assert shortage(f"0/3 nodes are available: 3 {words}. preemption: 0/3 nodes are available")
    waiting = (
        NOT_MADE.format(pod="pod1"),
        '0/3 nodes are available: resourceclaim "pod1-gpu-h6vrt" is being deleted.',
        "0/3 nodes are available: resourceclaim in use.",
    )
    assert [shortage(m) for m in waiting] == [False, False, False]
    assert shortage("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")


def test_a_dra_pools_quota_is_not_blamed_for_a_device_plugin_pod_after_its_pods_left() -> None:
    """A mixed cluster, as the simulator found it: the autoscaler ties pending claim pods to
    the DRA pool (a plan naming them), the pool fails on quota, their owner deletes them.
    A device-plugin pod then pends, untied, while the pool still fails: the pool gives
    ``gpu.nvidia.com`` devices, not ``nvidia.com/gpu``, so it starves nobody. What a pool
    offers outlives the pods it was learned from."""
    c = Cluster()
    for k in range(2):
        pod = f"trainer-{k}"
        pending_dra_pod(c, pod, 5, (template_claim(pod, 8),), NO_ROOM, owner=OWNER)
    # The plan comes before the pool's first failure: a group is tracked from its failures.
    c.autoscaler(20, "scale_up_planned", GROUP, pods=("trainer-0",), namespace="gpu-test1")
    _failures(c, [60, 400])
    for k in range(2):
        c.pending(f"trainer-{k}", 500, gpus=0, namespace="gpu-test1", owner=OWNER, op="deleted")
    c.pending("vllm-0", 600, gpus=2, namespace="inference", owner=("ReplicaSet", "vllm"))
    _failures(c, [750, 1100, 1450, 1800])
    c.tick(3600)
    revisions = run(c.events)
    assert of_type(revisions, STARVED) == []
    assert [i.attributes["node_group"] for i in of_type(revisions, SCALE_UP)] == [GROUP]


def test_a_dra_pod_is_not_blamed_on_a_device_plugin_pool_after_its_pods_left() -> None:
    """The converse: a device-plugin pool's pods were tied to it and left; an untied claim
    pod pending while that pool fails is not starved by it."""
    c = Cluster()
    c.pending("dp-0", 5, gpus=8, namespace="gpu-test1", owner=("Job", "dp"), created=0)
    c.autoscaler(20, "scale_up_planned", DP_GROUP, pods=("dp-0",), namespace="gpu-test1")
    for t in (60, 400):
        c.autoscaler(t, "scale_up_failed", DP_GROUP, reason="quota", code="VcpuLimitExceeded")
    c.pending("dp-0", 500, gpus=8, namespace="gpu-test1", owner=("Job", "dp"), op="deleted")
    pending_dra_pod(c, "trainer-0", 600, (template_claim("trainer-0"),), NO_ROOM, owner=OWNER)
    for t in (750, 1100, 1450, 1800):
        c.autoscaler(t, "scale_up_failed", DP_GROUP, reason="quota", code="VcpuLimitExceeded")
    c.tick(3600)
    assert of_type(run(c.events), STARVED) == []


def test_an_untied_pod_asking_what_a_failing_pool_offered_still_starves_by_it() -> None:
    """What a pool offers rules out other resources only: a later untied claim pod asking
    for the same device class is starved by the DRA pool's quota."""
    c = Cluster()
    pending_dra_pod(c, "trainer-0", 5, (template_claim("trainer-0", 8),), NO_ROOM, owner=OWNER)
    c.autoscaler(20, "scale_up_planned", GROUP, pods=("trainer-0",), namespace="gpu-test1")
    _failures(c, [60, 400])
    c.pending("trainer-0", 500, gpus=0, namespace="gpu-test1", owner=OWNER, op="deleted")
    late = ("Job", "late")
    pending_dra_pod(c, "late-0", 600, (template_claim("late-0", 8),), NO_ROOM, owner=late)
    _failures(c, [750, 1100, 1450, 1800])
    c.tick(3600)
    (starved,) = of_type(run(c.events), STARVED)
    assert [p.name for p in starved.pods] == ["late-0"]
    assert starved.attributes["node_groups"] == GROUP
