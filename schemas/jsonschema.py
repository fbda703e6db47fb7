"""JSON Schema documents for every record type, generated from the types themselves.

The ``msgspec.Struct`` definitions are the contract; the documents under
``schemas/jsonschema/`` (one per wire tag: ``pod.v1.json``, ``incident.v1.json``...)
are a published *view* of it for consumers that do not run Python. They are
generated, committed, and checked for drift in CI, so a field added to a struct
without regenerating fails the build instead of silently diverging.

The text must be byte-stable across runs and machines: keys sorted, two-space
indent, a trailing newline, non-ASCII kept as is. Docstrings become
``description``\\s, so rewording a docstring is (intentionally) a drift too.

Generation is pure; :func:`write_documents` and :func:`drifted_documents` are the
only functions that touch the file system.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import msgspec

from schemas.bridges import BridgeDelivery, BridgeGroup
from schemas.codec import json_schema
from schemas.dead_letters import DeadLetter
from schemas.events import EVENT_TYPES
from schemas.incidents import Incident

DOCUMENT_DIR: Final = Path(__file__).with_name("jsonschema")
"""Where the committed documents live (inside the package, so they ship with it)."""

DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"

RECORD_TYPES: Final[tuple[type[msgspec.Struct], ...]] = (
    *EVENT_TYPES,
    Incident,
    DeadLetter,
    BridgeDelivery,
    BridgeGroup,
)
"""Every type that goes on a topic or into a recorded file."""


def wire_tag(record_type: type[msgspec.Struct]) -> str:
    """The ``schema`` tag a record type carries on the wire, e.g. ``pod.v1``."""
    tag = record_type.__struct_config__.tag
    if not isinstance(tag, str):
        raise TypeError(f"{record_type.__name__} has no string wire tag")
    return tag


def schema_document(record_type: type[msgspec.Struct]) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of one record type, as plain data."""
    document: dict[str, Any] = {
        "$schema": DIALECT,
        "$comment": (
            f"Generated from {record_type.__module__}.{record_type.__qualname__} "
            "by `gputriage schemas --write`; do not edit."
        ),
        **json_schema(record_type),
    }
    return document


def render(document: dict[str, Any]) -> str:
    """Stable text: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def schema_documents() -> dict[str, str]:
    """Every document, as ``{file name: text}``, in a fixed order."""
    return {
        f"{wire_tag(record_type)}.json": render(schema_document(record_type))
        for record_type in RECORD_TYPES
    }


def write_documents(directory: Path = DOCUMENT_DIR) -> list[str]:
    """(Re)write every document whose text changed; return the names written.

    Files in ``directory`` that no record type produces are left alone: removing
    a published schema is a decision for a human, not a side effect.
    """
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in schema_documents().items():
        path = directory / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8", newline="\n")
            written.append(name)
    return written


def drifted_documents(directory: Path = DOCUMENT_DIR) -> list[str]:
    """Names of documents that are missing or differ from what the types generate."""
    drifted = []
    for name, text in schema_documents().items():
        path = directory / name
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            drifted.append(name)
    return drifted
