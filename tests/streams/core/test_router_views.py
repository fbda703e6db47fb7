"""The router's view of a GPU node: only what a cluster-scoped rule reads of it.

A GPU node's record moves for many reasons the cluster key never reads: a remediation
controller's state label, a cordon, a health controller's taint, the Ready message of a
NotReady node (the kubelet's PLEG message carries a duration that grows with every
update). The router copies a node record only when something the cluster rules read
changed (:data:`schemas.keys.CLUSTER_LABELS`, :data:`schemas.wellknown.REMOVAL_TAINTS`, Ready's
status, a graceful shutdown's message), and these tests hold it to two things: a record
whose read part did not change is not copied, and the incidents are byte for byte those
a copy of every record gives (what a producer that restarted sends).
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas import wellknown
from schemas.codec import AnyEvent, encode
from schemas.events import CORDON_TAINT, NodeCondition, NodeEvent, Taint
from schemas.keys import CLUSTER_LABELS, Router, is_copy
from streams.config import default_core_config
from streams.core import Correlator
from streams.core.rules import disruption, fabric, labels
from tests.factories import Cluster

NODES = ("gpu-node-0", "gpu-node-1")
GPUS = 4
DOMAIN = "f7a3c1e2-5b4d-4e8f-9a1b-2c3d4e5f6a7b.1"
STATE_LABEL = "dgxc.nvidia.com/nvsentinel-state"
"""NVSentinel's node-drainer sets this label as it remediates a node (its log: "Label
updated successfully for node", NVIDIA/NVSentinel#714): a label no cluster rule reads."""
PLEG = "PLEG is not healthy: pleg was last seen active {}m0.{}s ago; threshold is 3m0s"
"""The kubelet's NotReady message when its pod lifecycle loop stalls (format-string
provenance: kubernetes pkg/kubelet/pleg/generic.go ``Healthy``, "pleg was last seen active
%v ago; threshold is %v", wrapped by the runtime state as "PLEG is not healthy: %v")."""
OTHER_LABELS = (
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.memory",
    "nvidia.com/mig.strategy",
    "nvidia.com/mig.config",
    "nvidia.com/gpu.deploy.dcgm-exporter",
    "node.kubernetes.io/instance-type",
    "karpenter.sh/nodepool",
)
"""Labels a GPU node carries (GPU feature discovery's, the operator's, the provisioner's)
that no cluster rule reads today: their changes must not change an incident, so a rule
that starts reading one without widening the router's view fails the property test."""
HEALTH_TAINT = Taint(key="nvidia.com/gpu-health", value="unhealthy", effect="NoSchedule")
"""A health controller's taint: not a removal, not read by the cluster key."""

CHANGES = (
    "state-label",
    "other-label",
    "shared",
    "clique",
    "ready",
    "pleg-message",
    "shutdown",
    "cordon",
    "removal",
    "health-taint",
    "xid",
)


class _Node:
    """One node's current object, as its watch would report it."""

    def __init__(self) -> None:
        self.labels: dict[str, str] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
        self.ready, self.message = "True", "kubelet is posting ready status"
        self.taints: dict[str, Taint] = {}

    def change(self, kind: str, value: int) -> None:
        if kind == "state-label":
            self.labels[STATE_LABEL] = ("quarantined", "draining", "remediating")[value % 3]
        elif kind == "other-label":
            name = OTHER_LABELS[value % len(OTHER_LABELS)]
            self.labels[name] = f"{name.rsplit('.', 1)[-1]}-{value % 3}"
        elif kind == "shared":
            shared = ("none", "time-slicing")[value % 2]
            self.labels["nvidia.com/gpu.sharing-strategy"] = shared
        elif kind == "clique":
            if value % 2:
                self.labels[wellknown.CLIQUE_LABEL] = DOMAIN
            else:
                self.labels.pop(wellknown.CLIQUE_LABEL, None)
        elif kind == "ready":
            self.ready = ("True", "False", "Unknown")[value % 3]
            self.message = "kubelet is posting ready status" if self.ready == "True" else ""
        elif kind == "pleg-message":
            self.ready, self.message = "False", PLEG.format(3 + value % 4, value)
        elif kind == "shutdown":
            self.ready, self.message = "False", "Node is shutting down"
        else:
            taint = {
                "cordon": Taint(key=CORDON_TAINT, effect="NoSchedule"),
                "removal": Taint(key=wellknown.KARPENTER_DISRUPTED, effect="NoSchedule"),
                "health-taint": HEALTH_TAINT,
            }[kind]
            if value % 2:
                self.taints[taint.key] = taint
            else:
                self.taints.pop(taint.key, None)

    def record(self, c: Cluster, node: str, t: float) -> NodeEvent:
        ev = c.node(node, t, capacity=GPUS, alloc=GPUS, labels=dict(self.labels))
        ready = NodeCondition(type="Ready", status=self.ready, message=self.message)
        ev = msgspec.structs.replace(ev, conditions=(ready,), taints=tuple(self.taints.values()))
        c.events[-1] = ev
        return ev


def _history(plan: Iterable[tuple[int, str, int, int]]) -> list[AnyEvent]:
    """Two nodes of 4 one-GPU pods whose dcgm-exporter loses the pod mapping at 100 s (an
    allocation_mismatch unless the nodes are left out), then the plan's changes of the
    nodes' objects, and fabric XIDs on them."""
    c = Cluster()
    nodes = {name: _Node() for name in NODES}
    for name in NODES:
        nodes[name].record(c, name, 0)
        for g in range(GPUS):
            c.pod(name, f"{name}-w{g}", 1)
            c.bind(name, 2, f"GPU-{name}-{g}", f"0000:{0x10 + g:02x}:00.0", [f"{name}-w{g}"])
        for g in range(GPUS):
            c.bind(name, 100, f"GPU-{name}-{g}", f"0000:{0x10 + g:02x}:00.0", [])
    for t, kind, n, value in sorted(plan):
        name = NODES[n]
        if kind == "xid":
            c.xid(name, 200 + t, (149, 145)[value % 2], bus=f"0000:{0x10 + value % GPUS:02x}:00.0")
            continue
        nodes[name].change(kind, value)
        nodes[name].record(c, name, 200 + t)
    c.tick(200 + 4 * 3600)
    return sorted(c.events, key=lambda e: e.time)


def _incidents(events: list[AnyEvent], *, every_copy: bool) -> tuple[list[bytes], list[AnyEvent]]:
    correlator = Correlator(default_core_config())
    router = Router()
    out: list[bytes] = []
    copies: list[AnyEvent] = []
    for event in events:
        for routed in (Router() if every_copy else router).route(event):
            if is_copy(routed):
                copies.append(routed)
            out.extend(encode(i) for i in correlator.ingest(routed))
    out.extend(encode(i) for i in correlator.flush())
    return out, copies


def _read(ev: NodeEvent) -> object:
    """What the cluster rules read of a node record, as they read it."""
    return (
        labels.sharing_of(ev.labels),
        fabric.domain_of(ev.labels),
        [c.status for c in ev.conditions if c.type == "Ready"],
        disruption.removing(ev),
    )


def _inputs(ev: NodeEvent) -> object:
    """What the cluster rules read their answers from, named by the rules' own constants:
    the labels, Ready's status and shutdown message, the removal taints."""
    names = {wellknown.CLIQUE_LABEL, wellknown.SHARING_LABEL, wellknown.REPLICAS_LABEL}
    removal = {*disruption._REMOVING, wellknown.KARPENTER_DISRUPTION}
    return (
        {name: value for name, value in ev.labels.items() if name in names},
        [
            (c.status, wellknown.SHUTTING_DOWN in c.message.lower())
            for c in ev.conditions
            if c.type == "Ready"
        ],
        [t for t in ev.taints if t.key in removal],
    )


plans = st.lists(
    st.tuples(
        st.integers(0, 3 * 3600),
        st.sampled_from(CHANGES),
        st.integers(0, len(NODES) - 1),
        st.integers(0, 11),
    ),
    min_size=1,
    max_size=24,
)


@settings(max_examples=60, deadline=None)
@given(plans)
def test_node_changes_no_cluster_rule_reads_are_not_copied_and_change_no_incident(
    plan: list[tuple[int, str, int, int]],
) -> None:
    events = _history(plan)
    some, sent = _incidents(events, every_copy=False)
    every, _ = _incidents(events, every_copy=True)
    assert some == every
    copied = {ev.id for ev in sent if isinstance(ev, NodeEvent)}
    last: dict[str, tuple[object, object]] = {}
    for ev in events:
        if isinstance(ev, NodeEvent):
            was = last.get(ev.node)
            # Copied exactly when what the rules read from moved (or the node is new).
            assert (ev.id in copied) == (was is None or was[0] != _inputs(ev))
            if ev.id in copied:
                last[ev.node] = (_inputs(ev), _read(ev))
            else:  # and what they read of a skipped record is what they hold
                assert was is not None
                assert _read(ev) == was[1]


def test_a_stream_of_unread_node_changes_is_not_copied_and_gives_every_copys_incidents() -> None:
    """Every kind of change a cluster rule does not read, on both nodes, many times: none
    is copied, and the allocation_mismatch they would have revised is the same."""
    unread = ("state-label", "cordon", "health-taint")
    plan = [(60 * i, unread[i % 3], i % 2, i) for i in range(1, 120)]
    plan.append((3000, "ready", 0, 1))  # node 0 NotReady: its PLEG message then moves
    plan += [(3000 + 60 * i, "pleg-message", 0, i) for i in range(1, 60)]
    events = _history(plan)
    some, sent = _incidents(events, every_copy=False)
    every, _ = _incidents(events, every_copy=True)
    assert some == every
    assert any(b'"allocation_mismatch"' in line for line in some)
    node_copies = [ev for ev in sent if isinstance(ev, NodeEvent)]
    assert len(node_copies) == 3  # each node's first record, and node 0 going NotReady


def test_a_change_each_cluster_rule_reads_is_copied() -> None:
    c = Cluster()
    node, router = _Node(), Router()
    sent = []
    for t, kind, value in (
        (0, "", 0),
        (10, "shared", 1),  # allocation_mismatch leaves a time-sliced node out
        (20, "clique", 1),  # nvlink_domain_fault: the node's NVLink domain
        (30, "removal", 1),  # a node being removed is left out
        (40, "ready", 1),  # NotReady: left out
        (50, "pleg-message", 7),  # still NotReady: its message is not read
        (60, "state-label", 0),
        (70, "cordon", 1),
        (80, "shutdown", 0),  # the kubelet's graceful shutdown: a removal
    ):
        if kind:
            node.change(kind, value)
        sent.append(len(router.route(node.record(c, NODES[0], t))) == 2)
    assert sent == [True, True, True, True, True, False, False, False, True]


def test_the_copy_carries_what_the_cluster_rules_read_and_nothing_else() -> None:
    c = Cluster()
    node = _Node()
    for kind in ("state-label", "shared", "clique", "cordon", "removal", "health-taint"):
        node.change(kind, 1)
    original = node.record(c, NODES[0], 0)
    copy = Router().route(original)[-1]
    assert isinstance(copy, NodeEvent)
    assert is_copy(copy)
    assert set(copy.labels) == {wellknown.CLIQUE_LABEL, "nvidia.com/gpu.sharing-strategy"}
    assert [t.key for t in copy.taints] == [wellknown.KARPENTER_DISRUPTED]
    assert _read(copy) == _read(original)


def test_the_labels_taints_and_message_the_cluster_rules_read_are_in_the_routers_view() -> None:
    """A cluster rule that reads another label or taint must widen the router's view, or
    its changes never reach the cluster key."""
    assert wellknown.CLIQUE_LABEL in CLUSTER_LABELS
    assert {wellknown.SHARING_LABEL, wellknown.REPLICAS_LABEL} <= set(CLUSTER_LABELS)
    assert {*disruption._REMOVING, wellknown.KARPENTER_DISRUPTION} == wellknown.REMOVAL_TAINTS
