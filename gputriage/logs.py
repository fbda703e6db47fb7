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
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Final

from schemas import codec

FORMATS: Final = ("text", "json")
NOISY: Final = ("aiokafka", "kafka", "kubernetes_asyncio")


class LogConfigError(ValueError):
    """A ``[log]`` value that is not one of the allowed ones."""


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


def configure_logging(section: Mapping[str, Any]) -> None:
    """Set up the root logger on stderr from the ``[log]`` table."""
    unknown = set(section) - {"level", "format"}
    if unknown:
        raise LogConfigError(f"unknown key log.{sorted(unknown)[0]}")
    level_name = str(section.get("level", "info")).upper()
    level = logging.getLevelNamesMapping().get(level_name)
    if level is None:
        raise LogConfigError(f"log.level {level_name.lower()!r} is not a log level")
    fmt = str(section.get("format", "text"))
    if fmt not in FORMATS:
        raise LogConfigError(f"log.format {fmt!r} is not one of: {', '.join(FORMATS)}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if fmt == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for name in NOISY:
        logging.getLogger(name).setLevel(level if level <= logging.DEBUG else logging.WARNING)
