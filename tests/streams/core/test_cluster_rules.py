"""The cluster key's incidents: gpu_pods_starved, scale_up_failure, allocation_mismatch.

Scenarios run through :func:`tests.core_helpers.run`, which routes each record as the
producer does (a scheduled GPU pod, a GPU node and a pod-aware binding also go to the
cluster key), so these are the incidents a live worker and a replay both make.
"""

from __future__ import annotations

import msgspec

from schemas.codec import AnyEvent
from schemas.incidents import Incident
from streams.core import CoreSettings, Correlator
from streams.core.rules.mismatch import _short as short_key
from streams.core.rules.mismatch import bound_count
from streams.core.snapshot import decode_state, encode_state
from streams.core.state import ClusterState
from tests.core_helpers import config, feed, final, of_type
from tests.core_helpers import run as run_in_order
from tests.factories import T0, Cluster

GROUP = "eks-gpu-p4d-2f9c1e"
STARVED = "gpu_pods_starved"
SCALE_UP = "scale_up_failure"
MISMATCH = "allocation_mismatch"


def run(events: list[AnyEvent], cfg: CoreSettings | None = None) -> list[Incident]:
    """The scenario in event-time order (the builders below emit node by node; live, the
    watermark orders records, and this key merges every node's)."""
    return run_in_order(sorted(events, key=lambda e: e.time), cfg)


def _pending_job(c: Cluster, pods: int = 3, owner: tuple[str, str] = ("Job", "trainer")) -> None:
    for k in range(pods):
        c.pending(f"{owner[1]}-{k}", 5 + k, namespace="ml", owner=owner, created=k)


def _failures(c: Cluster, times: list[float], reason: str = "quota", code: str = "") -> None:
    for t in times:
        c.autoscaler(t, "scale_up_failed", GROUP, reason=reason, code=code)


def test_pending_gpu_pods_and_three_quota_failures_page_once_naming_the_owner_and_group() -> None:
    c = Cluster()
    _pending_job(c)
    _failures(c, [60, 400, 750], code="VcpuLimitExceeded")
    for k in range(3):
        c.pod("gpu-node-9", f"trainer-{k}", 1800 + k, namespace="ml", owner=("Job", "trainer"))
    revisions = run(c.events)
    (starved,) = of_type(revisions, STARVED)
    history = [r for r in revisions if r.id == starved.id]
    opened = history[0]
    assert opened.status == "open"
    assert opened.severity == "page"
    assert opened.node == ""
    assert opened.attributes["node_groups"] == GROUP
    assert opened.attributes["reason"] == "quota"
    assert opened.attributes["cloud_code"] == "VcpuLimitExceeded"
    assert opened.attributes["match"] == "cluster"
    assert (opened.attributes["gpus_requested"], opened.attributes["resource"]) == (
        "3",
        "nvidia.com/gpu",
    )
    assert {p.name for p in opened.pods} == {"trainer-0", "trainer-1", "trainer-2"}
    assert {(p.owner_kind, p.owner_name) for p in opened.pods} == {("Job", "trainer")}
    assert "Job ml/trainer" in opened.summary
    # Opened by the third attempt, not before: two failures and ten minutes are not enough.
    third = next(e for e in c.events if e.time.timestamp() - T0.timestamp() == 750)
    assert opened.evidence[-1].time <= third.time
    assert any(ev.event_id == third.id for ev in opened.evidence)
    assert starved.status == "resolved"
    assert "scheduled on gpu-node-9" in starved.attributes["resolution"]
    assert len([r for r in history if r.status == "open"]) == 1


def test_pending_then_a_successful_scale_up_is_no_incident() -> None:
    c = Cluster()
    _pending_job(c)
    c.autoscaler(30, "scale_up_planned", GROUP, pods=("trainer-0",), namespace="ml")
    for k in range(3):
        c.pod("gpu-node-new", f"trainer-{k}", 240 + k, namespace="ml", owner=("Job", "trainer"))
    c.tick(7200)
    revisions = run(c.events)
    assert revisions == []


def test_two_failures_are_not_enough_and_one_attempt_is_many_lines() -> None:
    c = Cluster()
    _pending_job(c, pods=1)
    # Two attempts, each logged as three lines within seconds.
    _failures(c, [60, 61, 62, 500, 501, 502])
    c.tick(7200)
    revisions = run(c.events)
    assert of_type(revisions, STARVED) == []
    (failure,) = of_type(revisions, SCALE_UP)
    assert failure.attributes["attempts"] == "2"


def test_capacity_is_a_ticket_and_each_owner_is_its_own_incident() -> None:
    c = Cluster()
    _pending_job(c, pods=2, owner=("Job", "a"))
    _pending_job(c, pods=1, owner=("RayCluster", "b"))
    _failures(c, [60, 400, 750], reason="capacity", code="InsufficientInstanceCapacity")
    c.tick(3600)
    starved = of_type(run(c.events), STARVED)
    assert sorted((i.attributes["pending_pods"], i.severity) for i in starved) == [
        ("1", "ticket"),
        ("2", "ticket"),
    ]
    assert {i.pods[0].owner_kind for i in starved} == {"Job", "RayCluster"}


def test_a_pod_tied_to_a_healthy_group_is_not_starved_by_another_groups_quota() -> None:
    c = Cluster()
    _pending_job(c, pods=1)
    c.autoscaler(20, "scale_up_planned", "eks-gpu-g5-healthy", pods=("trainer-0",), namespace="ml")
    _failures(c, [60, 400, 750])
    c.tick(3600)
    revisions = run(c.events)
    assert of_type(revisions, STARVED) == []
    # The failing group's own incident is there: it is a GPU group by its name.
    (failure,) = of_type(revisions, SCALE_UP)
    assert failure.attributes["node_group"] == GROUP


def test_a_pod_that_never_was_unschedulable_is_waiting_not_starved() -> None:
    c = Cluster()
    c.pending("fresh", 5, namespace="ml", unschedulable=False, created=0)
    _failures(c, [60, 400, 750])
    c.tick(3600)
    assert of_type(run(c.events), STARVED) == []


def test_a_pending_pod_deleted_resolves_its_incident() -> None:
    c = Cluster()
    _pending_job(c, pods=1)
    _failures(c, [60, 400, 750])
    c.pending("trainer-0", 900, namespace="ml", owner=("Job", "trainer"), op="deleted", created=0)
    (starved,) = of_type(run(c.events), STARVED)
    assert starved.status == "resolved"
    assert "deleted while pending" in starved.attributes["resolution"]


def test_scale_up_failure_pages_for_quota_counts_attempts_and_resolves_when_quiet() -> None:
    c = Cluster()
    _failures(c, [0, 300, 600], code="QUOTA_EXCEEDED")
    c.autoscaler(601, "backoff", GROUP, reason="backoff", until=900)
    c.autoscaler(0, "scale_up_failed", "cpu-pool-1", reason="quota")  # not a GPU group
    c.tick(10_000)
    revisions = run(c.events)
    (failure,) = of_type(revisions, SCALE_UP)
    assert failure.severity == "page"
    assert failure.attributes["attempts"] == "3"
    assert failure.attributes["cloud_code"] == "QUOTA_EXCEEDED"
    assert failure.status == "resolved"
    assert failure.resolved_at is not None
    assert failure.resolved_at.timestamp() - T0.timestamp() == 600 + 1800


def _cluster_with_dcgm(c: Cluster, nodes: int = 3, gpus: int = 4, shared: int = -1) -> None:
    """``nodes`` nodes of ``gpus`` GPUs, each GPU held by a one-GPU pod and reported bound."""
    for n in range(nodes):
        node = f"gpu-node-{n}"
        labels = {"nvidia.com/gpu.sharing-strategy": "time-slicing"} if n == shared else None
        c.node(node, 0, capacity=gpus, alloc=gpus, labels=labels)
        for g in range(gpus):
            c.pod(node, f"{node}-w{g}", 1)
            c.bind(node, 2, f"GPU-{n}-{g}", f"0000:{0x10 + g:02x}:00.0", [f"{node}-w{g}"])


def _dcgm_loses_pods(c: Cluster, n: int, t: float, gpus: int = 4) -> None:
    """dcgm-exporter on gpu-node-``n`` reports its GPUs without pods (lost the pod-resources
    socket, or restarted without it)."""
    for g in range(gpus):
        c.bind(f"gpu-node-{n}", t, f"GPU-{n}-{g}", f"0000:{0x10 + g:02x}:00.0", [])


def _mismatches(revisions: list[Incident]) -> list[Incident]:
    return [r for r in revisions if r.type == MISMATCH]


def test_a_dcgm_outage_on_two_nodes_names_them_and_resolves_when_they_return() -> None:
    c = Cluster()
    _cluster_with_dcgm(c)
    _dcgm_loses_pods(c, 0, 100)
    _dcgm_loses_pods(c, 1, 110)
    for n in (0, 1):
        for g in range(4):
            c.bind(f"gpu-node-{n}", 1000, f"GPU-{n}-{g}", f"0000:{0x10 + g:02x}:00.0", [])
    for n in (0, 1):  # they come back
        for g in range(4):
            c.bind(
                f"gpu-node-{n}",
                2000,
                f"GPU-{n}-{g}",
                f"0000:{0x10 + g:02x}:00.0",
                [f"gpu-node-{n}-w{g}"],
            )
    c.tick(2400)  # resolved once the counts have agreed for mismatch_after_seconds
    revisions = _mismatches(run(c.events))
    opened = revisions[0]
    assert opened.status == "open"
    assert opened.severity == "ticket"
    assert opened.attributes["nodes"] == "gpu-node-0,gpu-node-1"
    assert opened.attributes["difference"] == "8"
    # Not before both nodes have disagreed for mismatch_after_seconds (300 s).
    assert opened.first_seen.timestamp() - T0.timestamp() == 100
    assert "gpu-node-0 (4 requested, 0 bound)" in opened.summary
    assert opened.evidence, "the records that made the nodes disagree"
    assert revisions[-1].status == "resolved"
    assert final(revisions)[opened.id].resolved_at is not None
    assert len({r.id for r in revisions}) == 1


def test_below_the_threshold_or_brief_is_silent() -> None:
    c = Cluster()
    _cluster_with_dcgm(c)
    _dcgm_loses_pods(c, 0, 100)  # 4 GPUs: not more than 5
    _dcgm_loses_pods(c, 1, 200)
    for g in range(4):  # node 1 is back after 100 s: never counted
        c.bind("gpu-node-1", 300, f"GPU-1-{g}", f"0000:{0x10 + g:02x}:00.0", [f"gpu-node-1-w{g}"])
    c.tick(5000)
    assert _mismatches(run(c.events)) == []


def test_a_time_sliced_node_and_a_node_without_dcgm_are_left_out() -> None:
    c = Cluster()
    _cluster_with_dcgm(c, shared=2)
    _dcgm_loses_pods(c, 2, 100)  # time-sliced: its counts cannot agree
    c.node("gpu-node-nodcgm", 0, capacity=8, alloc=8)
    for g in range(8):  # GPU pods on a node no dcgm-exporter ever reported
        c.pod("gpu-node-nodcgm", f"x-{g}", 1)
    _dcgm_loses_pods(c, 0, 100)
    c.tick(5000)
    assert _mismatches(run(c.events)) == []


def test_an_ignored_namespace_is_left_out() -> None:
    c = Cluster()
    _cluster_with_dcgm(c)
    for n in (0, 1):
        for g in range(4):
            c.pod(f"gpu-node-{n}", f"shared-{n}-{g}", 50, namespace="sliced")
    c.tick(5000)
    assert len(_mismatches(run(c.events))) >= 1
    cfg = config(mismatch_ignore_namespaces=["sliced"])
    assert _mismatches(run(c.events, cfg)) == []


def test_one_quota_failure_logged_with_capacity_lines_is_one_quota_incident() -> None:
    """AWS: the quota line is followed by "placeholder-cannot-be-fulfilled" lines, which
    read as capacity; one group, one incident, named by its most telling reason."""
    c = Cluster()
    c.autoscaler(0, "scale_up_failed", GROUP, reason="quota", code="VcpuLimitExceeded")
    c.autoscaler(1, "scale_up_failed", GROUP, reason="capacity", code="placeholder")
    c.autoscaler(2, "backoff", GROUP, reason="capacity", until=300)
    c.autoscaler(400, "scale_up_failed", GROUP, reason="capacity", code="placeholder")
    c.tick(500)
    (failure,) = of_type(run(c.events), SCALE_UP)
    assert (failure.severity, failure.attributes["reason"]) == ("page", "quota")
    assert failure.attributes["cloud_code"] == "VcpuLimitExceeded"
    assert failure.attributes["attempts"] == "2"


def test_the_scheduler_retrying_a_starved_pod_is_not_a_revision_each_time() -> None:
    c = Cluster()
    _pending_job(c, pods=1)
    _failures(c, [60, 400, 750])
    for k, t in enumerate(range(800, 1400, 60)):
        c.pending(
            "trainer-0",
            t,
            namespace="ml",
            owner=("Job", "trainer"),
            created=0,
            message=f"0/{7 - k % 3} nodes are available: Insufficient nvidia.com/gpu.",
        )
    c.tick(1500)
    revisions = [r for r in run(c.events) if r.type == STARVED]
    assert [r.status for r in revisions] == ["open"]


def test_a_record_at_the_very_instant_a_node_settles_does_not_lose_the_incident() -> None:
    """The engine applies an event at time T before the key's timer due at T; the rules
    must do the timer's work then, or the node would never count (found in review)."""
    c = Cluster()
    _cluster_with_dcgm(c, nodes=3, gpus=8)
    _dcgm_loses_pods(c, 0, 100, gpus=8)  # 8 GPUs: above the threshold alone; due at 400
    c.node("gpu-node-2", 400, op="deleted")  # an unrelated record, exactly at 400
    c.tick(5000)
    (opened, *_) = _mismatches(run(c.events))
    assert opened.attributes["nodes"] == "gpu-node-0"
    assert opened.first_seen.timestamp() - T0.timestamp() == 100


def test_a_lost_node_is_not_a_dcgm_disagreement() -> None:
    """Two nodes go NotReady (Unknown, the kubelet gone) and the node controller fails
    their pods NodeLost: Kubernetes now counts 0 requested there, while dcgm-exporter,
    unreachable on those nodes, last said 8 GPUs bound. That is the outage
    (gpu_node_not_ready's), not dcgm-exporter losing its pod mapping: no
    allocation_mismatch (a simulated fleet had three). The same pods failing on
    Ready nodes with the bindings left standing is still a mismatch."""

    def history(ready: str) -> Cluster:
        c = Cluster()
        _cluster_with_dcgm(c)
        for n in (0, 1):
            c.node(f"gpu-node-{n}", 100, capacity=4, alloc=4, ready=ready)
            for g in range(4):
                c.pod(f"gpu-node-{n}", f"gpu-node-{n}-w{g}", 400, phase="Failed", reason="NodeLost")
        c.tick(5000)
        return c

    assert _mismatches(run(history("Unknown").events)) == []
    assert _mismatches(run(history("True").events)) != []


def test_two_gpus_whose_short_hashes_collided_still_count_as_two_bound() -> None:
    """Two GPUs of one simulated node (1,000 nodes) had the same 16-bit hash: the
    node counted 7 of its 8 bound forever and its 1 added to every other disagreement.
    Here that 1 on top of a 5-GPU outage (not more than 5 alone) opened an incident."""
    c = Cluster()
    _cluster_with_dcgm(c, nodes=1, gpus=5)
    uuids = [
        "GPU-e6ef57f1-efa6-4c6e-814c-0935a276e87c",  # both cd09 in the first 16 bits
        "GPU-7b65cdd4-c11d-4a4b-9e94-9926f665c7b0",
        *(f"GPU-c-{g}" for g in range(6)),
    ]
    c.node("gpu-node-c", 0, capacity=8, alloc=8)
    for g, uuid in enumerate(uuids):
        c.pod("gpu-node-c", f"c-w{g}", 1)
        c.bind("gpu-node-c", 2, uuid, f"0000:{0x20 + g:02x}:00.0", [f"c-w{g}"])
    _dcgm_loses_pods(c, 0, 100, gpus=5)
    c.tick(5000)
    assert _mismatches(run(c.events)) == []


def test_a_pod_replaced_on_a_blind_node_does_not_split_the_ticket() -> None:
    """dcgm-exporter is blind on an 8-GPU node held by two 4-GPU pods; one ends and its
    successor runs 40 s later (8 -> 4 -> 8 disagreeing, nothing came back): one ticket,
    not a resolve and a reopen. Once the exporter is back it resolves, after the counts
    have agreed for mismatch_after_seconds."""
    c = Cluster()
    c.node("gpu-node-0", 0, capacity=8, alloc=8)
    c.pod("gpu-node-0", "a", 1, gpus=4)
    c.pod("gpu-node-0", "b", 1, gpus=4)
    for g in range(8):
        c.bind("gpu-node-0", 2, f"GPU-0-{g}", f"0000:{0x10 + g:02x}:00.0", ["a" if g < 4 else "b"])
    for g in range(8):
        c.bind("gpu-node-0", 100, f"GPU-0-{g}", f"0000:{0x10 + g:02x}:00.0", [])
    c.pod("gpu-node-0", "a", 600, phase="Succeeded")
    c.pod("gpu-node-0", "a2", 640, gpus=4)
    for g in range(8):
        pods = ["a2" if g < 4 else "b"]
        c.bind("gpu-node-0", 900, f"GPU-0-{g}", f"0000:{0x10 + g:02x}:00.0", pods)
    c.tick(5000)
    revisions = _mismatches(run(c.events))
    assert len({r.id for r in revisions}) == 1
    assert revisions[0].first_seen.timestamp() - T0.timestamp() == 100
    assert revisions[-1].status == "resolved"
    resolved = revisions[-1].resolved_at
    assert resolved is not None
    assert resolved.timestamp() - T0.timestamp() == 900 + 300


def test_a_group_whose_failures_age_out_stays_named_while_the_pods_starve() -> None:
    """The page was for GROUP's quota; an hour on, its attempts leave the window while
    another GPU group fails and the pods still pend: the last revision must still name
    GROUP (it named only the other group, and the page's reason was gone)."""
    c = Cluster()
    _pending_job(c)
    _failures(c, [60, 400, 750])
    other = "eks-gpu-p5-7d1a0b"
    for t in (3000, 3300, 3700):
        c.autoscaler(t, "scale_up_failed", other, reason="capacity")
    c.tick(4000)
    (starved,) = of_type(run(c.events), STARVED)
    assert starved.attributes["node_groups"] == ",".join(sorted((GROUP, other)))


def test_a_snapshot_written_with_4_digit_gpu_keys_restores_with_its_count() -> None:
    """Snapshots from before the 64-bit keys hold 4 hex digits per bound GPU (and no
    ``digits``: NodeTally is array-like, the field is its last). Read as 16-digit keys,
    8 bound GPUs would count 2, and the upgraded worker would page a false
    allocation_mismatch (8 requested, 2 bound). The old tally keeps its width: the
    count stays right, a GPU unbound from it still leaves it; once empty it widens."""
    c = Cluster()
    _cluster_with_dcgm(c, nodes=1, gpus=8)
    before = Correlator(config(), track_dirty=True)
    for event in sorted(c.events, key=lambda e: e.time):
        feed(before, event)
    before.flush()
    [cluster_state] = [s for _, s in before.take_dirty() if isinstance(s, ClusterState)]
    tally = cluster_state.tallies["gpu-node-0"]
    assert (tally.digits, bound_count(tally)) == (16, 8)
    # The snapshot an older release wrote: the same state, 4-digit keys, no `digits`.
    tally.bound = "".join(sorted(short_key(f"GPU-0-{g}", 4) for g in range(8)))
    tally.digits = 4
    old = decode_state(encode_state(cluster_state))
    assert isinstance(old, ClusterState)
    assert old.tallies["gpu-node-0"].digits == 4  # the default: what an old one decodes to
    after = Correlator(config(), track_dirty=True)
    after.restore(old)
    later = Cluster()
    later.tick(4000)
    later.bind("gpu-node-0", 4100, "GPU-0-0", "0000:10:00.0", [])  # one GPU unbound
    later.tick(8000)
    out: list[Incident] = []
    for event in sorted(later.events, key=lambda e: e.time):
        out.extend(feed(after, event))
    out.extend(after.flush())
    assert _mismatches(out) == []
    restored = next(s for _, s in after.take_dirty() if isinstance(s, ClusterState))
    assert bound_count(restored.tallies["gpu-node-0"]) == 7
    for g in range(1, 8):  # the rest unbound: the empty tally takes the new width
        later.bind("gpu-node-0", 8100 + g, f"GPU-0-{g}", f"0000:{0x10 + g:02x}:00.0", [])
    for event in sorted(later.events, key=lambda e: e.time):
        if event.time.timestamp() > (T0.timestamp() + 8000):
            feed(after, event)
    after.flush()
    later.bind("gpu-node-0", 9000, "GPU-0-0", "0000:10:00.0", ["gpu-node-0-w0"])
    feed(after, later.events[-1])
    after.flush()
    final_state = next(s for _, s in after.take_dirty() if isinstance(s, ClusterState))
    assert final_state.tallies["gpu-node-0"].digits == 16


def test_the_kubelets_bindings_do_not_count_as_dcgms() -> None:
    """pod-resources bindings agree with the requests by construction (they are the
    kubelet's allocation): counted as DCGM's, they would hide the very outage
    allocation_mismatch exists for. Two nodes' dcgm-exporters lose their pods while the
    kubelet keeps reporting every GPU held: the ticket still opens, naming both nodes."""
    c = Cluster()
    _cluster_with_dcgm(c)
    _dcgm_loses_pods(c, 0, 100)
    _dcgm_loses_pods(c, 1, 110)
    for n in (0, 1):
        for g in range(4):
            kubelet = c.bind(
                f"gpu-node-{n}",
                120,
                f"GPU-{n}-{g}",
                f"0000:{0x10 + g:02x}:00.0",
                [f"gpu-node-{n}-w{g}"],
            )
            c.events[-1] = msgspec.structs.replace(kubelet, source="pod-resources", shared=True)
    c.tick(1000)
    revisions = _mismatches(run(c.events))
    assert revisions, "the DCGM outage must still be seen"
    assert revisions[0].attributes["nodes"] == "gpu-node-0,gpu-node-1"
    assert revisions[0].attributes["difference"] == "8"


def test_a_relisted_pod_behind_the_cluster_keys_position_does_not_stay_placed() -> None:
    """A relist stamps an object with its own older time, so its copy can reach the
    cluster key behind that key's position, where the engine drops it as stale. The
    router then copies the pod's next record whatever it says (its deletion here),
    or 8 GPUs a finished pod held would count as requested forever: a false ticket."""
    c = Cluster()
    node = "gpu-node-0"
    c.node(node, 0, capacity=8, alloc=8)
    c.pod(node, "train-0", 1, gpus=8)
    for g in range(8):
        c.bind(node, 2, f"GPU-0-{g}", f"0000:{0x10 + g:02x}:00.0", ["train-0"])
    for g in range(8):  # the pod ended while the connector was away
        c.bind(node, 1000, f"GPU-0-{g}", f"0000:{0x10 + g:02x}:00.0", [])
    c.node("gpu-node-1", 1010, capacity=8, alloc=8)  # moves the cluster key's position
    c.pod(node, "train-0", 900, gpus=8, phase="Succeeded")  # relisted: its own older time
    c.pod(node, "train-0", 1100, gpus=8, phase="Succeeded", op="deleted")
    c.tick(3000)
    assert _mismatches(run_in_order(c.events)) == []  # in arrival order: the relist is late
