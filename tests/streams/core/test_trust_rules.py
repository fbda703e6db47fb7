"""Rules of the domain that earlier versions of the core got wrong.

Each test builds a real-shaped timeline with :mod:`tests.factories` and says, in its
docstring, which fact of the domain it pins and how the old core broke it.
"""

from __future__ import annotations

from schemas.codec import AnyEvent
from schemas.incidents import Incident
from streams.core import Correlator
from tests.core_helpers import config, final, of_type, run
from tests.factories import Cluster, term

MIN = 60.0
BUS = "0000:9b:00.0"


def interleave(*streams: list[AnyEvent]) -> list[AnyEvent]:
    """The streams' events alternately (one consumer reading several clusters' topics)."""
    out: list[AnyEvent] = []
    for group in zip(*streams, strict=True):
        out.extend(group)
    return out


def by_cluster(revisions: list[Incident], kind: str) -> dict[str, list[Incident]]:
    found: dict[str, list[Incident]] = {}
    for inc in of_type(revisions, kind):
        found.setdefault(inc.cluster, []).append(inc)
    return found


# -- class 2: two clusters with the same node name ------------------------------------------
def device_chain(name: str) -> Cluster:
    """XID 79, an allocatable drop and a failed pod on ``gpu-node-01`` of cluster ``name``.

    Each :class:`Cluster` numbers its events from 1, so two clusters built alike share
    every event id and time: exactly what two clusters' sources produce when their ids
    are unique per cluster (a kmsg ``boot id + seq`` on look-alike images, a
    ``uid + resourceVersion`` restored from the same template...).
    """
    c = Cluster(name)
    c.node("gpu-node-01", 0)
    c.pod("gpu-node-01", "trainer-0", 1)
    c.bind("gpu-node-01", 2, "GPU-00000000-0000-0000-0000-000000000001", BUS, ["trainer-0"])
    c.xid("gpu-node-01", 5 * MIN, 79, bus=BUS)
    c.node("gpu-node-01", 5 * MIN + 9, alloc=7)
    c.pod("gpu-node-01", "trainer-0", 5 * MIN + 20, phase="Failed", current=term(5 * MIN + 18))
    return c


def test_the_same_timeline_in_two_clusters_gives_each_cluster_its_incident() -> None:
    """Dedup in the engine's buffer is by (time, schema, id) *and key*.

    The old buffer took "same time, schema and event id" for a redelivery and dropped
    the second cluster's XID, drop and pod failure: cluster b's device chain was lost.
    """
    a, b = device_chain("a"), device_chain("b")
    revisions = run(interleave(a.events, b.events))
    chains = by_cluster(revisions, "device_unhealthy_eviction")
    assert sorted(chains) == ["a", "b"]
    ids = {inc.id for incs in chains.values() for inc in incs}
    assert len(ids) == 2, "incident ids include the cluster"
    for incs in chains.values():
        [inc] = incs
        assert [p.name for p in inc.pods] == ["trainer-0"]
        assert [e.schema for e in inc.evidence] == ["xid.v1", "node.v1", "pod.v1"]


def test_an_xid_id_equal_across_clusters_does_not_drop_either_clusters_xid() -> None:
    """Five XID 79s on the same bus id in two clusters: both GPUs are failing hardware.

    Node name, bus id, uuid, times and XID ids are all equal (same image, same
    sources): only the cluster differs. The old buffer kept one cluster's five XIDs.
    """
    streams = []
    for name in ("east", "west"):
        c = Cluster(name)
        c.node("gpu-node-01", 0)
        for k in range(5):
            c.xid("gpu-node-01", (k + 1) * 10 * MIN, 79, bus=BUS, uuid="GPU-1")
        streams.append(c.events)
    revisions = run(interleave(*streams))
    repeats = by_cluster(revisions, "xid_repeat")
    assert sorted(repeats) == ["east", "west"]
    assert all(inc.attributes["occurrences"] == "5" for [inc] in repeats.values())


def test_an_app_fault_on_the_same_bus_id_in_two_clusters_names_each_clusters_own_pod() -> None:
    """GPU bindings and app XIDs meet per cluster: same node, bus id, uuid and pod name.

    Cluster a's ``render-0`` and cluster b's ``render-0`` each hold "the" GPU at
    ``0000:9b:00.0``; an XID 13 on each is two incidents, each naming its own pod and
    each resting on its own XID event (the old buffer dropped cluster b's binding and
    XID as duplicates of a's).
    """
    streams = []
    for name in ("a", "b"):
        c = Cluster(name)
        c.node("gpu-node-01", 0)
        c.pod("gpu-node-01", "render-0", 1, owner=("Job", f"render-{name}"))
        c.bind("gpu-node-01", 2, "GPU-1", BUS, ["render-0"])
        c.xid("gpu-node-01", 3 * MIN, 13, bus=BUS, uuid="GPU-1")
        streams.append(c.events)
    revisions = run(interleave(*streams))
    faults = by_cluster(revisions, "gpu_app_fault")
    assert sorted(faults) == ["a", "b"]
    for name, [inc] in faults.items():
        assert [(p.name, p.owner_name, p.role) for p in inc.pods] == [
            ("render-0", f"render-{name}", "bound")
        ]


def test_a_redelivery_is_still_a_duplicate_when_another_cluster_shares_its_id() -> None:
    """A redelivered copy of cluster a's event (Kafka is at-least-once) is counted as a
    duplicate, and cluster b's event with the same id and time is not.

    The old buffer ordered equal (time, schema, id) by arrival only and compared each
    event with the one before: it counted all of b's events as duplicates (7, not 1)
    and b's chain was lost.
    """
    a, b = device_chain("a"), device_chain("b")
    events = interleave(a.events, b.events)
    xid_a = next(e for e in a.events if e.id.startswith("xid"))
    correlator = Correlator(config(grace_seconds=30))
    revisions: list[Incident] = []
    for event in [*events[:8], xid_a, *events[8:]]:
        revisions.extend(correlator.ingest(event))
    revisions.extend(correlator.flush())
    assert correlator.stats.duplicates == 1
    assert sorted(by_cluster(revisions, "device_unhealthy_eviction")) == ["a", "b"]


def test_a_chain_in_one_cluster_never_absorbs_the_other_clusters_pod() -> None:
    """Cluster a's armed chain on ``gpu-node-01`` must not take in the failure of
    cluster b's same-named pod on its same-named node: b had no device fault, so b
    has no device incident and a's chain names only a's pod and a's evidence.

    A guard: this held before the fix too (state is kept per cluster, then node), and
    must keep holding whatever the buffer does with equal ids."""
    a = device_chain("a")
    b = Cluster("b")
    b.node("gpu-node-01", 0)
    b.pod("gpu-node-01", "trainer-0", 1)
    b.pod("gpu-node-01", "other-0", 2)
    b.tick(3)
    b.pod("gpu-node-01", "trainer-0", 5 * MIN + 20, phase="Failed", reason="Evicted")
    b.pod("gpu-node-01", "other-0", 5 * MIN + 30, phase="Failed", reason="Evicted")
    revisions = run(interleave(a.events, b.events))
    chains = by_cluster(revisions, "device_unhealthy_eviction")
    assert sorted(chains) == ["a"]
    [inc] = chains["a"]
    assert [p.name for p in inc.pods] == ["trainer-0"]
    assert all(r.cluster == "a" for r in final(revisions).values())


# -- class 7: exit 137 without OOMKilled is a SIGKILL; exit 143 on deletion is no crash ------
def probe_killed(c: Cluster, pod: str, times: list[float], code: int) -> None:
    """The kubelet's liveness-probe kill loop, as the API server shows it: ``Unhealthy``
    (the probe failed), ``Killing`` (the kubelet kills the container to restart it),
    then the restarted pod with ``lastState.terminated`` = ``Error`` and the signal's
    exit code (143 when the process dies of the SIGTERM, 137 when the grace ran out and
    SIGKILL came), ``reason`` never ``OOMKilled``."""
    for k, t in enumerate(times, start=1):
        c.kube(
            "gpu-node-03",
            t - 20,
            "Unhealthy",
            name=pod,
            message='Liveness probe failed: Get "http://10.0.3.7:8080/healthz": '
            "context deadline exceeded (Client.Timeout exceeded while awaiting headers)",
        )
        c.kube(
            "gpu-node-03",
            t - 19,
            "Killing",
            name=pod,
            message="Container trainer failed liveness probe, will be restarted",
        )
        c.pod(
            "gpu-node-03",
            pod,
            t + 2,
            container="trainer",
            restarts=k,
            last=term(t, "Error", code),
        )


def test_a_liveness_probe_sigkill_loop_is_not_suspected_cuda_oom() -> None:
    """Five exit-137 restarts in 10 min, each after a failed liveness probe: SIGKILL by
    the kubelet, not CUDA OOM (which is an exception in the process: exit 1). The old
    rule counted every non-zero exit and opened ``suspected_cuda_oom``."""
    c = Cluster()
    c.node("gpu-node-03", 0)
    c.pod("gpu-node-03", "serve-0", 1, container="trainer")
    probe_killed(c, "serve-0", [2 * MIN, 4 * MIN, 6 * MIN, 8 * MIN, 10 * MIN], 137)
    revisions = run(c.events)
    assert of_type(revisions, "suspected_cuda_oom") == []
    assert of_type(revisions, "host_oom_kill") == [], "137 without OOMKilled is no memory kill"


def test_a_liveness_probe_sigterm_loop_is_not_suspected_cuda_oom() -> None:
    """The same loop where the process dies of the kubelet's SIGTERM (exit 143)."""
    c = Cluster()
    c.node("gpu-node-03", 0)
    c.pod("gpu-node-03", "serve-0", 1, container="trainer")
    probe_killed(c, "serve-0", [2 * MIN, 4 * MIN, 6 * MIN, 8 * MIN, 10 * MIN], 143)
    assert of_type(run(c.events), "suspected_cuda_oom") == []


def test_real_crashes_still_count_when_sigkills_are_mixed_in() -> None:
    """A SIGKILL is left out of the count, not a reset of it: four exit-1 crashes in
    the window are a crash loop even with a probe kill between them."""
    c = Cluster()
    c.node("gpu-node-03", 0)
    c.pod("gpu-node-03", "ft-0", 1, container="trainer")
    exits = [(2 * MIN, 1), (4 * MIN, 137), (6 * MIN, 1), (8 * MIN, 1), (10 * MIN, 1)]
    for k, (t, code) in enumerate(exits, start=1):
        c.pod(
            "gpu-node-03",
            "ft-0",
            t + 2,
            container="trainer",
            restarts=k,
            last=term(t, "Error", code),
        )
    [inc] = of_type(run(c.events), "suspected_cuda_oom")
    assert inc.attributes["restarts_in_window"] == "4"


def test_exit_143_of_a_pod_being_deleted_is_not_a_crash() -> None:
    """Three real crashes, then the pod is deleted: its container exits 143 on the
    kubelet's SIGTERM (deletionTimestamp set) and the pod goes Failed, then DELETED.
    The old rule took that exit for a fourth crash and opened ``suspected_cuda_oom``
    for a pod being deleted on purpose."""
    c = Cluster()
    c.node("gpu-node-03", 0)
    c.pod("gpu-node-03", "ft-0", 1, container="trainer")
    for k, t in enumerate([2 * MIN, 4 * MIN, 6 * MIN], start=1):
        c.pod(
            "gpu-node-03", "ft-0", t + 2, container="trainer", restarts=k, last=term(t, "Error", 1)
        )
    gone = 7 * MIN
    c.pod("gpu-node-03", "ft-0", gone, container="trainer", restarts=3, deleted_at=gone)
    c.pod(
        "gpu-node-03",
        "ft-0",
        gone + 31,
        phase="Failed",
        container="trainer",
        restarts=3,
        current=term(gone + 30, "Error", 143),
        deleted_at=gone,
    )
    c.pod(
        "gpu-node-03",
        "ft-0",
        gone + 32,
        phase="Failed",
        container="trainer",
        restarts=3,
        current=term(gone + 30, "Error", 143),
        deleted_at=gone,
        op="deleted",
    )
    assert final(run(c.events)) == {}


def test_a_deleted_pod_does_not_join_an_armed_device_chain() -> None:
    """A pod deleted on purpose (its Job scaled down) while XID 79 has armed the
    chain exits 143 and goes Failed on deletion: not a casualty of the device. The old
    rule named it in a ``device_unhealthy_eviction`` page. A real failure (exit 1, no
    deletion) on the same node still opens the chain."""
    c = Cluster()
    c.node("gpu-node-01", 0)
    c.pod("gpu-node-01", "batch-0", 1)
    c.pod("gpu-node-01", "trainer-0", 1)
    c.xid("gpu-node-01", 5 * MIN, 79)
    c.pod("gpu-node-01", "batch-0", 5 * MIN + 10, deleted_at=5 * MIN + 10)
    c.pod(
        "gpu-node-01",
        "batch-0",
        5 * MIN + 40,
        phase="Failed",
        current=term(5 * MIN + 39, "Error", 143),
        deleted_at=5 * MIN + 10,
    )
    assert of_type(run(c.events), "device_unhealthy_eviction") == []
    c.pod("gpu-node-01", "trainer-0", 6 * MIN, phase="Failed", current=term(6 * MIN - 1))
    [inc] = of_type(run(c.events), "device_unhealthy_eviction")
    assert [p.name for p in inc.pods] == ["trainer-0"]


# -- class 9: crashes missed between updates -----------------------------------------------
def relisted(
    restarts: int, *, seen: float, relist: float, last: tuple[str, int] = ("Error", 1)
) -> Cluster:
    """A GPU pod seen at restartCount 0 at ``seen``, then (the watch having dropped and
    relisted) at ``restarts`` at ``relist``, its ``lastState`` the newest exit only."""
    c = Cluster()
    c.node("gpu-node-03", 0)
    c.pod("gpu-node-03", "ft-0", seen, container="trainer")
    reason, code = last
    c.pod(
        "gpu-node-03",
        "ft-0",
        relist,
        container="trainer",
        restarts=restarts,
        last=term(relist - 20, reason, code),
    )
    return c


def test_a_restart_count_jump_from_0_to_6_is_a_crash_loop() -> None:
    """restartCount 0 at 10:01, 6 at 10:10 after a relist: six crashes in nine minutes,
    though only the sixth termination was ever in an update we saw. The old rule
    counted observed terminations only (1) and said nothing."""
    c = relisted(6, seen=1 * MIN, relist=10 * MIN)
    [inc] = of_type(run(c.events), "suspected_cuda_oom")
    assert inc.attributes["restarts_in_window"] == "6"
    assert inc.first_seen.timestamp() == c.events[1].time.timestamp(), (
        "the unseen crashes are stamped at the last sighting, the earliest they can be"
    )


def test_a_jump_after_some_seen_crashes_adds_to_them() -> None:
    """Two crashes seen one by one, then restartCount 2 -> 5 across a watch gap: five
    crashes in the window, the two seen and three only restartCount shows."""
    c = Cluster()
    c.node("gpu-node-03", 0)
    c.pod("gpu-node-03", "ft-0", 1, container="trainer")
    for k, t in enumerate([1 * MIN, 2 * MIN], start=1):
        c.pod(
            "gpu-node-03", "ft-0", t + 2, container="trainer", restarts=k, last=term(t, "Error", 1)
        )
    c.pod("gpu-node-03", "ft-0", 9 * MIN, container="trainer", restarts=5, last=term(9 * MIN - 5))
    [inc] = of_type(run(c.events), "suspected_cuda_oom")
    assert inc.attributes["restarts_in_window"] == "5"


def test_a_jump_spread_over_more_than_the_window_is_not_a_loop_in_it() -> None:
    """0 at 10:00, 6 an hour later: six restarts in an hour need not be more than three
    in any 15 minutes, so the delta counts only from a sighting inside the window.
    A guard on the delta rule (before it, no delta counted)."""
    c = relisted(6, seen=1, relist=60 * MIN)
    assert of_type(run(c.events), "suspected_cuda_oom") == []


def test_a_jump_behind_a_sigkill_or_an_oomkill_is_not_cuda_oom() -> None:
    """The unseen restarts take the class of the newest exit shown: behind a 137
    without OOMKilled they are probe kills; behind OOMKilled, host memory; behind an
    exit 0, completions. A guard on the delta rule (before it, no delta counted)."""
    for last in (("Error", 137), ("OOMKilled", 137), ("Completed", 0)):
        c = relisted(6, seen=1 * MIN, relist=10 * MIN, last=last)
        assert of_type(run(c.events), "suspected_cuda_oom") == [], last


def test_the_first_sight_of_a_restart_count_is_a_baseline() -> None:
    """A long-lived pod first seen at restartCount 40 (a fresh processor, a new
    connector) has not crashed 40 times in the window: no delta without a sighting.
    A guard on the delta rule (before it, no delta counted)."""
    c = Cluster()
    c.node("gpu-node-03", 0)
    c.pod("gpu-node-03", "ft-0", 1 * MIN, container="trainer", restarts=40, last=term(50))
    c.pod("gpu-node-03", "ft-0", 5 * MIN, container="trainer", restarts=41, last=term(5 * MIN - 3))
    assert of_type(run(c.events), "suspected_cuda_oom") == []


def test_a_termination_seen_as_current_state_then_as_last_state_counts_once() -> None:
    """The kubelet first reports a crash as ``state.terminated`` at the old
    restartCount, then restarts the container: restartCount + 1 with the same exit in
    ``lastState``. That is one restart, not one seen plus one unseen: three crashes
    so reported stay below the threshold.

    A guard for the restartCount delta (held before, when there was no delta): the
    trap is counting the current termination once and its restart again."""
    c = Cluster()
    c.node("gpu-node-03", 0)
    c.pod("gpu-node-03", "ft-0", 1, container="trainer")
    for k, t in enumerate([1 * MIN, 3 * MIN, 5 * MIN]):
        crash = term(t, "Error", 1)
        c.pod("gpu-node-03", "ft-0", t + 1, container="trainer", restarts=k, current=crash)
        c.pod("gpu-node-03", "ft-0", t + 11, container="trainer", restarts=k + 1, last=crash)
    assert of_type(run(c.events), "suspected_cuda_oom") == []


def backing_off(crashes: int) -> Cluster:
    """A GPU pod crash-looping as the kubelet reports it: each exit first as
    ``waiting: CrashLoopBackOff`` at the crashed instance's restartCount with the exit in
    ``lastState``, then ``running`` at restartCount + 1 with the same exit (the next
    instance), as ``gputriage simulate`` writes it (``train-llama-7b-qs4lr-mxgcl``)."""
    c = Cluster()
    c.node("gpu-node-03", 0)
    c.pod("gpu-node-03", "ft-0", 1, container="trainer")
    for k in range(crashes):
        t = (k + 1) * 70.0
        crash = term(t, "Error", 1)
        c.pod(
            "gpu-node-03",
            "ft-0",
            t + 1,
            container="trainer",
            restarts=k,
            last=crash,
            waiting="CrashLoopBackOff",
        )
        c.pod("gpu-node-03", "ft-0", t + 15, container="trainer", restarts=k + 1, last=crash)
    return c


def test_the_restart_after_a_back_off_is_not_a_second_crash() -> None:
    """Three crashes reported back-off first: the count's rise after each back-off is
    that exit's own restart, already counted as its termination. The old rule counted
    it again as an unseen crash and paged "restarted 5 times" for three crashes."""
    assert of_type(run(backing_off(3).events), "suspected_cuda_oom") == []
    [inc] = of_type(run(backing_off(4).events), "suspected_cuda_oom")
    assert inc.attributes["restarts_in_window"] == "4"
    assert "restarted 4 times" in inc.summary


def test_a_gap_across_a_back_off_still_counts_the_missed_crashes() -> None:
    """restartCount 0 to a back-off at 4 with a newer exit: at least three crashes were
    missed (restartCount 4 says instances 0 to 3 exited before the one shown): with the
    exit shown, more than three in the window. A guard for the rule above: the missed
    crashes still count when the update brings an exit we had not seen."""
    c = Cluster()
    c.node("gpu-node-03", 0)
    c.pod("gpu-node-03", "ft-0", 1 * MIN, container="trainer")
    crash = term(9 * MIN, "Error", 1)
    c.pod(
        "gpu-node-03",
        "ft-0",
        9 * MIN + 1,
        container="trainer",
        restarts=4,
        last=crash,
        waiting="CrashLoopBackOff",
    )
    c.pod("gpu-node-03", "ft-0", 9 * MIN + 15, container="trainer", restarts=5, last=crash)
    [inc] = of_type(run(c.events), "suspected_cuda_oom")
    assert inc.attributes["restarts_in_window"] == "4", "a lower bound: never more than seen"
