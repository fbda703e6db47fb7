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


def parse_time(text: str, *, epoch_seconds: bool = False) -> datetime:
    """An RFC 3339 time with an offset (``Z`` or ``+hh:mm``); with ``epoch_seconds``, digits too.

    Raises ``ValueError`` with a message for the user that quotes ``text``.
    """
    value = text.strip()
    try:
        if epoch_seconds and value.isdigit():
            return datetime.fromtimestamp(int(value), UTC)
        stamp = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except (ValueError, OverflowError):
        kinds = "an RFC 3339 time or epoch seconds" if epoch_seconds else "an RFC 3339 time"
        raise ValueError(f"{text!r} is not {kinds}") from None
    if stamp.tzinfo is None:
        raise ValueError(f"{text!r} has no UTC offset: add Z or +hh:mm")
    return stamp
