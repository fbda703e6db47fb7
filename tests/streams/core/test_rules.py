"""Each node-scoped rule, driven through the real engine with small timelines."""

from __future__ import annotations

from typing import Any

import pytest

from streams.core import advance, step
from tests.cli_helpers import load_tables
from tests.core_helpers import config, final, of_type, run
from tests.factories import T0, Cluster, term

MIN = 60.0
T0_S = T0.timestamp()


def healthy(c: Cluster, node: str, pods: list[str], **labels: str) -> None:
    c.node(node, 0, labels=dict(labels) or None)
    for name in pods:
        c.pod(node, name, 1)


# -- device_unhealthy_eviction ---------------------------------------------------------
def test_xid79_drop_and_evictions_are_one_incident() -> None:
    c = Cluster()
    healthy(c, "n1", ["a", "b", "c"])
    c.bind("n1", 2, "GPU-1", "0000:9b:00.0", ["a"])
    c.xid("n1", 5 * MIN, 79)
    c.node("n1", 5 * MIN + 9, alloc=7)
    c.pod("n1", "a", 5 * MIN + 20, phase="Failed", current=term(5 * MIN + 18))
    c.pod("n1", "b", 5 * MIN + 30, phase="Failed", reason="UnexpectedAdmissionError")
    c.kube("n1", 5 * MIN + 40, "Evicted", name="c")
    revisions = run(c.events)
    chains = of_type(revisions, "device_unhealthy_eviction")
    assert len(final(revisions)) == 1, [i.type for i in final(revisions).values()]
    [inc] = chains
    assert {p.name for p in inc.pods} == {"a", "b", "c"}
    assert [p.role for p in inc.pods if p.name == "c"] == ["evicted"]
    schemas = [e.schema for e in inc.evidence]
    assert schemas[:2] == ["xid.v1", "node.v1"], "evidence reads in causal order"
    assert (inc.gpus[0].uuid, inc.gpus[0].pci_bus_id) == ("GPU-1", "0000:9b:00.0")
    assert inc.severity == "page"
    # The first page goes out at the XID; the drop and the three failures that follow
    # within revision_interval_seconds are one held update (published here at the end
    # of the input), not one re-trigger each.
    assert [r.status for r in revisions if r.id == inc.id] == ["open", "updated"]


def test_chain_needs_a_trigger() -> None:
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.pod("n1", "a", 5 * MIN, phase="Failed", reason="Evicted")
    assert of_type(run(c.events), "device_unhealthy_eviction") == []


def test_failure_just_before_the_drop_joins_through_the_lookback() -> None:
    c = Cluster()
    healthy(c, "n1", ["a"])
    lost = "pynvml.NVMLError_GpuIsLost: GPU is lost"
    c.pod("n1", "a", 5 * MIN, phase="Failed", current=term(5 * MIN - 1, message=lost))
    c.node("n1", 5 * MIN + 30, alloc=7)
    c.tick(7 * MIN)  # the drop persists (drop_persist_seconds); a crash whose words name the
    # GPU joins a drop alone (a wordless one does not: a drop names no GPU, kills nothing)
    [inc] = of_type(run(c.events), "device_unhealthy_eviction")
    assert [p.name for p in inc.pods] == ["a"]


def test_failure_after_the_window_is_not_joined_and_chain_resolves_on_recovery() -> None:
    c = Cluster()
    healthy(c, "n1", ["a", "b"])
    c.xid("n1", 1 * MIN, 48)
    c.pod("n1", "a", 2 * MIN, phase="Failed", reason="Evicted")
    c.pod("n1", "b", 30 * MIN, phase="Failed", reason="Evicted")
    c.tick(60 * MIN)
    revisions = run(c.events)
    [inc] = of_type(revisions, "device_unhealthy_eviction")
    assert [p.name for p in inc.pods] == ["a"]
    assert inc.status == "resolved"


def test_chain_stays_open_while_the_gpu_is_unallocatable() -> None:
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.xid("n1", 1 * MIN, 79)
    c.node("n1", 1 * MIN + 5, alloc=7)
    c.pod("n1", "a", 2 * MIN, phase="Failed", reason="Evicted")
    c.tick(40 * MIN)
    open_revisions = run(list(c.events))
    [inc] = of_type(open_revisions, "device_unhealthy_eviction")
    assert inc.status != "resolved"
    assert of_type(open_revisions, "gpu_degraded") == [], "the chain already reports the drop"
    c.node("n1", 45 * MIN, alloc=8)
    [inc] = of_type(run(c.events), "device_unhealthy_eviction")
    assert inc.status == "resolved"


# -- host_oom_kill -----------------------------------------------------------------------
@pytest.mark.parametrize("namespace", ["ns", "node"])  # "node/..." must not look host-level
def test_container_oom_and_node_oomkilling_event_are_one_incident(namespace: str) -> None:
    c = Cluster()
    c.node("n2", 0)
    c.pod("n2", "srv", 1, namespace=namespace)
    c.pod(
        "n2",
        "srv",
        10 * MIN,
        restarts=1,
        last=term(10 * MIN - 1, "OOMKilled", 137),
        namespace=namespace,
    )
    c.kube("n2", 10 * MIN + 3, "OOMKilling", kind="Node", name="n2", message="Killed process 4")
    [inc] = of_type(run(c.events), "host_oom_kill")
    assert sorted(e.schema for e in inc.evidence) == ["k8s_event.v1", "pod.v1"]
    assert (inc.pods[0].role, inc.pods[0].container) == ("oom_killed", "main")


def test_unclaimed_node_oom_event_becomes_a_host_level_incident() -> None:
    c = Cluster()
    healthy(c, "n2", ["srv"])
    c.kube("n2", 10 * MIN, "OOMKilling", kind="Node", name="n2", message="Killed process 7 (sshd)")
    c.tick(20 * MIN)
    [inc] = of_type(run(c.events), "host_oom_kill")
    assert inc.pods == ()
    assert "no GPU container" in inc.summary


def test_repeated_oom_kills_update_one_incident_then_it_resolves_when_quiet() -> None:
    c = Cluster()
    healthy(c, "n2", ["srv"])
    c.pod("n2", "srv", 2 * MIN, restarts=1, last=term(2 * MIN - 1, "OOMKilled", 137))
    c.pod("n2", "srv", 4 * MIN, restarts=2, last=term(4 * MIN - 1, "OOMKilled", 137))
    c.tick(60 * MIN)
    revisions = run(c.events)
    [inc] = of_type(revisions, "host_oom_kill")
    assert inc.attributes["kills"] == "2"
    assert [r.status for r in revisions if r.id == inc.id] == ["open", "updated", "resolved"]


def test_the_same_termination_seen_twice_counts_once() -> None:
    c = Cluster()
    healthy(c, "n2", ["srv"])
    oom = term(2 * MIN, "OOMKilled", 137)
    c.pod("n2", "srv", 2 * MIN + 1, current=oom)
    c.pod("n2", "srv", 2 * MIN + 5, restarts=1, last=oom)
    [inc] = of_type(run(c.events), "host_oom_kill")
    assert inc.attributes["kills"] == "1"


# -- suspected_cuda_oom --------------------------------------------------------------------
def crash_loop(
    c: Cluster,
    node: str,
    pod: str,
    times: list[float],
    reason: str = "Error",
    code: int = 1,
    message: str = "",
    gpus: int = 1,
) -> None:
    for k, t in enumerate(times, start=1):
        c.pod(node, pod, t + 2, restarts=k, last=term(t, reason, code, message), gpus=gpus)


def test_crash_loop_without_logs_is_suspected_cuda_oom() -> None:
    c = Cluster()
    healthy(c, "n3", ["ft"])
    crash_loop(c, "n3", "ft", [1 * MIN, 3 * MIN, 6 * MIN, 9 * MIN])
    [inc] = of_type(run(c.events), "suspected_cuda_oom")
    assert inc.attributes["confidence"] == "suspected"
    assert inc.attributes["restarts_in_window"] == "4"


def test_three_restarts_are_not_enough() -> None:
    c = Cluster()
    healthy(c, "n3", ["ft"])
    crash_loop(c, "n3", "ft", [1 * MIN, 3 * MIN, 6 * MIN])
    assert of_type(run(c.events), "suspected_cuda_oom") == []


def test_restarts_spread_beyond_the_window_do_not_fire() -> None:
    c = Cluster()
    healthy(c, "n3", ["ft"])
    crash_loop(c, "n3", "ft", [1 * MIN, 10 * MIN, 20 * MIN, 30 * MIN, 40 * MIN])
    assert of_type(run(c.events), "suspected_cuda_oom") == []


def test_cuda_oom_message_confirms_it() -> None:
    c = Cluster()
    healthy(c, "n3", ["ft"])
    crash_loop(
        c,
        "n3",
        "ft",
        [1 * MIN, 3 * MIN, 6 * MIN, 9 * MIN],
        message="torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB",
    )
    [inc] = of_type(run(c.events), "suspected_cuda_oom")
    assert inc.attributes["confidence"] == "log-confirmed"


def test_never_raised_when_the_last_termination_was_oomkilled() -> None:
    c = Cluster()
    healthy(c, "n3", ["ft"])
    times = [1 * MIN, 3 * MIN, 6 * MIN, 9 * MIN, 11 * MIN]
    for k, t in enumerate(times, start=1):
        reason, code = ("OOMKilled", 137) if k == len(times) - 1 else ("Error", 1)
        c.pod("n3", "ft", t + 2, restarts=k, last=term(t, reason, code))
    revisions = run(c.events)
    assert of_type(revisions, "suspected_cuda_oom") == []
    assert len(of_type(revisions, "host_oom_kill")) == 1


def test_open_suspicion_is_superseded_by_an_oomkill() -> None:
    c = Cluster()
    healthy(c, "n3", ["ft"])
    crash_loop(c, "n3", "ft", [1 * MIN, 3 * MIN, 6 * MIN, 9 * MIN])
    c.pod("n3", "ft", 12 * MIN, restarts=5, last=term(12 * MIN - 2, "OOMKilled", 137))
    revisions = run(c.events)
    [inc] = of_type(revisions, "suspected_cuda_oom")
    assert inc.status == "resolved"
    assert "OOMKilled" in inc.attributes["resolution"]


def test_shared_gpu_names_every_co_tenant_as_candidate() -> None:
    c = Cluster()
    healthy(c, "n3", ["ft", "nb"], **{"nvidia.com/gpu.sharing-strategy": "time-slicing"})
    c.bind("n3", 2, "GPU-3", "0000:1a:00.0", ["ft", "nb"])
    crash_loop(c, "n3", "ft", [1 * MIN, 3 * MIN, 6 * MIN, 9 * MIN])
    [inc] = of_type(run(c.events), "suspected_cuda_oom")
    assert {(p.name, p.role) for p in inc.pods} == {("ft", "restarting"), ("nb", "candidate")}
    assert inc.attributes["shared_gpu"] == "time-slicing"


def test_non_gpu_pods_are_not_tracked() -> None:
    c = Cluster()
    c.node("n3", 0)
    c.pod("n3", "web", 1, gpus=0)
    crash_loop(c, "n3", "web", [1 * MIN, 3 * MIN, 6 * MIN, 9 * MIN], gpus=0)
    assert run(c.events) == []


# -- gpu_degraded --------------------------------------------------------------------------
def test_silent_allocatable_drop_becomes_degraded_after_five_minutes() -> None:
    c = Cluster()
    healthy(c, "n4", ["a"])
    c.xid("n4", 3 * MIN - 2, 92, bus="0000:3b:00.0")
    c.node("n4", 3 * MIN, alloc=7)
    c.tick(7 * MIN)
    assert of_type(run(list(c.events)), "gpu_degraded") == [], "not before five minutes"
    c.tick(9 * MIN)
    [inc] = of_type(run(c.events), "gpu_degraded")
    assert inc.status == "open"
    assert [e.schema for e in inc.evidence] == ["xid.v1", "node.v1"]
    assert inc.gpus[0].pci_bus_id == "0000:3b:00.0"
    c.node("n4", 20 * MIN, alloc=8)
    [inc] = of_type(run(c.events), "gpu_degraded")
    assert inc.status == "resolved"


def test_short_drop_is_not_degraded() -> None:
    c = Cluster()
    healthy(c, "n4", [])
    c.node("n4", 3 * MIN, alloc=7)
    c.node("n4", 5 * MIN, alloc=8)
    c.tick(30 * MIN)
    assert run(c.events) == []


# -- gpu_app_fault ---------------------------------------------------------------------
def test_app_xid_names_the_bound_pod_and_escalates_when_repeated() -> None:
    c = Cluster()
    healthy(c, "n5", ["render"])
    c.bind("n5", 2, "GPU-5", "0000:4c:00.0", ["render"])
    c.xid("n5", 6 * MIN, 13, bus="0000:4c:00.0")
    revisions = run(list(c.events))
    [inc] = of_type(revisions, "gpu_app_fault")
    assert (inc.severity, inc.pods[0].name, inc.pods[0].role) == ("info", "render", "bound")
    c.xid("n5", 7 * MIN, 31, bus="0000:4c:00.0")
    c.xid("n5", 8 * MIN, 13, bus="0000:4c:00.0")  # the first XID 13's episode, logged again
    [inc] = of_type(run(list(c.events)), "gpu_app_fault")
    assert (inc.severity, inc.attributes["count"]) == ("info", "2"), "episodes, not lines"
    c.xid("n5", 30 * MIN, 13, bus="0000:4c:00.0")  # a third episode: past the 10 min gap
    [inc] = of_type(run(c.events), "gpu_app_fault")
    assert inc.severity == "ticket"
    assert inc.attributes["xids"] == "13,31"
    assert of_type(run(c.events), "device_unhealthy_eviction") == []


@pytest.mark.parametrize("sxid", [False, True])
def test_an_nvswitch_sxid_is_never_read_as_the_gpu_xid_with_its_number(sxid: bool) -> None:
    c = Cluster()
    healthy(c, "n5", ["render"])
    c.bind("n5", 2, "GPU-5", "0000:4c:00.0", ["render"])
    for minute in (6, 7, 8):
        c.xid("n5", minute * MIN, 13, bus="0000:4c:00.0", sxid=sxid)
    faults = of_type(run(c.events), "gpu_app_fault")
    assert bool(faults) is not sxid


@pytest.mark.parametrize(("pods_known", "named"), [(False, ["render"]), (True, [])])
def test_an_identity_only_binding_never_unbinds_pods(pods_known: bool, named: list[str]) -> None:
    # dcgm-exporter bound "render"; then a binding without pods: from NVML
    # (pods_known false: identity only) it changes nothing, from a pod-aware
    # source it unbinds.
    c = Cluster()
    healthy(c, "n5", ["render"])
    c.bind("n5", 2, "GPU-5", "0000:4c:00.0", ["render"])
    c.bind("n5", 3, "GPU-5", "0000:4c:00.0", [], pods_known=pods_known)
    c.xid("n5", 6 * MIN, 13, bus="0000:4c:00.0")
    [inc] = of_type(run(c.events), "gpu_app_fault")
    assert [p.name for p in inc.pods] == named


def test_app_xid_on_a_time_sliced_gpu_blames_no_single_pod() -> None:
    c = Cluster()
    healthy(c, "n5", ["a", "b", "c"])
    c.bind("n5", 2, "GPU-5", "0000:4c:00.0", ["a", "b", "c"])
    c.xid("n5", 6 * MIN, 31, bus="0000:4c:00.0")
    [inc] = of_type(run(c.events), "gpu_app_fault")
    assert {p.role for p in inc.pods} == {"candidate"}
    assert len(inc.pods) == 3


def test_xid_45_follows_the_earlier_error() -> None:
    c = Cluster()
    healthy(c, "n5", ["a"])
    c.bind("n5", 2, "GPU-5", "0000:4c:00.0", ["a"])
    c.xid("n5", 6 * MIN, 13, bus="0000:4c:00.0")
    c.xid("n5", 6 * MIN + 1, 45, bus="0000:4c:00.0")
    [inc] = of_type(run(c.events), "gpu_app_fault")
    assert inc.attributes["count"] == "1"
    assert len(inc.evidence) == 2


# -- xid_repeat -----------------------------------------------------------------------
CATALOG_TICKET_FATAL = 2
"""A fatal code the XID catalog rates ``ticket`` (unused on current GPUs)."""


def test_fifth_fatal_xid_in_a_day_escalates() -> None:
    c = Cluster()
    c.node("n6", 0)
    for k in range(4):
        c.xid("n6", (k + 1) * 3600, 119, bus="0000:cb:00.0")
    assert of_type(run(list(c.events)), "xid_repeat") == []
    c.xid("n6", 5 * 3600, 119, bus="0000:cb:00.0")
    [inc] = of_type(run(c.events), "xid_repeat")
    assert (inc.attributes["xid"], inc.attributes["occurrences"]) == ("119", "5")
    assert len(inc.evidence) == 5


def test_fatal_xids_spread_over_more_than_a_day_do_not_repeat() -> None:
    c = Cluster()
    c.node("n6", 0)
    for k in range(5):
        c.xid("n6", k * 7 * 3600, 119, bus="0000:cb:00.0")
    assert of_type(run(c.events), "xid_repeat") == []


def test_duplicates_from_two_sources_count_once() -> None:
    c = Cluster()
    c.node("n6", 0)
    for k in range(3):
        c.xid("n6", (k + 1) * 3600, 48, bus="0000:cb:00.0")
        c.xid("n6", (k + 1) * 3600 + 0.2, 48, bus="0000:cb:00.0", uuid="GPU-6")
    assert of_type(run(c.events), "xid_repeat") == []


@pytest.mark.parametrize(
    ("code", "overrides", "severity"),
    [
        (119, {}, "page"),  # the catalog says page: the type's severity stands
        (CATALOG_TICKET_FATAL, {}, "ticket"),  # the catalog caps this code at ticket
        (119, {"severity": {"xid_repeat": "ticket"}}, "ticket"),  # [core] is the ceiling
    ],
)
def test_a_repeat_is_at_most_as_severe_as_the_catalog_says(
    code: int, overrides: dict[str, Any], severity: str
) -> None:
    c = Cluster()
    c.node("n6", 0)
    for k in range(5):
        c.xid("n6", (k + 1) * 3600, code, bus="0000:cb:00.0")
    [inc] = of_type(run(c.events, config(**overrides)), "xid_repeat")
    assert inc.severity == severity


def test_repeat_threshold_comes_from_configuration() -> None:
    c = Cluster()
    c.node("n6", 0)
    for k in range(3):
        c.xid("n6", (k + 1) * 3600, 119, bus="0000:cb:00.0")
    [inc] = of_type(run(c.events, config(xid_repeat_count=3)), "xid_repeat")
    assert inc.attributes["occurrences"] == "3"


# -- gpu_node_not_ready ------------------------------------------------------------------
def test_not_ready_names_running_pods_and_later_evictions_join() -> None:
    c = Cluster()
    healthy(c, "n7", ["s1", "s2"])
    c.node("n7", 12 * MIN, ready="Unknown")
    c.kube("n7", 17 * MIN, "TaintManagerEviction", name="s1")
    c.node("n7", 24 * MIN, ready="True")
    revisions = run(c.events)
    [inc] = of_type(revisions, "gpu_node_not_ready")
    assert {(p.name, p.role) for p in inc.pods} == {("s1", "evicted"), ("s2", "running")}
    assert [r.status for r in revisions if r.id == inc.id] == ["open", "updated", "resolved"]


def test_not_ready_without_gpu_pods_is_quiet() -> None:
    c = Cluster()
    c.node("n7", 0)
    c.node("n7", 12 * MIN, ready="False")
    assert run(c.events) == []


def test_node_deletion_resolves_its_incidents() -> None:
    c = Cluster()
    healthy(c, "n7", ["s1"])
    c.node("n7", 12 * MIN, ready="False")
    c.node("n7", 13 * MIN, ready="False", op="deleted")
    [inc] = of_type(run(c.events), "gpu_node_not_ready")
    assert (inc.status, inc.attributes["resolution"]) == ("resolved", "node deleted")


# -- configuration and policy ---------------------------------------------------------
def test_xid_policy_override_changes_the_class() -> None:
    c = Cluster()
    healthy(c, "n5", ["a"])
    c.xid("n5", 6 * MIN, 13)
    c.pod("n5", "a", 6 * MIN + 10, phase="Failed", reason="Evicted")
    default = run(c.events)
    assert of_type(default, "device_unhealthy_eviction") == []
    overridden = run(c.events, load_tables({"xid": {"fatal": [13]}}).core_config())
    assert len(of_type(overridden, "device_unhealthy_eviction")) == 1


def test_xid_154_with_a_reset_action_arms_the_chain() -> None:
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.xid("n1", 60, 154, recovery_action="GPU Reset Required")
    c.pod("n1", "a", 70, phase="Failed", reason="Evicted")
    assert len(of_type(run(c.events), "device_unhealthy_eviction")) == 1


def test_unknown_xid_codes_are_kept_as_evidence() -> None:
    c = Cluster()
    healthy(c, "n4", [])
    c.xid("n4", 60, 999, bus="0000:3b:00.0")
    c.node("n4", 61, alloc=7)
    c.tick(20 * MIN)
    [inc] = of_type(run(c.events), "gpu_degraded")
    assert any("XID 999 (unknown" in e.text for e in inc.evidence)


def test_one_severity_override_keeps_the_other_defaults() -> None:
    cfg = load_tables({"core": {"severity": {"host_oom_kill": "page"}}}).core_config()
    assert cfg.severity["host_oom_kill"] == "page"
    assert cfg.severity["gpu_app_fault"] == "info"


# -- the per-key functional API ---------------------------------------------------------
def test_step_and_advance_are_the_same_transition_as_the_engine() -> None:
    c = Cluster()
    healthy(c, "n4", [])
    c.node("n4", 3 * MIN, alloc=7)
    cfg = config()
    state = None
    opened = []
    for event in c.events:
        state, out = step(state, event, cfg)
        opened += out
    assert state is not None
    assert opened == []
    state, early = advance(state, (T0_S + 7 * MIN), cfg)
    assert early == []
    state, due = advance(state, (T0_S + 9 * MIN), cfg)
    assert [i.type for i in due] == ["gpu_degraded"]
    c.tick(9 * MIN)
    assert [i.id for i in run(c.events)] == [due[0].id]


def test_a_taint_eviction_event_does_not_make_the_pods_next_update_a_successor() -> None:
    """A pod OOM-killed, then marked for deletion by the taint manager (a
    failure Event while the object is still Running): its deletionTimestamp update
    still shows the OOMKilled ``lastState``. That update is the same pod, not a new
    one of the same name, so the one kill stays one ``host_oom_kill``."""
    c = Cluster()
    healthy(c, "n2", ["srv"])
    c.pod("n2", "srv", 2 * MIN, restarts=1, last=term(2 * MIN - 1, "OOMKilled", 137))
    c.kube("n2", 5 * MIN, "TaintManagerEviction", name="srv", message="Marking for deletion")
    c.pod(
        "n2",
        "srv",
        5 * MIN + 1,
        restarts=1,
        last=term(2 * MIN - 1, "OOMKilled", 137),
        deleted_at=5 * MIN + 1,
    )
    c.pod(
        "n2",
        "srv",
        5 * MIN + 20,
        phase="Failed",
        restarts=1,
        last=term(2 * MIN - 1, "OOMKilled", 137),
        current=term(5 * MIN + 19, "Error", 143),
        deleted_at=5 * MIN + 1,
    )
    c.pod(
        "n2", "srv", 5 * MIN + 25, phase="Failed", restarts=1, op="deleted", deleted_at=5 * MIN + 1
    )
    [inc] = of_type(run(c.events), "host_oom_kill")
    assert inc.attributes["kills"] == "1"
    assert inc.attributes["resolution"] == "pod deleted"


def test_a_successor_after_a_failure_event_is_told_by_its_pending_phase() -> None:
    c = Cluster()
    healthy(c, "n2", ["db-0"])
    c.pod("n2", "db-0", 2 * MIN, restarts=1, last=term(2 * MIN - 1, "OOMKilled", 137))
    c.kube("n2", 3 * MIN, "Evicted", name="db-0", message="The node was low on memory")
    c.pod("n2", "db-0", 4 * MIN, phase="Pending", uid="uid-db-0-second")
    [inc] = of_type(run(c.events), "host_oom_kill")
    assert inc.attributes["resolution"] == "pod replaced by a new pod of the same name"


def test_a_same_named_successor_starts_a_fresh_pod() -> None:
    c = Cluster()
    healthy(c, "n2", ["db-0"])
    c.pod("n2", "db-0", 2 * MIN, restarts=1, last=term(2 * MIN - 1, "OOMKilled", 137))
    c.pod("n2", "db-0", 3 * MIN, phase="Failed", reason="Evicted")
    c.pod("n2", "db-0", 4 * MIN, phase="Running", uid="uid-db-0-second")
    [inc] = of_type(run(c.events), "host_oom_kill")
    assert inc.status == "resolved"
    assert inc.attributes["resolution"] == "pod replaced by a new pod of the same name"
