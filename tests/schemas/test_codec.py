"""The one codec: round trips, and errors that name the field."""

from __future__ import annotations

from datetime import UTC, datetime

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
from schemas.events import EVENT_TYPES, GpuBindingEvent, GpuShare, KubeEvent, PodEvent, XidEvent
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


# Encoded before PodEvent.gpu_share and ObjectRef.container were added (``encode`` of
# tests.sample_records.SAMPLES[:3] then), byte for byte: those fields
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
    """Fields added with defaults to the same tags: old records decode as before."""
    sample = {type(s): s for s in SAMPLES}
    event = decode_event(line)
    expected = sample[type(event)]
    if isinstance(expected, PodEvent):
        # The DRA fields came later, with defaults: no claims, no disruption, no devices.
        expected = msgspec.structs.replace(
            expected,
            claims=(),
            disruption=None,
            containers=tuple(msgspec.structs.replace(c, devices=()) for c in expected.containers),
        )
    assert event == expected
    if isinstance(event, PodEvent):
        assert event.gpu_share is None  # not a pod on part of a GPU
        assert (event.claims, event.disruption) == ((), None)
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


# Encoded by main before MIG instances had fields of their own (``encode`` of
# tests.sample_records.SAMPLES[3:5] then), byte for byte, and the two spellings of a MIG
# instance those releases wrote: dcgm's ``<parent uuid>/GI<id>`` with no bus id, NVML's
# ``MIG-`` uuid.
_BEFORE_MIG_FIELDS = (
    b'{"schema":"xid.v1","id":"boot-1/4711","cluster":"c1",'
    b'"time":"2024-05-01T12:00:00.000250Z","node":"gpu-node-1","code":79,'
    b'"pci_bus_id":"0000:9b:00.0","gpu_uuid":"GPU-0b7c1f7e-0000-0000-0000-000000000000",'
    b'"gpu_index":3,"pid":4242,"process":"python","message":"GPU has fallen off the bus.",'
    b'"source":"nvml","sxid":false,"recovery_action":"reboot","caused_by":48}',
    b'{"schema":"gpu_binding.v1","id":"dcgm/gpu-node-1/3/1","cluster":"c1",'
    b'"time":"2024-05-01T12:00:00Z","node":"gpu-node-1",'
    b'"gpu_uuid":"GPU-0b7c1f7e-0000-0000-0000-000000000000","pci_bus_id":"0000:9b:00.0",'
    b'"gpu_index":3,"device":"nvidia3","mig_profile":"1g.10gb",'
    b'"pods":[{"namespace":"ml","name":"trainer-0","container":"main"}],"pods_known":true}',
)
_OLD_DCGM_MIG = (
    b'{"schema":"gpu_binding.v1","id":"dcgm-0123456789abcdef0123","cluster":"c1",'
    b'"time":"2026-11-30T10:00:00Z","node":"n1",'
    b'"gpu_uuid":"GPU-265c9814-6156-355b-e589-ff2064894f16/GI3","pci_bus_id":"",'
    b'"gpu_index":null,"device":"nvidia0","mig_profile":"1g.6gb",'
    b'"pods":[{"namespace":"ml","name":"a-0","container":"main"}],"pods_known":true}'
)
_OLD_NVML_MIG = (
    b'{"schema":"gpu_binding.v1","id":"nvml-0123456789abcdef0123","cluster":"c1",'
    b'"time":"2026-11-30T10:00:00Z","node":"n1",'
    b'"gpu_uuid":"MIG-5e0b4a8c-7c1f-5b2e-9a43-2d4bc1e0f6a1","pci_bus_id":"",'
    b'"gpu_index":null,"device":"nvidia0","mig_profile":"3g.20gb","pods":[],"pods_known":false}'
)


@pytest.mark.parametrize("line", _BEFORE_MIG_FIELDS, ids=["xid.v1", "gpu_binding.v1"])
def test_records_written_before_the_mig_fields_still_decode(line: bytes) -> None:
    """The MIG fields have defaults: an old record decodes as a whole
    GPU, with no instance, exactly as the sample without them."""
    sample = {type(s): s for s in SAMPLES}
    event = decode_event(line)
    if isinstance(event, XidEvent):
        assert (event.gpu_instance, event.compute_instance) == (None, None)
        expected = msgspec.structs.replace(
            sample[XidEvent], gpu_instance=None, compute_instance=None
        )
    else:
        assert isinstance(event, GpuBindingEvent)
        assert (event.gpu_instance, event.mig_uuid, event.shared, event.source) == (
            None,
            "",
            False,
            "",
        )
        expected = msgspec.structs.replace(
            sample[GpuBindingEvent],
            gpu_instance=None,
            mig_uuid="",
            shared=False,
            source="",
            claims=(),
        )
    assert event == expected


def test_old_mig_spellings_decode_as_written() -> None:
    """The old instance spellings are not rewritten by the codec: the core reads them."""
    dcgm = decode_event(_OLD_DCGM_MIG)
    assert isinstance(dcgm, GpuBindingEvent)
    assert dcgm.gpu_uuid == "GPU-265c9814-6156-355b-e589-ff2064894f16/GI3"
    assert (dcgm.gpu_instance, dcgm.mig_uuid, dcgm.mig_profile) == (None, "", "1g.6gb")
    nvml = decode_event(_OLD_NVML_MIG)
    assert isinstance(nvml, GpuBindingEvent)
    assert nvml.gpu_uuid.startswith("MIG-")
    assert (nvml.gpu_instance, nvml.mig_uuid, nvml.pods_known) == (None, "", False)


def test_a_mig_instance_is_on_the_wire_with_its_parent_and_instance_id() -> None:
    binding = SAMPLES[4]
    assert isinstance(binding, GpuBindingEvent)
    data = encode(binding)
    assert b'"gpu_instance":5,"mig_uuid":"MIG-5e0b4a8c-7c1f-5b2e-9a43-2d4bc1e0f6a1"' in data
    xid = SAMPLES[3]
    assert isinstance(xid, XidEvent)
    assert b'"gpu_instance":5,"compute_instance":0,' in encode(xid)


def test_a_dra_binding_names_a_claim_of_the_longest_namespace_and_name() -> None:
    """A claim is ``namespace/name``: 63 + 1 + 253 characters at most, past a name's bound."""
    longest = f"{'n' * 63}/{'c' * 253}"
    binding = GpuBindingEvent(
        id="dra:n1:gpu-2:uid:1",
        cluster="c1",
        time=datetime(2026, 12, 1, tzinfo=UTC),
        node="n1",
        gpu_uuid="GPU-3f5e8a12-6b4c-4d8e-9a17-0c2b7e91d4a6",
        source="dra",
        claims=(longest,),
    )
    assert decode_event(encode(binding)) == binding
