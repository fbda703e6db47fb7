"""Node conditions by server-side apply, the breaker, taints and convergence, through the
real client and kmock (nodes answered with apply's ownership rules: cluster.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from connectors.writeback.marks import owned_by_us
from connectors.writeback.runner import Writeback, build
from connectors.writeback.settings import WritebackSettings
from tests.connectors.writeback.cluster import Cluster, cluster, gpu_node
from tests.connectors.writeback.incidents import eviction, resolved

MARKING = WritebackSettings(
    mark_nodes=True,
    pod_events=False,
    node_events=False,
    writes_per_second=1000,
    write_burst=1000,
    metrics_port=None,
)


def writer(c: Cluster, settings: WritebackSettings = MARKING) -> Writeback:
    return build(settings, c.api, identity="replica-1")


def value(metric: Any) -> float:
    return float(metric._value.get())


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_a_condition_is_applied_then_cleared_on_resolve() -> None:
    async with cluster() as c:
        c.add_node(gpu_node("gpu-1"))
        w = writer(c)
        incident = eviction()
        await w.handle(incident)
        marked = c.nodes.condition("gpu-1", "GPUHealthy")
        assert marked is not None
        assert (marked["status"], marked["reason"]) == ("False", "GPUXid79")
        assert "GPU fell off the bus" in marked["message"]
        [(node, manager, body, query)] = c.nodes.applies
        assert (node, manager) == ("gpu-1", "gputriage-writeback")
        assert "force" not in query
        assert body["apiVersion"] == "v1"
        assert body["kind"] == "Node"
        assert value(w.metrics.marked) == 1

        await w.handle(resolved(incident))
        cleared = c.nodes.condition("gpu-1", "GPUHealthy")
        assert cleared is not None
        assert (cleared["status"], cleared["reason"]) == ("True", "NoOpenIncident")
        assert c.nodes.condition("gpu-1", "Ready") is not None, "the kubelet's are untouched"
        assert value(w.metrics.marked) == 0


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_another_managers_condition_is_not_fought() -> None:
    """EKS's agent owns AcceleratedHardwareReady=True: our apply gets 409, and stops there."""
    settings = WritebackSettings(
        mark_nodes=True, pod_events=False, condition_type="AcceleratedHardwareReady"
    )
    async with cluster() as c:
        c.add_node(gpu_node("gpu-1"))
        c.nodes.objects["gpu-1"]["status"]["conditions"].append(
            {"type": "AcceleratedHardwareReady", "status": "True", "reason": "NvidiaGPUIsReady"}
        )
        c.nodes.own("gpu-1", "AcceleratedHardwareReady", "eks-node-monitoring-agent")
        w = writer(c, settings)
        await w.handle(eviction())
        kept = c.nodes.condition("gpu-1", "AcceleratedHardwareReady")
        assert kept is not None
        assert kept["status"] == "True"
        assert value(w.metrics.writes.labels("condition", "conflict")) == 1
        assert all("force" not in q for *_, q in c.nodes.applies)


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_the_breaker_stops_at_its_bound() -> None:
    """5 nodes of pool a (20%: 1 node) and 3 nodes without a pool, at most 2 nodes in all."""
    settings = WritebackSettings(
        mark_nodes=True, pod_events=False, node_events=False, max_marked_nodes=2
    )
    async with cluster() as c:
        for i in range(5):
            c.add_node(gpu_node(f"a{i}", pool="a"))
        for i in range(3):
            c.add_node(gpu_node(f"x{i}", pool=""))
        w = writer(c, settings)
        for minute, node in enumerate(["a0", "a1", "x0", "x1", "x2"]):
            await w.handle(eviction(node, minutes=minute))
        faulty = sorted(
            n
            for n in c.nodes.objects
            if (c.nodes.condition(n, "GPUHealthy") or {}).get("status") == "False"
        )
        assert faulty == ["a0", "x0"]
        assert value(w.metrics.breaker_tripped) == 1
        assert value(w.metrics.withheld) > 0

        await w.handle(resolved(eviction("a0", minutes=0)))  # room again: the oldest waiting
        faulty = sorted(
            n
            for n in c.nodes.objects
            if (c.nodes.condition(n, "GPUHealthy") or {}).get("status") == "False"
        )
        assert faulty == ["a1", "x0"]


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_a_restart_converges_once() -> None:
    """gpu-1 still faulty (left alone: no second apply), gpu-2 our leftover of a resolved
    incident (cleared), gpu-3 new (marked), gpu-4 another tool's False condition of our
    type (left alone), gpu-5 our mark whose incident is not in the topic (kept)."""
    ours = {"type": "GPUHealthy", "status": "False", "reason": "GPUXid79", "message": "old"}
    ours["lastTransitionTime"] = "2026-11-30T14:00:00Z"
    async with cluster() as c:
        for name in ("gpu-1", "gpu-2", "gpu-3", "gpu-4", "gpu-5"):
            c.add_node(gpu_node(name, pool=""))
        for name in ("gpu-1", "gpu-2", "gpu-5"):
            c.nodes.objects[name]["status"]["conditions"].append(dict(ours))
            c.nodes.own(name, "GPUHealthy", "gputriage-writeback")
        theirs = {"type": "GPUHealthy", "status": "False", "reason": "SomeoneElse"}
        c.nodes.objects["gpu-4"]["status"]["conditions"].append(theirs)
        c.nodes.own("gpu-4", "GPUHealthy", "node-problem-detector")
        settings = WritebackSettings(mark_nodes=True, pod_events=False, max_pool_fraction=1.0)
        w = writer(c, settings)
        known = (eviction("gpu-1"), resolved(eviction("gpu-2")), eviction("gpu-3", minutes=1))
        for incident in known:
            w.latest[incident.id] = incident
        await w.converge()
        applied = [node for node, *_ in c.nodes.applies]
        assert sorted(applied) == ["gpu-2", "gpu-3"], "each once; gpu-1 is already right"
        assert (c.nodes.condition("gpu-2", "GPUHealthy") or {})["status"] == "True"
        assert (c.nodes.condition("gpu-3", "GPUHealthy") or {})["status"] == "False"
        assert c.nodes.condition("gpu-4", "GPUHealthy") == theirs
        assert (c.nodes.condition("gpu-5", "GPUHealthy") or {})["status"] == "False"
        assert value(w.metrics.unexplained) == 1

        again = writer(c, settings)
        again.latest = dict(w.latest)
        await again.converge()
        assert len(c.nodes.applies) == 2, "a second restart writes nothing"


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_a_mark_whose_incident_left_the_topic_is_kept() -> None:
    """The topic is compacted and time-retained: an incident open for longer than the
    retention, with no new revision, is absent at the next start while the GPU is still
    broken. Absent is not resolved: its mark stays (logged, counted); a tombstone clears."""
    ours = {"type": "GPUHealthy", "status": "False", "reason": "GPUXid79", "message": "old"}
    async with cluster() as c:
        c.add_node(gpu_node("gpu-1", pool=""))
        c.nodes.objects["gpu-1"]["status"]["conditions"].append(ours)
        c.nodes.own("gpu-1", "GPUHealthy", "gputriage-writeback")
        w = writer(c)
        await w.converge()
        assert c.nodes.applies == []
        assert (c.nodes.condition("gpu-1", "GPUHealthy") or {})["status"] == "False"
        assert value(w.metrics.unexplained) == 1

        w.gone["c1/gpu-1/device_unhealthy_eviction/1"] = "gpu-1"  # its tombstone was read
        await w.converge()
        assert (c.nodes.condition("gpu-1", "GPUHealthy") or {})["status"] == "True"
        assert value(w.metrics.unexplained) == 0


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_the_transition_time_stays_while_the_status_stays() -> None:
    """karpenter #2833: a repair clock that restarts on every write never runs out."""
    async with cluster() as c:
        c.add_node(gpu_node("gpu-1"))
        ours = {"type": "GPUHealthy", "status": "False", "reason": "GPUDeviceUnhealthy"}
        ours["lastTransitionTime"] = "2026-11-30T14:00:00Z"
        c.nodes.objects["gpu-1"]["status"]["conditions"].append(ours)
        c.nodes.own("gpu-1", "GPUHealthy", "gputriage-writeback")
        w = writer(c, WritebackSettings(mark_nodes=True, pod_events=False))
        await w.handle(eviction())  # new words (an XID now): re-applied, same status
        condition = c.nodes.condition("gpu-1", "GPUHealthy")
        assert condition is not None
        assert condition["reason"] == "GPUXid79"
        assert condition["lastTransitionTime"] == "2026-11-30T14:00:00Z"


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_the_taint_follows_the_condition() -> None:
    settings = WritebackSettings(mark_nodes=True, pod_events=False, taint="NoSchedule")
    async with cluster() as c:
        c.add_node(gpu_node("gpu-1"))
        c.nodes.objects["gpu-1"]["spec"]["taints"] = [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
        ]
        w = writer(c, settings)
        incident = eviction()
        await w.handle(incident)
        taints = c.nodes.objects["gpu-1"]["spec"]["taints"]
        assert {"key": "gputriage.io/gpu-fault", "value": "true", "effect": "NoSchedule"} in taints
        assert len(taints) == 2
        await w.handle(resolved(incident))
        assert c.nodes.objects["gpu-1"]["spec"]["taints"] == [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
        ]


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_marking_off_never_touches_a_node() -> None:
    async with cluster() as c:
        c.add_node(gpu_node("gpu-1"))
        w = writer(c, WritebackSettings(pod_events=False, node_events=False))
        await w.handle(eviction())
        assert c.node_writes() == []


def test_ours_by_managed_fields_else_by_a_reason_we_write() -> None:
    """A server (or a copy) without managedFields: the reason decides, never a stranger's."""
    node = gpu_node("gpu-1")
    for reason, ours in (
        ("GPUXid79", True),
        ("GPUNVLinkDomainFault", True),
        ("NoOpenIncident", True),
        ("NvidiaXID79Error", False),
        ("SysLogsXIDErrorIsNotHealthy", False),
    ):
        node["status"]["conditions"][1:] = [
            {"type": "GPUHealthy", "status": "False", "reason": reason}
        ]
        assert owned_by_us(node, "GPUHealthy") is ours, reason
    node["metadata"]["managedFields"] = [
        {
            "manager": "gputriage-writeback",
            "operation": "Apply",
            "fieldsV1": {"f:status": {"f:conditions": {'k:{"type":"GPUHealthy"}': {}}}},
        }
    ]
    assert owned_by_us(node, "GPUHealthy")


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_a_failed_clear_is_retried_within_the_resync() -> None:
    """One 500 on the clear at resolve must not leave a healthy node marked (a repair
    system would replace it): the marks are reconciled again, on the loop's clock."""
    settings = WritebackSettings(
        mark_nodes=True, pod_events=False, node_events=False, resync_seconds=60
    )
    async with cluster() as c:
        c.add_node(gpu_node("gpu-1"))
        w = writer(c, settings)
        incident = eviction()
        await w.handle(incident)
        c.nodes.failures.append(500)
        await w.handle(resolved(incident))
        assert (c.nodes.condition("gpu-1", "GPUHealthy") or {})["status"] == "False"
        loop = asyncio.get_running_loop()
        started = loop.time()
        resync = asyncio.create_task(w.keep_marks())
        try:
            while (c.nodes.condition("gpu-1", "GPUHealthy") or {})["status"] != "True":
                assert loop.time() - started <= 60, "not cleared within the resync"
                await asyncio.sleep(0.5)
        finally:
            resync.cancel()
        assert value(w.metrics.resyncs.labels("failed")) == 1
        assert value(w.metrics.resyncs.labels("ok")) >= 1


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_a_mark_removed_by_hand_comes_back_at_the_resync() -> None:
    settings = WritebackSettings(mark_nodes=True, pod_events=False, resync_seconds=60)
    async with cluster() as c:
        c.add_node(gpu_node("gpu-1"))
        w = writer(c, settings)
        await w.handle(eviction())
        c.nodes.objects["gpu-1"]["status"]["conditions"] = [
            x for x in c.nodes.objects["gpu-1"]["status"]["conditions"] if x["type"] == "Ready"
        ]
        loop = asyncio.get_running_loop()
        started = loop.time()
        resync = asyncio.create_task(w.keep_marks())
        try:
            while (c.nodes.condition("gpu-1", "GPUHealthy") or {}).get("status") != "False":
                assert loop.time() - started <= 61, "not marked again within the resync"
                await asyncio.sleep(0.5)
        finally:
            resync.cancel()
        assert loop.time() - started >= 60, "put back by the resync, not at once"


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_clears_go_before_marks_so_the_bound_holds_within_a_pass() -> None:
    """At most one node marked: gpu-1's incident resolved and gpu-2's opened while we were
    away; the restart clears gpu-1 before it marks gpu-2, never two at once."""
    ours = {"type": "GPUHealthy", "status": "False", "reason": "GPUXid79", "message": "old"}
    settings = WritebackSettings(mark_nodes=True, pod_events=False, max_marked_nodes=1)
    async with cluster() as c:
        for name in ("gpu-1", "gpu-2"):
            c.add_node(gpu_node(name, pool=""))
        c.nodes.objects["gpu-1"]["status"]["conditions"].append(ours)
        c.nodes.own("gpu-1", "GPUHealthy", "gputriage-writeback")
        w = writer(c, settings)
        for incident in (resolved(eviction("gpu-1")), eviction("gpu-2", minutes=1)):
            w.latest[incident.id] = incident
        await w.converge()
        order = [
            (node, body["status"]["conditions"][0]["status"])
            for node, _, body, _ in c.nodes.applies
        ]
        assert order == [("gpu-1", "True"), ("gpu-2", "False")]


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_nodes_are_listed_a_page_at_a_time() -> None:
    async with cluster() as c:
        for i in range(5):
            c.add_node(gpu_node(f"gpu-{i}", pool=""))
        w = writer(c, WritebackSettings(mark_nodes=True, pod_events=False, max_pool_fraction=1))
        w.marker.page_size = 2
        for i in range(5):
            incident = eviction(f"gpu-{i}", minutes=i)
            w.latest[incident.id] = incident
        await w.converge()
        assert sorted(node for node, *_ in c.nodes.applies) == [f"gpu-{i}" for i in range(5)]
        lists = [r for r in c.server if r.url.path == "/api/v1/nodes"]
        assert [r.params.get("limit") for r in lists] == ["2", "2", "2"]
