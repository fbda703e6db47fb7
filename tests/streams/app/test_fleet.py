"""The fleet gauges: the tally over key states (pure), and the same gauges set from a real
pipeline's lanes; the time-to-resolve histogram."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from schemas.incidents import GpuRef, Incident
from schemas.topics import topic_layout
from streams.app.fleet import Tally, tally
from streams.app.metrics import Metrics
from streams.app.pipeline import Pipeline
from streams.core.state import ClusterState, DraDevice, DraState, NodeState, OpenIncident
from tests.core_helpers import config
from tests.factories import Cluster
from tests.processor_helpers import records


def node(name: str, **fields: Any) -> NodeState:
    return NodeState(cluster="c1", node=name, **fields)


def incident(kind: str, severity: str, *buses: str, node_name: str = "n") -> OpenIncident:
    return OpenIncident(
        id=f"{kind}-{node_name}",
        type=kind,
        subject=node_name,
        severity=severity,  # type: ignore[arg-type]
        first_seen=0.0,
        last_seen=0.0,
        gpus={bus: GpuRef(pci_bus_id=bus) for bus in buses},
    )


def gpus(counts: Tally, state: str, cluster: str = "c1") -> int:
    return sum(n for (c, _, _, s), n in counts.gpus.items() if (c, s) == (cluster, state))


def test_a_page_level_hardware_incident_takes_the_gpus_it_names_out_of_service() -> None:
    chain = incident("device_unhealthy_eviction", "page", "0000:9b:00.0", "0000:9c:00.0")
    state = node("n", capacity=8, ready="True", incidents={"k": chain})
    counts = tally([state])
    assert (gpus(counts, "healthy"), gpus(counts, "unhealthy")) == (6, 2)
    assert counts.incidents == {("c1", "device_unhealthy_eviction", "page"): 1}


def test_a_gpu_named_by_two_incidents_counts_once_and_never_more_than_the_node_has() -> None:
    first = incident("xid_repeat", "page", "0000:9b:00.0")
    second = incident("gpu_degraded", "page", "0000:9b:00.0", "0000:9c:00.0", "0000:9d:00.0")
    state = node("n", capacity=2, ready="True", incidents={"a": first, "b": second})
    counts = tally([state])
    assert (gpus(counts, "healthy"), gpus(counts, "unhealthy")) == (0, 2)


def test_a_hardware_page_that_names_no_gpu_takes_every_gpu_of_its_node() -> None:
    """Which GPU could not be told (a kernel XID whose bus id did not resolve, a ref
    without any identifier): every GPU of the node is suspect. A ticket naming none is
    still healthy, and the node beside it is untouched."""
    unnamed = incident("xid_repeat", "page")
    blank = OpenIncident(
        id="blank", type="device_unhealthy_eviction", subject="m", severity="page",
        first_seen=0.0, last_seen=0.0, gpus={"x": GpuRef()},
    )  # fmt: skip
    states = [
        node("n", capacity=8, ready="True", incidents={"a": unnamed}),
        node("m", capacity=4, ready="True", incidents={"b": blank}),
        node("t", capacity=4, ready="True", incidents={"c": incident("gpu_degraded", "ticket")}),
    ]
    counts = tally(states)
    assert (gpus(counts, "healthy"), gpus(counts, "unhealthy")) == (4, 12)


def test_tickets_and_software_incidents_leave_the_gpus_healthy() -> None:
    opened = {
        "a": incident("gpu_degraded", "ticket", "0000:9b:00.0"),
        "b": incident("suspected_cuda_oom", "page", "0000:9c:00.0"),
    }
    counts = tally([node("n", capacity=8, ready="True", incidents=opened)])
    assert (gpus(counts, "healthy"), gpus(counts, "unhealthy")) == (8, 0)
    assert counts.incidents == {
        ("c1", "gpu_degraded", "ticket"): 1,
        ("c1", "suspected_cuda_oom", "page"): 1,
    }


def test_every_gpu_of_a_node_not_ready_is_unhealthy_and_unknown_nodes_count_nothing() -> None:
    states = [
        node("down", capacity=4, ready="False"),
        node("lost", capacity=4, ready="Unknown"),
        node("up", capacity=4, ready="True"),
        node("cpu", capacity=0, ready="True"),
        node("deleted"),  # a deleted node's state is reset: capacity -1
    ]
    counts = tally(states)
    assert (gpus(counts, "healthy"), gpus(counts, "unhealthy")) == (4, 8)


def test_a_dra_node_counts_its_listed_physical_gpus() -> None:
    devices = {
        "gpu-0": DraDevice(uuid=b"\x01"),
        "gpu-0-mig-1g12gb-0": DraDevice(uuid=b"\x02", parent=b"\x01"),
        "gpu-0-mig-1g12gb-1": DraDevice(uuid=b"\x03", parent=b"\x01"),
        "gpu-1": DraDevice(uuid=b"\x04"),
        "gpu-2": DraDevice(uuid=b"\x05", gone=100.0),
    }
    state = node("dra", ready="True", dra=DraState(devices=devices))
    counts = tally([state])
    assert (gpus(counts, "healthy"), gpus(counts, "unhealthy")) == (2, 0)


def test_cluster_incidents_count_under_their_cluster() -> None:
    starved = incident("gpu_pods_starved", "page")
    cluster = ClusterState(cluster="c2", incidents={"s": starved})
    counts = tally([cluster])
    assert counts.incidents == {("c2", "gpu_pods_starved", "page"): 1}
    assert counts.gpus == {}


def test_gpus_are_counted_per_pool_and_product() -> None:
    states = [
        node("a", capacity=8, ready="True", pool="p1", product="H100"),
        node("b", capacity=8, ready="False", pool="p1", product="H100"),
        node("c", capacity=4, ready="True", pool="p2", product="A100"),
    ]
    assert tally(states).gpus == {
        ("c1", "p1", "H100", "healthy"): 8,
        ("c1", "p1", "H100", "unhealthy"): 8,
        ("c1", "p2", "A100", "healthy"): 4,
        ("c1", "p2", "A100", "unhealthy"): 0,
    }


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_the_gauges_follow_a_real_pipeline_and_a_deleted_node_disappears() -> None:
    """An XID 79 and the eviction it causes, through the processor's pipeline: one GPU out
    of eight taken out of service by the page; the node's deletion removes its series and
    resolves the incident (its time to resolve observed once; its open count goes to 0,
    the series kept for alerts that read it)."""
    c = Cluster()
    c.node("m", 0)
    c.pod("m", "t", 1)
    c.xid("m", 300, 79)
    c.pod("m", "t", 320, phase="Failed", reason="Evicted")
    pipeline = Pipeline(config(grace_seconds=1), topic_layout())
    out = pipeline.process(records(c.events))
    out_later = pipeline.tick(c.events[-1].time.timestamp() + 10)
    assert [i.type for i in out.incidents + out_later.incidents] == ["device_unhealthy_eviction"]
    metrics = Metrics()
    metrics.observe_lanes(pipeline.lanes)
    fleet = {"cluster": "c1", "pool": "", "product": ""}
    assert sample(metrics, "gputriage_fleet_gpus", **fleet, state="unhealthy") == 1
    assert sample(metrics, "gputriage_fleet_gpus", **fleet, state="healthy") == 7
    page = {"cluster": "c1", "type": "device_unhealthy_eviction", "severity": "page"}
    assert sample(metrics, "gputriage_open_incidents", **page) == 1

    c.node("m", 400, op="deleted")
    out = pipeline.process(records(c.events[-1:], start=len(c.events) - 1))
    out_later = pipeline.tick(c.events[-1].time.timestamp() + 10)
    for published in out.incidents + out_later.incidents:
        metrics.observe_published(published)
    metrics.observe_lanes(pipeline.lanes)
    resolutions = "gputriage_incident_resolution_seconds_count"
    assert sample(metrics, resolutions, type="device_unhealthy_eviction") == 1
    assert sample(metrics, "gputriage_fleet_gpus", **fleet, state="healthy") is None
    assert sample(metrics, "gputriage_fleet_gpus", **fleet, state="unhealthy") is None
    assert sample(metrics, "gputriage_open_incidents", **page) == 0


def resolved(kind: str, first: datetime, seconds: float, status: str = "resolved") -> Incident:
    return Incident(
        id=f"{kind}-1",
        type=kind,
        status=status,  # type: ignore[arg-type]
        revision=2,
        severity="page",
        cluster="c1",
        first_seen=first,
        last_seen=first,
        resolved_at=first + timedelta(seconds=seconds) if status == "resolved" else None,
        summary="s",
    )


def test_time_to_resolve_is_observed_for_resolved_revisions_only() -> None:
    metrics = Metrics()
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    metrics.observe_published(resolved("xid_repeat", t0, 0, status="open"))
    metrics.observe_published(resolved("xid_repeat", t0, 0, status="updated"))
    metrics.observe_published(resolved("xid_repeat", t0, 600))
    metrics.observe_published(resolved("gpu_degraded", t0, 7200))
    count = "gputriage_incident_resolution_seconds_count"
    total = "gputriage_incident_resolution_seconds_sum"
    assert sample(metrics, count, type="xid_repeat") == 1
    assert sample(metrics, total, type="xid_repeat") == 600
    assert sample(metrics, total, type="gpu_degraded") == 7200
    bucket = "gputriage_incident_resolution_seconds_bucket"
    assert sample(metrics, bucket, type="xid_repeat", le="300.0") == 0
    assert sample(metrics, bucket, type="xid_repeat", le="900.0") == 1
