"""The one RFC 3339 parser of the CLI: ``tail --from``, ``--boot-time``, and the same in settings.

Kept free of click so that the run functions (:mod:`gputriage.tail`) and the
click parameter type (:class:`gputriage.cli.common.TimeType`) share it.

Traps:

* A time without an offset is refused, not taken as local time: a node's and a
  laptop's local times differ, and every incident window with them.
* ``Z`` is accepted on every Python (``fromisoformat`` learnt it only in 3.11).
* Epoch seconds (``btime`` from ``/proc/stat``) are digits only, and only where
  the caller says so: in ``tail --from`` digits are an *offset*.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Final

EARLIEST: Final = datetime(1970, 1, 1, tzinfo=UTC)
"""No earlier time is accepted: Kafka timestamps and epoch seconds start here."""
LATEST: Final = datetime(3000, 1, 1, tzinfo=UTC)
"""Times from here on are refused: far enough for any real time, and far enough from
``datetime.max`` that adding a boot-relative offset or a window cannot overflow."""


def parse_time(text: str, *, epoch_seconds: bool = False) -> datetime:
    """An RFC 3339 time with an offset (``Z`` or ``+hh:mm``); with ``epoch_seconds``, digits too.

    Only times from 1970 to 2999 (:data:`EARLIEST`, :data:`LATEST`). Raises
    ``ValueError`` with a message for the user that quotes ``text``.
    """
    value = text.strip()
    digits = epoch_seconds and value.isascii() and value.isdigit()
    try:
        if digits and len(value) <= len(str(int(LATEST.timestamp()))):
            stamp = datetime.fromtimestamp(int(value), UTC)
        elif digits:
            stamp = LATEST  # too many digits for any time: refused below, never converted
        else:
            stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, OverflowError, OSError):
        kinds = "an RFC 3339 time or epoch seconds" if epoch_seconds else "an RFC 3339 time"
        raise ValueError(f"{text!r} is not {kinds}") from None
    if stamp.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset: add Z or +hh:mm")
    try:
        in_range = EARLIEST <= stamp < LATEST
    except OverflowError:  # an offset that moves it past datetime's own range
        in_range = False
    if not in_range:
        raise ValueError(f"{text!r} is not a time from 1970 to 2999")
    return stamp
