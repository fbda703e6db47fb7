"""Autoscaler Events to ``autoscaler.v1``: every Event of ``tests/data/autoscaler/events.jsonl``
through the real slimming (``connectors.k8s.slim``), then :func:`autoscaler_event`."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from connectors.autoscaler.classify import not_triggered
from connectors.autoscaler.kube_events import autoscaler_event
from connectors.autoscaler.lines import LineContext, parse_line
from connectors.k8s.slim import slim_object
from schemas.codec import RecordError, decode_event
from schemas.events import AutoscalerEvent, KubeEvent, PodRef
from tests.cli_helpers import gputriage
from tests.paths import DATA

CORPUS = [
    orjson.loads(line) for line in (DATA / "autoscaler" / "events.jsonl").read_bytes().splitlines()
]

NOT_MAPPED = {
    # The scheduler's own Events: the autoscaler says nothing in them.
    "ev-932-failedscheduling-scheduler",
    "ev-3448-scheduler-gpu",
    # Karpenter nominating an existing node: no scale-up (labelled "other").
    "ev-932-nominated",
}
DIFFERENT_REASON = {
    # The same message as ev-929 ("it wouldn't fit if a new node is added"), labelled
    # "other" because the issue says the group was full: the message cannot show it.
    "ev-1607-nottrigger-maxsize-hidden": "config",
}


def kube_event(record: dict[str, Any]) -> KubeEvent | None:
    """The corpus record as the API server would send it, slimmed as the connector does."""
    if not record.get("reason"):
        return None
    obj = {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {
            "name": record["id"],
            "namespace": "default",
            "uid": f"uid-{record['id']}",
            "resourceVersion": "7",
            "creationTimestamp": "2026-12-01T10:00:00Z",
        },
        "involvedObject": record.get("involvedObject") or {},
        "reason": record["reason"],
        "message": record.get("message") or record.get("note") or "",
        "type": record.get("type") or "Normal",
        "source": {"component": record.get("source") or ""},
        "count": record.get("count") or 1,
    }
    event = slim_object(obj, "added", cluster="c1")
    assert isinstance(event, KubeEvent)
    return event


@pytest.mark.parametrize("record", CORPUS, ids=[r["id"] for r in CORPUS])
def test_each_corpus_event_maps_to_its_label(record: dict[str, Any]) -> None:
    event = kube_event(record)
    got = autoscaler_event(event) if event is not None else None
    if record["id"] in NOT_MAPPED:
        assert got is None
        return
    assert event is not None
    assert got is not None
    assert got.action == record["action"]
    expected = DIFFERENT_REASON.get(record["id"], record.get("reason_class") or "")
    assert got.reason == expected
    assert (got.cluster, got.time) == ("c1", event.time)
    assert got.line == event.message
    assert got.source == record["source"]
    involved = record.get("involvedObject") or {}
    if involved.get("kind") == "Pod" and involved.get("name"):
        assert got.pods == (PodRef(namespace=involved.get("namespace", ""), name=involved["name"]),)
    else:
        assert got.pods == ()
    assert got.id == autoscaler_event(event).id  # type: ignore[union-attr]  # deterministic


def test_sizes_and_groups_are_read() -> None:
    by_id = {r["id"]: r for r in CORPUS}
    new = autoscaler_event(kube_event(by_id["ev-fmt-triggered-new"]))  # type: ignore[arg-type]
    assert new is not None
    assert new.node_group.endswith("gke-gpu-cluster-l4-pool-1a2b3c4d-grp")
    assert (new.size_from, new.size_to, new.max_size) == (2, 4, 8)
    old = autoscaler_event(kube_event(by_id["ev-2547-triggered"]))  # type: ignore[arg-type]
    assert old is not None
    assert (old.node_group, old.size_from, old.size_to) == ("XXX", 3, 4)
    scaled = autoscaler_event(kube_event(by_id["ev-fmt-scaledupgroup-set"]))  # type: ignore[arg-type]
    assert scaled is not None
    assert (scaled.size_from, scaled.size_to, scaled.max_size) == (5, 7, 10)
    pool = autoscaler_event(kube_event(by_id["ev-fmt-karpenter-failedscheduling"]))  # type: ignore[arg-type]
    assert pool is not None
    assert pool.node_group == "default"
    ice = autoscaler_event(kube_event(by_id["ev-fmt-ice-nodeclaim"]))  # type: ignore[arg-type]
    assert ice is not None
    assert ice.cloud_code == "InsufficientInstanceCapacity"


def test_not_trigger_scale_up_reason_lists() -> None:
    message = (
        "pod didn't trigger scale-up: 1 max node group size reached, 3 Insufficient nvidia.com/gpu"
    )
    assert not_triggered(message) == ("unschedulable", "max_size")
    assert not_triggered("pod didn't trigger scale-up: 2 max node group size reached") == (
        "max_size_reached",
        "max_size",
    )


def test_events_of_others_are_not_autoscaler_events() -> None:
    record = {"id": "x", "reason": "TriggeredScaleUp", "message": "m", "source": "kubelet"}
    event = kube_event(record)
    assert event is not None
    assert autoscaler_event(event) is None


def test_ingest_k8s_prints_the_autoscaler_record_too(tmp_path: Path) -> None:
    """Offline as live: a CPU pod's NotTriggerScaleUp is dropped by the GPU filter as a
    KubeEvent, and printed as its autoscaler.v1 record."""
    record = next(r for r in CORPUS if r["id"] == "ev-3538-nottrigger-cpu")
    event = {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {"name": "e", "namespace": "ml", "uid": "u-e", "resourceVersion": "3"},
        "involvedObject": {"kind": "Pod", "namespace": "ml", "name": "web"},
        "reason": record["reason"],
        "message": record["message"],
        "source": {"component": "cluster-autoscaler"},
        "lastTimestamp": "2026-12-01T10:00:00Z",
    }
    path = tmp_path / "events.jsonl"
    path.write_bytes(orjson.dumps({"type": "ADDED", "object": event}) + b"\n")
    proc = gputriage("ingest", "k8s", "--file", str(path), "--cluster", "prod")
    assert proc.returncode == 0, proc.stderr
    (line,) = proc.stdout.splitlines()
    printed = decode_event(line)
    assert isinstance(printed, AutoscalerEvent)
    assert (printed.action, printed.reason, printed.pods) == (
        "unschedulable",
        "config",
        (PodRef(namespace="ml", name="web"),),
    )


@pytest.mark.parametrize(
    "message",
    [
        "pod didn't trigger scale-up: 3 max node group size reached",
        "pod didn't trigger scale-up: 2 in backoff after failed scale-up, "
        "1 max node group size reached",
        "pod didn't trigger scale-up (it wouldn't fit if a new node is added)",
    ],
)
def test_a_not_trigger_scale_up_reads_the_same_from_a_log_line_and_from_the_event(
    message: str,
) -> None:
    """The autoscaler logs the Events it emits; both copies must give one record (review:
    the log path once said max_size where the Event path said backoff)."""
    line = (
        'I0605 11:27:30.008919       1 factory.go:33] Event(v1.ObjectReference{Kind:"Pod", '
        'Namespace:"ml", Name:"p-0", UID:"u"}): type: \'Normal\' reason: '
        f"'NotTriggerScaleUp' {message}"
    )
    ctx = LineContext(cluster="c", reference=datetime(2026, 6, 5, tzinfo=UTC))
    records = parse_line(line, ctx)
    assert not isinstance(records, RecordError)
    assert [(r.action, r.reason) for r in records] == [not_triggered(message)]
