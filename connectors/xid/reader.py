"""Kernel-log lines read in order: :func:`~connectors.xid.lines.parse_line_or_untimed`
plus the one kernel message the text tools split over lines.

The driver's "fallen off the bus" probe message is one ``printk`` of three lines;
``/dev/kmsg`` and the journal keep it whole, a text log does not. Only the last line says
what happened, and only the first names the GPU and (dmesg) the time. A
:class:`LineReader` remembers a header line for the next few lines and parses the fall-off
line that names no GPU joined with them, so its record has the header's bus id and time.

Trap: one reader per stream of lines (one file): its memory is that stream's order.
In full: docs/connectors.md, design notes: connectors/xid/reader.py.
"""

from __future__ import annotations

from typing import Final

from connectors.xid import falloff
from connectors.xid.lines import (
    FALL_OFF_CODE,
    MARKER,
    LineContext,
    Untimed,
    parse_line_or_untimed,
)
from schemas.codec import RecordError
from schemas.events import XidEvent

SPAN: Final = 4
"""Lines after a header that may still end its message (the driver's is three in all)."""


class LineReader:
    """Parses one stream's lines in order, joining a split fall-off message."""

    __slots__ = ("_lines",)

    def __init__(self) -> None:
        self._lines: list[bytes] = []
        """The pending header line and the lines after it (empty: none pending)."""

    def parse(self, raw: bytes, ctx: LineContext) -> XidEvent | RecordError | Untimed | None:
        """The result of ``raw`` (``None`` for a header line: its message is not over)."""
        lines = self._lines
        if falloff.HEADER_MARKER in raw and falloff.MARKER not in raw:
            self._lines = [raw]  # the header: its message is not over
            return None
        result = parse_line_or_untimed(raw, ctx)
        if not lines:
            return result
        if len(lines) > SPAN:
            self._lines = []
            return result
        if not _unnamed_fall_off(raw, result):
            lines.append(raw)
            return result
        self._lines = []
        joined = lines[0] + b"".join(b"\n" + _message(line) for line in (*lines[1:], raw))
        whole = parse_line_or_untimed(joined, ctx)
        return whole if whole is not None else result


def _unnamed_fall_off(raw: bytes, result: XidEvent | RecordError | Untimed | None) -> bool:
    """A fall-off line that names no GPU: the end of a pending header's message."""
    if MARKER in raw:
        return False
    if isinstance(result, Untimed):
        return result.fields.code == FALL_OFF_CODE and not result.fields.pci_bus_id
    if isinstance(result, XidEvent):
        return result.code == FALL_OFF_CODE and not result.pci_bus_id
    return isinstance(result, RecordError) and falloff.MARKER in raw


def _message(line: bytes) -> bytes:
    """A continuation line from its ``NVRM:`` on (its own prefix repeats the header's)."""
    at = line.find(b"NVRM:")
    return line[at:] if at >= 0 else line.strip()
