"""Planned disruption is not a device fault (:mod:`streams.core.rules.disruption`).

A node drained, consolidated, scaled down or shut down on purpose loses its pods and,
as it goes, every GPU from allocatable: that is the node leaving, not a GPU to reset or
replace. A fault on such a node (an XID, one GPU marked unhealthy) is still a fault.

The taints and Event strings are the components' own (format strings, cited in the
rule's docstring): Karpenter's ``Evicted pod: <reason>`` (v1.2+) and ``Evicted pod``
(v0.32-v1.1), ``DisruptionTerminating`` "Disrupting Node: Underutilized", the
``DisruptionBlocked`` message of a ``karpenter.sh/do-not-disrupt`` pod
(pkg/controllers/state/statenode.go, sentence-cased by pkg/utils/pretty); the kubelet's
graceful-shutdown pod status (pkg/kubelet/nodeshutdown).
"""

from __future__ import annotations

import random

import msgspec

from schemas.codec import encode
from schemas.events import NodeCondition
from schemas.incidents import Incident
from streams.core import Correlator
from tests.core_helpers import config, feed, final, run, within_grace
from tests.disruption_streams import (
    CORDON,
    KARPENTER_V0,
    KARPENTER_V1,
    NODE,
    PODS,
    deleted,
    gpu_node,
    karpenter_consolidation,
    timeline,
    unbound,
)
from tests.factories import T0, Cluster, term

HOUR = 3600.0
DAY = 86400.0
CHAIN = "device_unhealthy_eviction"
DEGRADED = "gpu_degraded"
SECOND = "ip-10-0-12-35.ec2.internal"
SHUTDOWN = "Pod was terminated in response to imminent node shutdown."


def incidents(c: Cluster) -> dict[str, tuple[str, str, str, frozenset[tuple[str, str]]]]:
    """The last revision of every incident: (type, severity, status, {(pod, role)})."""
    out: dict[str, tuple[str, str, str, frozenset[tuple[str, str]]]] = {}
    for inc in run(timeline(c)):
        out[inc.id] = (
            inc.type,
            inc.severity,
            inc.status,
            frozenset((p.name, p.role) for p in inc.pods),
        )
    return out


def test_karpenter_v0_taint_and_its_old_eviction_message_raise_nothing() -> None:
    """Karpenter v0.32-v0.37 taints ``karpenter.sh/disruption=disrupting`` and writes its
    Events as ``Evicted pod`` with no reason: the same consolidation, the same silence."""
    c = Cluster()
    gpu_node(c)
    karpenter_consolidation(c, HOUR, taints=KARPENTER_V0, evicted="Evicted pod")
    c.tick(HOUR + DAY)
    assert incidents(c) == {}


def test_karpenters_eviction_event_fails_no_pod_even_before_the_taint_is_seen() -> None:
    """The ``Evicted pod: Drifted`` Event says an eviction *through the API* (Karpenter asked
    for it): no failure, whatever the order the node update and the Events come in, so a
    node update lost or late behind the Events pages nothing either."""
    c = Cluster()
    gpu_node(c)
    for k, pod in enumerate(PODS):
        c.kube(NODE, HOUR + k, "Evicted", name=pod, message="Evicted pod: Drifted", warning=False)
        deleted(c, NODE, pod, HOUR + k, code=1)
    c.node(NODE, HOUR + 60, alloc=0)
    c.node(NODE, HOUR + 200, alloc=0, op="deleted")
    c.tick(HOUR + DAY)
    assert incidents(c) == {}


def test_a_blocked_then_completed_consolidation_raises_nothing() -> None:
    """``DisruptionBlocked`` (a ``karpenter.sh/do-not-disrupt`` pod) is Karpenter waiting,
    then the consolidation it waited for: neither is a fault."""
    c = Cluster()
    gpu_node(c)
    for k in range(6):
        c.kube(
            NODE,
            HOUR + 600 * k,
            "DisruptionBlocked",
            kind="Node",
            name=NODE,
            namespace="",
            message='Disruption is blocked through the "karpenter.sh/do-not-disrupt" annotation',
            warning=False,
            source="karpenter",
        )
    karpenter_consolidation(c, 3 * HOUR)
    c.tick(3 * HOUR + DAY)
    assert incidents(c) == {}


def test_a_slow_consolidation_is_no_allocation_mismatch() -> None:
    """Two nodes consolidated at once whose dcgm-exporters stop with them: their last
    bindings ("8 bound, 0 requested") stand until the nodes are deleted ten minutes
    later. A node being removed on purpose is left out of the cross-source count."""
    c = Cluster()
    gpu_node(c)
    gpu_node(c, SECOND, tuple(f"b-{k}" for k in range(4)))
    karpenter_consolidation(c, HOUR, end=900)
    karpenter_consolidation(c, HOUR, node=SECOND, pods=tuple(f"b-{k}" for k in range(4)), end=900)
    c.tick(HOUR + DAY)
    assert incidents(c) == {}


def test_an_xid_79_during_a_drain_still_pages_with_its_casualty_only() -> None:
    """A real fault on a node being drained is still a fault: an XID 79 on a GPU whose pod
    is still running, and that pod dying on its own (no deletion) a second later, is the
    eviction chain's page. The pods the drain evicted (Karpenter's Events, their SIGTERM
    exits) are not its casualties."""
    c = Cluster()
    gpu_node(c)
    c.node(NODE, HOUR, taints=KARPENTER_V1)
    for k, pod in enumerate(PODS[1:]):
        c.kube(
            NODE,
            HOUR + 5 + k,
            "Evicted",
            name=pod,
            message="Evicted pod: Underutilized",
            warning=False,
        )
        deleted(c, NODE, pod, HOUR + 5 + k, code=1)
    c.xid(NODE, HOUR + 30, 79, bus="0000:18:00.0")
    c.pod(NODE, PODS[0], HOUR + 32, gpus=2, phase="Failed", current=term(HOUR + 31, "Error", 1))
    c.node(NODE, HOUR + 33, alloc=6, taints=KARPENTER_V1)
    c.tick(HOUR + DAY)
    found = incidents(c)
    assert [v[:2] for v in found.values()] == [(CHAIN, "page")]
    [(_, _, _, pods)] = found.values()
    assert {name for name, role in pods if role in ("failed", "evicted")} == {PODS[0]}


def test_an_xid_79_as_a_drain_starts_opens_gpu_degraded_without_the_drains_pods() -> None:
    """Cordoned and drained for maintenance, an XID 79 as the drain starts: the driver says
    a GPU fell off the bus, and the cordon masks no XID: the ticket opens after
    ``degraded_after_seconds``. The pods the drain deletes are not its casualties, even
    the one on that GPU whose trainer exits 1 to the SIGTERM seconds after the XID."""
    c = Cluster()
    gpu_node(c)
    c.node(NODE, HOUR, taints=CORDON)
    c.xid(NODE, HOUR + 1, 79, bus="0000:18:00.0")
    for k, pod in enumerate(PODS):
        deleted(c, NODE, pod, HOUR + 2 + k, code=1)
    unbound(c, NODE, HOUR + 45)
    c.node(NODE, HOUR + 60, alloc=0, taints=CORDON)
    c.tick(HOUR + 2 * HOUR)
    found = incidents(c)
    assert [v[:2] for v in found.values()] == [(DEGRADED, "ticket")]
    [(_, _, _, pods)] = found.values()
    assert not {name for name, role in pods if role in ("failed", "evicted")}


def test_one_gpu_marked_unhealthy_on_a_cordoned_node_is_still_a_fault() -> None:
    """A health checker cordons a node *because* a GPU failed: the device plugin's 8 -> 7
    is that GPU, not the cordon, and its ticket opens. Only a drop of every GPU reads as
    the node's teardown: the drain that follows (the pods deleted, the driver reinstalled,
    every GPU gone ten minutes, then back to 7) is not the ticket's: it still says one GPU
    of eight, and no failed pod."""
    c = Cluster()
    gpu_node(c)
    c.node(NODE, HOUR, alloc=7)
    c.node(NODE, HOUR + 30, alloc=7, taints=CORDON)
    for k, pod in enumerate(PODS):
        deleted(c, NODE, pod, HOUR + 40 + k, code=1)
    unbound(c, NODE, HOUR + 90)
    c.node(NODE, HOUR + 400, alloc=0, taints=CORDON)
    c.node(NODE, HOUR + 1000, alloc=7, taints=CORDON)
    c.tick(HOUR + 2 * HOUR)
    [inc] = list(final(run(timeline(c))).values())
    assert (inc.type, inc.severity, inc.status) == (DEGRADED, "ticket", "open")
    assert "1 of 8" in inc.summary, inc.summary
    assert not [p.name for p in inc.pods if p.role in ("failed", "evicted")]


def test_a_graceful_node_shutdown_raises_nothing() -> None:
    """The kubelet's graceful node shutdown: Ready=False "node is shutting down", its GPU
    pods Failed ``Terminated`` ("Pod was terminated in response to imminent node
    shutdown."), the device plugin gone, the node gone: a planned stop, not a fault."""
    c = Cluster()
    gpu_node(c)
    shutting = NodeCondition(
        type="Ready",
        status="False",
        reason="KubeletNotReady",
        message="node is shutting down",
    )
    node = c.node(NODE, HOUR, ready="False")
    c.events[-1] = msgspec.structs.replace(node, conditions=(shutting,))
    for k, pod in enumerate(PODS):
        ev = c.pod(NODE, pod, HOUR + 1 + k, gpus=2, phase="Failed", reason="Terminated")
        c.events[-1] = msgspec.structs.replace(ev, message=SHUTDOWN)
    c.node(NODE, HOUR + 30, alloc=0, ready="Unknown")
    c.node(NODE, HOUR + 600, alloc=0, ready="Unknown", op="deleted")
    c.tick(HOUR + DAY)
    assert incidents(c) == {}


def test_a_cancelled_disruption_leaves_the_drop_to_be_judged_from_then() -> None:
    """The taint is a level: while it stands, the all-GPU drop is the teardown; once it is
    removed (consolidation cancelled) with the GPUs still unallocatable, that is a drop
    like any other, dated from the removal: ``gpu_degraded`` five minutes later."""
    c = Cluster()
    gpu_node(c)
    c.node(NODE, HOUR, taints=KARPENTER_V1)
    c.node(NODE, HOUR + 60, alloc=0, taints=KARPENTER_V1)
    c.node(NODE, HOUR + 1200, alloc=0)
    c.tick(HOUR + 2 * HOUR)
    revisions = run(timeline(c))
    assert [i.type for i in revisions if i.status == "open"][:1] == [DEGRADED]
    opened = next(i for i in revisions if i.type == DEGRADED)
    assert opened.first_seen == T0.fromtimestamp(T0.timestamp() + HOUR + 1200, T0.tzinfo)


def _xid_during_a_drain() -> Cluster:
    c = Cluster()
    gpu_node(c)
    c.node(NODE, HOUR, taints=KARPENTER_V1)
    for k, pod in enumerate(PODS[1:]):
        c.kube(
            NODE, HOUR + 5 + k, "Evicted", name=pod, message="Evicted pod: Drifted", warning=False
        )
        deleted(c, NODE, pod, HOUR + 5 + k, code=1)
    c.xid(NODE, HOUR + 6, 79, bus="0000:18:00.0")
    c.pod(NODE, PODS[0], HOUR + 8, gpus=2, phase="Failed", current=term(HOUR + 7, "Error", 1))
    c.node(NODE, HOUR + 9, alloc=0, taints=KARPENTER_V1)
    c.node(NODE, HOUR + 900, alloc=0, ready="Unknown", taints=KARPENTER_V1, op="deleted")
    c.tick(HOUR + DAY)
    return c


def test_arrival_order_within_the_grace_does_not_change_what_a_drain_raises() -> None:
    """Live equals replay: the taint (a level on the node), Karpenter's Events and the
    pods' deletions are read in event time, so any arrival order within the grace gives
    the same bytes: the XID's page, its casualty alone, nothing for the drain."""
    grace = 30.0
    cfg = config(grace_seconds=grace)
    ordered = timeline(_xid_during_a_drain())
    expected = [encode(r) for r in run(ordered, cfg)]
    for seed in range(8):
        correlator = Correlator(cfg)
        out: list[Incident] = []
        for event in within_grace(ordered, random.Random(seed), grace):
            out.extend(feed(correlator, event))
        out.extend(correlator.flush())
        assert correlator.stats.late == 0
        assert [encode(r) for r in out] == expected, seed
    last = final(run(ordered, cfg))
    failed = [
        (i.type, {p.name for p in i.pods if p.role in ("failed", "evicted")}) for i in last.values()
    ]
    assert failed == [(CHAIN, {PODS[0]})]
