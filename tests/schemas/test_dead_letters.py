"""The dead-letter record: original bytes survive as base64, and the document validates it."""

from __future__ import annotations

import base64
import hashlib
import json

import jsonschema
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.codec import RecordError, decode_dead_letter, encode, fitted_dead_letter
from schemas.dead_letters import MAX_LETTER_BYTES, DeadLetter
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


# -- a dead letter always fits ---------------------------------------------------------------
def _letter(value: bytes, key: bytes | None = b"prod/gpu-node-01") -> DeadLetter:
    return DeadLetter(
        topic="gputriage.raw.pods", partition=3, offset=42, reason="not JSON", key=key, value=value
    )


def test_an_800_kb_poison_record_becomes_a_letter_under_the_producers_limit() -> None:
    """The case that stopped the processor for good: ~800 KB of garbage is a ~1.07 MB
    letter in JSON (base64: +33 %), over the producer's 1 MB ``max_request_size``. The
    fitted letter is under the budget and keeps the head of the value, the original
    size and the SHA-256 of the whole value."""
    value = bytes(range(256)) * 3125  # 800,000 bytes, not UTF-8
    letter = _letter(value)
    assert len(encode(letter)) > 1_048_576
    fit = fitted_dead_letter(letter)
    assert len(encode(fit)) <= MAX_LETTER_BYTES
    assert fit.value is not None
    assert value.startswith(fit.value)
    assert len(fit.value) > 700_000, "as much of the head as fits"
    assert fit.value_size == len(value)
    assert fit.value_sha256 == hashlib.sha256(value).hexdigest()
    again = decode_dead_letter(encode(fit))
    assert (again.value_size, again.value_sha256) == (fit.value_size, fit.value_sha256)


def test_a_letter_that_fits_is_left_as_it_is() -> None:
    letter = _letter(b'{"schema":"pod.v1"')
    assert fitted_dead_letter(letter) is letter


@settings(max_examples=60, deadline=None)
@given(
    size=st.integers(0, 300_000),
    budget=st.integers(4_000, 200_000),
    key=st.none() | st.binary(max_size=50_000),
    reason=st.text(max_size=5_000),
)
def test_any_letter_fits_any_budget(size: int, budget: int, key: bytes | None, reason: str) -> None:
    value = b"\xff" * size
    letter = msgspec.structs.replace(_letter(value, key), reason=reason)
    fit = fitted_dead_letter(letter, budget)
    assert len(encode(fit)) <= budget
    assert fit.value is not None
    assert value.startswith(fit.value)
