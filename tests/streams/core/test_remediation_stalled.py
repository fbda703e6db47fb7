"""``remediation_stalled``: a node marked for repair that nobody repairs
(:mod:`streams.core.rules.stalled`), and the pool and GPU product node incidents name.

The node objects are read from tests/data/writeback (EKS's node monitoring agent's
``AcceleratedHardwareReady=False``, its aggregated multi-fault condition of
kubernetes-sigs/karpenter#2833, NVSentinel's quarantine, NPD on AKS) through the k8s
connector's own slimming, then placed on this test's timeline: every update of the node
(its heartbeat) repeats the mark, as the API server shows it.
"""

from __future__ import annotations

import json

import msgspec
import pytest

from connectors.k8s.slim import slim_object
from schemas.codec import AnyEvent
from schemas.events import NodeCondition, NodeEvent, Taint
from schemas.incidents import Incident
from schemas.keys import key_of
from schemas.wellknown import GPU_HEALTH_CONDITION
from streams.core import Correlator
from streams.core.state import NodeState
from tests.core_helpers import config, feed, of_type, run
from tests.disruption_streams import KARPENTER_V1
from tests.factories import T0, Cluster, at
from tests.paths import ROOT

STALLED = "remediation_stalled"
DATA = ROOT / "tests" / "data" / "writeback"
MIN = 60.0
HOUR = 3600.0
DELAY = 1800.0


def _node(name: str) -> NodeEvent:
    obj = json.loads((DATA / name).read_text(encoding="utf-8"))
    obj.setdefault("kind", "Node")  # the AKS capture is the status alone
    obj.setdefault("metadata", {"name": "aks-gpu-12345678-vmss000000"})
    obj["metadata"].setdefault("uid", f"uid-{name}")
    obj["metadata"]["resourceVersion"] = "1"  # the captures have none; the id needs one
    ev = slim_object(obj, "modified", cluster="c1")
    assert isinstance(ev, NodeEvent), ev
    return ev


class Stream:
    """A node's updates on this test's timeline, each a newer version of the object."""

    def __init__(self, base: NodeEvent) -> None:
        self.base = base
        self.c = Cluster()
        self.version = 100

    @property
    def name(self) -> str:
        return self.base.node

    def node(
        self,
        t: float,
        *,
        conditions: tuple[NodeCondition, ...] | None = None,
        taints: tuple[Taint, ...] | None = None,
        op: str = "modified",
        labels: dict[str, str] | None = None,
    ) -> NodeEvent:
        self.version += 1
        ev = msgspec.structs.replace(
            self.base,
            id=f"k8s:uid-{self.name}:{self.version}",
            resource_version=self.version,
            time=at(t),
            op=op,
            conditions=self.base.conditions if conditions is None else conditions,
            taints=self.base.taints if taints is None else taints,
            labels=self.base.labels if labels is None else labels,
        )
        self.c.events.append(ev)
        return ev

    def every_minute(self, start: float, end: float, **kwargs: object) -> None:
        t = start
        while t <= end:
            self.node(t, **kwargs)  # type: ignore[arg-type]
            t += MIN


def _healthy(conditions: tuple[NodeCondition, ...]) -> tuple[NodeCondition, ...]:
    """The same conditions with the repair marks cleared (EKS's healthy wording)."""
    return tuple(
        NodeCondition(
            type=c.type,
            status="True",
            reason="NvidiaGPUIsReady",
            message="Monitoring for the Nvidia GPU system is active",
        )
        if c.type == "AcceleratedHardwareReady"
        else c
        for c in conditions
    )


def _opened_at(events: list[AnyEvent]) -> tuple[float, Incident] | None:
    """The watermark (seconds after T0) when the first ``remediation_stalled`` opened."""
    correlator = Correlator(config())
    for ev in events:
        for inc in feed(correlator, ev):
            if inc.type == STALLED and inc.status == "open":
                return correlator.watermark - T0.timestamp(), inc
    for inc in correlator.flush():
        if inc.type == STALLED and inc.status == "open":
            return correlator.watermark - T0.timestamp(), inc
    return None


def test_a_marked_node_left_unrepaired_pages_after_the_delay_not_before() -> None:
    s = Stream(_node("node_eks_accelerated_hardware_false.json"))
    s.every_minute(0, DELAY + 5 * MIN)
    found = _opened_at(s.c.events)
    assert found is not None
    watermark, inc = found
    assert DELAY <= watermark < DELAY + MIN + 1, "opened at the first record past the delay"
    assert inc.severity == "page"
    assert inc.first_seen == at(0)
    assert inc.attributes["condition"] == "AcceleratedHardwareReady=False"
    assert inc.attributes["marked_by"] == "other"
    assert inc.attributes["since"] == at(0).isoformat()
    assert "NvidiaXID79Error" in inc.evidence[0].text
    assert "no repair or replacement has started" in inc.summary
    s2 = Stream(s.base)
    s2.every_minute(0, DELAY - MIN)
    s2.c.tick(DELAY - 1)
    assert of_type(run(s2.c.events), STALLED) == []


def test_the_clock_is_the_first_sight_not_the_conditions_resetting_words() -> None:
    """The agent aggregates faults into one condition, rewriting its reason and message
    (and, before its fix, its lastTransitionTime): the mark stands all along."""
    base = _node("node_eks_dcgm_multi_fault_aggregated.json")
    [mark] = [c for c in base.conditions if c.type == "AcceleratedHardwareReady"]
    assert mark.reason == "DCGMHealthCode4"
    s = Stream(base)
    for k in range(40):
        code = (101, 4, 122)[k % 3]
        said = msgspec.structs.replace(
            mark,
            reason=f"DCGMHealthCode{code}",
            message=f"DCGM detected issues in health check system with error code {code}",
        )
        others = tuple(c for c in base.conditions if c.type != mark.type)
        s.node(k * MIN, conditions=(said, *others))
    [inc] = of_type(run(s.c.events), STALLED)
    assert inc.first_seen == at(0)
    assert inc.status == "open"


def test_a_cleared_mark_resolves_and_a_mark_cleared_in_time_never_pages() -> None:
    s = Stream(_node("node_eks_accelerated_hardware_false.json"))
    s.every_minute(0, DELAY + 2 * MIN)
    cleared = s.node(DELAY + 3 * MIN, conditions=_healthy(s.base.conditions))
    s.c.tick(DELAY + HOUR)
    [inc] = of_type(run(s.c.events), STALLED)
    assert inc.status == "resolved"
    assert inc.resolved_at == cleared.time
    assert inc.attributes["resolution"] == "the repair mark cleared"
    assert any("AcceleratedHardwareReady=True" in e.text for e in inc.evidence)
    quick = Stream(s.base)
    quick.every_minute(0, DELAY - 2 * MIN)
    quick.node(DELAY - MIN, conditions=_healthy(s.base.conditions))
    quick.every_minute(DELAY, 2 * DELAY, conditions=_healthy(s.base.conditions))
    assert of_type(run(quick.c.events), STALLED) == []


@pytest.mark.parametrize("when", ["before", "after"])
def test_silent_on_a_node_being_removed_or_deleted(when: str) -> None:
    """Karpenter's repair taints the node for removal, then deletes it: the repair at
    work. Before the delay nothing pages; an open page resolves."""
    at_ = DELAY - 10 * MIN if when == "before" else DELAY + 10 * MIN
    s = Stream(_node("node_eks_accelerated_hardware_false.json"))
    s.every_minute(0, at_)
    s.every_minute(at_ + MIN, at_ + 10 * MIN, taints=KARPENTER_V1)
    s.node(at_ + 11 * MIN, op="deleted", taints=KARPENTER_V1)
    s.c.tick(at_ + 2 * HOUR)
    found = of_type(run(s.c.events), STALLED)
    if when == "before":
        assert found == []
        return
    [inc] = found
    assert inc.status == "resolved"
    assert inc.resolved_at == at(at_ + MIN)
    assert "being removed" in inc.attributes["resolution"]


def test_a_node_deleted_while_marked_pages_nothing() -> None:
    s = Stream(_node("node_eks_accelerated_hardware_false.json"))
    s.every_minute(0, 10 * MIN)
    s.node(11 * MIN, op="deleted")
    s.c.tick(2 * HOUR)
    assert of_type(run(s.c.events), STALLED) == []


def test_a_quarantine_cordon_is_no_repair() -> None:
    """NVSentinel cordons the node it marks faulty (``SysLogsXIDError=True``): that is the
    mark, not the repair; the page comes when nothing follows."""
    base = _node("node_nvsentinel_quarantined.json")
    assert any(t.key == "node.kubernetes.io/unschedulable" for t in base.taints)
    s = Stream(base)
    s.every_minute(0, DELAY + MIN)
    [inc] = of_type(run(s.c.events), STALLED)
    assert inc.attributes["condition"] == "SysLogsXIDError=True"
    assert inc.attributes["marked_by"] == "other"


def test_npds_healthy_condition_is_no_mark_and_our_own_mark_is_ours() -> None:
    """Our own ``GPUHealthy=False`` is no repair mark by default (nothing reads it unless
    told to: it would page twice for every page-level hardware incident left open); a
    cluster whose repair system reads it adds it, and the page says it is ours."""
    npd = Stream(_node("node_aks_npd_gpu_conditions.json"))
    npd.every_minute(0, 2 * DELAY)
    assert of_type(run(npd.c.events), STALLED) == []
    ours = NodeCondition(
        type=GPU_HEALTH_CONDITION, status="False", reason="OpenIncident", message="xid 79"
    )
    s = Stream(npd.base)
    s.every_minute(0, 2 * DELAY, conditions=(*npd.base.conditions, ours))
    assert of_type(run(s.c.events), STALLED) == [], "our own mark pages nothing by default"
    marks = (f"{GPU_HEALTH_CONDITION}=False", *config().repair_conditions)
    [inc] = of_type(run(s.c.events, config(repair_conditions=list(marks))), STALLED)
    assert inc.attributes["condition"] == "GPUHealthy=False"
    assert inc.attributes["marked_by"] == "gputriage"


def test_the_write_backs_accelerated_hardware_mark_is_a_default_mark() -> None:
    """The write-back told ``--condition-type AcceleratedHardwareReady`` (what Karpenter
    and EKS repair read) is counted by the default entry, and named another tool's."""
    npd = Stream(_node("node_aks_npd_gpu_conditions.json"))
    ours = NodeCondition(
        type="AcceleratedHardwareReady", status="False", reason="OpenIncident", message="xid 79"
    )
    s = Stream(npd.base)
    s.every_minute(0, DELAY + MIN, conditions=(*npd.base.conditions, ours))
    [inc] = of_type(run(s.c.events), STALLED)
    assert inc.attributes["condition"] == "AcceleratedHardwareReady=False"
    assert inc.attributes["marked_by"] == "other"


def test_the_repair_conditions_are_a_setting() -> None:
    s = Stream(_node("node_aks_npd_gpu_conditions.json"))
    s.every_minute(0, DELAY + MIN)
    cfg = config(repair_conditions=["NetworkUnavailable=True"], remediation_stalled_seconds=600)
    [inc] = of_type(run(s.c.events, cfg), STALLED)
    assert inc.attributes["condition"] == "NetworkUnavailable=True"
    assert inc.first_seen == at(0)


# -- pool and GPU product ------------------------------------------------------------------
def _labelled_node(labels: dict[str, str]) -> list[Incident]:
    c = Cluster()
    c.node("gpu-1", 0, labels=labels)
    c.pod("gpu-1", "train-0", 1)
    c.node("gpu-1", 600, ready="False", labels=labels)
    c.tick(HOUR)
    return of_type(run(c.events), "gpu_node_not_ready")


def test_node_incidents_name_the_pool_and_gpu_product_when_labelled() -> None:
    labels = {
        "eks.amazonaws.com/nodegroup": "p5-ng",
        "karpenter.sh/nodepool": "gpu-p5",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    }
    [inc] = _labelled_node(labels)
    assert inc.attributes["pool"] == "gpu-p5", "the first of POOL_LABELS present wins"
    assert inc.attributes["gpu_product"] == "NVIDIA-H100-80GB-HBM3"
    [bare] = _labelled_node({})
    assert "pool" not in bare.attributes
    assert "gpu_product" not in bare.attributes
    c = Cluster()
    c.node("gpu-1", 0, labels={"cloud.google.com/gke-nodepool": "a3-pool"})
    correlator = Correlator(config())
    for ev in c.events:
        feed(correlator, ev)
    correlator.flush()
    state = correlator.keys[key_of("c1", "gpu-1")]
    assert isinstance(state, NodeState)
    assert (state.pool, state.product) == ("a3-pool", "")
