"""Recorded files as a source: JSON lines from a path or stdin, plain or gzip.

The offline seam every connector shares: what a live connector would publish is recorded
and replayed through the same core. Synchronous on purpose: replay is CPU-bound.

Traps handled here: gzip is detected by magic bytes, never by name, and concatenated
members read as one stream; stdin cannot seek, so the sniffed bytes are put back; line
numbers are physical (blank lines counted), as an editor shows; a corrupt gzip or a read
error ends that file with an error *value*, so a merge keeps the others; every read is
bounded (:mod:`connectors.bounded`): a line over ``MAX_LINE_BYTES`` is a dead line, no line
break within ``MAX_INPUT_BYTES`` ends the input, and :meth:`FileReader.read` refuses a
bigger input with ``InputTooLarge``.
In full: docs/connectors.md, design notes: connectors/files.py.
"""

from __future__ import annotations

import functools
import gzip
import heapq
import io
import os
import sys
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, BinaryIO, Final, NamedTuple, TypeVar

from connectors.bounded import MAX_INPUT_BYTES, MAX_LINE_BYTES, read_bounded, size_text
from schemas.codec import AnyEvent, RecordError, try_decode_event

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

STDIN = "-"
"""The path that means standard input."""

_GZIP_MAGIC = b"\x1f\x8b"
_NO_TIME = datetime.min.replace(tzinfo=UTC)

_SKIP_CHUNK: Final = 1 << 20


class _Prefixed(io.RawIOBase):
    """A non-seekable stream with the bytes already sniffed from it put back in front."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        super().__init__()
        self._head = head
        # read1 returns what a pipe has now instead of waiting to fill the request,
        # so `tail -f log | gputriage replay -` streams rather than stalls.
        self._read: Callable[[int], bytes] = getattr(rest, "read1", rest.read)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        if self._head:
            count = min(len(view), len(self._head))
            view[:count] = self._head[:count]
            self._head = self._head[count:]
            return count
        data = self._read(len(view))
        view[: len(data)] = data
        return len(data)


class FileReader:
    """One recorded file (or stdin), opened for reading lines.

    Opening happens in the constructor so that a missing or unreadable file is
    an ``OSError`` *before* any output is produced, which the CLI reports as a
    usage error. Use it as a context manager, or call :meth:`close`.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = "<stdin>" if path == STDIN else path
        self._raw: BinaryIO
        if path == STDIN:
            self._raw = sys.stdin.buffer
            self._owns_raw = False
        else:
            self._raw = open(path, "rb")  # noqa: SIM115 - closed by close()
            self._owns_raw = True
        self.size: int | None = self._disk_size()
        """Bytes on disk, or ``None`` when unknown (pipes, terminals)."""
        self._counted = 0
        self._gzip: gzip.GzipFile | None = None
        self._stream: BinaryIO = self._detect()

    def _disk_size(self) -> int | None:
        try:
            if not self._raw.seekable():
                return None
            return os.fstat(self._raw.fileno()).st_size
        except (OSError, ValueError):
            return None

    def _detect(self) -> BinaryIO:
        seekable = self._raw.seekable()
        # Seek back to where we started, not to 0: stdin redirected from a file
        # may already be positioned past bytes another reader consumed.
        start = self._raw.tell() if seekable else 0
        head = self._raw.read(len(_GZIP_MAGIC))
        base: BinaryIO
        if seekable:
            self._raw.seek(start)
            base = self._raw
        else:
            base = io.BufferedReader(_Prefixed(head, self._raw))
        if head == _GZIP_MAGIC:
            self._gzip = gzip.GzipFile(fileobj=base, mode="rb")
            return self._gzip  # type: ignore[return-value]  # a BinaryIO in all but name
        return base

    @property
    def compressed(self) -> bool:
        """Whether the data is gzip (by its magic bytes)."""
        return self._gzip is not None

    def position(self) -> int:
        """Input bytes consumed so far (compressed bytes for gzip on disk): drives progress."""
        if self.size is not None:
            try:
                return self._raw.tell()
            except (OSError, ValueError):
                return self._counted
        return self._counted

    def lines(self) -> Iterator[tuple[int, bytes | RecordError]]:
        """Yield ``(line_number, raw_line)`` for each non-blank line, line ending stripped.

        A line longer than :data:`MAX_LINE_BYTES` comes as a ``RecordError`` (a dead
        line) in its place, and reading goes on after it; an input with no line break
        within :data:`MAX_INPUT_BYTES` ends with that error. Raises
        ``OSError``/``EOFError``/``zlib.error`` if the data ends or breaks mid-stream;
        :func:`parse_lines` turns those into error values.
        """
        # iter(partial(readline, cap)) costs what plain iteration does (~0.5 us a line,
        # measured); a Python loop calling readline(cap) costs about a fifth more.
        bounded = iter(functools.partial(self._stream.readline, MAX_LINE_BYTES + 1), b"")
        for number, line in enumerate(bounded, start=1):
            self._counted += len(line)
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                error, more = self._skip_line(len(line))
                yield number, error
                if not more:
                    return
                continue
            stripped = line.strip()
            if stripped:
                yield number, stripped

    def _skip_line(self, read: int) -> tuple[RecordError, bool]:
        """Read past the rest of an over-long line (``read`` bytes of it so far), in
        bounded chunks; the dead line's error, and whether the input goes on."""
        while read <= MAX_INPUT_BYTES:
            rest = self._stream.readline(_SKIP_CHUNK)
            self._counted += len(rest)
            read += len(rest)
            if not rest or rest.endswith(b"\n"):
                length = read - 1 if rest else read  # its text, not its line break
                cap = size_text(MAX_LINE_BYTES)
                return RecordError(f"line of {length} bytes is longer than {cap}: skipped"), True
        return (
            RecordError(
                f"no line break within {size_text(MAX_INPUT_BYTES)}: not text of lines; "
                "rest of input skipped"
            ),
            False,
        )

    def read(self, limit: int | None = MAX_LINE_BYTES) -> bytes:
        """The rest of the data, decompressed (for whole-file formats such as a scrape).

        :class:`InputTooLarge` past ``limit`` bytes (``None``: no cap, for the project's
        own generated files only). Raises ``OSError``/``EOFError``/``zlib.error`` when
        the data breaks, as :meth:`lines` does.
        """
        data = (
            self._stream.read() if limit is None else read_bounded(self._stream, self.name, limit)
        )
        self._counted += len(data)
        return data

    def close(self) -> None:
        """Close the file (never stdin, which the process owns)."""
        if self._gzip is not None:
            self._gzip.close()
        if self._owns_raw:
            self._raw.close()

    def __enter__(self) -> FileReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_error(exc: OSError | EOFError | zlib.error) -> str:
    """Why a file could not be read whole, as a reason (an ``OSError``'s own words, not its
    repr: ``larger than 16 MiB``, not ``[Errno 27] larger than 16 MiB: '/dev/zero'``)."""
    if isinstance(exc, EOFError):
        return "truncated gzip stream"
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    return str(exc)


def read_lines(path: str) -> Iterator[tuple[int, bytes | RecordError]]:
    """Non-blank lines of ``path`` (``-`` for stdin) as ``(line_number, raw_bytes)``; an
    over-long line as a ``RecordError`` (see :meth:`FileReader.lines`)."""
    with FileReader(path) as source:
        yield from source.lines()


R = TypeVar("R")


class Record(NamedTuple):
    """One line of one source, decoded: an event, or the error that explains why not."""

    source: str
    line: int
    event: AnyEvent | RecordError


def parse_lines(
    source: FileReader, parse: Callable[[bytes], R]
) -> Iterator[tuple[int, R | RecordError]]:
    """``(line number, parse(line))`` for every line; an over-long line is its
    :class:`RecordError` (never parsed), and a broken stream (truncated gzip, an I/O
    error) ends it with one :class:`RecordError` instead of an exception."""
    last_line = 0
    try:
        for number, raw in source.lines():
            last_line = number
            yield number, raw if isinstance(raw, RecordError) else parse(raw)
    except (OSError, EOFError, zlib.error) as exc:
        reason = "truncated gzip stream" if isinstance(exc, EOFError) else f"unreadable: {exc}"
        yield last_line + 1, RecordError(reason)


def read_records(source: FileReader) -> Iterator[Record]:
    """Decode every line of ``source``; a broken stream ends it with one error record."""
    for number, event in parse_lines(source, try_decode_event):
        yield Record(source.name, number, event)


def merge_by_time(streams: Sequence[Iterable[Record]]) -> Iterator[Record]:
    """Interleave several sources in event-time order.

    Each source is assumed to be roughly time-ordered already: ``heapq.merge``
    never reorders within one source, so local disorder passes through for the
    core's grace window to absorb. Ties go to the earlier source (merge is
    stable), which keeps the output deterministic. An error record has no time
    of its own; it takes the time of the last good record of its source so it
    is reported near where it was found.
    """
    if len(streams) == 1:
        yield from streams[0]
        return
    keyed = [_with_time(stream) for stream in streams]
    for _, record in heapq.merge(*keyed, key=_time_of):
        yield record


def _with_time(stream: Iterable[Record]) -> Iterator[tuple[datetime, Record]]:
    last = _NO_TIME
    for record in stream:
        if not isinstance(record.event, RecordError):
            last = record.event.time
        yield last, record


def _time_of(item: tuple[datetime, Record]) -> datetime:
    return item[0]
