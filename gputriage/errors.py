"""The one error line every ``gputriage`` command prints: ``gputriage: error: <message>``.

Kept out of :mod:`gputriage.cli` so that the run functions (``run_tail``,
``run_worker``, the demo) print the same line without importing click.

The exit statuses live here too, for the same reason: :data:`USAGE_ERROR` (2) is
for a user's mistake only (an option, a missing file, a bad setting);
:data:`FAILED` (1) for a command that ran and failed (Kafka unreachable, a state
file that cannot be saved, output that cannot be written): a supervisor that
restarts on 1 but not on 2 then does the right thing.

Trap: messages from libraries (aiokafka, msgspec, the OS) may hold newlines;
the line is collapsed to one, because log shippers and ``2>&1 | grep`` read
one line per error.
"""

from __future__ import annotations

import errno
import os
import sys
from typing import IO, Final

PROG: Final = "gputriage"

FAILED: Final = 1
"""The command ran and failed (or found bad input lines, drifted documents...)."""
USAGE_ERROR: Final = 2
"""A user's mistake: an option, a missing file, a setting. Never a runtime failure."""
INTERRUPTED: Final = 130
"""Ctrl-C, as a shell reports SIGINT."""


def error(message: str, stream: IO[str] | None = None) -> None:
    """Print ``gputriage: error: <message>`` on ``stream`` (default: stderr), on one line."""
    text = " ".join(message.split())
    print(f"{PROG}: error: {text}", file=stream or sys.stderr)


_WRITE_ERRORS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO})
"""What a write fails with when the disk, a quota or the device gives out."""


def os_error_text(exc: OSError) -> str:
    """An ``OSError`` as one line: the file it names and the OS's reason, or for one that
    names none and is a write's (stdout to a full disk or ``/dev/full``) ``write error:
    <reason>``, as ``cat`` and ``sort`` say it."""
    reason = exc.strerror or str(exc)
    if exc.filename is not None:
        return f"{os.fsdecode(exc.filename)}: {reason}"
    return f"write error: {reason}" if exc.errno in _WRITE_ERRORS else reason
