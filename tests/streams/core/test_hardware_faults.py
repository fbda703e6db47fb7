"""Hardware faults with no pod failure, and evictions that come late.

A fatal XID does not always make Kubernetes notice: an XID 62 (micro-controller halt)
on a GPU whose pods keep running, an XID 79 the device plugin has not noticed yet, a
lone XID 154 where the driver asks for a reset. Each is a GPU that needs an
intervention: ``gpu_degraded`` (ticket) after ``degraded_after_seconds`` if no eviction
chain has reported it, naming the GPU, its pods and the action the driver asks for. A
device failure that comes once that incident is open, or after the chain's window
closed, escalates it (page, same id) instead of floating unattached.

Lines are real shapes: ``tests/data/kmsg`` and public reports (NVIDIA/open-gpu-kernel-
modules#1045: "Xid 62/45 -> Xid 119 -> Xid 154"; the driver's XID 154 format is
"GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)").
"""

from __future__ import annotations

import pytest

from tests.core_helpers import config, of_type, run
from tests.factories import T0, Cluster, term
from tests.xid_lines import dcgm, kmsg

MIN = 60.0
T0_S = T0.timestamp()
BUS = "0000:3b:00.0"
UUID = "GPU-3b3b3b3b-0000-4000-8000-00000000003b"
HALT = "NVRM: Xid (PCI:0000:3b:00): 62, pid='<unknown>', name=<unknown>, 0000beef 0000a0d8"
RESET = (
    "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x0 (None) to 0x1 "
    "(GPU Reset Required)"
)
CLEARED = (
    "NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from 0x1 (GPU Reset "
    "Required) to 0x0 (None)"
)
CLEANUP = (
    "NVRM: Xid (PCI:0000:3b:00): 45, pid=4242, name=python3, Ch 00000010 caused by previous Xid 62"
)
BARE_CLEANUP = "NVRM: Xid (PCI:0000:3b:00): 45, pid=4242, name=python3, Ch 00000010"
OFF_BUS = (
    "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)
DEGRADED = "gpu_degraded"
CHAIN = "device_unhealthy_eviction"


def trainer_node(c: Cluster, node: str = "n1", pods: tuple[str, ...] = ("trainer-0",)) -> None:
    """A healthy 8-GPU node; ``trainer-0`` holds the GPU at ``BUS``."""
    c.node(node, 0)
    for name in pods:
        c.pod(node, name, 1)
    c.bind(node, 2, UUID, BUS, [pods[0]])


# -- class 10: a hardware fault with no pod failure ------------------------------------------
def test_a_halt_then_a_reset_request_then_cleanup_is_a_hardware_ticket() -> None:
    """XID 62, then 154 "GPU Reset Required", then the 45 cleanup, while the pod keeps
    running and allocatable never drops: a gpu_degraded ticket 5 min after the 62,
    naming the GPU (uuid and bus id), the pod on it (a candidate: it has not failed),
    the XIDs and the driver's own action. The 45 follows the 62 on that GPU: it is not
    an application fault. The old core called it gpu_app_fault, "the GPU itself is
    healthy"."""
    c = Cluster()
    trainer_node(c)
    kmsg(c, "n1", 10 * MIN, HALT)
    kmsg(c, "n1", 10 * MIN + 0.1, RESET)
    kmsg(c, "n1", 10 * MIN + 2, CLEANUP)
    c.tick(14 * MIN)
    assert of_type(run(list(c.events)), DEGRADED) == [], "not before degraded_after_seconds"
    c.tick(16 * MIN)
    revisions = run(c.events)
    assert of_type(revisions, "gpu_app_fault") == []
    [inc] = of_type(revisions, DEGRADED)
    assert (inc.severity, inc.status) == ("ticket", "open")
    assert inc.first_seen.timestamp() == T0_S + 10 * MIN
    assert [(g.uuid, g.pci_bus_id) for g in inc.gpus] == [(UUID, BUS)]
    assert [(p.name, p.role) for p in inc.pods] == [("trainer-0", "candidate")]
    assert inc.attributes["xids"] == "62,154"
    assert inc.attributes["recovery_action"] == "GPU Reset Required"
    assert "GPU Reset Required" in inc.summary
    assert "GPU Reset Required" in inc.action
    assert len(inc.evidence) == 3, "the 45 is evidence of the fault"


@pytest.mark.parametrize(
    "action", ["GPU Reset Required", "Drain and Reset", "Node Reboot Required"]
)
def test_a_lone_xid_154_raises_a_ticket_with_the_drivers_action(action: str) -> None:
    """XID 154 alone: the driver changed the GPU's recovery action to one of the three
    that need an intervention. That is the action on-call must take, so it is the
    incident's action. The old core armed the chain and, with no pod failure, said
    nothing."""
    c = Cluster()
    trainer_node(c)
    kmsg(c, "n1", 10 * MIN, RESET.replace("0x1 (GPU Reset Required)", f"0x2 ({action})"))
    c.tick(20 * MIN)
    [inc] = of_type(run(c.events), DEGRADED)
    assert inc.attributes["recovery_action"] == action
    assert inc.action.startswith(f"The driver asks: {action}.")
    assert [p.name for p in inc.pods] == ["trainer-0"]


def test_xid_79_without_an_allocatable_drop_is_a_ticket_unless_the_chain_pages() -> None:
    """An XID 79 the device plugin has not (yet) noticed still means the GPU is gone: a
    ticket with the catalog's action (drain and reboot). When a pod on that GPU fails
    first, the eviction chain pages and gpu_degraded stays quiet: one root cause, one
    incident. The old core raised nothing for the first."""
    c = Cluster()
    trainer_node(c)
    kmsg(c, "n1", 10 * MIN, OFF_BUS)
    c.tick(20 * MIN)
    [inc] = of_type(run(c.events), DEGRADED)
    assert inc.attributes["xids"] == "79"
    assert "Drain the node and reboot it" in inc.action
    chained = Cluster()
    trainer_node(chained)
    kmsg(chained, "n1", 10 * MIN, OFF_BUS)
    chained.pod("n1", "trainer-0", 10 * MIN + 20, phase="Failed", current=term(10 * MIN + 18))
    chained.tick(60 * MIN)
    revisions = run(chained.events)
    assert len(of_type(revisions, CHAIN)) == 1
    assert of_type(revisions, DEGRADED) == []


def test_the_same_fault_seen_by_dcgm_alone_raises_the_same_ticket() -> None:
    """dcgm-exporter names the GPU by uuid only and carries no driver text; the XID 79
    still raises the ticket, naming the pod bound to that uuid."""
    c = Cluster()
    trainer_node(c)
    dcgm(c, "n1", 10 * MIN, 79, UUID)
    c.tick(20 * MIN)
    [inc] = of_type(run(c.events), DEGRADED)
    assert [p.name for p in inc.pods] == ["trainer-0"]
    assert [g.uuid for g in inc.gpus] == [UUID]


def test_two_faulty_gpus_on_one_node_are_one_ticket_naming_both() -> None:
    """XID 62 on one GPU and XID 119 on another of the same node: one gpu_degraded for
    the node (as the eviction chain is one per node) naming both GPUs and both pods."""
    c = Cluster()
    trainer_node(c, pods=("trainer-0", "trainer-1"))
    c.bind("n1", 3, "GPU-1b", "0000:1b:00.0", ["trainer-1"])
    kmsg(c, "n1", 10 * MIN, HALT)
    kmsg(
        c,
        "n1",
        11 * MIN,
        "NVRM: Xid (PCI:0000:1b:00): 119, pid=1797828, name=pt_main_thread, Timeout after 6s "
        "of waiting for RPC response from GPU1 GSP! Expected function 76 (GSP_RM_CONTROL).",
    )
    c.tick(30 * MIN)
    [inc] = of_type(run(c.events), DEGRADED)
    assert sorted(g.pci_bus_id for g in inc.gpus) == ["0000:1b:00.0", BUS]
    assert sorted(p.name for p in inc.pods) == ["trainer-0", "trainer-1"]
    assert inc.attributes["xids"] == "62,119"


def test_a_cleanup_xid_45_alone_is_the_applications_but_after_a_fatal_it_follows() -> None:
    """XID 45 is the driver tearing down a process's channels after an error. Alone (no
    other XID on its GPU within the episode gap) it is the application's: gpu_app_fault.
    Within the gap after the XID 62 it follows the 62 and never opens an application
    fault, even without "caused by previous Xid" in the line. The old core called the
    second one an application fault too."""
    c = Cluster()
    trainer_node(c)
    kmsg(c, "n1", 10 * MIN, BARE_CLEANUP)
    assert len(of_type(run(list(c.events)), "gpu_app_fault")) == 1
    after = Cluster()
    trainer_node(after)
    kmsg(after, "n1", 10 * MIN, HALT)
    kmsg(after, "n1", 15 * MIN, BARE_CLEANUP)
    after.tick(20 * MIN)
    revisions = run(after.events)
    assert of_type(revisions, "gpu_app_fault") == []
    [inc] = of_type(revisions, DEGRADED)
    assert len(inc.evidence) == 2


def test_the_driver_clearing_its_recovery_action_resolves_the_ticket() -> None:
    """After a reset the driver logs XID 154 "... to 0x0 (None)": the GPU needs nothing
    any more, so the XID-only gpu_degraded resolves, same id. (The old core had none.)"""
    c = Cluster()
    trainer_node(c)
    kmsg(c, "n1", 10 * MIN, HALT)
    kmsg(c, "n1", 10 * MIN + 0.1, RESET)
    c.tick(20 * MIN)
    kmsg(c, "n1", 40 * MIN, CLEARED)
    revisions = run(c.events)
    [inc] = of_type(revisions, DEGRADED)
    assert inc.status == "resolved"
    assert inc.resolved_at is not None
    assert inc.resolved_at.timestamp() == T0_S + 40 * MIN
    assert len({r.id for r in revisions if r.type == DEGRADED}) == 1


def test_an_xid_only_ticket_resolves_after_a_quiet_day_configurable() -> None:
    """Nothing in Kubernetes shows a GPU reset, so an XID-only gpu_degraded stays open
    ``degraded_quiet_seconds`` (1 day) after the last fatal XID on the node, then
    resolves; a fatal XID meanwhile keeps it open."""
    c = Cluster()
    trainer_node(c)
    kmsg(c, "n1", 10 * MIN, HALT)
    kmsg(c, "n1", 12 * 60 * MIN, HALT)  # twelve hours later: a second episode, same ticket
    c.tick(30 * 60 * MIN)
    [inc] = of_type(run(list(c.events)), DEGRADED)
    assert inc.status != "resolved"
    c.tick(37 * 60 * MIN)
    [inc] = of_type(run(c.events), DEGRADED)
    assert inc.status == "resolved"
    assert inc.resolved_at is not None
    assert inc.resolved_at.timestamp() == T0_S + 12 * 3600 + 86400
    hour = Cluster()
    trainer_node(hour)
    kmsg(hour, "n1", 10 * MIN, HALT)
    hour.tick(3 * 60 * MIN)
    [short] = of_type(run(hour.events, config(degraded_quiet_seconds=3600)), DEGRADED)
    assert short.status == "resolved"
    assert short.resolved_at is not None
    assert short.resolved_at.timestamp() == T0_S + 70 * MIN


def test_a_fatal_xid_and_a_drop_are_one_degraded_incident_anchored_at_the_xid() -> None:
    """XID 62 and, a minute later, the device plugin dropping the GPU: one gpu_degraded
    for both, anchored at the XID (the earlier evidence), saying the XID and the drop.
    The old core opened it from the drop alone, "device plugin marked them unhealthy"."""
    c = Cluster()
    trainer_node(c)
    kmsg(c, "n1", 10 * MIN, HALT)
    c.node("n1", 11 * MIN, alloc=7)
    c.tick(30 * MIN)
    [inc] = of_type(run(c.events), DEGRADED)
    assert inc.first_seen.timestamp() == T0_S + 10 * MIN
    assert [e.schema for e in inc.evidence] == ["xid.v1", "node.v1"]
    assert "XID 62" in inc.summary
    assert "1 of 8 GPUs unallocatable" in inc.summary


# -- class 11: evictions that come late join the incident -------------------------------------
def test_a_device_eviction_after_the_window_escalates_the_open_degraded() -> None:
    """The drop persisted and armed the chain, nothing failed in its 10 min window, so it
    is a gpu_degraded ticket. A pod evicted for DeviceUnhealthy 25 min in is that GPU's
    doing: the same incident (same id, a new revision) becomes a page naming the pod and
    the eviction chain's action. The old core left the ticket as it was and the eviction
    unattached."""
    c = Cluster()
    c.node("n1", 0)
    for name in ("a", "b"):
        c.pod("n1", name, 1)
    c.node("n1", 5 * MIN, alloc=7)
    c.tick(12 * MIN)
    before = of_type(run(list(c.events)), DEGRADED)
    c.kube("n1", 30 * MIN, "Evicted", name="a", message="DeviceUnhealthy: nvidia.com/gpu")
    revisions = run(c.events)
    [inc] = of_type(revisions, DEGRADED)
    assert [b.id for b in before] == [inc.id]
    assert inc.severity == "page"
    assert [(p.name, p.role) for p in inc.pods] == [("a", "evicted")]
    assert "eviction chain" in inc.summary
    assert inc.action.startswith("Cordon and drain n1")
    assert [r.status for r in revisions if r.id == inc.id] == ["open", "updated"]
    assert of_type(revisions, CHAIN) == []


def test_a_pod_on_the_faulty_gpu_crashing_later_escalates_the_xid_ticket() -> None:
    """XID 79 with no drop became a ticket; half an hour later the pod bound to that GPU
    crashes with a CUDA error: it joins as failed and the ticket pages. An ordinary crash
    of a pod on another GPU, a host memory-pressure eviction and a crash with no device
    word far from the fault do not join (the chain's test). The old core had no
    incident at all."""
    c = Cluster()
    trainer_node(c, pods=("trainer-0", "trainer-1", "web", "batch"))
    c.bind("n1", 3, "GPU-1b", "0000:1b:00.0", ["trainer-1"])
    kmsg(c, "n1", 10 * MIN, OFF_BUS)
    c.tick(20 * MIN)
    c.pod("n1", "trainer-1", 40 * MIN, restarts=1, last=term(40 * MIN - 1))
    c.kube("n1", 41 * MIN, "Evicted", name="web", message="The node was low on resource: memory.")
    c.pod("n1", "batch", 42 * MIN, phase="Failed", current=term(42 * MIN - 1))
    msg = "RuntimeError: CUDA error: unspecified launch failure"
    c.pod("n1", "trainer-0", 43 * MIN, phase="Failed", current=term(43 * MIN - 1, message=msg))
    [inc] = of_type(run(c.events), DEGRADED)
    assert inc.severity == "page"
    assert {p.name: p.role for p in inc.pods} == {"trainer-0": "failed"}


def test_a_device_failure_within_the_window_escalates_an_open_degraded() -> None:
    """XID 79 at 10 min, the ticket opened at 15 min, the pod evicted at 17 min (inside
    the chain's 10 min window): the failure escalates the open gpu_degraded rather than
    opening a second incident for the same fault. The old core had only the chain."""
    c = Cluster()
    trainer_node(c)
    kmsg(c, "n1", 10 * MIN, OFF_BUS)
    c.pod("n1", "trainer-0", 17 * MIN, phase="Failed", reason="Evicted")
    revisions = run(c.events)
    assert of_type(revisions, CHAIN) == []
    [inc] = of_type(revisions, DEGRADED)
    assert (inc.severity, [p.role for p in inc.pods]) == ("page", ["evicted"])
    assert inc.attributes["xids"] == "79"


def test_a_late_device_failure_joins_the_chain_still_open_after_its_window() -> None:
    """The chain's incident stays open after its window while the GPU is unallocatable;
    a pod evicted for DeviceUnhealthy then is the same fault and joins it. The old core
    joined pods only inside the window."""
    c = Cluster()
    c.node("n1", 0)
    for name in ("a", "b"):
        c.pod("n1", name, 1)
    kmsg(c, "n1", 5 * MIN, OFF_BUS)
    c.node("n1", 5 * MIN + 9, alloc=7)
    c.pod("n1", "a", 5 * MIN + 20, phase="Failed", reason="Evicted")
    c.kube("n1", 30 * MIN, "Evicted", name="b", message="DeviceUnhealthy: nvidia.com/gpu")
    revisions = run(c.events)
    [inc] = of_type(revisions, CHAIN)
    assert sorted(p.name for p in inc.pods) == ["a", "b"]
    assert of_type(revisions, DEGRADED) == []


def test_a_new_fault_an_hour_after_an_open_ticket_pages_as_its_own_chain() -> None:
    """An XID 79 ticket (no pod failed) is open for its day of quiet; an hour later an
    XID 48 on another GPU and, 20 s after it, the pod on that GPU failing
    UnexpectedAdmissionError: a new fault, its own device_unhealthy_eviction page, not
    an update of the hour-old ticket (seen in a simulated fleet). Within the chain's window the
    ticket would be the same fault and escalate (the test above)."""
    c = Cluster()
    trainer_node(c, pods=("trainer-0", "trainer-1"))
    c.bind("n1", 3, "GPU-1b", "0000:1b:00.0", ["trainer-1"])
    kmsg(c, "n1", 10 * MIN, OFF_BUS)
    c.tick(20 * MIN)
    c.xid("n1", 70 * MIN, 48, bus="0000:1b:00.0", uuid="GPU-1b")
    c.pod("n1", "trainer-1", 70 * MIN + 20, phase="Failed", reason="UnexpectedAdmissionError")
    revisions = run(c.events)
    [chain] = of_type(revisions, CHAIN)
    assert chain.severity == "page"
    assert [p.name for p in chain.pods] == ["trainer-1"]
    assert [g.uuid for g in chain.gpus] == ["GPU-1b"]
    [ticket] = of_type(revisions, DEGRADED)
    assert ticket.severity == "ticket"
    assert "escalated" not in ticket.attributes


def test_a_failure_on_the_old_tickets_gpu_escalates_it_while_a_new_chain_is_open() -> None:
    """The hour-old XID 79 ticket (trainer-0 on its GPU) and the new XID 48 chain of
    trainer-1 are both open; then trainer-0 crashes on the GPU that fell off the bus.
    It is not the new chain's (its GPU is another), but it is the ticket's: the
    ticket escalates to a page naming it, rather than the failure attaching to nothing."""
    c = Cluster()
    trainer_node(c, pods=("trainer-0", "trainer-1"))
    c.bind("n1", 3, "GPU-1b", "0000:1b:00.0", ["trainer-1"])
    kmsg(c, "n1", 10 * MIN, OFF_BUS)
    c.tick(20 * MIN)
    c.xid("n1", 70 * MIN, 48, bus="0000:1b:00.0", uuid="GPU-1b")
    c.pod("n1", "trainer-1", 70 * MIN + 20, phase="Failed", reason="UnexpectedAdmissionError")
    c.pod("n1", "trainer-0", 73 * MIN, restarts=1, last=term(73 * MIN - 1))
    revisions = run(c.events)
    [chain] = of_type(revisions, CHAIN)
    assert [p.name for p in chain.pods] == ["trainer-1"]
    [ticket] = of_type(revisions, DEGRADED)
    assert (ticket.severity, ticket.attributes.get("escalated")) == ("page", "pod failure")
    assert [p.name for p in ticket.pods if p.role == "failed"] == ["trainer-0"]


def test_a_flaky_gpus_recurring_xid_and_a_failure_escalate_its_ticket() -> None:
    """The converse of the test above: the ticket's own GPU logs its XID 79 again an
    hour later and the pod on it fails: a recurrence of the ticket's fault, so the
    failure escalates the ticket (page, same id) rather than opening a second incident
    (seen in a simulated fleet: a flaky GPU's XID 74 every twenty minutes)."""
    c = Cluster()
    trainer_node(c)
    kmsg(c, "n1", 10 * MIN, OFF_BUS)
    c.tick(20 * MIN)
    kmsg(c, "n1", 70 * MIN, OFF_BUS)
    c.pod("n1", "trainer-0", 70 * MIN + 20, phase="Failed", reason="UnexpectedAdmissionError")
    revisions = run(c.events)
    assert of_type(revisions, CHAIN) == []
    [ticket] = of_type(revisions, DEGRADED)
    assert ticket.severity == "page"
    assert [p.name for p in ticket.pods if p.role == "failed"] == ["trainer-0"]
