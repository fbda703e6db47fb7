"""Offline ingest: a saved kernel log (dmesg, syslog, journal JSON, kmsg dump) to XID events.

``gputriage ingest kmsg --file dmesg.log --node N`` uses this to print the
typed events a live reader would publish: how users check the parser on their
own logs (DESIGN §4, principle 9). Lines of any framing may be mixed in one
file (:mod:`connectors.xid.lines`); plain or gzip, or stdin, via
:class:`connectors.files.FileSource`.

Trap: text framings have no sequence number, so an event's id is a hash of
the raw line. Identical lines do occur (``dmesg -T`` has one-second
resolution, and a burst of XID 13 repeats the same text), so the n-th
repetition of such an id within one input gets ``:<n>`` appended. Reading the
same file again therefore gives the same ids, and so does a longer copy of the
same log (the earlier lines keep theirs). The other side of the trade: two
overlapping captures concatenated into one file give the overlap twice, with
distinct ids. kmsg (``--boot-id``) and journal ids name the record itself and
are never suffixed, so there a repeated record keeps its id and deduplicates.
"""

from __future__ import annotations

from collections.abc import Iterator

import msgspec

from connectors.files import FileSource, Record, parse_lines
from connectors.xid.lines import LineContext, parse_line
from schemas.events import XidEvent


def read_xids(source: FileSource, ctx: LineContext) -> Iterator[Record]:
    """The XID events and bad XID lines of ``source``; other lines are skipped silently."""
    seen: dict[str, int] = {}
    for number, parsed in parse_lines(source, lambda raw: parse_line(raw, ctx)):
        if parsed is None:
            continue
        result = parsed
        if isinstance(result, XidEvent) and result.id.startswith("log:"):
            count = seen.get(result.id, 0) + 1
            seen[result.id] = count
            if count > 1:
                result = _with_id(result, f"{result.id}:{count}")
        yield Record(source.name, number, result)


def _with_id(event: XidEvent, event_id: str) -> XidEvent:
    return msgspec.structs.replace(event, id=event_id)
