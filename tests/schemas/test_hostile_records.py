"""Records written to do harm decode to a RecordError with a reason, never to an exception.

Every consumer (the processor, ``replay``, ``ingest``, the bridges) decodes through
:mod:`schemas.codec`, so what escaped it crashed them all on the same record, at every
restart. Measured before the fix: msgspec raises ``RecursionError`` on a record nested
about 1,000 deep, in a field the schema has and in one it does not, in JSON and in
MessagePack; a ``str`` with a lone surrogate raises ``UnicodeEncodeError``.
"""

from __future__ import annotations

from typing import Any

import pytest

from schemas import codec
from schemas.codec import (
    RecordError,
    decode_dead_letter,
    decode_event,
    decode_incident,
    encode,
    loads,
    split_documents,
    try_decode_event,
)
from schemas.events import XidEvent
from tests.sample_records import INCIDENT

DEPTH = 10_000
NESTED = b"[" * DEPTH + b"]" * DEPTH
OBJECTS = b'{"a":' * DEPTH + b"1" + b"}" * DEPTH

XID = (
    b'{"schema":"xid.v1","id":"k/1","cluster":"c1","time":"2024-05-01T12:00:00Z",'
    b'"node":"n1","code":79}'
)


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
