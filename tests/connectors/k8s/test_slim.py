"""Slimming raw Kubernetes objects: realistic fixtures and malformed shapes."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import msgspec
import orjson
import pytest

from connectors.k8s.gpu_filter import GpuFilter
from connectors.k8s.slim import (
    MAX_TEXT,
    SlimConfig,
    Slimmed,
    infer_kind,
    is_gpu_node,
    is_gpu_pod,
    slim_object,
    slim_watch_event,
    slim_watch_line,
)
from schemas.codec import RecordError, decode_event, encode
from schemas.events import GpuShare, KubeEvent, NodeEvent, PodEvent
from tests import paths

DATA = paths.DATA / "k8s"


def load(name: str) -> dict[str, Any]:
    """A fixture object as orjson parses it."""
    obj: dict[str, Any] = orjson.loads((DATA / f"{name}.json").read_bytes())
    return obj


def pod(name: str, **kwargs: Any) -> PodEvent:
    result = slim_object(load(name), cluster="c1", **kwargs)
    assert isinstance(result, PodEvent), result
    return result


def error(result: Slimmed) -> RecordError:
    assert isinstance(result, RecordError), result
    assert result.reason
    return result


def test_training_pod_drops_managed_fields_and_annotations() -> None:
    raw = load("pod_training")
    ev = pod("pod_training")
    assert ev.id == "k8s:5f1c0a8e-0001-4b7e-9d1a-000000000001:1001"
    assert (ev.namespace, ev.name, ev.node, ev.phase) == (
        "ml",
        "trainer-0",
        "gpu-node-1",
        "Running",
    )
    assert ev.gpu_requests == {"nvidia.com/gpu": 8} == ev.gpu_limits
    assert (ev.owner_kind, ev.owner_name) == ("Job", "trainer")
    assert ev.containers[0].state == "running"
    assert ev.scheduled is not None
    assert ev.scheduled.status == "True"
    assert ev.created_at == datetime(2024, 5, 1, 11, 0, tzinfo=UTC)
    # the newest status timestamp (container startedAt) is the event time offline
    assert ev.time == datetime(2024, 5, 1, 11, 1, tzinfo=UTC)
    assert len(orjson.dumps(raw)) > 10_000
    assert len(encode(ev)) < 1_000
    assert decode_event(encode(ev)) == ev


def test_crashloop_pod_keeps_last_oom_termination() -> None:
    ctr = pod("pod_crashloop_oom").containers[0]
    assert (ctr.state, ctr.reason, ctr.restart_count) == ("waiting", "CrashLoopBackOff", 5)
    assert ctr.last_terminated is not None
    assert ctr.last_terminated.reason == "OOMKilled"
    assert ctr.last_terminated.exit_code == 137
    assert ctr.last_terminated.finished_at == datetime(2024, 5, 1, 11, 59, 30, tzinfo=UTC)


def test_evicted_pod() -> None:
    ev = pod("pod_evicted")
    assert (ev.phase, ev.reason) == ("Failed", "Evicted")
    assert "low on resource" in ev.message
    assert (ev.owner_kind, ev.owner_name) == ("ReplicaSet", "infer-7d9f")
    term = ev.containers[0].terminated
    assert term is not None
    assert (term.exit_code, term.finished_at) == (137, None)
    assert ev.time == datetime(2024, 5, 1, 12, 10, tzinfo=UTC)


def test_mig_pod_and_termination_message() -> None:
    ev = pod("pod_mig")
    assert ev.gpu_requests == {"nvidia.com/mig-1g.10gb": 1}
    assert is_gpu_pod(ev)
    last = ev.containers[0].last_terminated
    assert last is not None
    assert "CUDA out of memory" in last.message
    assert [c.name for c in ev.containers] == ["jupyter", "sidecar"]


def test_mig_resources_only_count_when_configured() -> None:
    ev = pod("pod_mig", config=SlimConfig(gpu_prefixes=()))
    assert not is_gpu_pod(ev)


def test_plain_pod_is_not_a_gpu_pod() -> None:
    assert not is_gpu_pod(pod("pod_plain"))


def test_pending_pod_carries_unschedulable_condition() -> None:
    ev = pod("pod_pending")
    assert ev.node == ""
    assert ev.scheduled is not None
    assert ev.scheduled.reason == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in ev.scheduled.message


def test_init_container_counts_as_kubernetes_counts_it() -> None:
    raw = load("pod_training")
    init = copy.deepcopy(raw["spec"]["containers"][0])
    init["name"] = "warmup"
    init["resources"]["requests"]["nvidia.com/gpu"] = 2
    raw["spec"]["initContainers"] = [init]
    result = slim_object(raw, cluster="c1")
    assert isinstance(result, PodEvent)
    assert result.gpu_requests == {"nvidia.com/gpu": 8}


def test_observed_time_wins_when_given() -> None:
    now = datetime(2024, 5, 1, 13, 0, tzinfo=UTC)
    assert pod("pod_training", observed=now).time == now


def test_deletion_time_is_the_request_not_the_grace_deadline() -> None:
    raw = load("pod_training")
    raw["metadata"]["deletionTimestamp"] = "2024-05-01T12:30:30Z"
    raw["metadata"]["deletionGracePeriodSeconds"] = 30
    result = slim_watch_event({"type": "DELETED", "object": raw}, cluster="c1")
    assert isinstance(result, PodEvent)
    assert result.op == "deleted"
    assert result.deleted_at == datetime(2024, 5, 1, 12, 30, tzinfo=UTC)
    assert result.time == result.deleted_at


def test_gpu_node() -> None:
    result = slim_watch_event({"type": "MODIFIED", "object": load("node_gpu")}, cluster="c1")
    assert isinstance(result, NodeEvent)
    assert result.op == "modified"
    assert result.node == "gpu-node-1"
    assert result.capacity == {"nvidia.com/gpu": 8}
    assert result.allocatable == {"nvidia.com/gpu": 7}
    assert result.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert result.labels["topology.kubernetes.io/zone"] == "us-east-1a"
    assert "kubernetes.io/hostname" not in result.labels
    assert "nvidia.com/cuda.driver.major" not in result.labels
    assert [c.type for c in result.conditions] == ["MemoryPressure", "Ready"]
    assert result.taints[0].key == "nvidia.com/gpu"
    assert result.time == datetime(2024, 5, 1, 12, 3, tzinfo=UTC)
    assert is_gpu_node(result)


def test_node_without_gpus_and_legacy_labels() -> None:
    raw = load("node_gpu")
    del raw["status"]["capacity"]["nvidia.com/gpu"]
    del raw["status"]["allocatable"]["nvidia.com/gpu"]
    labels = raw["metadata"]["labels"]
    labels["beta.kubernetes.io/instance-type"] = labels.pop("node.kubernetes.io/instance-type")
    result = slim_object(raw, cluster="c1")
    assert isinstance(result, NodeEvent)
    assert not is_gpu_node(result)
    assert result.labels["node.kubernetes.io/instance-type"] == "p5.48xlarge"


def test_core_v1_evicted_event() -> None:
    result = slim_object(load("event_evicted"), cluster="c1")
    assert isinstance(result, KubeEvent)
    assert (result.reason, result.type, result.source, result.count) == (
        "Evicted",
        "Warning",
        "kubelet",
        1,
    )
    assert result.involved.kind == "Pod"
    assert result.involved.name == "infer-7d9f-abcde"
    assert result.node == "gpu-node-1"  # source.host
    assert result.time == datetime(2024, 5, 1, 12, 10, tzinfo=UTC)


def test_events_k8s_io_event() -> None:
    result = slim_object(load("event_failed_scheduling_v1"), cluster="c1")
    assert isinstance(result, KubeEvent)
    assert result.reason == "FailedScheduling"
    assert "Insufficient nvidia.com/gpu" in result.message  # from `note`
    assert (result.source, result.count, result.node) == ("default-scheduler", 4, "")
    assert result.involved.name == "trainer-1"
    assert result.time == datetime(2024, 5, 1, 12, 8, 0, 654321, tzinfo=UTC)


def test_oomkilling_node_event() -> None:
    result = slim_object(load("event_oomkilling"), cluster="c1")
    assert isinstance(result, KubeEvent)
    assert (result.reason, result.node, result.involved.kind) == (
        "OOMKilling",
        "gpu-node-1",
        "Node",
    )


def test_core_event_with_only_event_time_and_series() -> None:
    raw = load("event_evicted")
    raw["lastTimestamp"] = raw["firstTimestamp"] = None
    raw["count"] = None
    raw["eventTime"] = "2024-05-01T12:11:00.000001Z"
    raw["series"] = {"count": 3, "lastObservedTime": "2024-05-01T12:12:00.000001Z"}
    result = slim_object(raw, cluster="c1")
    assert isinstance(result, KubeEvent)
    assert result.count == 3
    assert result.time == datetime(2024, 5, 1, 12, 12, 0, 1, tzinfo=UTC)


# -- odd shapes that are tolerated -------------------------------------------------
def test_missing_status_gives_an_event() -> None:
    raw = load("pod_pending")
    del raw["status"]
    ev = slim_object(raw, cluster="c1")
    assert isinstance(ev, PodEvent)
    assert (ev.phase, ev.containers, ev.scheduled) == ("", (), None)
    assert ev.time == ev.created_at


def test_null_container_statuses_gives_an_event() -> None:
    raw = load("pod_training")
    raw["status"]["containerStatuses"] = None
    ev = slim_object(raw, cluster="c1")
    assert isinstance(ev, PodEvent)
    assert ev.containers == ()


def test_unknown_fields_and_huge_annotations_are_ignored() -> None:
    raw = load("pod_training")
    raw["metadata"]["annotations"]["huge"] = "x" * 1_000_000
    raw["status"]["futureField"] = {"nested": [1, 2, 3]}
    raw["spec"]["containers"][0]["resources"]["requests"]["example.com/foo"] = "500m"
    ev = slim_object(raw, cluster="c1")
    assert isinstance(ev, PodEvent)
    assert len(encode(ev)) < 1_000


def test_long_messages_are_capped() -> None:
    raw = load("pod_mig")
    raw["status"]["containerStatuses"][0]["lastState"]["terminated"]["message"] = "y" * 20_000
    ev = slim_object(raw, cluster="c1")
    assert isinstance(ev, PodEvent)
    last = ev.containers[0].last_terminated
    assert last is not None
    assert len(last.message) == MAX_TEXT
    assert last.message.endswith("…")


# -- malformed shapes: error values with a field -----------------------------------
def _mutate(name: str, path: list[str | int], value: Any) -> dict[str, Any]:
    raw = load(name)
    target: Any = raw
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return raw


_DELETE = object()


@pytest.mark.parametrize(
    ("name", "path", "value", "field"),
    [
        (
            "pod_crashloop_oom",
            ["status", "containerStatuses", 0, "restartCount"],
            "5",
            "$.status.containerStatuses[0].restartCount",
        ),
        ("pod_training", ["metadata", "uid"], _DELETE, "$.metadata.uid"),
        ("pod_training", ["metadata", "resourceVersion"], _DELETE, "$.metadata.resourceVersion"),
        ("pod_training", ["metadata"], _DELETE, "$.metadata"),
        ("pod_training", ["status"], "Running", "$.status"),
        ("pod_training", ["status", "containerStatuses"], {"a": 1}, "$.status.containerStatuses"),
        (
            "pod_training",
            ["spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"],
            "500m",
            "$.spec.containers[0].resources.requests['nvidia.com/gpu']",
        ),
        (
            "pod_crashloop_oom",
            ["status", "containerStatuses", 0, "lastState", "terminated", "finishedAt"],
            "yesterday",
            "$.status.containerStatuses[0].lastState.terminated.finishedAt",
        ),
        (
            "pod_crashloop_oom",
            ["status", "containerStatuses", 0, "lastState", "terminated", "exitCode"],
            True,
            "$.status.containerStatuses[0].lastState.terminated.exitCode",
        ),
        ("node_gpu", ["status", "capacity", "nvidia.com/gpu"], "eight", None),
        ("node_gpu", ["spec", "taints"], "none", "$.spec.taints"),
        ("event_evicted", ["reason"], _DELETE, "$.reason"),
        ("event_evicted", ["involvedObject"], [], "$.involvedObject"),
        ("pod_training", ["kind"], "ConfigMap", "$.kind"),
        ("pod_training", ["kind"], _DELETE, "$.kind"),
    ],
)
def test_malformed_shapes_are_error_values(
    name: str, path: list[str | int], value: Any, field: str | None
) -> None:
    err = error(slim_object(_mutate(name, path, value), cluster="c1"))
    if field is not None:
        assert err.field == field
    else:
        assert err.field.startswith("$.status.capacity")


def test_no_timestamp_anywhere_is_an_error_offline_but_fine_live() -> None:
    raw = load("pod_pending")
    del raw["status"]
    del raw["metadata"]["creationTimestamp"]
    assert error(slim_object(raw, cluster="c1")).field == "$.metadata"
    now = datetime(2024, 5, 1, tzinfo=UTC)
    ev = slim_object(raw, cluster="c1", observed=now)
    assert isinstance(ev, PodEvent)
    assert ev.time == now


@pytest.mark.parametrize("obj", [None, 3, "pod", [], {"kind": "Pod", "metadata": "x"}])
def test_not_an_object(obj: object) -> None:
    error(slim_object(obj, cluster="c1"))


def test_watch_envelopes() -> None:
    assert slim_watch_event({"type": "BOOKMARK", "object": {}}, cluster="c1") is None
    gone = error(
        slim_watch_event(
            {
                "type": "ERROR",
                "object": {
                    "kind": "Status",
                    "code": 410,
                    "reason": "Expired",
                    "message": "too old",
                },
            },
            cluster="c1",
        )
    )
    assert "410" in gone.reason
    assert "too old" in gone.reason
    assert (
        error(slim_watch_event({"type": "RENAMED", "object": {}}, cluster="c1")).field == "$.type"
    )
    assert error(slim_watch_event([1], cluster="c1")).field == "$"


def test_ids_are_deterministic_per_resource_version() -> None:
    first = pod("pod_training")
    raw = load("pod_training")
    raw["metadata"]["resourceVersion"] = "1002"
    second = slim_object(raw, cluster="c1")
    assert isinstance(second, PodEvent)
    assert first.id == pod("pod_training").id
    assert first.id != second.id


def test_gpu_filter_keeps_events_about_gpu_pods_and_nodes() -> None:
    keep = GpuFilter()
    events = {
        name: slim_object(load(name), cluster="c1")
        for name in ("pod_plain", "pod_evicted", "node_gpu", "event_evicted", "event_oomkilling")
    }
    before = events["event_evicted"]
    assert isinstance(before, KubeEvent)
    assert not GpuFilter().keep(before)  # neither its pod nor its node seen yet
    plain_event = KubeEvent(
        id="x",
        cluster="c1",
        time=datetime(2024, 5, 1, tzinfo=UTC),
        reason="Pulled",
        involved=before.involved,
    )
    assert not keep.keep(plain_event)  # pod not seen yet, no node, no GPU words
    decided = {}
    for name, ev in events.items():
        assert isinstance(ev, PodEvent | NodeEvent | KubeEvent)
        decided[name] = keep.keep(ev)
    assert decided == {
        "pod_plain": False,
        "pod_evicted": True,
        "node_gpu": True,
        "event_evicted": True,
        "event_oomkilling": True,
    }
    assert keep.keep(plain_event)  # now the pod is known
    failed = slim_object(load("event_failed_scheduling_v1"), cluster="c1")
    assert isinstance(failed, KubeEvent)
    assert GpuFilter().keep(failed)  # names nvidia.com/gpu in its message


def test_bench_objects_are_realistic_and_slim() -> None:
    from bench.slim_bench import make_pods  # noqa: PLC0415 - bench is not a package dependency

    lines = make_pods(3)
    assert len(set(lines)) == 3
    for line in lines:
        assert 10_240 <= len(line) < 12_000
        event = slim_watch_event(orjson.loads(line), cluster="c1")
        assert isinstance(event, PodEvent)
        assert event.containers[0].last_terminated is not None


# -- the views: msgspec finds the path, the words stay ours ----------------------------
@pytest.mark.parametrize(
    ("name", "path", "value", "field", "reason"),
    [
        (
            "pod_crashloop_oom",
            ["status", "conditions", 1, "lastTransitionTime"],
            1714564800,
            "$.status.conditions[1].lastTransitionTime",
            "expected an RFC 3339 time, got number",
        ),
        (
            "pod_training",
            ["spec", "containers", 0, "resources"],
            "none",
            "$.spec.containers[0].resources",
            "expected an object, got string",
        ),
        (
            "pod_training",
            ["metadata", "ownerReferences", 0, "kind"],
            False,
            "$.metadata.ownerReferences[0].kind",
            "expected a string, got boolean",
        ),
        (
            "node_gpu",
            ["status", "conditions"],
            {"Ready": "True"},
            "$.status.conditions",
            "expected an array, got object",
        ),
        (
            "event_evicted",
            ["count"],
            1.5,
            "$.count",
            "expected an integer, got number",
        ),
        (
            "pod_crashloop_oom",
            ["status", "containerStatuses", 0, "lastState", "terminated", "finishedAt"],
            "2024-05-01T11:59:30",
            "$.status.containerStatuses[0].lastState.terminated.finishedAt",
            "time without a timezone '2024-05-01T11:59:30'",
        ),
    ],
)
def test_errors_name_the_json_path_in_our_words(
    name: str, path: list[str | int], value: Any, field: str, reason: str
) -> None:
    err = error(slim_object(_mutate(name, path, value), cluster="c1"))
    assert (err.field, err.reason) == (field, reason)


def test_top_level_type_errors_are_at_the_root() -> None:
    err = error(slim_object(3, cluster="c1"))
    assert (err.field, err.reason) == ("$", "expected an object, got number")
    err = error(slim_watch_event([1], cluster="c1"))
    assert (err.field, err.reason) == ("$", "expected a watch event object, got array")
    err = error(slim_object(None, cluster="c1"))
    assert (err.field, err.reason) == ("$.kind", "object without a kind")


def test_null_entries_in_lists_read_as_empty_ones() -> None:
    raw = load("pod_training")
    raw["status"]["conditions"].append(None)
    raw["spec"]["containers"].append(None)
    raw["metadata"]["ownerReferences"].insert(0, None)
    ev = slim_object(raw, cluster="c1")
    assert isinstance(ev, PodEvent)
    assert ev == pod("pod_training")  # the controller reference still wins
    raw["status"]["containerStatuses"].append(None)
    err = error(slim_object(raw, cluster="c1"))
    assert err.field == "$.status.containerStatuses[1].name"
    node = load("node_gpu")
    node["spec"]["taints"].append(None)
    result = slim_object(node, cluster="c1")
    assert isinstance(result, NodeEvent)
    assert result.taints[-1].key == ""


def test_unread_values_of_any_type_are_tolerated() -> None:
    raw = load("pod_training")
    raw["spec"]["containers"][0]["resources"]["requests"]["cpu"] = {"odd": True}
    raw["status"]["conditions"][0]["type"] = 7
    raw["metadata"]["ownerReferences"][0]["controller"] = "true"
    raw["metadata"]["labels"] = "not read for pods"
    assert isinstance(slim_object(raw, cluster="c1"), PodEvent)
    node = load("node_gpu")
    node["metadata"]["labels"]["nvidia.com/gpu.count"] = 8
    node["metadata"]["annotations"] = ["not", "read"]
    result = slim_object(node, cluster="c1")
    assert isinstance(result, NodeEvent)
    assert result.labels["nvidia.com/gpu.count"] == "8"


# -- bytes straight into the views ----------------------------------------------------
def _same(a: Slimmed, b: Slimmed) -> bool:
    if isinstance(a, RecordError) or isinstance(b, RecordError):
        return (
            isinstance(a, RecordError)
            and isinstance(b, RecordError)
            and (a.reason, a.field) == (b.reason, b.field)
        )
    if a is None or b is None:
        return a is b
    return a == b and encode(a) == encode(b)


_FIXTURES = [
    "pod_training",
    "pod_crashloop_oom",
    "pod_evicted",
    "pod_mig",
    "pod_pending",
    "pod_plain",
    "node_gpu",
    "event_evicted",
    "event_failed_scheduling_v1",
    "event_oomkilling",
]


@pytest.mark.parametrize("name", _FIXTURES)
@pytest.mark.parametrize("observed", [None, datetime(2024, 5, 1, 13, 0, tzinfo=UTC)])
def test_watch_line_slims_as_the_parsed_event_does(name: str, observed: datetime | None) -> None:
    envelope = {"type": "MODIFIED", "object": load(name)}
    line = orjson.dumps(envelope)
    from_bytes = slim_watch_line(line, cluster="c1", observed=observed)
    assert not isinstance(from_bytes, RecordError), from_bytes
    assert _same(from_bytes, slim_watch_event(envelope, cluster="c1", observed=observed))


@pytest.mark.parametrize(
    ("name", "path", "value"),
    [
        ("pod_crashloop_oom", ["status", "containerStatuses", 0, "restartCount"], "5"),
        ("pod_training", ["metadata", "uid"], _DELETE),
        ("pod_training", ["metadata"], _DELETE),
        ("pod_training", ["status"], "Running"),
        (
            "pod_training",
            ["spec", "containers", 0, "resources", "requests", "nvidia.com/gpu"],
            "1m",
        ),
        ("node_gpu", ["status", "capacity", "nvidia.com/gpu"], "eight"),
        ("event_evicted", ["reason"], _DELETE),
        ("pod_training", ["kind"], "ConfigMap"),
        ("pod_training", ["kind"], _DELETE),
    ],
)
def test_watch_line_errors_are_the_parsed_errors(
    name: str, path: list[str | int], value: Any
) -> None:
    envelope = {"type": "ADDED", "object": _mutate(name, path, value)}
    from_bytes = error(slim_watch_line(orjson.dumps(envelope), cluster="c1"))
    assert _same(from_bytes, slim_watch_event(envelope, cluster="c1"))


def test_watch_line_envelopes() -> None:
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "9"}}}
    assert slim_watch_line(orjson.dumps(bookmark), cluster="c1") is None
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}
    assert "410" in error(slim_watch_line(orjson.dumps(gone), cluster="c1")).reason
    renamed = orjson.dumps({"type": "RENAMED", "object": load("pod_training")})
    assert error(slim_watch_line(renamed, cluster="c1")).field == "$.type"
    assert error(slim_watch_line(b"[1]", cluster="c1")).field == "$"
    assert error(slim_watch_line(b"{not json", cluster="c1")).reason.startswith("invalid JSON")


# -- what slimming used to drop -----------------------------------------------------------
def test_fractional_gpu_pod_is_a_gpu_pod_on_a_shared_gpu() -> None:
    """A Run:ai / KAI Scheduler pod asks for part of a GPU by annotation, with no GPU resource.

    Keys and value shapes, from the schedulers' own docs and code:

    * Run:ai, "Dynamic GPU Fractions" (run-ai-docs.nvidia.com/self-hosted/platform-management/
      runai-scheduler/resource-optimization/dynamic-fractions), the pod annotation table:
      ``gpu-fraction`` "a portion of GPU memory as a double-precision floating-point number"
      (``0.25``, ``0.75``); ``gpu-memory`` "Memory size in MiB" (``2500``, ``4096``, "always
      in MiB"); ``gpu-fraction-num-devices`` "the number of GPU devices to allocate using the
      specified gpu-fraction or gpu-memory value"; its example pod requests only cpu/memory.
    * NVIDIA/KAI-Scheduler (Run:ai's open-sourced scheduler): pkg/common/constants/constants.go
      (``GpuFraction = "gpu-fraction"``, ``GpuMemory = "gpu-memory"``,
      ``GpuFractionsNumDevices = "gpu-fraction-num-devices"``), docs/gpu-sharing/README.md and
      gpu-memory.yaml (``gpu-memory: "2000" # in Mib``, values are strings).
    * run-ai/fake-gpu-operator internal/common/constants/constants.go
      (``GpuFractionAnnotation = "gpu-fraction"``).

    The fixture is shaped like a scheduled Run:ai pod (its ``runai-allocated-*`` bookkeeping
    annotations included, which are not read).
    """
    raw = load("pod_runai_fraction")
    assert not any(
        "nvidia.com" in name
        for c in raw["spec"]["containers"]
        for name in c["resources"].get("requests", {}) | c["resources"].get("limits", {})
    )
    ev = pod("pod_runai_fraction")
    assert (ev.gpu_requests, ev.gpu_limits) == ({}, {})
    assert ev.gpu_share == GpuShare(fraction=0.5, memory_mib=0, devices=1)
    assert is_gpu_pod(ev)
    assert GpuFilter().keep(ev)
    assert (ev.node, ev.owner_kind) == ("gpu-node-1", "InteractiveWorkload")
    assert decode_event(encode(ev)) == ev


def test_gpu_memory_on_several_devices() -> None:
    raw = load("pod_runai_fraction")
    annotations = raw["metadata"]["annotations"]
    del annotations["gpu-fraction"]
    annotations["gpu-memory"] = "2000"
    annotations["gpu-fraction-num-devices"] = "2"
    ev = slim_object(raw, cluster="c1")
    assert isinstance(ev, PodEvent)
    assert ev.gpu_share == GpuShare(fraction=0.0, memory_mib=2000, devices=2)


def test_whole_gpu_pods_and_empty_annotations_share_nothing() -> None:
    assert pod("pod_training").gpu_share is None
    assert pod("pod_plain").gpu_share is None
    raw = load("pod_runai_fraction")
    raw["metadata"]["annotations"]["gpu-fraction"] = ""  # empty reads as absent, as for times
    raw["metadata"]["annotations"]["gpu-fraction-num-devices"] = "none"  # unread without a share
    ev = slim_object(raw, cluster="c1")
    assert isinstance(ev, PodEvent)
    assert ev.gpu_share is None
    assert not is_gpu_pod(ev)


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("gpu-fraction", "half", "expected a GPU fraction in (0, 1], got 'half'"),
        ("gpu-fraction", "0", "expected a GPU fraction in (0, 1], got '0'"),
        ("gpu-fraction", "1.5", "expected a GPU fraction in (0, 1], got '1.5'"),
        ("gpu-fraction", "nan", "expected a GPU fraction in (0, 1], got 'nan'"),
        ("gpu-fraction", True, "expected a GPU fraction in (0, 1], got 'True'"),
        ("gpu-memory", "2Gi", "expected an integer quantity, got '2Gi'"),
        ("gpu-fraction-num-devices", "0", "expected at least 1 device, got 0"),
    ],
)
def test_bad_fractional_gpu_annotations_are_errors(key: str, value: object, reason: str) -> None:
    raw = load("pod_runai_fraction")
    raw["metadata"]["annotations"][key] = value
    err = error(slim_object(raw, cluster="c1"))
    assert (err.field, err.reason) == (f"$.metadata.annotations['{key}']", reason)
    from_bytes = slim_watch_line(orjson.dumps({"type": "ADDED", "object": raw}), cluster="c1")
    assert _same(from_bytes, err)


def test_hand_written_numbers_in_fractional_annotations() -> None:
    raw = load("pod_runai_fraction")
    raw["metadata"]["annotations"]["gpu-fraction"] = 0.25
    raw["metadata"]["annotations"]["gpu-fraction-num-devices"] = 4
    ev = slim_object(raw, cluster="c1")
    assert isinstance(ev, PodEvent)
    assert ev.gpu_share == GpuShare(fraction=0.25, devices=4)


def test_gpu_operator_node_labels_are_kept() -> None:
    """MIG strategy/capability, GPU presence and machine labels, as the NVIDIA stack writes them.

    * GPU feature discovery, NVIDIA/k8s-device-plugin docs/gpu-feature-discovery/README.md
      ("Generated Labels"): ``nvidia.com/gpu.machine`` "Machine type" (``DGX-1``);
      ``nvidia.com/mig.strategy`` "MIG strategy in use" (``single`` / ``mixed``).
    * NVIDIA/gpu-operator controllers/state_manager.go: ``commonGPULabelKey =
      "nvidia.com/gpu.present"`` (value ``"true"``, set on nodes with an NVIDIA PCI device)
      and ``migCapableLabelKey = "nvidia.com/mig.capable"`` (``"true"``).

    The fixture is a mixed-strategy A100 node labelled by gpu-operator + GFD (its
    ``gpu.deploy.*`` and per-profile ``mig-1g.5gb.count`` labels are not kept).
    """
    result = slim_object(load("node_gpu_operator_mig"), cluster="c1")
    assert isinstance(result, NodeEvent)
    labels = result.labels
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/mig.capable"] == "true"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert labels["nvidia.com/gpu.machine"] == "p4d.24xlarge"
    assert labels["nvidia.com/mig.config"] == "custom-mixed"
    assert not any(key.startswith("nvidia.com/gpu.deploy.") for key in labels)
    assert "nvidia.com/mig-1g.5gb.count" not in labels
    assert labels["feature.node.kubernetes.io/pci-10de.present"] == "true"  # NFD's: a GPU node
    assert result.capacity == {"nvidia.com/mig-1g.5gb": 14, "nvidia.com/mig-3g.20gb": 2}
    assert is_gpu_node(result)


def test_events_k8s_io_deprecated_source_and_container() -> None:
    """An Event the kubelet wrote through core/v1, read back as events.k8s.io/v1.

    It has no ``reportingController``: the component is only in ``deprecatedSource``. The
    container is the ``regarding.fieldPath`` the kubelet writes, ``spec.containers{name}``
    (kubernetes pkg/kubelet/container/ref.go, ``fieldPath``).
    """
    result = slim_object(load("event_backoff_v1_deprecated_source"), cluster="c1")
    assert isinstance(result, KubeEvent)
    assert (result.reason, result.source, result.node, result.count) == (
        "BackOff",
        "kubelet",
        "gpu-node-1",
        12,
    )
    assert result.involved.container == "trainer"
    assert (result.involved.kind, result.involved.name) == ("Pod", "trainer-0")
    assert result.time == datetime(2024, 5, 1, 12, 6, tzinfo=UTC)


def test_reporting_controller_wins_over_deprecated_source() -> None:
    raw = load("event_backoff_v1_deprecated_source")
    raw["reportingController"] = "kubelet-v2"
    result = slim_object(raw, cluster="c1")
    assert isinstance(result, KubeEvent)
    assert result.source == "kubelet-v2"


@pytest.mark.parametrize(
    ("field_path", "container"),
    [
        ("spec.containers{trainer}", "trainer"),
        ("spec.initContainers{warmup}", "warmup"),
        ("spec.ephemeralContainers{debugger-x7k2p}", "debugger-x7k2p"),
        ("spec.containers[0]", ""),  # the kubelet's form for a container without a name
        ("status.conditions", ""),
        ("", ""),
    ],
)
def test_core_v1_event_container_from_field_path(field_path: str, container: str) -> None:
    raw = load("event_evicted")
    raw["involvedObject"]["fieldPath"] = field_path
    result = slim_object(raw, cluster="c1")
    assert isinstance(result, KubeEvent)
    assert result.involved.container == container


def test_a_field_path_of_the_wrong_type_is_an_error() -> None:
    raw = load("event_backoff_v1_deprecated_source")
    raw["regarding"]["fieldPath"] = ["spec"]
    err = error(slim_object(raw, cluster="c1"))
    assert (err.field, err.reason) == ("$.regarding.fieldPath", "expected a string, got array")


# -- objects without a kind: inferred from the shape (offline files) ----------------------
_SHAPED = {
    "pod_training": "Pod",
    "pod_pending": "Pod",
    "pod_runai_fraction": "Pod",
    "node_gpu": "Node",
    "node_gpu_operator_mig": "Node",
    "event_evicted": "Event",
    "event_oomkilling": "Event",
    "event_failed_scheduling_v1": "Event",
    "event_backoff_v1_deprecated_source": "Event",
}


def bare(name: str) -> dict[str, Any]:
    """A fixture as an API List item: no ``kind``, no ``apiVersion``."""
    raw = load(name)
    del raw["kind"], raw["apiVersion"]
    return raw


@pytest.mark.parametrize(("name", "kind"), _SHAPED.items())
def test_kind_is_inferred_from_the_shape(name: str, kind: str) -> None:
    raw = bare(name)
    assert infer_kind(raw) == kind
    # The API group of a bare Event comes from its shape too: the same event either way.
    assert slim_object({**raw, "kind": kind}, cluster="c1") == slim_object(load(name), cluster="c1")


def test_node_shapes_without_node_info() -> None:
    node = bare("node_gpu")
    del node["status"]["nodeInfo"], node["spec"]["providerID"]
    assert "podCIDR" not in node["spec"]
    assert infer_kind(node) == "Node"  # decided by status.capacity alone
    assert infer_kind({"spec": {"providerID": "aws:///us-east-1a/i-0"}}) == "Node"
    assert infer_kind({"spec": {"podCIDR": "10.244.0.0/24"}}) == "Node"
    assert infer_kind({"status": {"nodeInfo": {"kubeletVersion": "v1.29.3"}}}) == "Node"


@pytest.mark.parametrize(
    ("obj", "reason"),
    [
        # a Deployment: its containers are under spec.template
        (
            {"metadata": {"name": "web"}, "spec": {"template": {"spec": {"containers": []}}}},
            "object without a kind, and not shaped like a Pod, Node or Event",
        ),
        # a PersistentVolumeClaim: status.capacity, but spec.accessModes
        (
            {
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {}},
                "status": {"phase": "Bound", "capacity": {"storage": "10Gi"}},
            },
            "object without a kind, and not shaped like a Pod, Node or Event",
        ),
        # an Event without a reason
        (
            {"involvedObject": {"kind": "Pod", "name": "p"}, "message": "m"},
            "object without a kind, and not shaped like a Pod, Node or Event",
        ),
        ({"data": {"k": "v"}}, "object without a kind, and not shaped like a Pod, Node or Event"),
        (
            {"spec": {"containers": []}, "status": {"nodeInfo": {}}},
            "object without a kind, shaped like both a Pod and a Node",
        ),
        (
            {"spec": {"containers": []}, "reason": "x", "regarding": {}},
            "object without a kind, shaped like both a Pod and an Event",
        ),
    ],
)
def test_no_deciding_shape_stays_an_error(obj: dict[str, Any], reason: str) -> None:
    err = infer_kind(obj)
    assert isinstance(err, RecordError)
    assert (err.field, err.reason) == ("$.kind", reason)


def test_an_event_without_api_version_is_read_by_its_shape() -> None:
    modern = load("event_failed_scheduling_v1")
    del modern["apiVersion"]
    result = slim_object(modern, cluster="c1")
    assert isinstance(result, KubeEvent)
    assert (result.involved.name, result.source, result.count) == (
        "trainer-1",
        "default-scheduler",
        4,
    )
    core = load("event_evicted")
    del core["apiVersion"]
    assert slim_object(core, cluster="c1") == slim_object(load("event_evicted"), cluster="c1")


@pytest.mark.parametrize(
    "name", ["pod_runai_fraction", "node_gpu_operator_mig", "event_backoff_v1_deprecated_source"]
)
@pytest.mark.parametrize("observed", [None, datetime(2024, 5, 1, 13, 0, tzinfo=UTC)])
def test_watch_line_slims_new_fixtures_as_the_parsed_event_does(
    name: str, observed: datetime | None
) -> None:
    envelope = {"type": "MODIFIED", "object": load(name)}
    from_bytes = slim_watch_line(orjson.dumps(envelope), cluster="c1", observed=observed)
    assert not isinstance(from_bytes, RecordError), from_bytes
    assert _same(from_bytes, slim_watch_event(envelope, cluster="c1", observed=observed))


def test_the_gpu_filter_survives_a_deleted_pod_stamped_at_the_end_of_time() -> None:
    """Found by tests/cli/test_fuzz.py: a DELETED pod whose condition says
    ``lastTransitionTime: 9999-12-31T23:59:59Z`` has that event time, and remembering
    when to forget its name overflowed ``datetime`` (OverflowError in ``ingest k8s``)."""
    gpu_pod = pod("pod_training")
    last = msgspec.structs.replace(
        gpu_pod, op="deleted", time=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
    )
    keep = GpuFilter()
    assert keep.keep(gpu_pod)
    assert keep.keep(last)


# -- values nested too deep for Python to walk ------------------------------------------
DEEP: list[Any] = []
for _ in range(1001):  # past Python's recursion limit, within orjson's 1,024 levels
    DEEP = [DEEP]


@pytest.mark.parametrize(
    ("path", "shown"),
    [
        (["metadata", "labels", "nvidia.com/gpu.product"], "labels"),
        (["status", "capacity", "nvidia.com/gpu"], "capacity"),
    ],
)
def test_a_value_nested_a_thousand_deep_where_any_value_is_read_is_an_error(
    path: list[str | int], shown: str
) -> None:
    """``str()`` of it raised RecursionError out of ``ingest k8s`` and the watch."""
    raw = _mutate("node_gpu", path, DEEP)
    err = error(slim_object(raw, cluster="c1"))
    assert "nested too deep" in err.reason, shown
    # As the API would send it (orjson.dumps stops at 255 levels, so spliced in as text).
    marked = orjson.dumps({"type": "MODIFIED", "object": _mutate("node_gpu", path, "@@")})
    line = marked.replace(b'"@@"', b"[" * 1001 + b"]" * 1001)
    assert "nested too deep" in error(slim_watch_line(line, cluster="c1")).reason
    deep_kind = slim_watch_event({"type": DEEP, "object": raw}, cluster="c1")
    assert error(deep_kind).field == "$.type"
    status = {"type": "ERROR", "object": {"code": DEEP, "reason": DEEP, "message": "m"}}
    assert "nested too deep to show" in error(slim_watch_event(status, cluster="c1")).reason


# -- values past the schemas' bounds: errors where they are read ---------------------------
@pytest.mark.parametrize(
    ("name", "path", "value", "field", "why"),
    [
        (
            "pod_training",
            ["metadata", "creationTimestamp"],
            "0001-01-01T00:00:00+14:00",  # year 0 in UTC
            "$.metadata.creationTimestamp",
            "before the Unix epoch",
        ),
        (
            "node_gpu",
            ["status", "conditions", 0, "lastHeartbeatTime"],
            "9999-12-31T23:59:59-12:00",  # year 10000 in UTC
            "$.status.conditions[0].lastHeartbeatTime",
            "past the end of year 9999",
        ),
        ("pod_training", ["metadata", "name"], "p" * 254, "$.name", "length <= 253"),
        ("pod_training", ["metadata", "namespace"], "n" * 64, "$.namespace", "length <= 63"),
        ("node_gpu", ["metadata", "name"], "n" * 254, "$.node", "length <= 253"),
        (
            "node_gpu",
            ["metadata", "labels", "nvidia.com/gpu.product"],
            "x" * 64,
            "$.labels[...]",
            "length <= 63",
        ),
        ("pod_training", ["metadata", "uid"], "u" * 9000, "$.id", "length <= 8192"),
        (
            "node_gpu",
            ["status", "capacity", "nvidia.com/gpu"],
            "100000000000000000000000",
            "$.capacity[...]",
            "<= 2147483647",
        ),
    ],
    ids=[
        "year-0",
        "year-10000",
        "pod-name",
        "namespace",
        "node-name",
        "label",
        "megabyte-id",
        "capacity",
    ],
)
def test_a_value_the_codec_would_refuse_is_an_error_here(
    name: str, path: list[str | int], value: Any, field: str, why: str
) -> None:
    """Never an event that becomes a dead letter at the processor: a dead line at the source.
    A time names the object's field; a bound the event's (the codec's own words)."""
    raw = _mutate(name, path, value)
    err = error(slim_object(raw, cluster="c1"))
    assert (err.field, why in err.reason) == (field, True), err
    line = orjson.dumps({"type": "ADDED", "object": raw})
    assert _same(slim_watch_line(line, cluster="c1"), err)


def test_the_epoch_itself_is_a_time_a_node_without_a_clock_reports() -> None:
    raw = _mutate("pod_training", ["metadata", "creationTimestamp"], "1970-01-01T00:00:00Z")
    for status in raw["status"]["containerStatuses"]:
        status["state"] = {"waiting": {"reason": "ContainerCreating"}}
    del raw["status"]["conditions"]
    ev = slim_object(raw, cluster="c1")
    assert isinstance(ev, PodEvent), ev
    assert ev.time == datetime(1970, 1, 1, tzinfo=UTC)
