"""False pages: signals that look like a fault but are Kubernetes working.

Each test is a rule of the domain (docs/detection.md), driven through the real
engine with real-shaped events from :mod:`tests.factories`; the docstring says why.
"""

from __future__ import annotations

import msgspec

from streams.core import Correlator
from tests.core_helpers import config, final, of_type, run
from tests.factories import T0, Cluster, term

MIN = 60.0
T0_S = T0.timestamp()
NOT_READY = "gpu_node_not_ready"


def healthy(c: Cluster, node: str, pods: list[str]) -> None:
    c.node(node, 0)
    for name in pods:
        c.pod(node, name, 1)


# -- class 5: a NotReady blip is not a page -----------------------------------------------
def test_a_30_second_not_ready_blip_does_not_page() -> None:
    """Kubernetes waits out a short NotReady (node-monitor grace, 300 s NoExecute
    tolerations): a 30 s blip evicts nothing and heals itself, so it publishes nothing."""
    c = Cluster()
    healthy(c, "n7", ["s1", "s2"])
    c.node("n7", 10 * MIN, ready="Unknown")
    c.node("n7", 10 * MIN + 30, ready="True")
    c.tick(30 * MIN)
    assert of_type(run(c.events), NOT_READY) == []


def test_not_ready_longer_than_the_grace_pages_at_the_grace_in_event_time() -> None:
    """Past the grace (default 120 s) the node is really down: it pages, anchored on the
    transition (same id and first_seen as without a grace), when the *watermark* passes
    the grace: a tick two minutes later, not a wall clock."""
    c = Cluster()
    healthy(c, "n7", ["s1"])
    c.node("n7", 10 * MIN, ready="False")
    correlator = Correlator(config())
    for ev in c.events:
        assert [i for i in correlator.ingest(ev) if i.type == NOT_READY] == []
    c.events.clear()
    early = c.tick(10 * MIN + 119)
    assert correlator.ingest(early) == []
    [opened] = correlator.ingest(c.tick(10 * MIN + 121))
    assert (opened.type, opened.status, opened.severity) == (NOT_READY, "open", "page")
    assert opened.first_seen.timestamp() == T0_S + 10 * MIN
    assert [p.name for p in opened.pods] == ["s1"]


def test_a_gpu_pod_failing_during_the_grace_pages_at_once() -> None:
    """A GPU pod evicted or failed while the node is NotReady means the blip already
    costs work: no reason to wait out the grace."""
    c = Cluster()
    healthy(c, "n7", ["s1", "s2"])
    c.node("n7", 10 * MIN, ready="Unknown")
    c.kube("n7", 10 * MIN + 20, "TaintManagerEviction", name="s1")
    c.node("n7", 10 * MIN + 40, ready="True")
    revisions = run(c.events)
    [inc] = of_type(revisions, NOT_READY)
    assert inc.severity == "page"
    assert {(p.name, p.role) for p in inc.pods} == {("s1", "evicted"), ("s2", "running")}
    assert [r.status for r in revisions if r.id == inc.id] == ["open", "resolved"]


def test_false_then_unknown_is_one_episode_measured_from_the_first_transition() -> None:
    """Ready=False then Unknown (the kubelet said unhealthy, then stopped reporting) is
    one NotReady: the grace is not restarted by the second, and it pages once."""
    c = Cluster()
    healthy(c, "n7", ["s1"])
    c.node("n7", 10 * MIN, ready="False")
    c.node("n7", 11 * MIN, ready="Unknown")
    c.node("n7", 12 * MIN + 30, ready="True")
    revisions = run(c.events)
    [inc] = of_type(revisions, NOT_READY)
    opened = [r for r in revisions if r.id == inc.id and r.status == "open"]
    assert len(opened) == 1
    assert opened[0].first_seen.timestamp() == T0_S + 10 * MIN
    assert inc.status == "resolved"


def test_a_flapping_node_measures_each_stretch_and_does_not_page_on_short_flaps() -> None:
    """Several short flaps (each < grace) do not add up: the grace restarts at each
    transition. A later stretch past the grace does page, as its own incident."""
    c = Cluster()
    healthy(c, "n7", ["s1"])
    for k in range(4):
        c.node("n7", (10 + k) * MIN, ready="Unknown")
        c.node("n7", (10 + k) * MIN + 45, ready="True")
    assert of_type(run(list(c.events)), NOT_READY) == []
    c.node("n7", 20 * MIN, ready="Unknown")
    c.node("n7", 25 * MIN, ready="True")
    [inc] = of_type(run(c.events), NOT_READY)
    assert inc.first_seen.timestamp() == T0_S + 20 * MIN


def test_a_node_deleted_while_not_ready_pages_and_resolves_as_deleted() -> None:
    """Deleting a NotReady node inside the grace loses its GPU pods (the pod GC deletes
    pods bound to a node that no longer exists): that is a failure, so it pages, and
    resolves as deleted in the same breath; the pending timer dies with the node."""
    c = Cluster()
    healthy(c, "n7", ["s1"])
    c.node("n7", 10 * MIN, ready="Unknown")
    c.node("n7", 10 * MIN + 30, ready="Unknown", op="deleted")
    c.tick(30 * MIN)
    revisions = run(c.events)
    [inc] = of_type(revisions, NOT_READY)
    assert (inc.status, inc.attributes["resolution"]) == ("resolved", "node deleted")
    assert len(final(revisions)) == 1


def test_the_not_ready_grace_is_configurable() -> None:
    """``not_ready_grace_seconds`` sets the wait; 0 restores paging on the transition."""
    c = Cluster()
    healthy(c, "n7", ["s1"])
    c.node("n7", 10 * MIN, ready="False")
    c.node("n7", 10 * MIN + 30, ready="True")
    assert of_type(run(c.events, config(not_ready_grace_seconds=10)), NOT_READY) != []
    assert of_type(run(c.events, config(not_ready_grace_seconds=0)), NOT_READY) != []
    assert of_type(run(c.events, config(not_ready_grace_seconds=60)), NOT_READY) == []


# -- class 4: a device-plugin restart is not a device fault ---------------------------------
CHAIN = "device_unhealthy_eviction"


def test_a_device_plugin_restart_and_an_unrelated_crash_do_not_page() -> None:
    """A restarting device plugin de-registers and re-registers its GPUs: allocatable
    8 -> 0 -> 8 in seconds is no fault, so it never arms the eviction chain, and an
    application crash a minute later is the application's (no "cordon and drain" page)."""
    c = Cluster()
    healthy(c, "n1", ["a", "b"])
    c.node("n1", 5 * MIN, alloc=0)
    c.node("n1", 5 * MIN + 4, alloc=8)
    c.pod("n1", "a", 6 * MIN + 30, phase="Failed", current=term(6 * MIN + 29))
    c.tick(30 * MIN)
    revisions = run(c.events)
    assert of_type(revisions, CHAIN) == []
    assert of_type(revisions, "gpu_degraded") == []


def test_an_unrelated_crash_just_before_a_plugin_restart_does_not_page() -> None:
    """The same restart with the application crash 30 s *before* it: an ordinary crash
    does not vouch for a drop (only a failure that says device does: the kubelet's
    UnexpectedAdmissionError, a DeviceFailed eviction), so the 4 s drop never arms."""
    c = Cluster()
    healthy(c, "n1", ["a", "b"])
    c.pod("n1", "a", 5 * MIN - 30, phase="Failed", current=term(5 * MIN - 31))
    c.node("n1", 5 * MIN, alloc=0)
    c.node("n1", 5 * MIN + 4, alloc=8)
    c.tick(30 * MIN)
    revisions = run(c.events)
    assert of_type(revisions, CHAIN) == []


def test_an_admission_error_just_before_a_drop_trusts_it_at_once() -> None:
    """The kubelet often sees a dead device first: a pod refused with
    UnexpectedAdmissionError a few seconds before the plugin drops the GPU vouches for
    the drop, which arms the chain without waiting for it to persist."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.pod("n1", "a", 5 * MIN - 10, phase="Failed", reason="UnexpectedAdmissionError")
    c.node("n1", 5 * MIN, alloc=7)
    [inc] = of_type(run(c.events), CHAIN)
    assert [p.name for p in inc.pods] == ["a"]


def test_a_drop_that_persists_arms_the_chain_anchored_at_the_drop() -> None:
    """A drop still there after ``drop_persist_seconds`` (60 s) is the plugin marking a
    GPU unhealthy: the chain arms from the drop's own time, so an eviction joins it."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.node("n1", 5 * MIN, alloc=7)
    c.pod("n1", "a", 8 * MIN, phase="Failed", reason="Evicted")
    [inc] = of_type(run(c.events), CHAIN)
    assert inc.first_seen.timestamp() == T0_S + 5 * MIN
    assert [p.name for p in inc.pods] == ["a"]
    assert "GPU allocatable drop" in inc.summary


def test_an_ordinary_crash_far_from_the_fault_does_not_join_a_drop_chain() -> None:
    """A container's exit 1 minutes after the drop, with no device word and no binding
    to say where it ran, is an application bug: it does not join (the eviction does)."""
    c = Cluster()
    healthy(c, "n1", ["a", "b"])
    c.node("n1", 5 * MIN, alloc=7)
    c.pod("n1", "a", 9 * MIN, phase="Running", restarts=1, last=term(9 * MIN - 2))
    c.pod("n1", "b", 10 * MIN, phase="Failed", reason="Evicted")
    [inc] = of_type(run(c.events), CHAIN)
    assert [p.name for p in inc.pods] == ["b"]


def test_a_crash_on_another_gpu_does_not_join_but_one_on_the_faulty_gpu_does() -> None:
    """With bindings known, a pod joins only if it ran on the faulty GPU: a crash on a
    healthy GPU of the same node, two minutes after an XID 79 on another, is unrelated."""
    c = Cluster()
    healthy(c, "n1", ["a", "b"])
    c.bind("n1", 2, "GPU-1", "0000:9b:00.0", ["a"])
    c.bind("n1", 2, "GPU-2", "0000:bb:00.0", ["b"])
    c.xid("n1", 5 * MIN, 79, bus="0000:9b:00.0", uuid="GPU-1")
    c.pod("n1", "b", 7 * MIN, phase="Running", restarts=1, last=term(7 * MIN - 1))
    c.pod("n1", "a", 7 * MIN + 10, phase="Failed", current=term(7 * MIN + 5))
    [inc] = of_type(run(c.events), CHAIN)
    assert [p.name for p in inc.pods] == ["a"]


def test_a_failure_that_says_device_joins_wherever_it_ran() -> None:
    """``UnexpectedAdmissionError``, a ``DeviceUnhealthy`` eviction or a CUDA/NVML error
    in the termination message say *device*: they join even far from the fault time.
    A CUDA *out of memory* message does not: that is the workload's memory."""
    c = Cluster()
    healthy(c, "n1", ["a", "b", "d", "e"])
    c.node("n1", 5 * MIN, alloc=7)
    c.pod("n1", "a", 9 * MIN, phase="Failed", reason="UnexpectedAdmissionError")
    c.kube("n1", 9 * MIN, "Evicted", name="b", message="DeviceUnhealthy: nvidia.com/gpu")
    msg = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    c.pod("n1", "d", 9 * MIN, restarts=1, last=term(9 * MIN - 1, message=msg))
    oom = "torch.OutOfMemoryError: CUDA error: out of memory"
    c.pod("n1", "e", 9 * MIN, restarts=1, last=term(9 * MIN - 1, message=oom))
    [inc] = of_type(run(c.events), CHAIN)
    assert sorted(p.name for p in inc.pods) == ["a", "b", "d"]


def test_a_kernel_fault_on_another_gpu_does_not_join_a_drop_chain() -> None:
    """A drop that names no GPU persists (gpu_degraded's ticket); minutes later a pod on
    another GPU hits XID 13 (an application error: NVIDIA's catalog, and the device
    plugin does not mark a GPU unhealthy for it) and crashes with ``CUDA error: an
    illegal memory access was encountered``, which the cause table classes as a kernel
    fault, the workload's. Its words contain "CUDA error", but they say workload: it
    does not make the drop a device_unhealthy_eviction page (the old rule did: one
    false page and one missed ticket, a simulated fleet). A failure whose words do say
    device (an uncorrectable ECC error) still escalates the drop."""
    c = Cluster()
    healthy(c, "n1", ["a", "b"])
    c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
    c.node("n1", 5 * MIN, alloc=7)
    c.xid("n1", 10 * MIN, 13, bus="0000:20:00.0", uuid="GPU-20")
    msg = (
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "CUDA kernel errors might be asynchronously reported at some other API call."
    )
    c.pod("n1", "a", 10 * MIN + 10, restarts=1, last=term(10 * MIN + 9, message=msg))
    revisions = run(c.events)
    assert of_type(revisions, CHAIN) == []
    [degraded] = of_type(revisions, "gpu_degraded")
    assert (degraded.severity, degraded.pods) == ("ticket", ())
    assert [i.type for i in of_type(revisions, "gpu_app_fault")] == ["gpu_app_fault"]
    ecc = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
    c.pod("n1", "b", 11 * MIN, restarts=1, last=term(11 * MIN - 1, message=ecc))
    [escalated] = of_type(run(c.events), "gpu_degraded")
    assert escalated.severity == "page"
    assert [p.name for p in escalated.pods if p.role == "failed"] == ["b"]


def test_earlier_unrelated_xids_do_not_move_a_drops_first_seen() -> None:
    """An XID 13 (the workload's) and an XID 63 (a page retirement, informational)
    minutes before a drop stay attached as context, but the degradation began at the
    drop: first_seen is the drop's time, and the XID 13's GPU is not named degraded (the
    device plugin marks a GPU unhealthy for any XID but the application ones).
    The old rule dated the incident from the earliest XID, minutes before the drop, so
    its detection delay looked minutes long (seen in simulated fleets)."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
    c.xid("n1", 2 * MIN, 13, bus="0000:20:00.0", uuid="GPU-20")
    c.xid("n1", 3 * MIN, 63, bus="0000:21:00.0", uuid="GPU-21")
    c.node("n1", 5 * MIN, alloc=7)
    c.tick(11 * MIN)
    [inc] = of_type(run(c.events), "gpu_degraded")
    assert inc.first_seen.timestamp() == T0_S + 5 * MIN
    assert [e.schema for e in inc.evidence].count("xid.v1") == 2, "kept as context"
    assert "GPU-20" not in [g.uuid for g in inc.gpus], "an XID 13 marks no GPU unhealthy"


def test_a_crash_loops_next_crash_near_a_drop_is_the_loops() -> None:
    """A container crash-looping for ten minutes (its suspected_cuda_oom open) crashes
    again 30 s before a drop that names no GPU. An ordinary crash near a trigger joins
    the chain because a dead GPU kills its process at once, but this one would have
    crashed anyway: the drop stays a gpu_degraded ticket, the loop stays its own
    incident. The old rule paged device_unhealthy_eviction for it (seen in a simulated fleet,
    twice). A pod that fails with no loop behind it joins only if its words name the
    GPU (a drop alone kills no process; a wordless crash says nothing)."""
    c = Cluster()
    healthy(c, "n1", ["a", "b"])
    for k in range(5):
        t = (k + 1) * 2 * MIN
        c.pod("n1", "a", t + 1, restarts=k + 1, last=term(t))
    c.node("n1", 10 * MIN + 31, alloc=7)
    c.tick(17 * MIN)
    revisions = run(c.events)
    assert of_type(revisions, CHAIN) == []
    assert [i.severity for i in of_type(revisions, "gpu_degraded")] == ["ticket"]
    [loop] = of_type(revisions, "suspected_cuda_oom")
    assert loop.status in ("open", "updated")
    c.events.pop()
    c.pod("n1", "b", 10 * MIN + 20, restarts=1, last=term(10 * MIN + 19))
    c.tick(17 * MIN)
    assert of_type(run(c.events), CHAIN) == []
    c.events.pop()
    lost = "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost."
    c.pod("n1", "b", 10 * MIN + 25, restarts=2, last=term(10 * MIN + 24, message=lost))
    c.tick(17 * MIN)
    [chain] = of_type(run(c.events), CHAIN)
    assert [p.name for p in chain.pods] == ["b"]


def test_a_pressure_evictions_sigkill_is_the_eviction_not_a_crash() -> None:
    """Node memory pressure evicts a GPU pod 20 s after a drop that names no GPU: the
    pod update says ``Failed``/``Evicted`` "low on resource: memory" and its container
    exited 137, the eviction's SIGKILL. That kill is the eviction (the host's, which does
    not join), not an ordinary crash near the drop; the old rule offered the exit alone
    and paged the drop as a device_unhealthy_eviction (seen in a simulated fleet)."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.node("n1", 5 * MIN, alloc=7)
    c.kube("n1", 5 * MIN + 20, "Evicted", name="a", message="The node was low on resource: memory.")
    ev = c.pod(
        "n1",
        "a",
        5 * MIN + 23,
        phase="Failed",
        reason="Evicted",
        current=term(5 * MIN + 22, code=137),
    )
    c.events[-1] = msgspec.structs.replace(ev, message="The node was low on resource: memory.")
    c.tick(12 * MIN)
    revisions = run(c.events)
    assert of_type(revisions, CHAIN) == []
    assert [i.severity for i in of_type(revisions, "gpu_degraded")] == ["ticket"]


def test_a_loop_whose_job_gives_up_near_a_drop_is_not_the_drops() -> None:
    """A crash loop ends with the pod ``Failed`` (no reason) 40 s after a drop that names
    no GPU: the pod's failure is the loop's end, not the device's (seen in a simulated fleet)."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    for k in range(5):
        t = (k + 1) * 2 * MIN
        c.pod("n1", "a", t + 1, restarts=k + 1, last=term(t))
    c.node("n1", 10 * MIN + 31, alloc=7)
    c.pod("n1", "a", 11 * MIN + 11, phase="Failed", restarts=5, current=term(11 * MIN + 10))
    c.tick(17 * MIN)
    revisions = run(c.events)
    assert of_type(revisions, CHAIN) == []
    assert [i.severity for i in of_type(revisions, "gpu_degraded")] == ["ticket"]


def test_a_crash_right_after_an_app_xid_on_its_gpu_is_the_workloads() -> None:
    """XID 13 on the pod's GPU, a drop naming no GPU 7 s later, the pod's exit 14 s after
    that: the crash is explained by its own GPU's application fault (the device plugin
    marks no GPU unhealthy for an XID 13), so the drop's nearness does not claim it: a
    gpu_degraded ticket and a gpu_app_fault, no page (seen in a simulated fleet). The same crash
    with no XID on its GPU does not join either: a drop alone claims only a
    crash whose words name the GPU, and this one has none."""

    def history(app_xid: bool) -> Cluster:
        c = Cluster()
        healthy(c, "n1", ["a"])
        c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
        if app_xid:
            c.xid("n1", 5 * MIN - 7, 13, bus="0000:20:00.0", uuid="GPU-20")
        c.node("n1", 5 * MIN, alloc=7)
        c.pod("n1", "a", 5 * MIN + 14, restarts=1, last=term(5 * MIN + 13))
        c.tick(12 * MIN)
        return c

    revisions = run(history(app_xid=True).events)
    assert of_type(revisions, CHAIN) == []
    assert [i.severity for i in of_type(revisions, "gpu_degraded")] == ["ticket"]
    assert len(of_type(revisions, "gpu_app_fault")) == 1
    assert of_type(run(history(app_xid=False).events), CHAIN) == []


def test_a_crash_whose_message_names_an_app_error_is_not_claimed_by_nearness() -> None:
    """A container exits 1 with ``KeyError: 'input_ids'`` 30 s before a drop that names
    no GPU: its own last words name an application bug, so the drop's nearness does not
    make it a device casualty (simulator, 100 nodes 6 h). With no message it does not
    join either (a drop alone claims only a crash whose words name the GPU);
    with a CUDA error it does."""

    def history(message: str) -> Cluster:
        c = Cluster()
        healthy(c, "n1", ["a"])
        c.pod("n1", "a", 5 * MIN - 29, restarts=1, last=term(5 * MIN - 30, message=message))
        c.node("n1", 5 * MIN, alloc=7)
        c.tick(12 * MIN)
        return c

    app = "Traceback (most recent call last): KeyError: 'input_ids'"
    revisions = run(history(app).events)
    assert of_type(revisions, CHAIN) == []
    assert [i.severity for i in of_type(revisions, "gpu_degraded")] == ["ticket"]
    assert of_type(run(history("").events), CHAIN) == []
    [chain] = of_type(run(history("RuntimeError: CUDA error: unknown error").events), CHAIN)
    assert [p.name for p in chain.pods] == ["a"]


def test_a_fatal_xid_while_a_drop_is_pending_trusts_the_drop_at_once() -> None:
    """A drop that comes with a fatal XID is a fault, not a re-registration: the chain
    arms at the XID without waiting, and the earlier drop anchors it."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.node("n1", 5 * MIN, alloc=7)
    c.xid("n1", 5 * MIN + 5, 79)
    c.pod("n1", "a", 5 * MIN + 20, phase="Failed", reason="Evicted")
    [inc] = of_type(run(c.events), CHAIN)
    assert [e.schema for e in inc.evidence][:2] == ["node.v1", "xid.v1"]
    assert inc.first_seen.timestamp() == T0_S + 5 * MIN


def test_a_memory_pressure_eviction_is_the_hosts_not_the_gpus() -> None:
    """The kubelet evicting for node memory pressure is not the device's doing: it does
    not join a drop chain (and, alone, opens none)."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.node("n1", 5 * MIN, alloc=7)
    c.kube("n1", 8 * MIN, "Evicted", name="a", message="The node was low on resource: memory.")
    assert of_type(run(c.events), CHAIN) == []


def test_the_drop_persistence_is_configurable() -> None:
    """``drop_persist_seconds`` = 0 trusts every drop at once (today's behaviour)."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.node("n1", 5 * MIN, alloc=0)
    c.node("n1", 5 * MIN + 4, alloc=8)
    c.pod("n1", "a", 5 * MIN + 30, phase="Failed", reason="Evicted")
    assert of_type(run(c.events), CHAIN) == []
    assert len(of_type(run(c.events, config(drop_persist_seconds=0)), CHAIN)) == 1


def test_the_only_gpu_pod_failing_during_the_grace_still_pages() -> None:
    """Trap: the failed pod is no longer "running"; when it was the node's only GPU pod
    the page must not be lost for want of running pods."""
    c = Cluster()
    healthy(c, "n7", ["s1"])
    c.node("n7", 10 * MIN, ready="Unknown")
    c.kube("n7", 10 * MIN + 20, "TaintManagerEviction", name="s1")
    [inc] = of_type(run(c.events), NOT_READY)
    assert [(p.name, p.role) for p in inc.pods] == [("s1", "evicted")]


def test_a_pod_on_the_faulty_gpu_joins_when_the_xid_named_it_by_uuid_only() -> None:
    """Trap: an NVML XID names the GPU by uuid before a binding reveals its bus id; the
    pod bound to that GPU (by bus id and uuid) is still on the faulty GPU."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.xid("n1", 5 * MIN, 79, bus="", uuid="GPU-00000000-0000-0000-0000-000000000001")
    c.bind("n1", 5 * MIN + 1, "GPU-00000000-0000-0000-0000-000000000001", "0000:9b:00.0", ["a"])
    c.pod("n1", "a", 9 * MIN, phase="Running", restarts=1, last=term(9 * MIN - 1))
    [inc] = of_type(run(c.events), CHAIN)
    assert [p.name for p in inc.pods] == ["a"]


def test_a_crash_on_the_faulty_gpu_that_names_another_cause_does_not_page() -> None:
    """An XID 64 on the GPU a pod holds, no pod harmed by it, then the pod's container
    exits 1 three minutes later of its own bug (``ValueError: checkpoint shard ...``)
    or of ``CUDA out of memory`` (the workload's memory): a GPU that kills its process
    kills it in a CUDA call, and those last words name another cause. The XID is the
    degraded GPU's ticket, not a page (seen in a simulated fleet, 1,000 nodes 24 h: five such
    tickets paged). The same crash with no message, or with a CUDA error, still joins
    by its binding."""

    def history(message: str) -> Cluster:
        c = Cluster()
        healthy(c, "n1", ["a"])
        c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
        c.xid("n1", 5 * MIN, 64, bus="0000:20:00.0", uuid="GPU-20")
        c.pod("n1", "a", 8 * MIN, restarts=1, last=term(8 * MIN - 1, message=message))
        c.tick(20 * MIN)
        return c

    for message in (
        "ValueError: checkpoint shard model-00003-of-00030.safetensors is truncated",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ):
        revisions = run(history(message).events)
        assert of_type(revisions, CHAIN) == [], message
        assert [i.severity for i in of_type(revisions, "gpu_degraded")] == ["ticket"], message
    for message in ("", "RuntimeError: CUDA error: unspecified launch failure"):
        [chain] = of_type(run(history(message).events), CHAIN)
        assert [p.name for p in chain.pods] == ["a"], message


def test_a_crash_hours_after_the_xid_does_not_escalate_the_gpus_ticket() -> None:
    """An XID 48 with no pod harmed opens the GPU's ticket, open a day. Its pod's
    container exits 1 (no message) two hours later: an application's crash, not the
    degraded GPU evicting workloads; the chain's test counts from the fault time, so
    it does not escalate the ticket (seen in a simulated fleet: tickets paged by crashes 45 min
    and 7 h after their XID). One within the window still does."""

    def history(after: float) -> Cluster:
        c = Cluster()
        healthy(c, "n1", ["a"])
        c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
        c.xid("n1", 5 * MIN, 48, bus="0000:20:00.0", uuid="GPU-20")
        c.tick(5 * MIN + after - 30)
        c.pod("n1", "a", 5 * MIN + after, restarts=1, last=term(5 * MIN + after - 1))
        c.tick(5 * MIN + after + 60)
        return c

    [late] = of_type(run(history(120 * MIN).events), "gpu_degraded")
    assert (late.severity, [p.name for p in late.pods if p.role == "failed"]) == ("ticket", [])
    [near] = of_type(run(history(7 * MIN).events), "gpu_degraded")
    assert (near.severity, [p.name for p in near.pods if p.role == "failed"]) == ("page", ["a"])


def test_an_application_xid_the_ticket_attached_does_not_make_a_new_fault_its_own() -> None:
    """An XID 74 on GPU-20 opens a ticket; hours later an XID 43 (the workload's) on
    GPU-21 is attached to it as context; later still an XID 74 on GPU-21 and a
    ``DeviceFailed`` eviction of its pod. The ticket never told a fault of GPU-21 (the
    XID 43 is the application's): the new fault pages as its own chain, from its own
    XID, instead of updating the hours-old ticket (seen in a simulated fleet)."""
    c = Cluster()
    healthy(c, "n1", ["a", "b"])
    c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
    c.bind("n1", 1, "GPU-21", "0000:21:00.0", ["b"])
    c.xid("n1", 5 * MIN, 74, bus="0000:20:00.0", uuid="GPU-20")
    c.xid("n1", 100 * MIN, 43, bus="0000:21:00.0", uuid="GPU-21")
    c.xid("n1", 200 * MIN, 74, bus="0000:21:00.0", uuid="GPU-21")
    c.kube(
        "n1", 200 * MIN + 20, "Evicted", name="b", message="The node had condition: [DeviceFailed]."
    )
    c.tick(230 * MIN)
    revisions = run(c.events)
    [chain] = of_type(revisions, CHAIN)
    assert chain.first_seen.timestamp() == T0_S + 200 * MIN
    assert [p.name for p in chain.pods] == ["b"]
    [ticket] = of_type(revisions, "gpu_degraded")
    assert ticket.severity == "ticket"


def test_a_plugin_restart_does_not_resolve_an_xid_tickets_gpu() -> None:
    """An XID 119 with no pod harmed opens the GPU's ticket (open a day: a GPU reset is
    invisible to Kubernetes). A device plugin restart then re-registers the GPUs, 8 ->
    0 -> 8 in 8 s: no fault (the chain's ``drop_persist_seconds``), and no sign the
    GPU was reset. The ticket stays open, and the GPU's next XID 119 updates it instead
    of opening a second one (seen in a simulated fleet: two tickets for one flaky GPU). A drop
    that lasted is the plugin marking a GPU unhealthy: its recovery still resolves, and
    the GPU's next XID 119 is that fault come back, counted toward its xid_repeat, not a
    second ticket (seen in a simulated fleet: a ticket at 22:18, resolved by the plugin at 23:09,
    another for the same GPU's XID 119 at 23:19)."""

    def history(back: float) -> Cluster:
        c = Cluster()
        healthy(c, "n1", ["a"])
        c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
        c.xid("n1", 5 * MIN, 119, bus="0000:20:00.0", uuid="GPU-20")
        c.node("n1", 15 * MIN, alloc=0)
        c.node("n1", 15 * MIN + back, alloc=8)
        c.xid("n1", 30 * MIN, 119, bus="0000:20:00.0", uuid="GPU-20")
        c.tick(40 * MIN)
        return c

    revisions = run(history(8).events)
    [ticket] = of_type(revisions, "gpu_degraded")
    assert ticket.status == "updated"
    assert ticket.first_seen.timestamp() == T0_S + 5 * MIN
    assert len({r.id for r in revisions if r.type == "gpu_degraded"}) == 1
    lasted = [r for r in run(history(10 * MIN).events) if r.type == "gpu_degraded"]
    assert len({r.id for r in lasted}) == 1
    assert lasted[-1].status == "resolved"
    assert lasted[-1].resolved_at is not None
    assert lasted[-1].resolved_at.timestamp() == T0_S + 25 * MIN


def test_a_wordless_crash_near_a_drop_alone_is_not_the_devices() -> None:
    """A drop that names no GPU persists; GPU pods on the node crash within a minute of
    it, before or after: exit 134 with no message, an NCCL "remote process exited", a
    CUDA OOM. None of them ran on a GPU known to be the faulty one, and none says
    device: the drop is the device plugin marking a GPU unhealthy, it kills no process,
    so nearness alone does not make them its casualties. The drop stays a gpu_degraded
    ticket (seen in simulated fleets, 1,000 nodes 24 h: 12 false pages). A failure that
    says device still escalates it."""
    nccl = (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, "
        "remote process exited or there was a network error"
    )
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
    c = Cluster()
    healthy(c, "n1", ["a", "b", "d", "e"])
    c.pod("n1", "a", 5 * MIN - 40, restarts=1, last=term(5 * MIN - 41, code=134))
    c.node("n1", 5 * MIN, alloc=7)
    c.pod("n1", "b", 5 * MIN + 14, restarts=1, last=term(5 * MIN + 13, message=nccl))
    c.pod("n1", "d", 5 * MIN + 40, restarts=1, last=term(5 * MIN + 39, message=oom))
    c.tick(12 * MIN)
    revisions = run(c.events)
    assert of_type(revisions, CHAIN) == []
    [ticket] = of_type(revisions, "gpu_degraded")
    assert (ticket.severity, ticket.pods) == ("ticket", ())
    c.pod("n1", "e", 12 * MIN + 5, phase="Failed", reason="UnexpectedAdmissionError")
    [escalated] = of_type(run(c.events), "gpu_degraded")
    assert [p.name for p in escalated.pods if p.role == "failed"] == ["e"]


def test_a_crash_before_the_fatal_xid_is_not_its_casualty() -> None:
    """A GPU pod's container exits 1 (no message) 56 s before an XID 79 on its GPU: it
    was dead before the driver saw any fault, and a GPU kills its process after it
    falls off the bus, not before. It does not make the XID a page (seen in a simulated fleet:
    a flaky GPU's first XID 79 paged for such a crash; another the same with an NCCL
    error 111 s before an XID 48). The same crash 10 s after the XID is its casualty."""

    def history(offset: float) -> Cluster:
        c = Cluster()
        healthy(c, "n1", ["a"])
        c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
        c.pod("n1", "a", 5 * MIN + offset, restarts=1, last=term(5 * MIN + offset - 1))
        c.xid("n1", 5 * MIN, 79, bus="0000:20:00.0", uuid="GPU-20")
        c.tick(20 * MIN)
        c.events.sort(key=lambda ev: ev.time)
        return c

    revisions = run(history(-56).events)
    assert of_type(revisions, CHAIN) == []
    [ticket] = of_type(revisions, "gpu_degraded")
    assert ticket.first_seen.timestamp() == T0_S + 5 * MIN
    [chain] = of_type(run(history(10).events), CHAIN)
    assert [p.name for p in chain.pods] == ["a"]


def test_a_recovered_plugin_restart_does_not_fold_a_new_fault_into_an_old_ticket() -> None:
    """A flaky GPU-20's XID 79 ticket is open; a device plugin restart (8 -> 0 -> 8 in
    10 s) is attached to it and no longer resolves it. An hour later an XID 95 on
    GPU-21 and a DeviceFailed eviction of its pod: a new fault, its own page. The old
    drop recovered, so it cannot be the new fault's unnamed GPU (seen in a simulated fleet)."""
    c = Cluster()
    healthy(c, "n1", ["a", "b"])
    c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
    c.bind("n1", 1, "GPU-21", "0000:21:00.0", ["b"])
    c.xid("n1", 5 * MIN, 79, bus="0000:20:00.0", uuid="GPU-20")
    c.node("n1", 30 * MIN, alloc=0)
    c.node("n1", 30 * MIN + 10, alloc=8)
    c.xid("n1", 90 * MIN, 95, bus="0000:21:00.0", uuid="GPU-21")
    c.node("n1", 90 * MIN + 20, alloc=7)
    c.kube(
        "n1", 90 * MIN + 25, "Evicted", name="b", message="The node had condition: [DeviceFailed]."
    )
    c.tick(100 * MIN)
    revisions = run(c.events)
    [chain] = of_type(revisions, CHAIN)
    assert chain.first_seen.timestamp() == T0_S + 90 * MIN
    [ticket] = of_type(revisions, "gpu_degraded")
    assert ticket.severity == "ticket"


def test_a_container_crash_during_a_not_ready_blip_does_not_page() -> None:
    """A 40 s PLEG blip (Ready=False, back to True before the grace) during which a GPU
    pod's container exits 1: the kubelet being slow kills no container, the crash is
    the application's, and the blip is Kubernetes working: nothing is published
    (seen in simulated fleets: an NCCL error 37 s into a blip paged). A pod Kubernetes
    takes off the node meanwhile (a ``TaintManagerEviction``) still pages at once."""

    def history(evicted: bool) -> Cluster:
        c = Cluster()
        healthy(c, "n7", ["s1", "s2"])
        c.node("n7", 10 * MIN, ready="False")
        c.pod("n7", "s1", 10 * MIN + 37, restarts=1, last=term(10 * MIN + 36))
        if evicted:
            c.kube("n7", 10 * MIN + 38, "TaintManagerEviction", name="s2")
        c.node("n7", 10 * MIN + 40, ready="True")
        c.tick(30 * MIN)
        return c

    assert of_type(run(history(evicted=False).events), NOT_READY) == []
    [inc] = of_type(run(history(evicted=True).events), NOT_READY)
    assert inc.severity == "page"


def test_another_gpus_drop_and_recovery_do_not_close_a_flaky_gpus_ticket() -> None:
    """GPU-20's XID 79 ticket is open (no reset seen: it stays open a day). Hours later
    an XID 95 on GPU-21, the device plugin drops it, its pod is evicted: a new fault,
    its own chain. The drop is GPU-21's, so its recovery says nothing of GPU-20: the
    ticket stays open (seen in a simulated fleet: the recovery closed a flaky GPU's ticket and
    its next drop opened a second one)."""
    c = Cluster()
    healthy(c, "n1", ["a", "b"])
    c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
    c.bind("n1", 1, "GPU-21", "0000:21:00.0", ["b"])
    c.xid("n1", 5 * MIN, 79, bus="0000:20:00.0", uuid="GPU-20")
    c.xid("n1", 200 * MIN, 95, bus="0000:21:00.0", uuid="GPU-21")
    c.node("n1", 200 * MIN + 20, alloc=7)
    c.kube(
        "n1", 200 * MIN + 25, "Evicted", name="b", message="The node had condition: [DeviceFailed]."
    )
    c.node("n1", 240 * MIN, alloc=8)
    c.tick(250 * MIN)
    revisions = run(c.events)
    [chain] = of_type(revisions, CHAIN)
    assert chain.status == "resolved"
    [ticket] = of_type(revisions, "gpu_degraded")
    assert ticket.status != "resolved"
    assert "node.v1" not in [e.schema for e in ticket.evidence]


def test_a_crash_after_an_app_xid_on_one_of_its_gpus_does_not_escalate_the_ticket() -> None:
    """A pod holds GPU-20 (a flaky GPU: XID 79, its ticket open) and GPU-21. GPU-21 logs
    an XID 13 (the workload's kernel faulted) and the pod exits 6 s later with ``an
    illegal memory access was encountered``: its own GPU's application fault explains
    the crash, even though it also held the flaky GPU (seen in a simulated fleet: the ticket
    was escalated to a page: the XID 79 was 69 s before). Without the XID 13 the same
    crash escalates it, and so does one 30 s after the XID 79, XID 13 or not: a GPU that
    falls off the bus kills its process at once (seen in a simulated fleet: an XID 43 on a
    pod's other GPU 6 s before its crash, 34 s after an XID 79 on its first)."""
    msg = "RuntimeError: CUDA error: an illegal memory access was encountered"

    def history(app_xid: bool, after: float = 7 * MIN) -> Cluster:
        c = Cluster()
        healthy(c, "n1", ["a"])
        c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
        c.bind("n1", 1, "GPU-21", "0000:21:00.0", ["a"])
        c.xid("n1", 5 * MIN, 79, bus="0000:20:00.0", uuid="GPU-20")
        crash = 5 * MIN + after
        if app_xid:
            c.xid("n1", crash - 6, 13, bus="0000:21:00.0", uuid="GPU-21")
        c.pod("n1", "a", crash, restarts=1, last=term(crash - 1, message=msg))
        c.tick(20 * MIN)
        return c

    [ticket] = of_type(run(history(app_xid=True).events), "gpu_degraded")
    assert (ticket.severity, [p.name for p in ticket.pods if p.role == "failed"]) == ("ticket", [])
    [paged] = of_type(run(history(app_xid=False).events), "gpu_degraded")
    assert (paged.severity, [p.name for p in paged.pods if p.role == "failed"]) == ("page", ["a"])
    [chain] = of_type(run(history(app_xid=True, after=30).events), CHAIN)
    assert [p.name for p in chain.pods] == ["a"]


def test_a_new_gpus_fault_does_not_join_the_window_of_a_ticketed_one() -> None:
    """A flaky GPU-20 logs XID 79 again and again; its ticket is open. Its latest XID 79
    arms the chain (no pod fails). Nine minutes later an XID 74 on GPU-21 and its pod's
    DeviceFailed eviction: the page is GPU-21's fault, dated from its XID and naming
    GPU-21 only, not folded into GPU-20's window (seen in a simulated fleet). A casualty of
    GPU-20 would still escalate GPU-20's ticket."""
    c = Cluster()
    healthy(c, "n1", ["a", "b"])
    c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
    c.bind("n1", 1, "GPU-21", "0000:21:00.0", ["b"])
    c.xid("n1", 5 * MIN, 79, bus="0000:20:00.0", uuid="GPU-20")
    c.xid("n1", 60 * MIN, 79, bus="0000:20:00.0", uuid="GPU-20")
    c.xid("n1", 69 * MIN, 74, bus="0000:21:00.0", uuid="GPU-21")
    c.kube(
        "n1", 69 * MIN + 30, "Evicted", name="b", message="The node had condition: [DeviceFailed]."
    )
    c.tick(90 * MIN)
    revisions = run(c.events)
    [chain] = of_type(revisions, CHAIN)
    assert chain.first_seen.timestamp() == T0_S + 69 * MIN
    assert [g.uuid for g in chain.gpus] == ["GPU-21"]
    assert [p.name for p in chain.pods] == ["b"]
    [ticket] = of_type(revisions, "gpu_degraded")
    assert ticket.severity == "ticket"


def test_a_pressure_eviction_of_the_faulty_gpus_pod_is_still_the_hosts() -> None:
    """XID 79 on GPU-20, which pod a holds; two minutes later the kubelet evicts a for
    node memory pressure ("The node was low on resource: memory"). The eviction is the
    host's, wherever the pod ran: it neither opens the chain nor escalates the GPU's
    ticket. Taken as "Kubernetes took it off the faulty GPU", it made a flaky GPU's
    ticket a page that its xid_repeat could no longer supersede, and the GPU's next
    fault twelve hours later was told by nothing (seen in a simulated fleet)."""
    pressure = "The node was low on resource: memory. Threshold quantity: 100Mi."
    for after in (2 * MIN, 12 * MIN):  # in the chain's window; against the open ticket
        c = Cluster()
        healthy(c, "n1", ["a"])
        c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
        c.xid("n1", 5 * MIN, 79, bus="0000:20:00.0", uuid="GPU-20")
        c.kube("n1", 5 * MIN + after, "Evicted", name="a", message=pressure)
        ev = c.pod("n1", "a", 5 * MIN + after + 1, phase="Failed", reason="Evicted")
        c.events[-1] = msgspec.structs.replace(ev, message=pressure)
        c.tick(30 * MIN)
        revisions = run(c.events)
        assert of_type(revisions, CHAIN) == []
        [ticket] = of_type(revisions, "gpu_degraded")
        assert ticket.severity == "ticket"
        assert "escalated" not in ticket.attributes


def test_a_kernel_fault_before_a_fatal_xid_is_not_its_casualty() -> None:
    """Pod a's kernel faults on its GPU-10 (XID 31, then its "illegal memory access" exit
    7 s later; dcgm reports the XID again at its scrape, 20 s after the exit). Half a
    minute later an XID 119 on GPU-17 and pod b's DeviceFailed eviction: the page is
    GPU-17's, first seen at its XID, naming b only. A kernel fault says device only
    against a fatal XID that came first: it was not there yet (seen in a simulated fleet)."""
    illegal = "RuntimeError: CUDA error: an illegal memory access was encountered"
    c = Cluster()
    healthy(c, "n1", ["a", "b"])
    c.bind("n1", 1, "GPU-10", "0000:10:00.0", ["a"])
    c.bind("n1", 1, "GPU-17", "0000:17:00.0", ["b"])
    c.xid("n1", 5 * MIN, 31, bus="0000:10:00.0", uuid="GPU-10")
    c.pod("n1", "a", 5 * MIN + 8, restarts=1, last=term(5 * MIN + 7, message=illegal))
    c.xid("n1", 5 * MIN + 28, 31, bus="0000:10:00.0", uuid="GPU-10")
    c.xid("n1", 5 * MIN + 38, 119, bus="0000:17:00.0", uuid="GPU-17")
    c.kube(
        "n1", 6 * MIN + 30, "Evicted", name="b", message="The node had condition: [DeviceFailed]."
    )
    c.tick(20 * MIN)
    [chain] = of_type(run(c.events), CHAIN)
    assert chain.first_seen.timestamp() == T0_S + 5 * MIN + 38
    assert [p.name for p in chain.pods] == ["b"]


def test_a_recovered_drop_does_not_date_a_later_fault() -> None:
    """A drop lasts 86 s (past ``drop_persist_seconds``: trusted, the chain armed) and
    recovers with no pod failing. Three minutes later an XID 74 and its pod's DeviceFailed
    eviction: a new fault, whose page is first seen at its XID, not at the recovered drop
    (seen in a simulated fleet). The device plugin said the GPUs were healthy again in between."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.bind("n1", 1, "GPU-18", "0000:18:00.0", ["a"])
    c.node("n1", 5 * MIN, alloc=7)
    c.node("n1", 5 * MIN + 86, alloc=8)
    c.xid("n1", 10 * MIN, 74, bus="0000:18:00.0", uuid="GPU-18")
    c.kube(
        "n1", 10 * MIN + 27, "Evicted", name="a", message="The node had condition: [DeviceFailed]."
    )
    c.tick(30 * MIN)
    [chain] = of_type(run(c.events), CHAIN)
    assert chain.first_seen.timestamp() == T0_S + 10 * MIN
