"""The watcher does not publish a pod or node update that repeats the last record it
published for the object (``connectors.k8s.relist.repeated``).

Against kmock over HTTP with the real kubernetes-asyncio client, like test_watch.py.
Routine updates here are the ones a real cluster sends all day: a readiness probe
flipping the pod's ``Ready`` condition and its container's ``ready``, a
``managedFields`` timestamp, a node's condition heartbeat (``lastHeartbeatTime``); each
comes with a new resourceVersion. None of them is in a slim record.
"""

from __future__ import annotations

from typing import Any

import pytest

from connectors.k8s.metrics import ConnectorMetrics
from connectors.k8s.watch import Emitted, ResourceWatcher, Synced
from schemas.events import NodeEvent, PodEvent
from tests.k8s_helpers import (
    FAST_WATCH,
    WATCHED,
    FakeCluster,
    collecting,
    fake_cluster,
    gone,
    node,
    pod,
)
from tests.kafka_helpers import eventually

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(20)]

SKIPPED = "gputriage_connector_unchanged_updates_total"


def watcher(cluster: FakeCluster, resource: Any = "pods") -> ResourceWatcher:
    return ResourceWatcher(
        cluster.api,
        resource,
        WATCHED,
        options=FAST_WATCH,
        metrics=ConnectorMetrics(),
    )


def emitted(items: list[Any]) -> list[Any]:
    return [item.event for item in items if isinstance(item, Emitted)]


def skipped(w: ResourceWatcher) -> float:
    assert w.metrics is not None
    return w.metrics.value(SKIPPED, resource=w.resource)


def running(
    name: str,
    rv: str,
    *,
    uid: str | None = None,
    ready: bool = True,
    probed: str = "2026-11-30T10:01:00Z",
    restarts: int = 0,
) -> dict[str, Any]:
    """A running GPU pod as the kubelet reports it, with what a probe moves."""
    obj = pod(name, rv, uid=uid)
    flag = "True" if ready else "False"
    obj["metadata"]["managedFields"] = [
        {"manager": "kubelet", "operation": "Update", "subresource": "status", "time": probed}
    ]
    obj["status"].update(
        {
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": CREATED},
                {"type": "Ready", "status": flag, "lastTransitionTime": probed},
                {"type": "ContainersReady", "status": flag, "lastTransitionTime": probed},
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "ready": ready,
                    "started": True,
                    "restartCount": restarts,
                    "state": {"running": {"startedAt": CREATED}},
                }
            ],
        }
    )
    return obj


CREATED = "2026-11-30T10:00:00Z"


def heartbeat(name: str, rv: str, at: str, *, allocatable: int = 8) -> dict[str, Any]:
    """A GPU node whose kubelet posted its status at ``at``."""
    obj = node(name, rv, allocatable=allocatable)
    for cond in obj["status"]["conditions"]:
        cond["lastHeartbeatTime"] = at
    return obj


async def test_updates_that_change_nothing_slimmed_are_not_published() -> None:
    """Ten pod updates, six of them routine: four records are published, in order, each
    with the version of the update that changed something; six are counted."""
    updates = [
        ("MODIFIED", running("a", "11", probed="2026-11-30T10:02:00Z")),  # managedFields
        ("MODIFIED", running("a", "12", ready=False, probed="2026-11-30T10:03:00Z")),  # probe
        ("MODIFIED", running("a", "13", ready=True, probed="2026-11-30T10:04:00Z")),  # probe
        ("MODIFIED", running("a", "14", restarts=1)),  # a restart: published
        ("MODIFIED", running("a", "15", restarts=1, probed="2026-11-30T10:05:00Z")),
        ("MODIFIED", running("b", "16")),  # another pod, first seen: published
        ("MODIFIED", running("b", "17", ready=False)),
        ("MODIFIED", {**running("a", "18", restarts=1), "status": {"phase": "Failed"}}),
        ("MODIFIED", {**running("a", "19", restarts=1), "status": {"phase": "Failed"}}),
        ("DELETED", {**running("a", "20", restarts=1), "status": {"phase": "Failed"}}),
    ]
    async with fake_cluster() as cluster:
        cluster.pods.put(running("a", "10"))
        cluster.pods.list_version = "10"
        w = watcher(cluster)
        async with collecting(w.items()) as items:
            await eventually(lambda: len(cluster.pods.watch_requests) == 1, what="a watch")
            for kind, obj in updates:
                cluster.pods.event(kind, obj)
            await eventually(lambda: w.resource_version == "20", what="all updates read")
        events = emitted(items)
        assert [(e.op, e.id) for e in events] == [
            ("added", "k8s:uid-a:10"),
            ("modified", "k8s:uid-a:14"),
            ("modified", "k8s:uid-b:16"),
            ("modified", "k8s:uid-a:18"),
            ("deleted", "k8s:uid-a:20"),
        ]
        assert [e.resource_version for e in events] == [10, 14, 16, 18, 20]
        assert skipped(w) == len(updates) + 1 - len(events)
        assert set(w.known) == {"uid-b"}
        assert w.known["uid-b"].resource_version == "17"  # the newest version, not published
        last = w.known["uid-b"].event
        assert isinstance(last, PodEvent)
        assert last.id == "k8s:uid-b:16"


async def test_a_node_heartbeat_is_not_published_and_an_allocatable_drop_is() -> None:
    async with fake_cluster() as cluster:
        cluster.nodes.put(heartbeat("gpu-1", "10", "2026-11-30T10:00:00Z"))
        cluster.nodes.list_version = "10"
        w = watcher(cluster, "nodes")
        async with collecting(w.items()) as items:
            await eventually(lambda: len(cluster.nodes.watch_requests) == 1, what="a watch")
            for rv, minute in (("11", 1), ("12", 2), ("13", 3)):
                cluster.nodes.event(
                    "MODIFIED", heartbeat("gpu-1", rv, f"2026-11-30T10:0{minute}:00Z")
                )
            cluster.nodes.event(
                "MODIFIED", heartbeat("gpu-1", "14", "2026-11-30T10:04:00Z", allocatable=7)
            )
            cluster.nodes.event(
                "MODIFIED", heartbeat("gpu-1", "15", "2026-11-30T10:05:00Z", allocatable=7)
            )
            await eventually(lambda: w.resource_version == "15", what="all updates read")
        events = emitted(items)
        assert [e.id for e in events] == ["k8s:uid-gpu-1:10", "k8s:uid-gpu-1:14"]
        assert all(isinstance(e, NodeEvent) for e in events)
        assert [e.allocatable["nvidia.com/gpu"] for e in events] == [8, 7]
        assert skipped(w) == 4


async def test_a_deleted_pod_recreated_with_the_same_status_is_published_again() -> None:
    """A delete forgets the object: the same uid coming back (never in a real cluster,
    but the memory must not outlive the object) and a StatefulSet's successor of the same
    name with the very same status are both published."""
    async with fake_cluster() as cluster:
        cluster.pods.put(running("a", "10"))
        cluster.pods.list_version = "10"
        w = watcher(cluster)
        async with collecting(w.items()) as items:
            await eventually(lambda: len(cluster.pods.watch_requests) == 1, what="a watch")
            cluster.pods.event("DELETED", running("a", "11"))
            cluster.pods.event("ADDED", running("a", "12"))
            cluster.pods.event("DELETED", running("a", "13"))
            cluster.pods.event("ADDED", running("a", "14", uid="uid-a2"))
            cluster.pods.event("MODIFIED", running("a", "15", uid="uid-a2", ready=False))
            await eventually(lambda: w.resource_version == "15", what="all updates read")
        assert [(e.op, e.id) for e in emitted(items)] == [
            ("added", "k8s:uid-a:10"),
            ("deleted", "k8s:uid-a:11"),
            ("added", "k8s:uid-a:12"),
            ("deleted", "k8s:uid-a:13"),
            ("added", "k8s:uid-a2:14"),
        ]
        assert skipped(w) == 1


async def test_a_relist_skips_repeats_and_a_restart_publishes_everything_again() -> None:
    """After 410 Gone the watcher still remembers what it published: an object whose
    version moved with nothing else is not published again, one that changed is, and a
    vanished one is deleted with its last published state. A restarted connector
    remembers nothing: it publishes every object (the core absorbs the repeats)."""
    async with fake_cluster() as cluster:
        for name, rv in (("a", "10"), ("b", "11"), ("c", "12")):
            cluster.pods.put(running(name, rv))
        cluster.pods.list_version = "12"
        w = watcher(cluster)
        async with collecting(w.items()) as items:
            await eventually(lambda: len(cluster.pods.watch_requests) == 1, what="a watch")
            cluster.pods.event("MODIFIED", running("c", "13", ready=False))  # skipped
            cluster.pods.put(running("a", "20", ready=False, probed="2026-11-30T10:09:00Z"))
            cluster.pods.put(running("b", "21", restarts=1))
            del cluster.pods.objects["uid-c"]
            cluster.pods.list_version = "22"
            cluster.pods.send(gone())
            await eventually(lambda: len(cluster.pods.watch_requests) == 2, what="rewatch")
        assert [(e.op, e.id) for e in emitted(items)] == [
            ("added", "k8s:uid-a:10"),
            ("added", "k8s:uid-b:11"),
            ("added", "k8s:uid-c:12"),
            ("modified", "k8s:uid-b:21"),
            ("deleted", "k8s:uid-c:22"),
        ]
        gone_c = emitted(items)[-1]
        assert gone_c.resource_version == 22
        assert gone_c.containers == emitted(items)[2].containers
        assert skipped(w) == 2  # c's probe, a's relisted probe

        restarted = watcher(cluster)
        async with collecting(restarted.items()) as again:
            await eventually(lambda: any(isinstance(i, Synced) for i in again), what="a list")
        assert sorted(e.id for e in emitted(again)) == ["k8s:uid-a:20", "k8s:uid-b:21"]
        assert skipped(restarted) == 0
