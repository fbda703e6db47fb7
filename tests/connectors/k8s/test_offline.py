"""``gputriage ingest k8s`` end to end, through a subprocess like a user's shell."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson

from schemas.codec import decode_event
from schemas.events import KubeEvent, NodeEvent, PodEvent
from tests import paths
from tests.cli_helpers import gputriage

DATA = paths.DATA / "k8s"

ALL = (
    "node_gpu",
    "pod_training",
    "pod_crashloop_oom",
    "pod_evicted",
    "pod_mig",
    "pod_plain",
    "pod_pending",
    "event_evicted",
    "event_failed_scheduling_v1",
    "event_oomkilling",
)


def load(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = orjson.loads((DATA / f"{name}.json").read_bytes())
    return obj


def watch_lines(*items: tuple[str, object]) -> bytes:
    """JSON lines of watch events."""
    return b"".join(orjson.dumps({"type": t, "object": o}) + b"\n" for t, o in items)


def events_of(stdout: bytes) -> list[PodEvent | NodeEvent | KubeEvent]:
    out = []
    for line in stdout.splitlines():
        event = decode_event(line)
        assert isinstance(event, PodEvent | NodeEvent | KubeEvent)
        out.append(event)
    return out


def test_watch_stream_gpu_only_by_default(tmp_path: Path) -> None:
    path = tmp_path / "watch.jsonl"
    path.write_bytes(
        watch_lines(
            *(("ADDED", load(name)) for name in ALL),
            ("BOOKMARK", {"kind": "Pod", "metadata": {"resourceVersion": "99999"}}),
        )
    )
    proc = gputriage("ingest", "k8s", "--file", str(path), "--cluster", "prod")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == b""
    events = events_of(proc.stdout)
    names = [getattr(e, "name", None) or e.node for e in events if not isinstance(e, KubeEvent)]
    assert "web-5c6b-xyz" not in names
    assert names == [
        "gpu-node-1",
        "trainer-0",
        "finetune-0",
        "infer-7d9f-abcde",
        "notebook-0",
        "trainer-1",
    ]
    assert [e.reason for e in events if isinstance(e, KubeEvent)] == [
        "Evicted",
        "FailedScheduling",
        "OOMKilling",
    ]
    assert {e.cluster for e in events} == {"prod"}


def test_all_keeps_non_gpu_objects(tmp_path: Path) -> None:
    path = tmp_path / "watch.jsonl"
    path.write_bytes(watch_lines(("MODIFIED", load("pod_plain"))))
    proc = gputriage("ingest", "k8s", "--file", str(path), "--cluster", "c1", "--keep-all")
    assert proc.returncode == 0, proc.stderr
    (event,) = events_of(proc.stdout)
    assert isinstance(event, PodEvent)
    assert event.op == "modified"


def test_bad_lines_are_reported_and_skipped(tmp_path: Path) -> None:
    broken = load("pod_crashloop_oom")
    broken["status"]["containerStatuses"][0]["restartCount"] = "5"
    no_uid = load("pod_training")
    del no_uid["metadata"]["uid"]
    path = tmp_path / "watch.jsonl"
    path.write_bytes(
        watch_lines(("ADDED", load("pod_evicted")), ("ADDED", broken))
        + b"{not json\n\n"
        + watch_lines(
            ("MODIFIED", no_uid),
            ("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "gone"}),
            ("ADDED", load("pod_mig")),
        )
    )
    proc = gputriage("ingest", "k8s", "--file", str(path), "--cluster", "c1")
    assert proc.returncode == 1
    err = proc.stderr.decode().splitlines()
    assert err[0] == (
        f"{path}:2: expected an integer, got string "
        "(at $.object.status.containerStatuses[0].restartCount)"
    )
    assert err[1].startswith(f"{path}:3: invalid JSON")
    assert err[2].startswith(f"{path}:5: missing uid")
    assert "$.object.metadata.uid" in err[2]
    assert err[3].startswith(f"{path}:6: watch error 410")
    assert err[4] == "gputriage: 4 bad objects of 6 skipped"
    assert [e.id.rsplit(":", 1)[1] for e in events_of(proc.stdout)] == ["3003", "4004"]


def test_kubectl_list_pretty_printed_and_gzip(tmp_path: Path) -> None:
    listing = {
        "apiVersion": "v1",
        "kind": "List",
        "metadata": {"resourceVersion": ""},
        "items": [load("node_gpu"), load("pod_training"), load("pod_plain")],
    }
    path = tmp_path / "pods.json.gz"
    path.write_bytes(gzip.compress(orjson.dumps(listing, option=orjson.OPT_INDENT_2)))
    proc = gputriage("ingest", "k8s", "--file", str(path), "--cluster", "c1")
    assert proc.returncode == 0, proc.stderr
    events = events_of(proc.stdout)
    assert [type(e).__name__ for e in events] == ["NodeEvent", "PodEvent"]
    assert all(e.op == "added" for e in events if isinstance(e, PodEvent | NodeEvent))


def test_pod_list_items_without_kind_and_errors_name_the_item(tmp_path: Path) -> None:
    good = load("pod_training")
    bad = load("pod_mig")
    del good["kind"]
    del bad["kind"]
    bad["metadata"]["uid"] = 7
    listing = {"apiVersion": "v1", "kind": "PodList", "items": [good, bad]}
    proc = gputriage(
        "ingest", "k8s", "--file", "-", "--cluster", "c1", stdin=orjson.dumps(listing) + b"\n"
    )
    assert proc.returncode == 1
    assert proc.stderr.decode().splitlines()[0] == (
        "<stdin>:1: expected a string, got number (at $.items[1].metadata.uid)"
    )
    (event,) = events_of(proc.stdout)
    assert isinstance(event, PodEvent)
    assert event.name == "trainer-0"


def test_pretty_printed_concatenated_watch_output(tmp_path: Path) -> None:
    docs = [
        {"type": "ADDED", "object": load("pod_evicted")},
        {"type": "DELETED", "object": load("pod_evicted")},
    ]
    text = b"\n".join(orjson.dumps(doc, option=orjson.OPT_INDENT_2) for doc in docs) + b"\n"
    path = tmp_path / "watch.json"
    path.write_bytes(text + b'{\n  "type": \n')
    proc = gputriage("ingest", "k8s", "--file", str(path), "--cluster", "c1")
    assert proc.returncode == 1
    events = events_of(proc.stdout)
    assert [e.op for e in events if isinstance(e, PodEvent)] == ["added", "deleted"]
    first_line_of_tail = text.count(b"\n") + 1
    assert proc.stderr.decode().startswith(f"{path}:{first_line_of_tail + 1}: invalid JSON")


def test_custom_gpu_resource(tmp_path: Path) -> None:
    raw = load("pod_plain")
    raw["spec"]["containers"][0]["resources"]["limits"]["amd.com/gpu"] = "1"
    path = tmp_path / "watch.jsonl"
    path.write_bytes(watch_lines(("ADDED", raw)))
    proc = gputriage(
        "ingest", "k8s", "--file", str(path), "--cluster", "c1", "--resource", "amd.com/gpu"
    )
    assert proc.returncode == 0, proc.stderr
    (event,) = events_of(proc.stdout)
    assert isinstance(event, PodEvent)
    assert event.gpu_limits == {"amd.com/gpu": 1}


def test_usage_errors_are_one_line() -> None:
    proc = gputriage("ingest", "k8s", "--file", "/nonexistent/watch.jsonl", "--cluster", "c1")
    assert proc.returncode == 2
    assert len(proc.stderr.decode().splitlines()) == 1
    proc = gputriage("ingest", "k8s", "--file", "-")
    assert proc.returncode == 2
    assert "--cluster" in proc.stderr.decode()


def test_help() -> None:
    proc = gputriage("ingest", "k8s", "--help")
    assert proc.returncode == 0
    text = proc.stdout.decode()
    assert "--keep-all" in text
    assert "--cluster" in text
    assert "ingest" in gputriage("--help").stdout.decode()


# -- bare List items (no kind, no apiVersion) --------------------------------------------
ISSUE_10 = ("pod_runai_fraction", "node_gpu_operator_mig", "event_backoff_v1_deprecated_source")


def bare(name: str) -> dict[str, Any]:
    """A fixture as an API List item: no ``kind``, no ``apiVersion``."""
    obj = load(name)
    del obj["kind"], obj["apiVersion"]
    return obj


def test_jq_items_of_a_list_slim_as_the_full_objects(tmp_path: Path) -> None:
    """``kubectl get ... -o json | jq '.items[]'``: pretty-printed, concatenated, kindless."""
    names = (*ALL, *ISSUE_10)
    bare_path = tmp_path / "items.json"
    bare_path.write_bytes(
        b"\n".join(orjson.dumps(bare(name), option=orjson.OPT_INDENT_2) for name in names) + b"\n"
    )
    full_path = tmp_path / "full.jsonl"
    full_path.write_bytes(b"".join(orjson.dumps(load(name)) + b"\n" for name in names))
    args = ("ingest", "k8s", "--cluster", "prod", "--keep-all")
    bare_run = gputriage(*args, "--file", str(bare_path))
    full_run = gputriage(*args, "--file", str(full_path))
    assert bare_run.returncode == 0, bare_run.stderr
    assert bare_run.stderr == b""
    assert full_run.returncode == 0, full_run.stderr
    assert bare_run.stdout == full_run.stdout
    assert len(events_of(bare_run.stdout)) == len(names)


def test_bare_items_keep_what_slimming_dropped(tmp_path: Path) -> None:
    path = tmp_path / "items.jsonl"
    # trainer-0 first: the BackOff Event is about it, so the GPU-only filter keeps the Event
    names = ("pod_training", *ISSUE_10)
    path.write_bytes(b"".join(orjson.dumps(bare(name)) + b"\n" for name in names))
    proc = gputriage("ingest", "k8s", "--file", str(path), "--cluster", "c1")
    assert proc.returncode == 0, proc.stderr
    trainer, pod, node, event = events_of(proc.stdout)  # all kept by the GPU-only filter
    assert isinstance(trainer, PodEvent)
    assert trainer.gpu_share is None
    assert isinstance(pod, PodEvent)
    assert pod.gpu_share is not None
    assert (pod.gpu_share.fraction, pod.gpu_requests) == (0.5, {})
    assert isinstance(node, NodeEvent)
    assert node.labels["nvidia.com/mig.strategy"] == "mixed"
    assert node.labels["nvidia.com/gpu.present"] == "true"
    assert isinstance(event, KubeEvent)
    assert (event.source, event.involved.container) == ("kubelet", "trainer")


def test_items_no_shape_decides_are_reported_by_index(tmp_path: Path) -> None:
    deployment = {
        "metadata": {"name": "web", "namespace": "ml", "uid": "d-1", "resourceVersion": "1"},
        "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web"}]}}},
    }
    listing = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [bare("pod_training"), deployment, bare("node_gpu")],
    }
    proc = gputriage(
        "ingest", "k8s", "--file", "-", "--cluster", "c1", stdin=orjson.dumps(listing) + b"\n"
    )
    assert proc.returncode == 1
    err = proc.stderr.decode().splitlines()
    assert err[0] == (
        "<stdin>:1: object without a kind, and not shaped like a Pod, Node or Event "
        "(at $.items[1].kind)"
    )
    assert [type(e).__name__ for e in events_of(proc.stdout)] == ["PodEvent", "NodeEvent"]


def test_event_list_items_are_read_by_their_shape(tmp_path: Path) -> None:
    """An events.k8s.io EventList's items lack kind and apiVersion: regarding/note are read."""
    listing = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "EventList",
        "items": [bare("event_failed_scheduling_v1"), bare("event_backoff_v1_deprecated_source")],
    }
    proc = gputriage(
        "ingest",
        "k8s",
        "--file",
        "-",
        "--cluster",
        "c1",
        "--keep-all",
        stdin=orjson.dumps(listing) + b"\n",
    )
    assert proc.returncode == 0, proc.stderr
    scheduling, backoff = events_of(proc.stdout)
    assert isinstance(scheduling, KubeEvent)
    assert (scheduling.involved.name, scheduling.source) == ("trainer-1", "default-scheduler")
    assert isinstance(backoff, KubeEvent)
    assert backoff.involved.container == "trainer"


def test_watch_events_of_bare_objects(tmp_path: Path) -> None:
    path = tmp_path / "watch.jsonl"
    path.write_bytes(
        watch_lines(
            ("ADDED", bare("pod_runai_fraction")),
            ("BOOKMARK", {"metadata": {"resourceVersion": "99999"}}),  # no kind: still skipped
            ("MODIFIED", {"metadata": {"name": "x"}, "data": {}}),
        )
    )
    proc = gputriage("ingest", "k8s", "--file", str(path), "--cluster", "c1")
    assert proc.returncode == 1
    assert proc.stderr.decode().splitlines()[0] == (
        f"{path}:3: object without a kind, and not shaped like a Pod, Node or Event "
        "(at $.object.kind)"
    )
    (event,) = events_of(proc.stdout)
    assert isinstance(event, PodEvent)
    assert event.gpu_share is not None


def test_pretty_printed_documents_are_refused_one_by_one_as_lines_are(tmp_path: Path) -> None:
    """A document split out of pretty-printed input is parsed as a line is (orjson): a lone
    surrogate was accepted there by Python's ``json`` and crashed the encoder; now it is
    one bad object, and the documents after it are still read."""
    good = orjson.dumps(load("pod_evicted"), option=orjson.OPT_INDENT_2)
    named = load("pod_training")
    named["metadata"]["name"] = "@@"
    surrogate = orjson.dumps(named, option=orjson.OPT_INDENT_2).replace(b'"@@"', b'"p\\ud800"')
    path = tmp_path / "pods.json"
    path.write_bytes(good + b"\n" + surrogate + b"\n" + good + b"\n")
    proc = gputriage("ingest", "k8s", "--file", str(path), "--cluster", "c1")
    stderr = proc.stderr.decode()
    assert "Traceback" not in stderr
    assert proc.returncode == 1, stderr
    first, summary = stderr.splitlines()
    second = good.count(b"\n") + 2
    assert first.startswith(f"{path}:{second}: invalid JSON: no low surrogate in string")
    assert summary == "gputriage: 1 bad object of 3 skipped"
    assert len(events_of(proc.stdout)) == 2


def test_pretty_printed_input_nested_ten_thousand_deep_ends_with_one_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "deep.json"
    good = orjson.dumps(load("pod_evicted"), option=orjson.OPT_INDENT_2)
    nested = b"[" * 10_000 + b"]" * 10_000
    path.write_bytes(good + b'\n{\n  "x": ' + nested + b"\n}\n" + good + b"\n")
    proc = gputriage("ingest", "k8s", "--file", str(path), "--cluster", "c1")
    stderr = proc.stderr.decode()
    assert "Traceback" not in stderr
    assert proc.returncode == 1, stderr
    deep_line = good.count(b"\n") + 2
    assert stderr.splitlines() == [
        f"{path}:{deep_line}: invalid JSON: nested too deep; rest of input skipped",
        "gputriage: 1 bad object of 2 skipped",
    ]
    assert len(events_of(proc.stdout)) == 1
