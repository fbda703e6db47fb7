"""GKE cluster autoscaler visibility entries (connectors/autoscaler/gke.py).

Entries are tests/data/autoscaler/gke_visibility.jsonl (sources and provenance per line
in that folder's SOURCES.md, block ``gke_visibility.jsonl``); the per-line action/reason
oracle runs in test_corpus.py. These tests pin what the labels do not: groups, pods,
codes, times, the input shapes (LogEntry, bare payload, one-line array, long lines) and
that no shape raises.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.autoscaler import gke
from connectors.autoscaler.lines import Format, LineContext, parse_line
from schemas.codec import RecordError
from schemas.events import AutoscalerEvent

DATA = Path(__file__).parents[2] / "data" / "autoscaler"
LINES = (DATA / "gke_visibility.jsonl").read_text().splitlines()
REFERENCE = datetime(2026, 7, 1, tzinfo=UTC)
VOCABULARY = {
    "unschedulable",
    "scale_up_planned",
    "scale_up_failed",
    "scale_up_timeout",
    "backoff",
    "max_size_reached",
    "scale_down",
}


def _ctx(fmt: Format = "auto") -> LineContext:
    return LineContext(cluster="c1", reference=REFERENCE, source="gke", fmt=fmt)


def parse(raw: str | bytes, fmt: Format = "auto") -> tuple[AutoscalerEvent, ...]:
    result = parse_line(raw, _ctx(fmt), 1)
    assert isinstance(result, tuple), result
    return result


def line(number: int) -> str:
    return LINES[number - 1]


def test_the_real_leap_scale_down_is_a_gce_scale_down_of_its_mig() -> None:
    """L10: 2i2c-org/infrastructure#3461 (yuvipanda, 2023-11-28), the real GKE entry;
    no timestamp survived the stored copy, so the reference time is used."""
    (record,) = parse(line(10))
    assert (record.action, record.reason, record.node_group, record.cloud) == (
        "scale_down",
        "",
        "gke-leap-cluster-core-pool-1592e1d3-grp",
        "gce",
    )
    assert record.source == "cluster-autoscaler"
    assert "gke-leap-cluster-core-pool-1592e1d3-sbmp" in record.message
    assert record.time == REFERENCE
    assert record.line == line(10)


def test_documented_scale_up_names_the_mig_and_its_pods_and_decide_time() -> None:
    """L1: the documentation's scaleUp example (bare jsonPayload)."""
    (record,) = parse(line(1))
    assert record.node_group == "test-cluster-default-pool-a0c72690-grp"
    assert [(p.namespace, p.name) for p in record.pods] == [("default", "test-85958b848b-ptc7n")]
    assert record.time == datetime.fromtimestamp(1582124907, UTC)
    assert record.message.endswith("+1")
    assert record.size_to is None  # requestedNodes is how many more, not a size


def test_entry_timestamp_wins_over_the_payload_time() -> None:
    """L8: a full LogEntry (KHI fixture): ``timestamp`` is the record's time."""
    (record,) = parse(line(8))
    assert record.time == datetime(2025, 11, 9, 2, 15, 27, 768533, tzinfo=UTC)
    assert record.node_group == "gke-ca-cluster-default-pool-915eef86-grp"


def test_result_errors_take_the_mig_from_its_url_and_keep_the_message_id() -> None:
    """L12-L15 (constructed from the documented schema): quota, stockout, timeout, IP."""
    got = [parse(line(n))[0] for n in (12, 13, 14, 15)]
    assert [(r.action, r.reason, r.cloud_code) for r in got] == [
        ("scale_up_failed", "quota", "scale.up.error.quota.exceeded"),
        ("scale_up_failed", "capacity", "scale.up.error.out.of.resources"),
        ("scale_up_timeout", "timeout", "scale.up.error.waiting.for.instances.timeout"),
        ("scale_up_failed", "other", "scale.up.error.ip.space.exhausted"),
    ]
    assert {r.node_group for r in got} == {"gke-gpu-cluster-l4-pool-3f9a2c1d-grp"}


def test_a_failed_scale_down_finds_the_nodes_mig_by_gke_naming() -> None:
    """L7 (documentation example) and L16: the parameter is a node name."""
    documented = parse(line(7))
    assert [(r.action, r.reason, r.node_group) for r in documented] == [
        ("scale_down", "other", "test-cluster-default-pool-5c90f485-grp")
    ]
    (evict,) = parse(line(16))
    assert evict.node_group == "gke-gpu-cluster-l4-pool-3f9a2c1d-grp"


def test_no_scale_up_ranks_its_reasons_like_not_trigger_scale_up() -> None:
    """L5 (documentation example): the pod fails default-pool's predicate (config) and
    autoprovisioning is at its limits (max_size): unschedulable, max_size first."""
    (record,) = parse(line(5))
    assert (record.action, record.reason, record.cloud_code) == (
        "unschedulable",
        "max_size",
        "no.scale.up.nap.pod.zonal.resources.exceeded",
    )
    assert [(p.namespace, p.name) for p in record.pods] == [
        ("autoscaling-1661", "memory-reservation2-6zg8m")
    ]
    assert "Insufficient memory" in record.message


def test_gpu_pod_that_fits_no_pool_is_config() -> None:
    """L19: Insufficient nvidia.com/gpu and no NAP limit for the GPU: a config problem."""
    (record,) = parse(line(19))
    assert (record.action, record.reason, record.node_group) == (
        "unschedulable",
        "config",
        "gke-gpu-cluster-l4-pool-3f9a2c1d-grp",
    )
    assert record.pods[0].name == "train-x7k2p"


def test_no_fact_entries_are_unrecognised() -> None:
    """L3/L4 node pool created/deleted, L6 noScaleDown, L9 a successful result."""
    for number in (3, 4, 6, 9):
        assert parse(line(number)) == (), number


def test_bare_payload_and_log_entry_agree() -> None:
    payload = json.loads(line(12))["jsonPayload"]
    bare = parse(json.dumps(payload))[0]
    full = parse(line(12))[0]
    assert (bare.action, bare.reason, bare.node_group, bare.cloud_code) == (
        full.action,
        full.reason,
        full.node_group,
        full.cloud_code,
    )
    assert bare.time == datetime.fromtimestamp(1764590460, UTC)  # measureTime


def test_a_gcloud_array_on_one_line_gives_every_entry() -> None:
    """``gcloud logging read --format=json | jq -c .``: the array on one line."""
    array = "[" + ",".join(line(n) for n in (11, 12, 3)) + "]"
    records = parse(array)
    assert [r.action for r in records] == ["scale_up_planned", "scale_up_failed"]
    assert len({r.id for r in records}) == 2
    assert all(r.line == array for r in records)
    assert parse("[" + line(12) + ', {"message": "not an entry"}]') == ()
    assert parse("[]") == ()


def test_formats_keep_to_themselves() -> None:
    klog_line = (DATA / "ca_klog.log").read_text().splitlines()[2]
    karpenter_line = (DATA / "karpenter.jsonl").read_text().splitlines()[6]
    assert parse(klog_line, "gke") == ()
    assert parse(karpenter_line, "gke") == ()
    assert parse(line(12), "karpenter") == ()
    assert parse(line(12), "gke")[0].reason == "quota"
    assert parse(karpenter_line)[0].source == "karpenter"  # auto still reads Karpenter


def test_karpenter_decision_string_is_not_a_gke_payload() -> None:
    assert not gke.is_entry({"message": "disrupting node(s)", "decision": "replace"})
    assert gke.is_entry({"logName": "projects/p/logs/container.googleapis.com%2F" + gke.LOG_NAME})


def _long_scale_down(pods: int) -> str:
    entry: dict[str, Any] = json.loads(line(8))
    removed = entry["jsonPayload"]["decision"]["scaleDown"]["nodesToBeRemoved"][0]
    removed["evictedPods"] = [
        {"name": f"worker-{i:06d}", "namespace": "batch", "controller": {"kind": "Job"}}
        for i in range(pods)
    ]
    return json.dumps(entry)


def test_an_entry_longer_than_a_line_limit_is_read_whole_up_to_256_kib() -> None:
    raw = _long_scale_down(1500)
    assert 65536 < len(raw) < gke.MAX_ENTRY
    (record,) = parse(raw)
    assert record.action == "scale_down"
    assert len(record.line) == 65536  # the evidence is clipped like any line's
    assert len(record.pods) == 64
    assert parse(raw.encode())[0].id == record.id
    huge = _long_scale_down(6000)
    assert len(huge) > gke.MAX_ENTRY
    assert parse(huge) == ()  # cut at 64 KiB: no longer JSON, unrecognised


_KEYS = st.sampled_from(
    [
        "jsonPayload",
        "logName",
        "timestamp",
        "receiveTimestamp",
        "decision",
        "noDecisionStatus",
        "resultInfo",
        "scaleUp",
        "scaleDown",
        "noScaleUp",
        "noScaleDown",
        "increasedMigs",
        "nodesToBeRemoved",
        "mig",
        "node",
        "name",
        "namespace",
        "requestedNodes",
        "triggeringPods",
        "evictedPods",
        "results",
        "errorMsg",
        "messageId",
        "parameters",
        "eventId",
        "unhandledPodGroups",
        "rejectedMigs",
        "skippedMigs",
        "napFailureReasons",
        "podGroup",
        "samplePod",
        "reason",
        "decideTime",
        "measureTime",
    ]
)
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(
        [
            "scale.up.error.quota.exceeded",
            "scale.down.error.failed.to.evict.pods",
            "no.scale.up.mig.skipped",
            "no.scale.up.in.backoff",
            "no.scale.up.nap.pod.gpu.no.limit.defined",
            "max node group size reached",
            "projects/p/logs/container.googleapis.com%2Fcluster-autoscaler-visibility",
            "https://www.googleapis.com/compute/v1/projects/p/zones/z/instanceGroups/g",
            "gke-a-b-0123abcd-x1y2",
            "2025-11-09T02:15:27.768533131Z",
            "1582124907",
            "99999999999999999999",
        ]
    ),
)
_JSON = st.recursive(
    _LEAVES,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_KEYS, children, max_size=5),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(_JSON, st.sampled_from(["auto", "gke"]))
def test_any_json_shaped_like_an_entry_never_raises(value: object, fmt: Format) -> None:
    for wrapped in (value, {"jsonPayload": value}, [value, {"jsonPayload": value}]):
        raw = json.dumps(wrapped)
        result = parse_line(raw, _ctx(fmt), 1)
        assert isinstance(result, tuple | RecordError)
        if isinstance(result, tuple):
            for record in result:
                assert record.action in VOCABULARY
                if fmt == "gke":
                    assert record.cloud == "gce"


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_never_raise_as_gke(raw: bytes) -> None:
    result = parse_line(raw, _ctx("gke"), 1)
    assert isinstance(result, tuple | RecordError)
