"""JSON Schema documents: committed, in sync with the types, and valid for real records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest

from schemas.codec import encode
from schemas.jsonschema import (
    DOCUMENT_DIR,
    RECORD_TYPES,
    drifted_documents,
    schema_documents,
    wire_tag,
    write_documents,
)
from tests.sample_records import INCIDENT, SAMPLES


def _document(tag: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((DOCUMENT_DIR / f"{tag}.json").read_text("utf-8"))
    return loaded


def test_committed_documents_have_not_drifted() -> None:
    assert drifted_documents() == [], "run `make schemas` (gputriage schemas --write)"


def test_one_document_per_record_type() -> None:
    names = set(schema_documents())
    assert names == {f"{wire_tag(t)}.json" for t in RECORD_TYPES}
    assert {"pod.v1.json", "xid.v1.json", "incident.v1.json"} <= names


def test_write_then_check_in_a_fresh_directory(tmp_path: Path) -> None:
    assert sorted(drifted_documents(tmp_path)) == sorted(schema_documents())
    assert sorted(write_documents(tmp_path)) == sorted(schema_documents())
    assert write_documents(tmp_path) == []
    assert drifted_documents(tmp_path) == []
    (tmp_path / "pod.v1.json").write_text("{}\n", encoding="utf-8")
    assert drifted_documents(tmp_path) == ["pod.v1.json"]


@pytest.mark.parametrize("record", [*SAMPLES, INCIDENT], ids=lambda r: type(r).__name__)
def test_encoded_records_validate_against_their_document(record: msgspec.Struct) -> None:
    document = _document(wire_tag(type(record)))
    jsonschema.Draft202012Validator.check_schema(document)
    jsonschema.validate(json.loads(encode(record)), document, cls=jsonschema.Draft202012Validator)


def test_documents_reject_a_wrong_type() -> None:
    wire = json.loads(encode(SAMPLES[3]))
    wire["code"] = "seventy-nine"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(wire, _document("xid.v1"), cls=jsonschema.Draft202012Validator)
