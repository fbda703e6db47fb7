"""Records written to do harm decode to a RecordError with a reason, never to an exception.

Every consumer (the processor, ``replay``, ``ingest``, the bridges) decodes through
:mod:`schemas.codec`, so what escaped it crashed them all on the same record, at every
restart. Measured before the fix: msgspec raises ``RecursionError`` on a record nested
about 1,000 deep, in a field the schema has and in one it does not, in JSON and in
MessagePack; a ``str`` with a lone surrogate raises ``UnicodeEncodeError``.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
import pytest

from schemas import codec
from schemas.codec import (
    RecordError,
    checked,
    decode_dead_letter,
    decode_event,
    decode_incident,
    encode,
    loads,
    split_documents,
    time_error,
    try_decode_event,
)
from schemas.events import (
    AutoscalerEvent,
    GpuBindingEvent,
    KubeEvent,
    NodeEvent,
    PodEvent,
    PodRef,
    ResourceSliceEvent,
    Tick,
    XidEvent,
)
from schemas.types import MAX_ID_LENGTH, MAX_NODE_PODS, MAX_XID_CODE
from tests.sample_records import INCIDENT, SAMPLES

DEPTH = 10_000
NESTED = b"[" * DEPTH + b"]" * DEPTH
OBJECTS = b'{"a":' * DEPTH + b"1" + b"}" * DEPTH

XID = (
    b'{"schema":"xid.v1","id":"k/1","cluster":"c1","time":"2024-05-01T12:00:00Z",'
    b'"node":"n1","code":79}'
)


def xid(**fields: Any) -> bytes:
    """:data:`XID` with ``fields`` set (JSON values, already encoded)."""
    wire = loads(XID)
    wire.update(fields)
    return json.dumps(wire).encode()  # not orjson: it cannot write 10**23


def _sample(kind: type[msgspec.Struct]) -> Any:
    return next(s for s in SAMPLES if type(s) is kind)


# -- depth -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "record",
    [
        XID[:-1] + b',"not_in_the_schema":' + NESTED + b"}",
        XID[:-1] + b',"not_in_the_schema":' + OBJECTS + b"}",
        # A field the schema has, whose type nests: a container's unknown field.
        b'{"schema":"pod.v1","id":"p","cluster":"c1","time":"2024-05-01T12:00:00Z",'
        b'"namespace":"ml","name":"p","containers":[{"name":"c","later":' + NESTED + b"}]}",
        # Before the tag: the decoder cannot even know the type yet.
        b'{"first":' + NESTED + b',"schema":"xid.v1"}',
    ],
    ids=["unknown-field", "unknown-field-objects", "known-field", "before-the-tag"],
)
def test_a_record_nested_ten_thousand_deep_is_a_record_error(record: bytes) -> None:
    error = try_decode_event(record)
    assert isinstance(error, RecordError)
    assert "nested too deep" in error.reason
    assert isinstance(try_decode_event(record.decode()), RecordError)  # str input too
    with pytest.raises(RecordError, match="nested too deep"):
        decode_event(record)


def test_a_known_field_of_the_wrong_shape_stays_a_type_error_at_any_depth() -> None:
    wire = XID[:-1] + b',"pid":' + NESTED + b"}"
    error = try_decode_event(wire)
    assert isinstance(error, RecordError)
    assert error.field == "$.pid"


def test_every_other_decoder_turns_depth_into_a_record_error() -> None:
    incident = encode(INCIDENT)[:-1] + b',"later":' + NESTED + b"}"
    with pytest.raises(RecordError, match="nested too deep"):
        decode_incident(incident)
    with pytest.raises(RecordError, match="nested too deep"):
        decode_dead_letter(b'{"later":' + NESTED + b"}")
    with pytest.raises(RecordError, match="nested too deep"):
        codec.typed_decoder(XidEvent)(XID[:-1] + b',"later":' + NESTED + b"}")
    with pytest.raises(RecordError, match="nested too deep"):
        codec.decode_as(NESTED, list[Any])
    _, from_msgpack = codec.msgpack_codec(list[Any])
    with pytest.raises(RecordError, match="nested too deep"):
        from_msgpack(b"\x91" * DEPTH + b"\x90")  # a one-item array in each, MessagePack
    with pytest.raises(RecordError, match=r"invalid JSON: .*depth"):
        loads(NESTED)  # orjson's own limit, 1,024 levels: a JSONDecodeError, so far so good


def test_a_record_just_within_reach_still_decodes() -> None:
    event = decode_event(XID[:-1] + b',"later":' + b"[" * 500 + b"]" * 500 + b"}")
    assert event == decode_event(XID)


# -- text ----------------------------------------------------------------------------------
def test_a_lone_surrogate_is_a_record_error_in_every_form() -> None:
    as_text = XID.decode().replace('"n1"', '"n\ud800"')
    error = try_decode_event(as_text)
    assert isinstance(error, RecordError)
    assert "not valid UTF-8" in error.reason
    assert isinstance(try_decode_event(XID.replace(b'"n1"', b'"n\\ud800"')), RecordError)
    with pytest.raises(RecordError, match="surrogate"):
        loads(b'{"a":"\\ud800"}')
    with pytest.raises(RecordError):
        codec.typed_decoder(XidEvent)(as_text)
    built = msgspec.structs.replace(_sample(XidEvent), node="n\ud800")
    refused = checked(built)
    assert isinstance(refused, RecordError)
    assert "not valid UTF-8" in refused.reason


def test_split_documents_refuses_per_document_what_a_line_would_refuse() -> None:
    text = '{"a": 1}\n{"b": "\\ud800"}\n{"c": [1,\n 2]}\n{"d": ' + NESTED.decode() + "}\n"
    found = list(split_documents(text))
    starts = [text.index(key) for key in ('{"a"', '{"b"', '{"c"', '{"d"')]
    assert [offset for offset, _ in found] == starts
    assert found[0][1] == {"a": 1}
    assert isinstance(found[1][1], RecordError)
    assert "surrogate" in found[1][1].reason
    assert found[2][1] == {"c": [1, 2]}  # the next document after a refused one is read
    assert isinstance(found[3][1], RecordError)
    assert "nested too deep; rest of input skipped" in found[3][1].reason


def test_split_documents_stops_at_a_syntax_error_where_it_is() -> None:
    found = list(split_documents('{"a": 1}\n{"b": ]\n{"c": 3}'))
    assert found[0] == (0, {"a": 1})
    offset, error = found[1]
    assert offset == len('{"a": 1}\n{"b": ')
    assert isinstance(error, RecordError)
    assert "rest of input skipped" in error.reason
    assert len(found) == 2


# -- times ------------------------------------------------------------------------------
EAST = timezone(timedelta(hours=14))
WEST = timezone(timedelta(hours=-12))


@pytest.mark.parametrize(
    ("time", "why"),
    [
        ("0001-01-01T00:00:00+14:00", "before the Unix epoch"),  # year 0 in UTC
        ("0001-01-01T00:00:00Z", "before the Unix epoch"),
        ("0001-01-01T00:00:00-12:00", "before the Unix epoch"),
        ("1969-12-31T23:59:59.999999Z", "before the Unix epoch"),
        ("1970-01-01T13:59:59+14:00", "before the Unix epoch"),
        ("9999-12-31T23:59:59-12:00", "past the end of year 9999 UTC"),  # year 10000 in UTC
        ("9999-12-31T12:00:00-12:00", "past the end of year 9999 UTC"),
    ],
)
def test_a_time_out_of_range_is_a_record_error_at_its_field(time: str, why: str) -> None:
    error = try_decode_event(xid(time=time))
    assert isinstance(error, RecordError)
    assert error.field == "$.time"
    assert why in error.reason
    assert time[:19] in error.reason


def test_year_one_without_a_clock_is_not_rfc3339() -> None:
    error = try_decode_event(xid(time="0001-01-01Z"))
    assert isinstance(error, RecordError)
    assert error.field == "$.time"


@pytest.mark.parametrize(
    "time",
    [
        "1970-01-01T00:00:00Z",  # a node without a real-time clock
        "1970-01-01T14:00:00+14:00",
        "1970-01-01T00:00:00-12:00",
        "2024-05-01T12:00:00+02:00",
        "9999-12-31T23:59:59.999999Z",
        "9999-12-31T23:59:59.999999+14:00",
        "9999-12-31T11:59:59.999999-12:00",
    ],
)
def test_every_time_from_the_epoch_to_the_end_of_9999_decodes(time: str) -> None:
    event = decode_event(xid(time=time))
    assert event.time == datetime.fromisoformat(time)


def test_times_inside_an_event_are_bounded_too_and_named() -> None:
    pod = _sample(PodEvent)
    ancient = datetime(1, 1, 1, tzinfo=EAST)
    second = msgspec.structs.replace(
        pod.containers[0],
        last_terminated=msgspec.structs.replace(
            pod.containers[0].last_terminated, finished_at=ancient
        ),
    )
    bad = msgspec.structs.replace(pod, containers=(pod.containers[0], second))
    error = try_decode_event(encode(bad))
    assert isinstance(error, RecordError)
    assert error.field == "$.containers[1].last_terminated.finished_at"
    for field in ("created_at", "deleted_at"):
        error = try_decode_event(encode(msgspec.structs.replace(pod, **{field: ancient})))
        assert isinstance(error, RecordError)
        assert error.field == f"$.{field}"
    late = datetime(9999, 12, 31, 23, tzinfo=WEST)
    backoff = msgspec.structs.replace(_sample(AutoscalerEvent), until=late)
    error = try_decode_event(encode(backoff))
    assert isinstance(error, RecordError)
    assert error.field == "$.until"
    again = time_error(backoff)  # what a parser calls: the same error, without the encoding
    assert again is not None
    assert (again.reason, again.field) == (error.reason, error.field)


def _plant(record: dict[str, Any], steps: tuple[str, ...], value: str) -> str:
    """Put ``value`` at ``steps`` of a record (``[]``: the first item, made if missing);
    the JSONPath-like field name a RecordError gives for it."""
    node: Any = record
    field = "$"
    for here, after in zip(steps, (*steps[1:], None), strict=True):
        if here == "[]":
            continue
        if after is None:
            node[here] = value
        elif after == "[]":
            items = node.setdefault(here, [])
            if not items:
                items.append({"name": "c"})  # a container needs its name
            node = items[0]
        else:
            node = node.setdefault(here, {}) if node.get(here) is None else node[here]
        field += f".{here}" + ("[0]" if after == "[]" else "")
    return field


@pytest.mark.parametrize(
    ("kind", "steps"),
    [(kind, steps) for kind, paths in codec._EVENT_TIMES.items() for steps in paths],
    ids=lambda v: v.__name__ if isinstance(v, type) else ".".join(v),
)
def test_every_time_field_is_bounded_by_the_decoder(
    kind: type[Any], steps: tuple[str, ...]
) -> None:
    """Each time the schema has (found from the schema itself, so one added later is
    here too) is refused out of range by the decoder's fast check, at that field."""
    record = json.loads(encode(_sample(kind)))
    field = _plant(record, steps, "0001-01-01T00:00:00+14:00")  # year 0 in UTC
    error = try_decode_event(json.dumps(record))
    assert isinstance(error, RecordError), error
    assert error.field == field


def test_the_fast_time_check_covers_every_time_field_of_every_schema() -> None:
    """:func:`schemas.codec._plain_times` spells the walk out for speed: a time field added
    to a schema must be added there, or this fails."""
    assert {kind: paths for kind, paths in codec._EVENT_TIMES.items() if paths} == {
        PodEvent: (
            ("containers", "[]", "terminated", "finished_at"),
            ("containers", "[]", "last_terminated", "finished_at"),
            ("created_at",),
            ("deleted_at",),
        ),
        AutoscalerEvent: (("until",),),
        ResourceSliceEvent: (("devices", "[]", "taints", "[]", "time_added"),),
        Tick: (("read_at",),),
    }


def test_an_offset_time_in_range_is_kept_as_written() -> None:
    pod = _sample(PodEvent)
    east = msgspec.structs.replace(pod, created_at=datetime(1970, 1, 1, 14, tzinfo=EAST))
    decoded = decode_event(encode(east))
    assert isinstance(decoded, PodEvent)
    assert decoded.created_at == east.created_at
    assert decoded.created_at is not None
    assert decoded.created_at.utcoffset() == timedelta(hours=14)


# -- bounds -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fields", "field", "why"),
    [
        ({"code": -79}, "$.code", ">= 0"),
        ({"code": 10**23}, "$.code", f"<= {MAX_XID_CODE}"),
        ({"code": MAX_XID_CODE + 1}, "$.code", f"<= {MAX_XID_CODE}"),
        ({"caused_by": 10**23}, "$.caused_by", f"<= {MAX_XID_CODE}"),
        ({"id": "x" * 1_000_000}, "$.id", f"length <= {MAX_ID_LENGTH}"),
        ({"node": "n" * 254}, "$.node", "length <= 253"),
        ({"cluster": "c" * 254}, "$.cluster", "length <= 253"),
    ],
    ids=["xid-negative", "xid-1e23", "xid-65536", "caused-by", "megabyte-id", "node", "cluster"],
)
def test_absurd_values_are_refused_with_their_bound(
    fields: dict[str, Any], field: str, why: str
) -> None:
    error = try_decode_event(xid(**fields))
    assert isinstance(error, RecordError)
    assert error.field == field
    assert why in error.reason


@pytest.mark.parametrize(
    ("sample", "change", "field"),
    [
        (NodeEvent, {"capacity": {"nvidia.com/gpu": 10**23}}, "$.capacity[...]"),
        (PodEvent, {"gpu_requests": {"nvidia.com/gpu": 2**31}}, "$.gpu_requests[...]"),
        (XidEvent, {"gpu_index": 2**64}, "$.gpu_index"),
        (GpuBindingEvent, {"gpu_index": -(2**31) - 1}, "$.gpu_index"),
        (KubeEvent, {"count": 10**23}, "$.count"),
        (AutoscalerEvent, {"max_size": 10**23}, "$.max_size"),
    ],
    ids=["capacity", "requests", "xid-gpu-index", "binding-gpu-index", "count", "max-size"],
)
def test_an_integer_past_32_bits_is_refused(
    sample: type[msgspec.Struct], change: dict[str, Any], field: str
) -> None:
    """msgspec decodes any integer; the state topic's MessagePack stops at 64 bits, and a
    node whose capacity said 10**23 crashed the worker at its next snapshot."""
    wire = loads(encode(_sample(sample)))
    wire.update(change)
    error = try_decode_event(json.dumps(wire).encode())
    assert isinstance(error, RecordError)
    assert error.field == field
    assert "2147483647" in error.reason or "-2147483648" in error.reason


def test_the_largest_values_in_bounds_decode() -> None:
    event = decode_event(
        xid(code=MAX_XID_CODE, caused_by=0, id="x" * MAX_ID_LENGTH, node="n" * 253)
    )
    assert isinstance(event, XidEvent)
    assert (event.code, event.caused_by, len(event.id)) == (MAX_XID_CODE, 0, MAX_ID_LENGTH)


def test_a_binding_of_100k_pods_is_refused_and_a_full_node_is_not() -> None:
    binding = _sample(GpuBindingEvent)
    pods = tuple(PodRef(namespace="ml", name=f"p-{i}") for i in range(100_000))
    error = try_decode_event(encode(msgspec.structs.replace(binding, pods=pods)))
    assert isinstance(error, RecordError)
    assert error.field == "$.pods"
    assert f"length <= {MAX_NODE_PODS}" in error.reason
    full = msgspec.structs.replace(binding, pods=pods[:MAX_NODE_PODS])
    assert decode_event(encode(full)) == full


@pytest.mark.parametrize(
    ("ref", "field"),
    [
        (PodRef(namespace="n" * 64, name="p"), "$.pods[0].namespace"),
        (PodRef(namespace="ml", name="p" * 254), "$.pods[0].name"),
        (PodRef(namespace="ml", name="p", container="c" * 64), "$.pods[0].container"),
    ],
)
def test_pod_names_longer_than_kubernetes_allows_are_refused(ref: PodRef, field: str) -> None:
    binding = msgspec.structs.replace(_sample(GpuBindingEvent), pods=(ref,))
    error = try_decode_event(encode(binding))
    assert isinstance(error, RecordError)
    assert error.field == field
    refused = checked(binding)
    assert isinstance(refused, RecordError)
    assert refused.field == field


def test_checked_gives_back_the_very_event_when_it_is_valid() -> None:
    for sample in SAMPLES:
        assert checked(sample) is sample  # type: ignore[type-var]


def test_a_label_value_longer_than_63_is_refused() -> None:
    node = next(s for s in SAMPLES if s.__struct_config__.tag == "node.v1")
    long = msgspec.structs.replace(node, labels={"nvidia.com/gpu.product": "x" * 64})
    error = try_decode_event(encode(long))
    assert isinstance(error, RecordError)
    assert error.field == "$.labels[...]"


def test_every_sample_and_old_record_is_within_the_bounds() -> None:
    for sample in SAMPLES:
        assert try_decode_event(encode(sample)) == sample
    assert time_error(_sample(PodEvent)) is None
    assert datetime(1970, 1, 1, tzinfo=UTC) == decode_event(xid(time="1970-01-01T00:00:00Z")).time
