"""The score split by pool kind: DRA nodes apart from device-plugin ones."""

from __future__ import annotations

from pathlib import Path

from msgspec.structs import replace

from gputriage.replay import ReplayResult
from gputriage.scoring.matching import match
from gputriage.scoring.metrics import type_scores
from gputriage.scoring.pools import (
    DEVICE_PLUGIN,
    DRA,
    incident_pool,
    pool_scores,
    slice_nodes,
    subjects,
)
from gputriage.scoring.report import table, to_json
from gputriage.scoring.run import score_replay
from schemas.codec import encode
from schemas.events import ResourceSliceEvent, SliceDevice
from schemas.truth import ExpectedIncident
from tests.scoring.test_matching import T0, at, detected, incident, truth


def of(fault: str, item: ExpectedIncident) -> ExpectedIncident:
    """``item`` as the fault ``fault`` made it."""
    return replace(item, fault=fault)


def test_a_truth_is_dras_by_its_fault_and_an_incident_by_its_node_pod_or_group() -> None:
    dra_truths = [
        of("dra_taint_eviction", truth(id="dra_taint_eviction-1/x", node="dra-1")),
        of(
            "dra_pending_claims",
            truth(
                id="dra_pending_claims-2/s",
                type="gpu_pods_starved",
                node="",
                pods=("ml/pending",),
                node_group="eks-gpu-dra",
            ),
        ),
    ]
    dra = subjects([*dra_truths, truth(node="dp-1")], [("c1", "dra-2")])
    assert dra.nodes == {("c1", "dra-1"), ("c1", "dra-2")}
    assert incident_pool(incident(node="dra-2"), dra) == DRA
    assert incident_pool(incident(node="dp-1"), dra) == DEVICE_PLUGIN
    assert incident_pool(incident(node="", pods=("ml/pending",)), dra) == DRA
    grouped = incident(
        node="", pods=(), type="scale_up_failure", attributes={"node_groups": "a,eks-gpu-dra"}
    )
    assert incident_pool(grouped, dra) == DRA
    mismatch = incident(
        node="", pods=(), type="allocation_mismatch", attributes={"nodes": "dp-1,dra-2"}
    )
    assert incident_pool(mismatch, dra) == DRA
    assert incident_pool(replace(mismatch, attributes={"nodes": "dp-1"}), dra) == DEVICE_PLUGIN
    assert incident_pool(incident(node="", pods=("ml/other",)), dra) == DEVICE_PLUGIN


def test_the_pools_figures_add_up_to_the_types() -> None:
    truths = [
        truth(id="a", node="dp-1"),
        of("dra_fatal_xid", truth(id="b", node="dra-1")),
        of("dra_fatal_xid", truth(id="c", node="dra-2")),
    ]
    found = [
        detected(incident(id="i1", node="dp-1")),
        detected(incident(id="i2", node="dra-1")),
        detected(incident(id="i3", node="dra-3", first_seen=5)),
    ]
    matching = match(truths, found)
    dra = subjects(truths, [("c1", "dra-3")])
    pools = pool_scores(matching, dra)
    kind = "device_unhealthy_eviction"
    assert (pools[DRA][kind].tp, pools[DRA][kind].fn, pools[DRA][kind].fp) == (1, 1, 1)
    assert (pools[DEVICE_PLUGIN][kind].tp, pools[DEVICE_PLUGIN][kind].fp) == (1, 0)
    whole = type_scores(matching)[kind]
    assert whole.tp == sum(p[kind].tp for p in pools.values())
    assert whole.fp == sum(p[kind].fp for p in pools.values())
    assert whole.fn == sum(p[kind].fn for p in pools.values())


def test_a_score_without_dra_reads_as_before_and_one_with_dra_shows_the_pools() -> None:
    result = ReplayResult(revisions=[incident(id="i1", node="dp-1")])
    result.first_published["i1"] = at(30)
    plain = score_replay([truth(node="dp-1")], result)
    assert plain.pools == {}
    assert b'"pools"' not in to_json(plain)
    assert "POOL" not in table(plain)
    mixed = score_replay([truth(node="dp-1")], result, [("c1", "dra-1")])
    assert set(mixed.pools) == {DEVICE_PLUGIN}
    assert b'"pools":{"device-plugin"' in to_json(mixed)
    assert "POOL" in table(mixed)


def test_the_events_slices_name_the_dra_nodes(tmp_path: Path) -> None:
    sliced = ResourceSliceEvent(
        id="s1",
        cluster="c1",
        time=T0,
        node="dra-9",
        name="dra-9-gpu.nvidia.com-abcde",
        driver="gpu.nvidia.com",
        pool="dra-9",
        devices=(SliceDevice(name="gpu-0", uuid="GPU-1"),),
    )
    path = tmp_path / "events.jsonl"
    path.write_bytes(encode(sliced) + b"\n" + b'{"schema":"resource_slice.v1","broken"\n')
    assert slice_nodes(str(path)) == {("c1", "dra-9")}
    assert slice_nodes("<stdin>") == set()
