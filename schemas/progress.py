"""Source progress on the wire: two Kafka record headers, and how to read them.

Every raw record a connector publishes says *who* sent it and *how far* that
sender has delivered in event time::

    gputriage-source    b"kmsg:/dev/kmsg@c1/gpu-node-01"   the source id (UTF-8)
    gputriage-progress  b"1764576000123"                   event time delivered up to,
                                                           integer ms since the epoch (ASCII);
                                                           absent: none yet; b"end": the
                                                           source has ended

A source that has nothing to publish still speaks: every ``heartbeat_seconds``
it sends a ``tick.v1`` record carrying the same headers to every raw
topic-partition it has published to (:class:`connectors.publish.Publisher`).
The processor's watermark is the minimum of these progresses over the sources
it has heard recently (:class:`streams.app.pipeline.Pipeline`), so an old event
delivered slowly meets the watermark of its own source, not the worker's clock.

Why headers and not a field of every event: the events' schemas are the
contract of the correlation core (and of replay files), progress is a fact
about the transport; a header costs nothing to a consumer that ignores it, and
older records (an older connector release, a test producing raw records
directly) simply have none.

Traps:

* **Malformed is header-less, never fatal.** A value that is not ASCII digits
  (or a source id that is empty or not UTF-8) makes :func:`read` return
  :data:`MALFORMED`: the processor treats the record as header-less and counts
  it; the record itself is processed as usual.
* **Progress is a bound per topic-partition, not per source.** A record on
  partition *p* vouches only for the records of its source before it on *p*
  (Kafka orders nothing across partitions); the processor keeps one progress
  per (source, topic, partition).
* **A source announces a partition before it vouches for it.** The processor
  only knows a (source, partition) once it has read a record of it there, and
  Kafka orders nothing across partitions: a source's first record on a new
  partition *A* can be read after a later record of it on *B* whose progress
  covers it (the fetch that read *B* saw *A* before that record landed). So when
  its acknowledged records reveal a new partition, the publisher first sends a
  ``tick.v1`` with its old progress and ``gputriage-partitions`` (every raw
  topic-partition it has used) to all of them, and only then raises its progress:
  a worker reads the announcement on *B* before any progress that covers *A*'s
  record, and holds its watermark for *A* until it has heard the source there or
  read *A* to an end it fetched after the announcement (:mod:`streams.app.announced`).
* **Integer milliseconds.** Floats would round differently on the two sides;
  an event time is never finer than that in this project's sources that matter
  for grace (seconds), and the watermark only has to be a lower bound.
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
