"""Offline ingest: a saved kernel log (dmesg, syslog, journal JSON, kmsg dump) to XID events.

``gputriage ingest kmsg --file dmesg.log --node N`` prints the typed events a live reader
would publish: how users check the parser on their own logs. Framings may be mixed.

Traps: text framings have no sequence number, so an id hashes the raw line, and the n-th
repeat within one input gets ``:<n>`` (the same file, or a longer copy, gives the same ids;
two overlapping captures concatenated give the overlap twice); kmsg and journal ids are
never suffixed. Lines pasted from reports often carry no usable time: offline they are
stamped with an *assumed* time (``--default-time``, else the file's mtime, else the time of
reading a pipe; never ``now`` for a file), stated once on stderr (:class:`AssumedTime`).
Live readers never assume. In full: docs/connectors.md, design notes:
connectors/xid/offline.py.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import msgspec

from connectors.files import STDIN, FileReader, Record, parse_lines
from connectors.xid.lines import LineContext, Untimed
from connectors.xid.reader import LineReader
from schemas.events import XidEvent

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(slots=True)
class AssumedTime:
    """The time given to XID lines without a usable one, and which lines got it."""

    time: datetime
    basis: str
    """Where the time comes from, for the warning: ``--default-time``, the file's mtime, ..."""
    lines: int = 0
    first_line: int = 0
    first_reason: str = ""

    def note(self, line: int, reason: str) -> None:
        """Count one line stamped with :attr:`time`."""
        self.lines += 1
        if self.lines == 1:
            self.first_line, self.first_reason = line, reason

    def warning(self, name: str) -> str | None:
        """The one warning line for ``name`` (``None`` when no line needed the assumption)."""
        if not self.lines:
            return None
        plural = "" if self.lines == 1 else "s"
        stamp = self.time.isoformat().replace("+00:00", "Z")
        return (
            f"{self.lines} XID line{plural} of {name} had no usable time (first: line "
            f"{self.first_line}, {self.first_reason}); stamped {stamp}, {self.basis} "
            "(give --boot-time or --default-time to choose)"
        )


def assumed_time(source: FileReader, given: datetime | None = None) -> AssumedTime:
    """The assumption for ``source``: ``given``, else its modification time, else now."""
    if given is not None:
        return AssumedTime(given, "from --default-time")
    try:
        info = os.fstat(sys.stdin.fileno()) if source.path == STDIN else os.stat(source.path)
    except (OSError, ValueError):
        info = None
    if info is not None and stat.S_ISREG(info.st_mode):
        mtime = _EPOCH + timedelta(microseconds=info.st_mtime_ns // 1000)
        return AssumedTime(mtime, "the file's modification time")
    return AssumedTime(datetime.now(UTC).replace(microsecond=0), "the time of reading")


def read_xids(
    source: FileReader, ctx: LineContext, assumed: AssumedTime | None = None
) -> Iterator[Record]:
    """The XID events and bad XID lines of ``source``; other lines are skipped silently.

    A line without a usable time gets ``assumed.time`` and is counted in ``assumed``
    (default: :func:`assumed_time` of ``source`` and ``ctx.default_time``); the
    caller reports :meth:`AssumedTime.warning` when the input is done.
    """
    if assumed is None:
        assumed = assumed_time(source, ctx.default_time)
    seen: dict[str, int] = {}
    reader = LineReader()  # joins the lines of a fall-off message dmesg split
    for number, parsed in parse_lines(source, lambda raw: reader.parse(raw, ctx)):
        if parsed is None:
            continue
        result = parsed
        if isinstance(result, Untimed):
            assumed.note(number, result.error.reason)
            result = result.event(ctx, assumed.time)
        if isinstance(result, XidEvent) and result.id.startswith("log:"):
            count = seen.get(result.id, 0) + 1
            seen[result.id] = count
            if count > 1:
                result = _with_id(result, f"{result.id}:{count}")
        yield Record(source.name, number, result)


def _with_id(event: XidEvent, event_id: str) -> XidEvent:
    return msgspec.structs.replace(event, id=event_id)
