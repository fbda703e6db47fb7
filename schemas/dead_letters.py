"""The dead-letter record: a Kafka record (or a connector's input) that could not be used, and why.

Errors are values, not exceptions: a record that does not decode is published here with
its coordinates and the reason, under its own key, and processing goes on. Connectors use
it for input that never was a Kafka record: ``topic`` names the source
(``kubernetes/pods``, ``kmsg:/dev/kmsg``, the scrape URL...), ``partition`` is -1, and
``offset`` a position in that source, else -1.

Trap: key and value are kept byte for byte, so in JSON ``bytes`` fields are base64 (a
garbage record is often not UTF-8, and a text field would mangle exactly the bytes someone
needs): decode with :func:`schemas.codec.decode_dead_letter`.
docs/operations.md, design notes: the dead-letter record.
"""

from __future__ import annotations

from typing import Final

import msgspec


class DeadLetter(
    msgspec.Struct, frozen=True, kw_only=True, tag_field="schema", tag="dead_letter.v1"
):
    """A record that could not be processed: where it was, why, and its original bytes."""

    topic: str
    """The topic the record was read from, or a connector's source (see above)."""
    partition: int
    """-1 for a connector's source."""
    offset: int
    """The record's offset, or its position in a connector's source (-1: none)."""
    reason: str
    """Why it failed, one line (e.g. ``Expected `int`, got `str```)."""
    field: str = ""
    """The JSON path of the offending field, e.g. ``$.code``, when known."""
    key: bytes | None = None
    """The original record key (base64 in JSON); null when the record had none."""
    value: bytes | None = None
    """The original record value (base64 in JSON); null for a tombstone."""
    timestamp_ms: int | None = None
    """The original record's Kafka timestamp, milliseconds since the epoch."""
    value_size: int | None = None
    """Set when ``value`` was cut to fit (:func:`schemas.codec.fitted_dead_letter`):
    the original value's size in bytes. ``value`` then holds only the head of it."""
    value_sha256: str = ""
    """Set with ``value_size``: the SHA-256 of the whole original value (hex), to find
    the record again in the source or prove two letters are the same record."""


MAX_LETTER_BYTES: Final = 1_000_000
"""The default budget of one encoded dead letter: under Kafka's default 1 MiB
``max.request.size`` / ``message.max.bytes`` with room for the record's key, headers
and batch overhead."""
