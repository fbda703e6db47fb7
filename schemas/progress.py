"""Source progress on the wire: two Kafka record headers, and how to read them.

Every raw record says who sent it (``gputriage-source``) and how far that sender has delivered in
event time (``gputriage-progress``: integer ms since the epoch, absent for none yet, ``end`` once it
has ended); a quiet source heartbeats a ``tick.v1`` with the same headers. The processor's watermark
is the least progress of the sources it hears, so an old event delivered slowly meets its own
source's watermark, not the worker's clock. Why headers, not an event field: progress is a fact of
the transport, the events are the core's contract, and a consumer that ignores headers pays nothing.

Traps: a malformed header makes the record header-less, never fatal; progress vouches per
topic-partition, not per source (Kafka orders nothing across partitions); a source first *announces*
a new partition (``gputriage-partitions``) at its old progress, so no worker finds that partition's
first record late; integer milliseconds, since floats round differently on the two sides.
docs/detection.md, design notes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Final

DEFAULT_GRACE_SECONDS: Final = 0.5
"""How far behind the newest event time the watermark trails by default (the core's
``grace_seconds``): declared here, where both the core's configuration and the
producer's router (which must know what the engine will call late) can read it."""

SOURCE_HEADER: Final = "gputriage-source"
"""The sender's source id: stable per connector instance (family, cluster, node)."""
PROGRESS_HEADER: Final = "gputriage-progress"
"""Event time the sender has delivered up to: integer milliseconds since the epoch, ASCII."""

PARTITIONS_HEADER: Final = "gputriage-partitions"
"""On an announcement tick only: ``topic:0,1,5;other-topic:3`` (every raw topic-partition
the source has published to). Kafka topic names never contain ``:``, ``,`` or ``;``."""

Headers = Sequence[tuple[str, bytes]]
"""Kafka record headers as aiokafka gives and takes them."""

END: Final = b"end"
"""The progress of a source that has ended (``--once`` read everything): it holds nothing."""

_ABSENT: Final = object()

MALFORMED: Final = "malformed"
"""What :func:`read` returns for a record whose progress headers cannot be used."""


def encode_progress(progress: datetime) -> bytes:
    """``progress`` as the header's value (integer ms since the epoch, floored)."""
    return str(math.floor(progress.timestamp() * 1000)).encode("ascii")


def headers(source: str, progress: datetime) -> list[tuple[str, bytes]]:
    """The two headers a record of ``source`` carries, delivered up to ``progress``."""
    return [(SOURCE_HEADER, source.encode()), (PROGRESS_HEADER, encode_progress(progress))]


def read(record_headers: Iterable[tuple[str, bytes]]) -> tuple[bytes, float] | str | None:
    """``(source id, progress in epoch seconds)``, None without them, :data:`MALFORMED` if bad.

    The source id stays bytes: the processor only compares it and uses it as a dict key.
    A source id without a progress is a source that has delivered no event time yet:
    its progress is ``-inf`` (it holds the watermark while it is alive). A progress
    without a source id, an empty or non-UTF-8 id, or a progress that is not ASCII
    digits (a time before the epoch, a float) is malformed. :data:`END` is ``+inf``.
    """
    source: object = _ABSENT
    progress: object = _ABSENT
    for name, value in record_headers:
        if name == SOURCE_HEADER:
            source = value
        elif name == PROGRESS_HEADER:
            progress = value
    if source is _ABSENT and progress is _ABSENT:
        return None
    if not isinstance(source, bytes) or not source:
        return MALFORMED
    try:
        source.decode()
    except UnicodeDecodeError:
        return MALFORMED
    if progress is _ABSENT:
        return source, -math.inf
    if progress == END:
        return source, math.inf
    if not isinstance(progress, bytes) or not progress.isdigit():
        return MALFORMED
    return source, int(progress) / 1000


def encode_partitions(partitions: Iterable[tuple[str, int]]) -> bytes:
    """``{(topic, partition)}`` as :data:`PARTITIONS_HEADER`'s value, sorted (stable bytes)."""
    by_topic: dict[str, set[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, set()).add(partition)
    return ";".join(
        f"{topic}:{','.join(map(str, sorted(numbers)))}"
        for topic, numbers in sorted(by_topic.items())
    ).encode("ascii")


def read_partitions(record_headers: Iterable[tuple[str, bytes]]) -> frozenset[tuple[str, int]]:
    """The partitions an announcement names; empty without the header or when it is
    malformed (an announcement is an optimisation of safety, never a reason to fail)."""
    for name, value in record_headers:
        if name != PARTITIONS_HEADER:
            continue
        raw: object = value  # aiokafka allows None
        if not isinstance(raw, bytes):
            return frozenset()
        out: set[tuple[str, int]] = set()
        try:
            for part in raw.decode("ascii").split(";"):
                topic, _, numbers = part.partition(":")
                if not topic or not numbers:
                    return frozenset()
                for number in numbers.split(","):
                    if not number.isdigit():
                        return frozenset()
                    out.add((topic, int(number)))
        except UnicodeDecodeError:
            return frozenset()
        return frozenset(out)
    return frozenset()
