"""Logging for long-running commands: one line per record, text or JSON.

``[log] format = "json"`` writes one JSON object per line (``ts``, ``level``, ``logger``,
``msg``, ``exc``), which shippers parse without a regex; ``text`` is for people.

Traps: library loggers (aiokafka, kubernetes-asyncio) are held at WARNING unless the level
is DEBUG (they chatter at INFO and DEBUG); during a broker outage aiokafka logs every
refused connection at ERROR (~2,000 lines in 30 s, measured), so :class:`RepeatFilter`
writes a warning or error at most once per ``[log] repeat_seconds`` for each kind, the
next saying how many were held back: a whole library is one kind, one of ours is the same
text from the same logger (one item's warning never hides another's).
docs/operations.md, design notes: logging.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal

import msgspec

from schemas import codec

NOISY: Final = ("aiokafka", "kafka", "kubernetes_asyncio")


LogFormat = Literal["text", "json"]


class LogSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[log]`` table (a sub-tree of :class:`gputriage.settings.Settings`).

    ``level`` is any standard level name in any case (``INFO``, ``debug``):
    checked in ``__post_init__``, so a typo fails at load with its path
    (``log.level: 'verbose' is not a log level``), not when logging starts.
    """

    level: str = "info"
    format: LogFormat = "text"
    repeat_seconds: Annotated[float, msgspec.Meta(ge=0, le=86400)] = 30.0
    """A warning or error of a kind written less than this long ago is counted, not
    written (:class:`RepeatFilter`); 0 writes every one."""

    def __post_init__(self) -> None:
        if self.level.upper() not in logging.getLevelNamesMapping():
            raise ValueError(f"level: {self.level.lower()!r} is not a log level")


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, tz=UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return codec.dumps(entry).decode()


class RepeatFilter(logging.Filter):
    """Writes a warning or error at most once per ``every_seconds`` for each kind; the next one
    written after a quiet spell says how many of its kind were held back meanwhile.

    The kind of a library's record (:data:`NOISY`) is the library and the level: in an
    outage aiokafka's client, fetcher and coordinator all fail together, and one line
    says it. The kind of ours is the logger, the level and the text: an outage repeats
    the same words (``commit failed (KafkaConnectionError...)``), while the warnings
    about one item each (an incident sent again) differ and are all written. INFO and
    below always pass. ``clock`` is for tests (the loop's, under looptime).
    """

    _FORGET_AFTER: Final = 512
    """Kinds remembered before the ones quiet for a window are forgotten (and, if a
    storm of different texts fills it within one window, all of them)."""

    def __init__(self, every_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.every_seconds = every_seconds
        self._clock = clock
        self._lock = threading.Lock()  # the /metrics thread logs too
        self._seen: dict[tuple[object, ...], list[float]] = {}
        """kind -> [when its last written record was, how many were held since]"""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or self.every_seconds <= 0:
            return True
        family = record.name.partition(".")[0]
        kind = (
            (family, record.levelno)
            if family in NOISY
            else (record.name, record.levelno, record.getMessage())
        )
        with self._lock:
            now = self._clock()
            seen = self._seen.get(kind)
            if seen is not None and now - seen[0] < self.every_seconds:
                seen[1] += 1
                return False
            if len(self._seen) >= self._FORGET_AFTER:
                self._seen = {
                    k: v for k, v in self._seen.items() if now - v[0] < self.every_seconds
                }
                if len(self._seen) >= self._FORGET_AFTER:
                    self._seen.clear()
            self._seen[kind] = [now, 0]
        if seen is not None and seen[1]:
            held, since = int(seen[1]), now - seen[0]
            more = "like it" if len(kind) == 3 else f"from {family}"
            record.msg = f"{record.getMessage()} ({held} more {more} in the last {since:.0f} s)"
            record.args = None
        return True


def configure_logging(settings: LogSettings) -> None:
    """Set up the root logger on stderr from the ``[log]`` settings."""
    level = logging.getLevelNamesMapping()[settings.level.upper()]
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(RepeatFilter(settings.repeat_seconds))
    handler.setFormatter(
        JsonFormatter()
        if settings.format == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in NOISY:
        logging.getLogger(name).setLevel(level if level <= logging.DEBUG else logging.WARNING)
