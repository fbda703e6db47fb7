"""Offline ingest: a saved cluster-autoscaler or Karpenter log to ``autoscaler.v1`` records.

``gputriage ingest autoscaler --file ca.log --cluster C`` prints what a live reader
would publish, one JSON line per record (:mod:`connectors.autoscaler.lines` does the
parsing; wrappers and formats may be mixed in one file). Lines that state no fact are
*unrecognised*: counted (:class:`Counts`), never printed. A klog line that cannot be
read is a bad line, reported like the other ``ingest`` verbs' bad lines.

klog has no year: the caller gives a reference time (``--reference-time``, default
the file's modification time, for a pipe the time of reading), and each line takes the
year that puts it nearest; ``--year Y`` puts every line in year Y. Ids hash the file's
name, the line number and the line, so reading the same file twice gives the same ids.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from connectors.autoscaler.lines import LineContext, parse_line
from connectors.files import STDIN, FileReader, Record, parse_lines
from schemas.codec import RecordError


@dataclass(slots=True)
class Counts:
    """What one input held."""

    lines: int = 0
    records: int = 0
    unrecognised: int = 0
    bad: int = 0


def year_reference(year: int) -> datetime:
    """A reference time that puts every ``mmdd`` in ``year`` (its middle)."""
    return datetime(year, 7, 2, tzinfo=UTC)


def read_autoscaler(source: FileReader, ctx: LineContext, counts: Counts) -> Iterator[Record]:
    """The records and bad lines of ``source``; unrecognised lines are only counted."""
    for number, parsed in parse_lines(source, lambda raw: raw):
        counts.lines += 1
        result = parsed if isinstance(parsed, RecordError) else parse_line(parsed, ctx, number)
        if isinstance(result, RecordError):
            counts.bad += 1
            yield Record(source.name, number, result)
            continue
        if not result:
            counts.unrecognised += 1
            continue
        for event in result:
            counts.records += 1
            yield Record(source.name, number, event)


def default_reference(source: FileReader) -> datetime:
    """The file's modification time (the log was written before it), else now."""
    try:
        info = os.fstat(sys.stdin.fileno()) if source.path == STDIN else os.stat(source.path)
    except (OSError, ValueError):
        info = None
    if info is not None and stat.S_ISREG(info.st_mode):
        return datetime.fromtimestamp(info.st_mtime, UTC)
    return datetime.now(UTC)
