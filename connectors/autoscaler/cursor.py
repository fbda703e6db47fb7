"""Where a followed container log stands: the last kubelet timestamp and the lines at it.

Pure: :mod:`connectors.autoscaler.follow` keeps one :class:`Position` per container and
saves :class:`FollowState`. Why a timestamp *and* hashes: lines carry nanosecond times but a
reconnect's ``sinceTime`` is whole seconds, so a resumed stream repeats up to a second.
Older lines are skipped; lines at exactly the last timestamp are skipped once per
remembered hash (a multiset: two identical lines at one instant are two lines).

Traps: RFC 3339 "nano" drops trailing zeros, so times are compared as integer
nanoseconds; a line without a timestamp is handed out untracked; a new container starts
from nothing. In full: docs/connectors.md, design notes: connectors/autoscaler/cursor.py.
"""

from __future__ import annotations

import collections
import hashlib
import re
from datetime import UTC, datetime, timedelta
from typing import Final

import msgspec

_STAMP: Final = re.compile(
    rb"(?P<date>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<frac>\d{1,9}))?"
    rb"(?P<zone>Z|[+-]\d\d:\d\d) "
)
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class LogCursor(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One container's position, as saved in the state file."""

    pod: str
    """``namespace/name``."""
    uid: str
    container: str
    restart_count: int
    time_ns: int = 0
    """The kubelet timestamp of the last line handed out (0: none yet)."""
    seen: tuple[str, ...] = ()
    """Hashes of the lines handed out at ``time_ns``."""


class FollowState(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every followed container's cursor: the autoscaler connector's state file."""

    cursors: tuple[LogCursor, ...] = ()


def split_stamp(line: bytes) -> tuple[int, bytes] | None:
    """``(nanoseconds since the epoch, the rest)`` of a kubelet-stamped line, or None."""
    match = _STAMP.match(line)
    if match is None:
        return None
    try:
        whole = datetime.fromisoformat(match["date"].decode()).replace(tzinfo=UTC)
    except ValueError:
        return None
    zone = match["zone"]
    if zone != b"Z":
        sign = 1 if zone[:1] == b"+" else -1
        whole -= sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    frac = (match["frac"] or b"").ljust(9, b"0")
    delta = whole - _EPOCH
    seconds = delta.days * 86400 + delta.seconds
    return seconds * 1_000_000_000 + int(frac), line[match.end() :]


def stamp_time(time_ns: int) -> datetime:
    """The datetime (microseconds) of a timestamp in nanoseconds."""
    return _EPOCH + timedelta(microseconds=time_ns // 1000)


def since_time(time_ns: int) -> str:
    """``sinceTime`` for a resumed stream: the timestamp's second, floored (RFC 3339)."""
    return stamp_time(time_ns).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def line_hash(text: bytes) -> str:
    """A short, stable hash of a line's text (timestamp excluded)."""
    return hashlib.blake2b(text, digest_size=8).hexdigest()


class Position:
    """One container's read position: says which lines of a (resumed) stream are new."""

    def __init__(self, cursor: LogCursor) -> None:
        self.cursor = cursor
        self._seen = list(cursor.seen)
        self._skip: collections.Counter[str] = collections.Counter()

    @property
    def resumable(self) -> bool:
        """Whether a line was handed out: then a new stream starts at ``sinceTime``."""
        return self.cursor.time_ns > 0

    def restarted(self, restart_count: int) -> None:
        """A new container: its lines come after the old one's, so the filter is kept."""
        self.cursor = msgspec.structs.replace(self.cursor, restart_count=restart_count)

    def reconnected(self) -> None:
        """A new stream begins: the lines at the remembered timestamp come again once."""
        self._skip = collections.Counter(self._seen)

    def admit(self, line: bytes) -> bool:
        """Whether ``line`` (stamped) is new; if so the position moves past it."""
        split = split_stamp(line)
        if split is None:
            return True
        time_ns, text = split
        last = self.cursor.time_ns
        if time_ns < last:
            return False
        digest = line_hash(text)
        if time_ns == last:
            if self._skip[digest] > 0:
                self._skip[digest] -= 1
                return False
            self._seen.append(digest)
        else:
            self._seen = [digest]
            self._skip.clear()
        self.cursor = msgspec.structs.replace(self.cursor, time_ns=time_ns, seen=tuple(self._seen))
        return True
