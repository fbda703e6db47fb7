"""Following a kernel log *file* (dmesg, syslog, ``dmesg --ctime`` output) exactly once.

For nodes with no ``/dev/kmsg`` nor journal, only a file (``/var/log/kern.log``).
:class:`TextLogReader` follows it like ``tail -F``, parses complete lines with
:func:`connectors.xid.lines.parse_line`, and saves inode and byte offset only after the
batch was published: a restart re-sends nothing and skips nothing.

Traps: rotation by rename (read the old inode to its end first); by truncation (restart at
0, the lost tail counted as one gap); a restart after a rotation (the new file from its
start); a half-written line waits for the next poll; ids are positions, so a re-sent batch
keeps them and two identical lines stay two; syslog times have no year; a message split
over lines is joined by :class:`~connectors.xid.reader.LineReader`, and a rotation between
its lines loses the join, not the record. In full: docs/connectors.md, design notes:
connectors/xid/textlog.py.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import replace
from datetime import UTC, datetime, tzinfo
from pathlib import Path
from typing import IO, Final

import msgspec

from connectors.source import Batch, DeadLine
from connectors.state import StateFile
from connectors.xid.kmsg import ReadStats
from connectors.xid.lines import LineContext, Untimed
from connectors.xid.reader import LineReader
from schemas.codec import RecordError

READ_SIZE: Final = 1 << 20
MAX_LINE: Final = 64 * 1024
"""A longer "line" is not a kernel message; it is cut into dead letters, not buffered forever."""


class TextLogState(msgspec.Struct, frozen=True, kw_only=True):
    """Which file (inode) and how far (byte offset of the next unread line)."""

    inode: int
    offset: int


class TextLogReader:
    """Batches of XID events from a growing, rotating text log, resuming from the state file."""

    def __init__(
        self,
        *,
        path: str | Path,
        node: str,
        cluster: str,
        state_path: str | Path,
        boot_time: datetime | None = None,
        tz: tzinfo | None = None,
        year: int | None = None,
    ) -> None:
        self.path = Path(path)
        self.name = f"file:{self.path}"
        self.stats = ReadStats()
        self.state_file = StateFile(state_path, TextLogState)
        self.context = LineContext(
            node=node, cluster=cluster, boot_time=boot_time, tz=tz or UTC, year=year
        )
        self._fixed_year = year is not None
        self._reader = LineReader()
        saved = self.state_file.load()
        self.state_error = self.state_file.error
        self._file: IO[bytes] | None = None
        self._inode = -1
        self._offset = 0
        self._rest = b""
        self._open(resume=saved)

    # -- files -------------------------------------------------------------------------
    def _open(self, resume: TextLogState | None = None) -> None:
        """Open the path (``OSError`` if missing), at the saved offset when it is that file."""
        file = open(self.path, "rb")  # noqa: SIM115 - kept open across polls, closed in close()
        inode = os.fstat(file.fileno()).st_ino
        offset = 0
        if resume is not None and resume.inode == inode:
            size = os.fstat(file.fileno()).st_size
            offset = resume.offset if resume.offset <= size else 0
        file.seek(offset)
        if self._file is not None:
            self._file.close()
        self._file, self._inode, self._offset, self._rest = file, inode, offset, b""

    def _rotated(self) -> bool:
        """The path names another file now (renamed away and recreated)."""
        try:
            return os.stat(self.path).st_ino != self._inode
        except FileNotFoundError:  # between the rename and the new file: wait
            return False

    # -- reading ------------------------------------------------------------------------
    def poll(self, limit: int = 1000) -> Batch:
        """Read the complete lines available now (at most ``limit``) into one batch."""
        assert self._file is not None
        batch = Batch()
        if not self._fixed_year:  # syslog times have no year: a follower's is this one
            self.context = replace(self.context, year=datetime.now(self.context.tz).year)
        if self._truncated():
            self.stats.skipped += 1
            self._file.seek(0)
            self._offset, self._rest = 0, b""
        lines = self._read_lines(limit)
        if not lines and self._rotated():
            self._open()  # the old file is read to its end: go on with the new one
            lines = self._read_lines(limit)
        batch.records = len(lines)
        for offset, raw in lines:
            self.stats.records += 1
            self._add(batch, offset, raw)
        if lines:
            batch.state = TextLogState(inode=self._inode, offset=self._offset)
        return batch

    def _truncated(self) -> bool:
        assert self._file is not None
        with contextlib.suppress(OSError):
            return os.fstat(self._file.fileno()).st_size < self._offset
        return False

    def _read_lines(self, limit: int) -> list[tuple[int, bytes]]:
        """Up to ``limit`` complete lines with their start offsets; advances ``_offset``."""
        assert self._file is not None
        out: list[tuple[int, bytes]] = []
        while len(out) < limit:
            chunk = self._file.read(READ_SIZE)
            if not chunk:
                break
            data = self._rest + chunk
            position = self._offset
            *complete, rest = data.split(b"\n")
            for line in complete:
                out.append((position, line))
                position += len(line) + 1
            if len(rest) > MAX_LINE:  # a runaway "line": hand it on, do not hoard it
                out.append((position, rest))
                position += len(rest)
                rest = b""
            self._offset, self._rest = position, rest
        return out

    def _add(self, batch: Batch, offset: int, raw: bytes) -> None:
        result = self._reader.parse(raw, self.context)
        if result is None:
            return
        if isinstance(result, Untimed):  # a live line without a time is a bug to see
            result = result.error
        if isinstance(result, RecordError):
            self.stats.bad += 1
            batch.dead.append(DeadLine(raw, result, offset))
            return
        event_id = f"file:{self.context.node}:{self._inode}:{offset}"
        self.stats.xids += 1
        batch.events.append(msgspec.structs.replace(result, id=event_id))
        batch.progress = result.time  # only lines that parse carry a time we trust

    def commit(self, batch: Batch) -> None:
        """Save the batch's state: call only after its events and dead letters are acknowledged."""
        self.state_file.save(batch.state, published=bool(batch.events or batch.dead))

    def close(self) -> None:
        self.state_file.close()
        if self._file is not None:
            self._file.close()
            self._file = None
