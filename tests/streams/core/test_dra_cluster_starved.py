"""``gpu_pods_starved`` and ``scale_up_failure`` for pods that ask for GPUs by DRA claim.

The scheduler's messages are composed from its format strings (tests/data/dra/messages.md:
``NoNodeAvailableMsg = "0/%v nodes are available"``, per-node reasons counted as
``"%v %v"``; the DRA plugin's ``cannot allocate all claims`` and ``waiting for dynamic
resource controller to create the resourceclaim %q``), not captured from a cluster.
"""

from __future__ import annotations

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
