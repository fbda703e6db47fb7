"""The dead-letter record: original bytes survive as base64, and the document validates it."""

from __future__ import annotations

import base64
import json

import jsonschema
import pytest

from schemas.codec import RecordError, decode_dead_letter, encode
from schemas.dead_letters import DeadLetter
from schemas.jsonschema import DOCUMENT_DIR, RECORD_TYPES


def _garbage() -> DeadLetter:
    return DeadLetter(
        topic="gputriage.raw.xids",
        partition=2,
        offset=4711,
        reason="Expected `int`, got `str`",
        field="$.code",
        key=b"prod/gpu-node-01",
        value=b'{"schema":"xid.v1","code":"seventy-nine"}\xff\x00',
        timestamp_ms=1_796_000_000_000,
    )


def test_round_trip_keeps_the_original_bytes_exactly() -> None:
    record = _garbage()
    wire = encode(record)
    assert decode_dead_letter(wire) == record
    data = json.loads(wire)
    assert data["schema"] == "dead_letter.v1"
    assert base64.b64decode(data["value"]) == record.value
    assert base64.b64decode(data["key"]) == record.key


def test_minimal_record_and_a_tombstone() -> None:
    record = DeadLetter(topic="t", partition=0, offset=0, reason="null value")
    assert decode_dead_letter(encode(record)) == record
    assert json.loads(encode(record))["value"] is None


def test_the_document_is_published_and_validates_records() -> None:
    assert DeadLetter in RECORD_TYPES
    document = json.loads((DOCUMENT_DIR / "dead_letter.v1.json").read_text("utf-8"))
    jsonschema.Draft202012Validator.check_schema(document)
    jsonschema.validate(
        json.loads(encode(_garbage())), document, cls=jsonschema.Draft202012Validator
    )


def test_a_broken_dead_letter_names_the_field() -> None:
    with pytest.raises(RecordError) as caught:
        decode_dead_letter(b'{"schema":"dead_letter.v1","topic":"t","partition":"x"}')
    assert caught.value.field == "$.partition"
