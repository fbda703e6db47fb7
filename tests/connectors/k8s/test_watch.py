"""ResourceWatcher against kmock over HTTP with the real kubernetes-asyncio client.

Each test scripts the API server's answers (tests/k8s_helpers.py) and checks
what the watcher yields and what it asked for next (the resourceVersion it
resumed from), which is where list/watch bugs hide.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson
import pytest

from connectors.k8s.gpu_filter import GpuFilter
from connectors.k8s.metrics import ConnectorMetrics
from connectors.k8s.settings import K8sSettings
from connectors.k8s.watch import (
    Emitted,
    Rejected,
    ResourceWatcher,
    Synced,
    WatchOptions,
    dead_letter,
)
from schemas.events import KubeEvent, PodEvent
from tests.k8s_helpers import (
    FAST_WATCH,
    WATCHED,
    Fail,
    FakeCluster,
    bookmark,
    collecting,
    fake_cluster,
    gone,
    ids,
    kube_event,
    node,
    pod,
)
from tests.kafka_helpers import eventually

FAST = FAST_WATCH

# Each test is a coroutine on pytest-asyncio's loop; 20 s is far beyond any of them.
pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(20)]


def watcher(cluster: FakeCluster, resource: Any = "pods", **options: Any) -> ResourceWatcher:
    """A watcher on :data:`WATCHED`; ``options``: settings' fields or watch options."""
    settings = {k: options.pop(k) for k in list(options) if k in K8sSettings.__struct_fields__}
    opts = WatchOptions(**{**FAST.__dict__, **options})
    return ResourceWatcher(
        cluster.api,
        resource,
        msgspec.structs.replace(WATCHED, **settings),
        options=opts,
        metrics=ConnectorMetrics(),
    )


def emitted(items: list[Any]) -> list[Any]:
    return [item.event for item in items if isinstance(item, Emitted)]


async def test_list_then_watch_from_the_lists_resource_version() -> None:
    async with fake_cluster() as cluster:
        cluster.pods.put(pod("a", "10"))
        cluster.pods.put(pod("b", "11"))
        cluster.pods.list_version = "12"
        w = watcher(cluster)
        async with collecting(w.items()) as items:
            await eventually(lambda: len(cluster.pods.watch_requests) == 1, what="a watch")
            cluster.pods.event("MODIFIED", pod("a", "13", phase="Failed"))
            cluster.pods.event("DELETED", pod("b", "14"))
            await eventually(lambda: len(emitted(items)) == 4, what="4 events")
        assert ids(items) == ["k8s:uid-a:10", "k8s:uid-b:11", "k8s:uid-a:13", "k8s:uid-b:14"]
        assert isinstance(items[2], Synced)
        assert items[2].resource_version == "12"
        events = emitted(items)
        assert [e.op for e in events] == ["added", "added", "modified", "deleted"]
        assert events[2].phase == "Failed"
        params = cluster.pods.watch_requests[0]
        assert params["resourceVersion"] == "12"
        assert params["allowWatchBookmarks"].lower() == "true"
        assert w.resource_version == "14"
        assert set(w.known) == {"uid-a"}


async def test_bookmarks_advance_the_checkpoint_and_the_next_watch_resumes_there() -> None:
    async with fake_cluster() as cluster:
        cluster.pods.list_version = "20"
        w = watcher(cluster)
        async with collecting(w.items()) as items:
            await eventually(lambda: len(cluster.pods.watch_requests) == 1)
            cluster.pods.send(bookmark("35"))
            cluster.pods.end()  # the server ends the watch (timeoutSeconds)
            await eventually(lambda: len(cluster.pods.watch_requests) == 2, what="rewatch")
        assert cluster.pods.watch_requests[1]["resourceVersion"] == "35"
        assert emitted(items) == []  # a bookmark is not an event
        assert len(cluster.pods.list_requests) == 1  # no relist for a normal end


async def test_gone_mid_stream_relists_and_emits_the_deletion_that_happened_while_away() -> None:
    async with fake_cluster() as cluster:
        cluster.pods.put(pod("a", "10"))
        cluster.pods.put(pod("b", "11"))
        cluster.pods.put(pod("c", "12"))
        cluster.pods.list_version = "12"
        w = watcher(cluster)
        async with collecting(w.items()) as items:
            await eventually(lambda: len(cluster.pods.watch_requests) == 1)
            # While the watch was falling behind: b deleted, c modified, d created, a unchanged.
            del cluster.pods.objects["uid-b"]
            cluster.pods.put(pod("c", "40", phase="Failed"))
            cluster.pods.put(pod("d", "41"))
            cluster.pods.list_version = "42"
            cluster.pods.send(gone())
            await eventually(lambda: len(cluster.pods.watch_requests) == 2, what="rewatch")
        after = items[items.index(next(i for i in items if isinstance(i, Synced))) + 1 :]
        changes = [(e.op, e.id) for e in emitted(after)]
        assert sorted(changes) == sorted(
            [
                ("modified", "k8s:uid-c:40"),
                ("added", "k8s:uid-d:41"),
                ("deleted", "k8s:uid-b:42"),  # the list's version: newer than anything known
            ]
        )
        deleted = next(e for e in emitted(after) if e.op == "deleted")
        assert isinstance(deleted, PodEvent)
        assert (deleted.name, deleted.node) == ("b", "gpu-1")
        assert isinstance(after[-1], Synced)
        assert after[-1].relist
        assert cluster.pods.watch_requests[1]["resourceVersion"] == "42"
        assert "resourceVersion" not in cluster.pods.list_requests[1]  # a fresh, full list
        assert w.metrics is not None
        assert w.metrics.value("gputriage_connector_relists_total", resource="pods") == 1


async def test_http_410_on_the_watch_request_relists() -> None:
    async with fake_cluster() as cluster:
        cluster.pods.put(pod("a", "10"))
        cluster.pods.watch_answers.append(Fail(410, reason="Expired"))
        w = watcher(cluster)
        async with collecting(w.items()):
            await eventually(lambda: len(cluster.pods.list_requests) == 2, what="a relist")
            await eventually(lambda: len(cluster.pods.watch_requests) == 2)


@pytest.mark.looptime
async def test_a_silent_stream_is_reconnected_from_the_checkpoint(looptime: float) -> None:
    """Three seconds of silence on the loop's fake clock (looptime), not the wall clock.

    kmock serves from this same event loop, so every request and answer is socket I/O
    that looptime polls before it moves its clock: the clock only jumps when both ends
    are idle, i.e. through the silence itself (and the helpers' 10-50 ms polls). A
    server in another thread or process would not be safe so: looptime would jump the
    clock to the next timer while an answer is still on its way.
    """
    async with fake_cluster() as cluster:
        cluster.pods.list_version = "50"
        w = watcher(cluster, silence_timeout_seconds=3.0)
        async with collecting(w.items()) as items:
            await eventually(lambda: len(cluster.pods.watch_requests) == 1)
            cluster.pods.send(bookmark("55"))
            await eventually(lambda: cluster.pods.pending == 0, what="the bookmark taken")
            silent_from = float(looptime)
            # ... and then nothing: the connection is dead but TCP does not know.
            await eventually(lambda: len(cluster.pods.watch_requests) == 2, what="reconnect")
            # On the fake clock this is exact up to the helpers' polls: the whole silence,
            # not a blip, and not much more (a real-time deadline could not tell).
            assert 3.0 <= float(looptime) - silent_from < 3.5
            cluster.pods.event("ADDED", pod("late", "56"))
            await eventually(lambda: emitted(items), what="the event after reconnecting")
        assert cluster.pods.watch_requests[1]["resourceVersion"] == "55"
        assert ids(items) == ["k8s:uid-late:56"]
        assert w.metrics is not None
        assert (
            w.metrics.value(
                "gputriage_connector_watch_restarts_total", resource="pods", reason="silent"
            )
            >= 1
        )


@pytest.mark.looptime
async def test_500_and_429_with_retry_after_are_retried_with_backoff(looptime: float) -> None:
    """The Retry-After second passes on the loop's fake clock (looptime): kmock answers
    from this same loop, so the clock moves only while both ends wait (see above)."""
    async with fake_cluster() as cluster:
        cluster.pods.put(pod("a", "10"))
        cluster.pods.list_answers.extend([Fail(500), Fail(503)])
        cluster.pods.watch_answers.append(Fail(429, headers={"Retry-After": "1"}))
        w = watcher(cluster)
        async with collecting(w.items()) as items:
            await eventually(lambda: emitted(items), what="the list after two 5xx")
            started = float(looptime)
            await eventually(lambda: len(cluster.pods.watch_requests) == 2, what="retry")
            waited = float(looptime) - started
        assert len(cluster.pods.list_requests) == 3
        assert 0.9 <= waited < 1.5  # Retry-After: 1 was honoured, not our 10 ms backoff
        assert w.metrics is not None
        assert (
            w.metrics.value("gputriage_connector_api_errors_total", resource="pods", code="429")
            == 1
        )
        assert (
            w.metrics.value("gputriage_connector_api_errors_total", resource="pods", code="500")
            == 1
        )


async def test_api_errors_fail_the_watch_health_condition_until_the_list_succeeds() -> None:
    """``/readyz``'s ``watch-pods`` line (connectors.health): failing with the API's
    answer while the list is refused, holding once listed; given back when the watch ends
    (a leader that lost its lease has no watch of its own to be judged by)."""
    async with fake_cluster() as cluster:
        cluster.pods.put(pod("a", "10"))
        cluster.pods.list_answers.extend([Fail(500)] * 4)
        w = watcher(cluster)
        assert w.metrics is not None
        health = w.metrics.delivery.health
        async with collecting(w.items()) as items:
            await eventually(lambda: len(cluster.pods.list_requests) >= 2, what="a retry")
            state = health.condition("watch-pods").state
            assert not state.ok
            assert state.detail.startswith("API error 500")
            await eventually(lambda: emitted(items), what="the list after four 500s")
            await eventually(lambda: health.condition("watch-pods").state.ok, what="watching")
            assert "[+]watch-pods ok: listed, watching" in health.ready().lines
        assert health.condition("watch-pods").state.detail == "not watching (standby or stopping)"


async def test_error_event_other_than_410_backs_off_and_resumes_without_relisting() -> None:
    async with fake_cluster() as cluster:
        cluster.pods.list_version = "7"
        w = watcher(cluster)
        async with collecting(w.items()):
            await eventually(lambda: len(cluster.pods.watch_requests) == 1)
            cluster.pods.event("ADDED", pod("a", "8"))
            cluster.pods.send(
                {"type": "ERROR", "object": {"kind": "Status", "code": 500, "message": "x"}}
            )
            await eventually(lambda: len(cluster.pods.watch_requests) == 2)
        assert cluster.pods.watch_requests[1]["resourceVersion"] == "8"
        assert len(cluster.pods.list_requests) == 1


async def test_odd_shapes_never_crash_bad_ones_become_dead_letters() -> None:
    async with fake_cluster() as cluster:
        w = watcher(cluster)
        no_status = pod("no-status", "2")
        del no_status["status"]
        null_statuses = pod("null-statuses", "3")
        null_statuses["status"]["containerStatuses"] = None
        unknown = pod("unknown-fields", "4")
        unknown["spec"]["futureField"] = {"x": [1, 2]}
        unknown["brandNew"] = True
        huge = pod("huge-annotations", "5")
        huge["metadata"]["annotations"] = {"big": "x" * 600_000}  # > aiohttp's 512 KiB
        bad_status = pod("bad-status", "6")
        bad_status["status"] = "Running"
        bad_restarts = pod("bad-restarts", "7")
        bad_restarts["status"]["containerStatuses"] = [{"name": "m", "restartCount": "3"}]
        async with collecting(w.items()) as items:
            await eventually(lambda: len(cluster.pods.watch_requests) == 1)
            for obj in (no_status, null_statuses, unknown, huge, bad_status, bad_restarts):
                cluster.pods.event("ADDED", obj)
            cluster.pods.send(b"{not json\n")
            cluster.pods.send({"type": "SURPRISE", "object": {}})
            cluster.pods.event("ADDED", pod("after", "9"))
            await eventually(lambda: "k8s:uid-after:9" in ids(items), what="the last pod")
        names = [e.name for e in emitted(items)]
        assert names == ["no-status", "null-statuses", "unknown-fields", "huge-annotations",
                         "after"]  # fmt: skip
        rejected = [i for i in items if isinstance(i, Rejected)]
        reasons = [(r.error.field, r.error.reason) for r in rejected]
        assert reasons[0] == ("$.object.status", "expected an object, got string")
        assert reasons[1][0] == "$.object.status.containerStatuses[0].restartCount"
        assert reasons[2][1].startswith("invalid JSON")
        assert reasons[3] == ("$.type", "unknown watch event type 'SURPRISE'")
        letter = dead_letter(rejected[0])
        assert letter.key == b"uid-bad-status"
        assert letter.value is not None
        assert orjson.loads(letter.value)["object"]["status"] == "Running"
        assert w.metrics is not None
        assert w.metrics.value("gputriage_connector_dead_letters_total", resource="pods") == 4


async def test_gpu_filter_keeps_gpu_pods_and_their_events_only() -> None:
    async with fake_cluster() as cluster:
        cluster.pods.put(pod("trainer", "10"))
        cluster.pods.put(pod("web", "11", gpus=0))
        cluster.events.put(kube_event("e1", "20", reason="Evicted", pod_name="trainer"))
        cluster.events.put(kube_event("e2", "21", reason="Pulled", pod_name="web"))
        gpu = GpuFilter()
        pods = ResourceWatcher(cluster.api, "pods", WATCHED, options=FAST, keep=gpu.keep)
        events = ResourceWatcher(cluster.api, "events", WATCHED, options=FAST, keep=gpu.keep)
        async with collecting(pods.items()) as pod_items:
            await eventually(lambda: any(isinstance(i, Synced) for i in pod_items))
            async with collecting(events.items()) as event_items:
                await eventually(lambda: len(cluster.events.watch_requests) == 1)
                cluster.events.event(
                    "DELETED", kube_event("e1", "22", reason="Evicted", pod_name="trainer")
                )
                cluster.events.event(
                    "ADDED", kube_event("e3", "23", reason="Killing", pod_name="trainer")
                )
                await eventually(lambda: "k8s:uid-e3:23" in ids(event_items))
        assert ids(pod_items) == ["k8s:uid-trainer:10"]
        # e2 is about a non-GPU pod; e1's deletion is an expiry, not a change.
        assert ids(event_items) == ["k8s:uid-e1:20", "k8s:uid-e3:23"]
        assert all(isinstance(e, KubeEvent) for e in emitted(event_items))
        assert set(pods.known) == {"uid-trainer", "uid-web"}  # both known, one forwarded


async def test_namespaced_watch_and_nodes() -> None:
    async with fake_cluster() as cluster:
        cluster.pods.put(pod("mine", "10", namespace="ml"))
        cluster.pods.put(pod("theirs", "11", namespace="other"))
        cluster.nodes.put(node("gpu-1", "5"))
        pods = watcher(cluster, namespace="ml")
        nodes = watcher(cluster, "nodes", namespace="ml")  # cluster-scoped anyway
        async with (
            collecting(pods.items()) as pod_items,
            collecting(nodes.items()) as node_items,
        ):
            await eventually(lambda: len(cluster.nodes.watch_requests) == 1)
            cluster.nodes.event("MODIFIED", node("gpu-1", "6", allocatable=7))
            await eventually(lambda: len(emitted(node_items)) == 2)
            await eventually(lambda: emitted(pod_items))
        assert [e.name for e in emitted(pod_items)] == ["mine"]
        assert emitted(node_items)[1].allocatable == {"nvidia.com/gpu": 7}
        paths = {r.url.path for r in cluster.requests()}
        assert {"/api/v1/namespaces/ml/pods", "/api/v1/nodes"} <= paths


async def test_a_restarted_watcher_relists_the_same_events_so_downstream_skips_them() -> None:
    async with fake_cluster() as cluster:
        cluster.pods.put(pod("a", "10"))
        cluster.pods.put(pod("b", "11", phase="Failed"))
        runs = []
        for _ in range(2):  # the first connector, then its restarted successor
            w = watcher(cluster)
            async with collecting(w.items()) as items:
                await eventually(lambda: any(isinstance(i, Synced) for i in items))
            runs.append(emitted(items))
        assert runs[0] == runs[1]  # same ids *and* times: duplicates, not news
        assert [e.time.isoformat() for e in runs[0]] == ["2026-11-30T10:00:00+00:00"] * 2


async def test_a_line_over_the_limit_is_a_dead_letter_and_the_stream_resyncs() -> None:
    async with fake_cluster() as cluster:
        w = watcher(cluster, max_line_bytes=4096)
        big = pod("big", "2")
        big["metadata"]["annotations"] = {"x": "y" * 10_000}
        async with collecting(w.items()) as items:
            await eventually(lambda: len(cluster.pods.watch_requests) == 1)
            cluster.pods.event("ADDED", big)
            cluster.pods.event("ADDED", pod("small", "3"))
            await eventually(lambda: emitted(items), what="the pod after the long line")
        rejected = [i for i in items if isinstance(i, Rejected)]
        assert [r.error.reason for r in rejected] == ["line longer than 4096 bytes"]
        assert ids(items) == ["k8s:uid-small:3"]
        assert w.resource_version == "3"
