"""The ground-truth record: round trip, an older writer's line, a bad line's error."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from schemas.codec import RecordError, encode
from schemas.truth import ExpectedIncident, decode_truth

T0 = datetime(2025, 3, 3, 8, 0, tzinfo=UTC)


def test_a_truth_line_round_trips() -> None:
    expected = ExpectedIncident(
        id="f-1",
        fault="host_oom",
        type="host_oom_kill",
        cluster="prod",
        node="gpu-node-1",
        pods=("ml/train-0",),
        start=T0,
        not_before=T0,
        not_after=T0,
    )
    line = encode(expected)
    assert b'"schema":"truth.v1"' in line
    assert decode_truth(line) == expected


def test_a_minimal_v1_line_decodes_with_defaults() -> None:
    """What the first simulator wrote: only the required fields."""
    line = (
        '{"schema":"truth.v1","id":"f","fault":"quota","type":"scale_up_failure",'
        '"cluster":"c","start":"2025-03-03T08:00:00Z","not_before":"2025-03-03T08:00:00Z",'
        '"not_after":"2025-03-03T08:10:00Z"}'
    )
    got = decode_truth(line)
    assert (got.node, got.pods, got.gpus, got.node_group, got.severity) == ("", (), (), "", "")


def test_a_naive_time_is_refused_naming_the_field() -> None:
    line = (
        '{"schema":"truth.v1","id":"f","fault":"x","type":"t","cluster":"c",'
        '"start":"2025-03-03T08:00:00","not_before":"2025-03-03T08:00:00Z",'
        '"not_after":"2025-03-03T08:00:00Z"}'
    )
    with pytest.raises(RecordError, match="start"):
        decode_truth(line)
