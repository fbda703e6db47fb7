"""Logging for long-running commands: one line per record, text or JSON.

``[log] format = "json"`` (or ``GPUTRIAGE_LOG__FORMAT=json``) writes one JSON
object per line (``ts``, ``level``, ``logger``, ``msg`` and, for an exception,
``exc``), which log shippers parse without a regex; the default ``text`` is
for people. ``[log] level`` is a standard level name.

Trap: library loggers (aiokafka, kubernetes-asyncio) log reconnect chatter at
INFO and every produced batch at DEBUG; they are held at WARNING unless the
level asked for is DEBUG, where everything is wanted.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any, Final, Literal

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


def configure_logging(settings: LogSettings) -> None:
    """Set up the root logger on stderr from the ``[log]`` settings."""
    level = logging.getLevelNamesMapping()[settings.level.upper()]
    handler = logging.StreamHandler(sys.stderr)
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
