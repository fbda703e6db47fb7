"""The DRA resources through kmock and the real kubernetes-asyncio client: list, watch, a 410
relist, and clusters that serve no resource.k8s.io (before Kubernetes 1.34) or no
DeviceTaintRules (the ``DRADeviceTaints`` gate off).

The objects are the cited ones of tests/data/dra, at other resourceVersions where a test
needs a newer copy.
"""

from __future__ import annotations

import copy
import logging
from typing import Any

import msgspec
import orjson
import pytest

from connectors.k8s.dra import DraJoin
from connectors.k8s.metrics import ConnectorMetrics
from connectors.k8s.run import Connector
from connectors.k8s.slim import DEFAULT_CONFIG, slim_object
from connectors.k8s.watch import (
    Derived,
    Emitted,
    ResourceWatcher,
    Synced,
    WatchOptions,
)
from schemas.codec import AnyEvent
from schemas.events import (
    GpuBindingEvent,
    NodeEvent,
    PodEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
)
from tests.k8s_helpers import (
    FAST_WATCH,
    WATCHED,
    Fail,
    FakeCluster,
    collecting,
    fake_cluster,
    gone,
    node,
    pod,
)
from tests.kafka_helpers import eventually
from tests.paths import DATA

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(20)]


def load(name: str, rv: str | None = None) -> dict[str, Any]:
    obj: dict[str, Any] = orjson.loads((DATA / "dra" / f"{name}.json").read_bytes())
    if rv is not None:
        obj["metadata"]["resourceVersion"] = rv
    return obj


def watcher(
    cluster: FakeCluster, resource: Any, join: DraJoin | None = None, **options: Any
) -> ResourceWatcher:
    return ResourceWatcher(
        cluster.api,
        resource,
        WATCHED,
        options=WatchOptions(**{**FAST_WATCH.__dict__, **options}),
        metrics=ConnectorMetrics(),
        join=join or DraJoin(DEFAULT_CONFIG),
    )


def published(items: list[Any]) -> list[AnyEvent]:
    """Every record the items would publish, in order."""
    out: list[AnyEvent] = []
    for item in items:
        if isinstance(item, Emitted):
            out += [item.event, *item.also]
        elif isinstance(item, Derived):
            out += item.events
    return out


async def test_slices_list_watch_and_relist_after_410() -> None:
    async with fake_cluster(dra=True) as cluster:
        slices = cluster.resource("resourceslices")
        slices.put(load("resourceslice_gpu_node"))
        slices.list_version = "512400"
        w = watcher(cluster, "resourceslices")
        async with collecting(w.items()) as items:
            await eventually(lambda: len(slices.watch_requests) == 1, what="a watch")
            slices.event("MODIFIED", load("resourceslice_device_taint"))
            await eventually(lambda: len(published(items)) == 2, what="the tainted slice")
            # While the watch fell behind: the node's slice was deleted (a plugin restart).
            slices.objects.clear()
            slices.list_version = "540000"
            slices.send(gone())
            await eventually(lambda: len(slices.list_requests) == 2, what="a relist")
            await eventually(lambda: len(published(items)) == 3, what="the deletion")
            await eventually(lambda: len([i for i in items if isinstance(i, Synced)]) == 2)
        records = published(items)
        assert all(isinstance(r, ResourceSliceEvent) for r in records)
        first, tainted, deleted = records
        assert isinstance(first, ResourceSliceEvent)
        assert isinstance(tainted, ResourceSliceEvent)
        assert isinstance(deleted, ResourceSliceEvent)
        assert (first.op, first.id) == ("added", "k8s:0e6d2f4a-3b1c-4e58-9a7d-6c5b4a392817:512340")
        assert [d.name for d in tainted.devices if d.taints] == ["gpu-2"]
        assert (deleted.op, deleted.resource_version, deleted.name) == (
            "deleted",
            540000,
            first.name,
        )
        assert slices.watch_requests[0]["resourceVersion"] == "512400"
        synced = [i for i in items if isinstance(i, Synced)]
        assert [s.relist for s in synced] == [False, True]


async def test_claims_bind_on_list_and_unbind_on_a_relist_that_misses_them() -> None:
    join = DraJoin(DEFAULT_CONFIG)
    join.on(slim_object(load("resourceslice_gpu_node"), cluster="c1"))  # type: ignore[arg-type]
    async with fake_cluster(dra=True) as cluster:
        claims = cluster.resource("resourceclaims")
        claims.put(load("resourceclaim_allocated"))
        claims.list_version = "520300"
        w = watcher(cluster, "resourceclaims", join)
        async with collecting(w.items()) as items:
            await eventually(lambda: len(claims.watch_requests) == 1, what="a watch")
            released = load("resourceclaim_allocated", "520400")
            del released["status"]["reservedFor"]
            claims.event("MODIFIED", released)
            await eventually(lambda: len(published(items)) == 4, what="the release")
            claims.put(load("resourceclaim_allocated", "520500"))
            claims.list_version = "520600"
            claims.send(gone())
            await eventually(lambda: len(published(items)) == 6, what="the relist")
            claims.objects.clear()
            claims.list_version = "520700"
            claims.send(gone())
            await eventually(lambda: len(published(items)) == 8, what="the deletion")
            await eventually(
                lambda: claims.watch_requests[-1]["resourceVersion"] == "520700",
                what="a watch from the relist's version",
            )
        records = published(items)
        assert [type(r).__name__ for r in records] == [
            "ResourceClaimEvent",
            "GpuBindingEvent",
        ] * 4
        bindings = [r for r in records if isinstance(r, GpuBindingEvent)]
        assert [len(b.pods) for b in bindings] == [1, 0, 1, 0]
        assert {b.device for b in bindings} == {"gpu-2"}
        last = records[-2]
        assert isinstance(last, ResourceClaimEvent)
        assert (last.op, last.resource_version) == ("deleted", 520700)


async def test_device_taint_rules_on_v1beta2_are_listed_and_watched_there() -> None:
    async with fake_cluster(dra=True) as cluster:  # Kubernetes 1.36: v1beta2, not v1
        rules = cluster.resource("devicetaintrules")
        rules.put(load("devicetaintrule"))
        join = DraJoin(DEFAULT_CONFIG)
        join.on(slim_object(load("resourceslice_gpu_node"), cluster="c1"))  # type: ignore[arg-type]
        w = watcher(cluster, "devicetaintrules", join)
        async with collecting(w.items()) as items:
            await eventually(lambda: len(rules.watch_requests) == 1, what="a watch")
            rules.event("DELETED", load("devicetaintrule", "540000"))
            await eventually(lambda: len(published(items)) == 2, what="the slice, twice")
        paths = [r.url.path for r in cluster.requests() if "devicetaintrules" in r.url.path]
        assert paths[0] == "/apis/resource.k8s.io/v1/devicetaintrules"
        assert set(paths[1:]) == {"/apis/resource.k8s.io/v1beta2/devicetaintrules"}
        tainted, cleared = published(items)
        assert isinstance(tainted, ResourceSliceEvent)
        assert isinstance(cleared, ResourceSliceEvent)
        assert [t.rule for d in tainted.devices for t in d.taints] == ["evict-gpu-2-xid-79"]
        assert [t for d in cleared.devices for t in d.taints] == []
        assert cleared.resource_version == 540000


async def test_device_taint_rules_fall_back_to_v1alpha3_then_go_on_without_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with fake_cluster() as cluster:  # no resource.k8s.io at all
        w = watcher(cluster, "devicetaintrules", unserved_retry_seconds=0.05)
        with caplog.at_level(logging.WARNING, logger="gputriage.connect.k8s"):
            async with collecting(w.items()) as items:
                await eventually(
                    lambda: len([i for i in items if isinstance(i, Synced)]) >= 2,
                    what="two rounds",
                )
                await eventually(lambda: len(cluster.requests()) >= 4, what="a fourth ask")
        paths = [r.url.path for r in cluster.requests() if "devicetaintrules" in r.url.path]
        assert paths[:4] == [
            "/apis/resource.k8s.io/v1/devicetaintrules",
            "/apis/resource.k8s.io/v1beta2/devicetaintrules",
            "/apis/resource.k8s.io/v1alpha3/devicetaintrules",
            "/apis/resource.k8s.io/v1/devicetaintrules",  # asked again later, newest first
        ]
        synced = [i for i in items if isinstance(i, Synced)]
        assert all(not s.served for s in synced)
        lines = [r.getMessage() for r in caplog.records if "not served" in r.getMessage()]
        assert len(lines) == 1, lines  # said once, however often it asks again
        assert "status=404" in lines[0]
        assert "api=resource.k8s.io/v1alpha3" in lines[0]


async def test_a_failing_dra_list_is_retried_and_holds_nothing_back() -> None:
    async with fake_cluster(dra=True) as cluster:
        claims = cluster.resource("resourceclaims")
        claims.list_answers.extend([Fail(500), Fail(500)])
        claims.put(load("resourceclaim_allocated"))
        w = watcher(cluster, "resourceclaims")
        async with collecting(w.items()) as items:
            await eventually(lambda: len(published(items)) == 1, what="the claim, at last")
            await eventually(lambda: len([i for i in items if isinstance(i, Synced)]) == 3)
        synced = [i for i in items if isinstance(i, Synced)]
        assert [s.served for s in synced] == [False, False, True]
        assert len(claims.list_requests) == 3


async def gather(connector: Connector, done: Any, limit: int = 200) -> list[AnyEvent]:
    """Batches of the connector's source until ``done(records)``."""
    records: list[AnyEvent] = []
    for _ in range(limit):
        batch = await connector.source.next_batch()
        assert batch is not None
        records += batch.events
        if done(records):
            return records
    raise AssertionError(f"not done after {limit} batches: {records}")


async def test_a_cluster_without_resource_k8s_io_keeps_the_pod_and_node_watch() -> None:
    async with fake_cluster() as cluster:
        cluster.pods.put(pod("trainer", "10"))
        cluster.nodes.put(node("gpu-1", "5"))
        connector = Connector(cluster.api, WATCHED, watch=FAST_WATCH)
        try:
            records = await gather(
                connector,
                lambda rs: {type(r) for r in rs} >= {PodEvent, NodeEvent},
            )
        finally:
            await connector.source.close()
        assert [r.name for r in records if isinstance(r, PodEvent)] == ["trainer"]
        dra = [r for r in cluster.requests() if r.url.path.startswith("/apis/resource.k8s.io/")]
        assert dra, "the DRA resources were asked for"


async def test_a_pod_holding_its_gpu_by_claim_only_is_published_with_its_binding() -> None:
    async with fake_cluster(dra=True) as cluster:
        cluster.nodes.put(node("gpu-a100-node-01", "5", gpus=0))  # DRA: no nvidia.com/gpu
        cluster.resource("resourceslices").put(load("resourceslice_gpu_node"))
        cluster.resource("resourceclaimtemplates").put(load("resourceclaimtemplate"))
        cluster.resource("resourceclaims").put(load("resourceclaim_allocated"))
        cluster.pods.put(load("pod_with_claims"))
        cpu_only = pod("cpu-only", "11", gpus=0)
        cluster.pods.put(cpu_only)
        connector = Connector(cluster.api, WATCHED, watch=FAST_WATCH)
        try:
            records = await gather(
                connector,
                lambda rs: (
                    {type(r) for r in rs}
                    >= {PodEvent, GpuBindingEvent, ResourceSliceEvent, ResourceClaimEvent}
                ),
            )
        finally:
            await connector.source.close()
        [pod1] = [r for r in records if isinstance(r, PodEvent)]
        assert pod1.name == "pod1"
        assert [(c.name, c.gpus) for c in pod1.claims] == [("gpu", 1)]
        assert [d.resource for d in pod1.containers[0].devices] == ["claim:gpu/gpu"]
        [binding] = [r for r in records if isinstance(r, GpuBindingEvent)]
        assert (binding.node, binding.device, binding.claims) == (
            "gpu-a100-node-01",
            "gpu-2",
            ("gpu-test1/pod1-gpu-h6vrt",),
        )


async def test_a_dra_node_no_label_marks_is_listed_after_its_slice_and_kept() -> None:
    """No GPU capacity, no GPU label (NVIDIA's DRA driver, no GPU operator): the GPU
    filter and the router know it for a GPU node by its slice only, so the nodes are
    listed once the slices are; listed first, its record was dropped until its next
    change (the kubelet's status report, minutes on)."""
    async with fake_cluster(dra=True) as cluster:
        cluster.nodes.put(node("gpu-a100-node-01", "5", gpus=0))
        cluster.resource("resourceslices").put(load("resourceslice_gpu_node"))
        connector = Connector(cluster.api, WATCHED, watch=FAST_WATCH)
        try:
            records = await gather(
                connector, lambda rs: any(isinstance(r, NodeEvent) for r in rs), limit=20
            )
        finally:
            await connector.source.close()
        kinds = [type(r) for r in records if isinstance(r, NodeEvent | ResourceSliceEvent)]
        assert kinds == [ResourceSliceEvent, NodeEvent]


async def test_non_gpu_claims_are_filtered_and_kept_with_keep_all() -> None:
    nic = load("resourceclaim_allocated")
    nic["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "nic.example.com"
    nic["status"]["allocation"]["devices"]["results"][0]["driver"] = "nic.example.com"
    gpu = copy.deepcopy(load("resourceclaim_allocated"))
    gpu["metadata"].update(uid="uid-gpu-claim", name="other", resourceVersion="520999")
    for keep_all, expected in ((False, ["other"]), (True, ["other", "pod1-gpu-h6vrt"])):
        async with fake_cluster(dra=True) as cluster:
            claims = cluster.resource("resourceclaims")
            claims.put(nic)
            claims.put(gpu)
            settings = msgspec.structs.replace(WATCHED, keep_all=keep_all)
            connector = Connector(cluster.api, settings, watch=FAST_WATCH)
            w = connector.watchers["resourceclaims"]
            async with collecting(w.items()) as items:
                await eventually(lambda: any(isinstance(i, Synced) for i in items))
            names = sorted(r.name for r in published(items) if isinstance(r, ResourceClaimEvent))
            assert names == expected


async def test_a_manifest_without_the_dra_grant_is_said_once_and_asked_again_later(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with fake_cluster(dra=True) as cluster:
        slices = cluster.resource("resourceslices")
        slices.list_answers.extend([Fail(403, reason="Forbidden"), Fail(403, reason="Forbidden")])
        slices.put(load("resourceslice_gpu_node"))
        w = watcher(cluster, "resourceslices", unserved_retry_seconds=0.05)
        with caplog.at_level(logging.WARNING, logger="gputriage.connect.k8s"):
            async with collecting(w.items()) as items:
                await eventually(lambda: len(published(items)) == 1, what="the slice, once granted")
        lines = [r.getMessage() for r in caplog.records if "not served" in r.getMessage()]
        assert len(lines) == 1, lines
        assert "status=403" in lines[0]
        assert [s.served for s in items if isinstance(s, Synced)][:2] == [False, False]
        assert w.metrics is not None
        errors = w.metrics.value(
            "gputriage_connector_api_errors_total", resource="resourceslices", code="403"
        )
        assert errors == 2  # a missing grant is a fault to alert on, unlike a 404
