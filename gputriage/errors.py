"""The one error line every ``gputriage`` command prints: ``gputriage: error: <message>``.

Kept out of :mod:`gputriage.cli` so that the run functions (``run_tail``,
``run_worker``, the demo) print the same line without importing click.

Trap: messages from libraries (aiokafka, msgspec, the OS) may hold newlines;
the line is collapsed to one, because log shippers and ``2>&1 | grep`` read
one line per error.
"""

from __future__ import annotations

import sys
from typing import IO, Final

PROG: Final = "gputriage"


def error(message: str, stream: IO[str] | None = None) -> None:
    """Print ``gputriage: error: <message>`` on ``stream`` (default: stderr), on one line."""
    text = " ".join(message.split())
    print(f"{PROG}: error: {text}", file=stream or sys.stderr)
