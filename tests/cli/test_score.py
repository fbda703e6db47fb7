"""``gputriage score`` through the real CLI: the shipped scenario against a hand-written truth.

``examples/scenario.truth.jsonl`` says, fault by fault, what ``examples/build_scenario.py``
injects (``tests/demo/test_scenario.py`` holds the incidents a replay gives); the
variants here move one expectation where no incident is, or give it the wrong type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from schemas.codec import encode
from schemas.truth import ExpectedIncident, decode_truth
from tests.cli_helpers import bad_xid_line, gputriage
from tests.demo.test_scenario import ALL_TYPES
from tests.paths import ROOT

SCENARIO = ROOT / "examples" / "scenario.jsonl"
TRUTH = ROOT / "examples" / "scenario.truth.jsonl"
REQUIRED = {"precision", "recall", "delay_p50_s", "delay_p95_s", "tp", "fp", "fn"}


def truths() -> list[ExpectedIncident]:
    return [decode_truth(line) for line in TRUTH.read_bytes().splitlines()]


def write_truth(path: Path, items: list[ExpectedIncident]) -> Path:
    path.write_bytes(b"".join(encode(item) + b"\n" for item in items))
    return path


def changed(kind: str, **changes: Any) -> list[ExpectedIncident]:
    """The scenario's truth with the device-plugin nodes' expectation of type ``kind``
    changed (the DRA node's stays)."""
    return [
        msgspec.structs.replace(item, **changes) if item.type == kind and not dra(item) else item
        for item in truths()
    ]


def dra(item: ExpectedIncident) -> bool:
    """The DRA node's expectation (its fault is ``dra_...``)."""
    return item.fault.startswith("dra_")


def score_json(*args: str) -> tuple[dict[str, Any], int, str]:
    result = gputriage("score", "-o", "json", *args)
    lines = result.stdout.splitlines()
    assert len(lines) == 1, result.stdout
    return json.loads(lines[0]), result.returncode, result.stderr.decode()


def test_the_scenario_scores_every_type_once_and_right() -> None:
    score, code, stderr = score_json(str(SCENARIO), str(TRUTH))
    assert code == 0, stderr
    assert list(score) == ["types", "confusion", "misses", "false_positives", "excused", "pools"]
    assert score["excused"] == []
    assert set(score["types"]) == ALL_TYPES
    assert list(score["pools"]) == ["device-plugin", "dra"]
    dra_figures = score["pools"]["dra"]["device_unhealthy_eviction"]
    assert (dra_figures["tp"], dra_figures["fp"], dra_figures["fn"]) == (1, 0, 0)
    assert set(score["pools"]["dra"]) == {"device_unhealthy_eviction"}
    for kind, figures in score["pools"]["device-plugin"].items():
        assert set(figures) == REQUIRED
        assert (figures["tp"], figures["fp"], figures["fn"]) == (1, 0, 0), kind
        assert (figures["precision"], figures["recall"]) == (1.0, 1.0), kind
        assert figures["delay_p50_s"] == figures["delay_p95_s"], "one delay: both are it"
        assert figures["delay_p50_s"] >= 0, kind
    twice = {"device_unhealthy_eviction"}  # a device-plugin node's and the DRA node's
    assert score["confusion"] == {
        kind: {kind: 2 if kind in twice else 1} for kind in sorted(ALL_TYPES)
    }
    assert score["misses"] == []
    assert score["false_positives"] == []


def test_the_delay_runs_from_the_fault_to_the_first_revision_on_the_stream_clock() -> None:
    """The XID 79 at minute 5, the pods fail by 5.6; the first revision comes out at the
    event that releases it from the grace (stream time 10:05:30): 30 s."""
    score, _, _ = score_json(str(SCENARIO), str(TRUTH))
    device_plugin = score["pools"]["device-plugin"]
    assert device_plugin["device_unhealthy_eviction"]["delay_p50_s"] == 30.0
    assert device_plugin["scale_up_failure"]["delay_p50_s"] == 12.0


def test_the_table_lists_scores_then_confusion() -> None:
    result = gputriage("score", str(SCENARIO), str(TRUTH))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert lines[0].split() == [
        "TYPE", "TP", "FP", "FN", "PRECISION", "RECALL", "DELAY", "P50", "DELAY", "P95",
    ]  # fmt: skip
    assert lines[1].split() == [
        "allocation_mismatch", "1", "0", "0", "1.000", "1.000", "390s", "390s",
    ]  # fmt: skip
    assert lines[len(ALL_TYPES) + 1] == "", "a blank line between sections"
    assert lines[len(ALL_TYPES) + 2].split()[:2] == ["POOL", "TYPE"], "a mixed cluster's pools"
    assert any(line.split() == ["TRUTH", "REPORTED", "AS", "COUNT"] for line in lines)
    assert "MISSED" not in result.stdout.decode(), "no misses: no section"


def test_a_truth_on_the_wrong_node_is_a_miss_and_its_incident_a_false_positive(
    tmp_path: Path,
) -> None:
    truth = write_truth(tmp_path / "t.jsonl", changed("host_oom_kill", node="gpu-node-04"))
    score, code, _ = score_json(str(SCENARIO), str(truth))
    assert code == 0, "a poor score is not a failure without a bar"
    figures = score["types"]["host_oom_kill"]
    assert (figures["tp"], figures["fp"], figures["fn"]) == (0, 1, 1)
    assert (figures["precision"], figures["recall"]) == (0.0, 0.0)
    assert (figures["delay_p50_s"], figures["delay_p95_s"]) == (None, None)
    assert score["confusion"]["host_oom_kill"] == {"none": 1}
    assert score["confusion"]["none"] == {"host_oom_kill": 1}
    assert [m["id"] for m in score["misses"]] == ["scenario-02"]
    assert score["misses"][0]["reported_as"] is None
    (false_positive,) = score["false_positives"]
    assert (false_positive["type"], false_positive["node"]) == ("host_oom_kill", "gpu-node-02")
    assert false_positive["truth"] is None


def test_an_optional_truth_counts_its_incident_neither_way(tmp_path: Path) -> None:
    """A truth the simulator could not judge (due where its stream ends): its incident is
    listed as excused, and the type has no true positive, false positive or miss."""
    truth = write_truth(tmp_path / "t.jsonl", changed("host_oom_kill", optional=True))
    score, code, stderr = score_json(str(SCENARIO), str(truth))
    assert code == 0, stderr
    assert "host_oom_kill" not in score["types"]
    assert [item["type"] for item in score["excused"]] == ["host_oom_kill"]
    assert score["false_positives"] == []
    assert score["misses"] == []
    table = gputriage("score", str(SCENARIO), str(truth)).stdout.decode()
    assert "1 incident matched only optional truths" in table


def test_a_window_that_excludes_first_seen_is_a_miss(tmp_path: Path) -> None:
    (eviction,) = (t for t in truths() if t.type == "device_unhealthy_eviction" and not dra(t))
    late = eviction.not_before.replace(minute=6)  # first_seen is 10:05:00
    items = changed("device_unhealthy_eviction", not_before=late, not_after=late.replace(minute=9))
    score, _, _ = score_json(str(SCENARIO), str(write_truth(tmp_path / "t.jsonl", items)))
    figures = score["pools"]["device-plugin"]["device_unhealthy_eviction"]
    assert (figures["tp"], figures["fp"], figures["fn"]) == (0, 1, 1)
    assert score["confusion"]["device_unhealthy_eviction"] == {
        "device_unhealthy_eviction": 1,
        "none": 1,
    }
    assert score["confusion"]["none"] == {"device_unhealthy_eviction": 1}
    assert score["types"]["host_oom_kill"]["tp"] == 1, "the others still match"


def test_a_truth_of_the_wrong_type_shows_what_it_was_reported_as(tmp_path: Path) -> None:
    """The OOM on gpu-node-02 expected as a device eviction (right node and pod, wrong
    type): a miss of the one, a false positive of the other, and the confusion cell."""
    items = changed("host_oom_kill", type="device_unhealthy_eviction")
    score, _, _ = score_json(str(SCENARIO), str(write_truth(tmp_path / "t.jsonl", items)))
    assert score["confusion"]["device_unhealthy_eviction"] == {
        "device_unhealthy_eviction": 2,
        "host_oom_kill": 1,
    }
    assert "none" not in score["confusion"], "the false positive is explained by the confusion"
    device = score["pools"]["device-plugin"]["device_unhealthy_eviction"]
    assert (device["tp"], device["fp"], device["fn"], device["recall"]) == (1, 0, 1, 0.5)
    oom = score["types"]["host_oom_kill"]
    assert (oom["tp"], oom["fp"], oom["fn"]) == (0, 1, 0)
    assert (oom["precision"], oom["recall"]) == (0.0, None), "no OOM expected: recall null"
    (miss,) = score["misses"]
    assert (miss["id"], miss["reported_type"]) == ("scenario-02", "host_oom_kill")
    assert miss["reported_as"] == score["false_positives"][0]["id"]
    assert score["false_positives"][0]["truth"] == "scenario-02"
    table = gputriage("score", str(SCENARIO), str(tmp_path / "t.jsonl")).stdout.decode()
    assert any(
        line.split()[:3] == ["device_unhealthy_eviction", "host_oom_kill", "1"]
        for line in table.splitlines()
    ), table
    assert any(line.startswith("MISSED ") for line in table.splitlines())
    assert any(line.startswith("scenario-02 ") for line in table.splitlines())


def test_one_incident_satisfies_one_of_two_truths(tmp_path: Path) -> None:
    (oom,) = (t for t in truths() if t.type == "host_oom_kill")
    twin = msgspec.structs.replace(oom, id="scenario-02b")
    score, _, _ = score_json(str(SCENARIO), str(write_truth(tmp_path / "t.jsonl", [twin, oom])))
    figures = score["types"]["host_oom_kill"]
    assert (figures["tp"], figures["fp"], figures["fn"]) == (1, 0, 1)
    assert (figures["precision"], figures["recall"]) == (1.0, 0.5)
    assert [m["id"] for m in score["misses"]] == ["scenario-02b"], "tie on start: by id"
    assert set(score["types"]) == ALL_TYPES, "types with incidents and no truth stay in"
    assert score["types"]["xid_repeat"]["recall"] is None


def test_min_recall_fails_naming_the_types_below_it(tmp_path: Path) -> None:
    truth = write_truth(tmp_path / "t.jsonl", changed("host_oom_kill", node="gpu-node-04"))
    result = gputriage("score", "--min-recall", "0.9", str(SCENARIO), str(truth))
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        "gputriage: below the bar: recall of host_oom_kill 0.000 < 0.9"
    ]
    assert result.stdout.startswith(b"TYPE "), "the score is printed all the same"
    both = gputriage(
        "score", "--min-precision", "1", "--min-recall", "0", str(SCENARIO), str(truth)
    )
    assert both.returncode == 1
    assert "precision of host_oom_kill 0.000 < 1" in both.stderr.decode()


def test_bars_met_exit_zero() -> None:
    result = gputriage(
        "score", "--min-precision", "1", "--min-recall", "1", str(SCENARIO), str(TRUTH)
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""


@pytest.mark.parametrize(
    ("good", "bad", "field"),
    [
        (b'"start":"2026-11-30T10:05:00Z"', b'"start":"2026-11-30T10:05:00"', "$.start"),
        (b'"gpus":["GPU-6f1c2a9e-79aa-4c1e-9d3b-000000000001"]', b'"gpus":"GPU-6f"', "$.gpus"),
    ],
)
def test_a_bad_truth_line_is_one_line_naming_file_line_and_field(
    tmp_path: Path, good: bytes, bad: bytes, field: str
) -> None:
    lines = TRUTH.read_bytes().splitlines()
    assert good in lines[0]
    truth = tmp_path / "t.jsonl"
    truth.write_bytes(b"\n".join([lines[1], b"", lines[0].replace(good, bad), *lines[2:]]))
    result = gputriage("score", str(SCENARIO), str(truth))
    assert result.returncode == 2
    assert result.stdout == b"", "no score against a partial truth"
    (message,) = result.stderr.decode().splitlines()
    assert message.startswith(f"gputriage: error: {truth}:3: "), "physical line numbers"
    assert message.endswith(f"(at {field})"), message


def test_a_node_scoped_truth_without_a_node_is_refused(tmp_path: Path) -> None:
    items = changed("gpu_degraded", node="")
    result = gputriage("score", str(SCENARIO), str(write_truth(tmp_path / "t.jsonl", items)))
    assert result.returncode == 2
    (message,) = result.stderr.decode().splitlines()
    assert message == (
        f"gputriage: error: {tmp_path / 't.jsonl'}:4: gpu_degraded is node-scoped: "
        "node is required (at $.node)"
    )


def test_bad_event_lines_are_reported_and_skipped_as_replay_does(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(SCENARIO.read_bytes() + bad_xid_line() + b"\n")
    score, code, stderr = score_json(str(events), str(TRUTH))
    assert code == 1
    lines = stderr.splitlines()
    bad = len(SCENARIO.read_bytes().splitlines()) + 1  # the line after the scenario's
    assert lines[0].startswith(f"{events}:{bad}: ")
    assert lines[-1] == f"gputriage: 1 bad line of {bad} skipped"
    assert all(figures["recall"] == 1.0 for figures in score["types"].values())


def test_a_bar_outside_zero_to_one_is_a_usage_error() -> None:
    result = gputriage("score", "--min-recall", "1.5", str(SCENARIO), str(TRUTH))
    assert result.returncode == 2
    assert len(result.stderr.splitlines()) == 1
    assert b"--min-recall" in result.stderr
