"""The one codec: round trips, and errors that name the field."""

from __future__ import annotations

import msgspec
import pytest

from schemas.codec import (
    RecordError,
    decode_event,
    decode_incident,
    dumps,
    encode,
    loads,
    try_decode_event,
)
from schemas.events import EVENT_TYPES, GpuShare, KubeEvent, PodEvent
from tests.sample_records import INCIDENT, SAMPLES

GOOD_XID = (
    b'{"schema":"xid.v1","id":"k/1","cluster":"c1","time":"2024-05-01T12:00:00Z",'
    b'"node":"n1","code":79}'
)


def test_samples_cover_every_event_type() -> None:
    assert {type(sample) for sample in SAMPLES} == set(EVENT_TYPES)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: type(s).__name__)
def test_every_event_type_round_trips(sample: msgspec.Struct) -> None:
    data = encode(sample)
    assert decode_event(data) == sample
    assert try_decode_event(data) == sample
    assert encode(decode_event(data)) == data


def test_incident_round_trips() -> None:
    data = encode(INCIDENT)
    assert decode_incident(data) == INCIDENT
    assert encode(decode_incident(data)) == data


def test_the_tag_is_on_the_wire_and_no_class_path() -> None:
    wire = loads(encode(SAMPLES[0]))
    assert wire["schema"] == "pod.v1"
    assert "PodEvent" not in encode(SAMPLES[0]).decode()


def test_a_wrong_type_names_the_field() -> None:
    error = try_decode_event(GOOD_XID.replace(b'"code":79', b'"code":"seventy-nine"'))
    assert isinstance(error, RecordError)
    assert error.field == "$.code"
    assert "int" in error.reason
    with pytest.raises(RecordError, match=r"\(at \$\.code\)"):
        decode_event(GOOD_XID.replace(b'"code":79', b'"code":"x"'))


def test_a_nested_bad_field_names_its_path() -> None:
    sample = SAMPLES[0]
    wire = loads(encode(sample))
    wire["containers"][0]["restart_count"] = "many"
    error = try_decode_event(dumps(wire))
    assert isinstance(error, RecordError)
    assert error.field == "$.containers[0].restart_count"


def test_a_naive_timestamp_is_rejected() -> None:
    error = try_decode_event(GOOD_XID.replace(b"12:00:00Z", b"12:00:00"))
    assert isinstance(error, RecordError)
    assert error.field == "$.time"


def test_an_offset_timestamp_is_accepted_and_kept() -> None:
    event = decode_event(GOOD_XID.replace(b"12:00:00Z", b"14:00:00+02:00"))
    assert event.time.utcoffset() is not None
    assert event.time == decode_event(GOOD_XID).time


def test_an_unknown_schema_tag_is_rejected() -> None:
    error = try_decode_event(GOOD_XID.replace(b"xid.v1", b"xid.v9"))
    assert isinstance(error, RecordError)
    assert error.field == "$.schema"
    assert "xid.v9" in error.reason


def test_a_missing_required_field_is_named() -> None:
    error = try_decode_event(GOOD_XID.replace(b',"code":79', b""))
    assert isinstance(error, RecordError)
    assert "code" in str(error)


@pytest.mark.parametrize("cut", [1, 10, len(GOOD_XID) // 2])
def test_truncated_json_is_an_error_value(cut: int) -> None:
    error = try_decode_event(GOOD_XID[:-cut])
    assert isinstance(error, RecordError)
    assert "malformed" in error.reason or "truncated" in error.reason


def test_not_json_at_all_is_an_error_value() -> None:
    assert isinstance(try_decode_event(b"\xff\xfe not json"), RecordError)
    assert isinstance(try_decode_event(b"[]"), RecordError)


def test_untyped_loads_raises_record_error() -> None:
    with pytest.raises(RecordError, match="invalid JSON"):
        loads(b"{")


def test_unknown_fields_are_ignored_for_forward_compatibility() -> None:
    event = decode_event(GOOD_XID[:-1] + b',"added_in_v1_1":true}')
    assert event == decode_event(GOOD_XID)


# Encoded by main before issue 10 (``encode`` of tests.sample_records.SAMPLES[:3] then),
# byte for byte: the fields issue 10 added (PodEvent.gpu_share, ObjectRef.container)
# are absent, as in every record already on the topics.
_BEFORE_ISSUE_10 = (
    b'{"schema":"pod.v1","id":"uid-1/100","cluster":"c1","time":"2024-05-01T12:00:00Z",'
    b'"node":"gpu-node-1","op":"added","namespace":"ml","name":"trainer-0","uid":"uid-1",'
    b'"phase":"Running","reason":"Evicted","message":"The node was low on resource: memory.",'
    b'"gpu_requests":{"nvidia.com/gpu":2},"gpu_limits":{"nvidia.com/gpu":2},'
    b'"owner_kind":"Job","owner_name":"trainer","containers":[{"name":"main",'
    b'"restart_count":3,"state":"waiting","reason":"CrashLoopBackOff","terminated":'
    b'{"reason":"Error","exit_code":1,"finished_at":"2024-05-01T12:00:00Z","message":""},'
    b'"last_terminated":{"reason":"OOMKilled","exit_code":137,'
    b'"finished_at":"2024-05-01T11:59:55Z","message":"CUDA out of memory"}}],'
    b'"scheduled":{"status":"False","reason":"Unschedulable","message":"Insufficient"},'
    b'"created_at":"2024-05-01T11:00:00Z","deleted_at":"2024-05-01T12:01:00Z"}',
    b'{"schema":"node.v1","id":"node-uid/7","cluster":"c1","time":"2024-05-01T14:00:00+02:00",'
    b'"node":"gpu-node-1","op":"modified","capacity":{"nvidia.com/gpu":8},'
    b'"allocatable":{"nvidia.com/gpu":7},"conditions":[{"type":"Ready","status":"True",'
    b'"reason":"KubeletReady","message":""}],'
    b'"labels":{"nvidia.com/gpu.product":"NVIDIA-H100-80GB-HBM3"},'
    b'"taints":[{"key":"nvidia.com/gpu","value":"present","effect":"NoSchedule"}]}',
    b'{"schema":"k8s_event.v1","id":"ev-1","cluster":"c1","time":"2024-05-01T12:00:00Z",'
    b'"node":"gpu-node-1","reason":"OOMKilling",'
    b'"message":"Memory cgroup out of memory: Killed process 1234 (python)","type":"Warning",'
    b'"involved":{"kind":"Node","name":"gpu-node-1","namespace":"","uid":"node-uid"},'
    b'"source":"kernel-monitor","count":2}',
)


@pytest.mark.parametrize("line", _BEFORE_ISSUE_10, ids=["pod.v1", "node.v1", "k8s_event.v1"])
def test_records_written_before_issue_10_still_decode(line: bytes) -> None:
    """Issue 10 added fields with defaults to the same tags: old records decode as before."""
    sample = {type(s): s for s in SAMPLES}
    event = decode_event(line)
    assert event == sample[type(event)]
    if isinstance(event, PodEvent):
        assert event.gpu_share is None  # not a pod on part of a GPU
    if isinstance(event, KubeEvent):
        assert event.involved.container == ""


def test_a_pod_on_part_of_a_gpu_round_trips() -> None:
    pod = SAMPLES[0]
    assert isinstance(pod, PodEvent)
    shared = msgspec.structs.replace(
        pod, gpu_requests={}, gpu_limits={}, gpu_share=GpuShare(memory_mib=2000, devices=2)
    )
    data = encode(shared)
    assert b'"gpu_share":{"fraction":0.0,"memory_mib":2000,"devices":2}' in data
    assert decode_event(data) == shared
