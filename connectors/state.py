"""Small state files that let a node-local connector resume where it stopped.

The kmsg reader (boot id + sequence number), the journal follower (cursor),
the log-file follower (inode + offset) and the dcgm poller (the last scrape)
each keep one msgspec struct as JSON in a file, written only after what it
covers was acknowledged by Kafka. Traps handled here, once:

* The file is replaced atomically (a temporary file beside it, ``fsync``,
  ``rename``, then ``fsync`` of the directory), so a crash or a power cut never
  leaves half a state file.
* A file that does not decode raises :class:`~schemas.codec.RecordError`; the
  caller decides what starting over means for its source (and logs it).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

import msgspec

from schemas.codec import RecordError, decode_as, encode

S = TypeVar("S", bound=msgspec.Struct)


def load_state(path: str | Path, kind: type[S]) -> S | None:
    """The saved state, or ``None`` when there is none; ``RecordError`` if unreadable."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    try:
        return decode_as(data, kind)
    except RecordError as exc:
        raise RecordError(f"state file {path}: {exc}") from None


def save_state(path: str | Path, state: msgspec.Struct) -> None:
    """Replace the state file atomically: a temporary file, ``fsync``, ``rename``."""
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    with open(tmp, "wb") as out:
        out.write(encode(state) + b"\n")
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, target)
    with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory
        directory = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


class StateFile(Generic[S]):
    """One source's state file: loaded once at start, saved after each delivered batch.

    Saving costs two ``fsync`` calls. A batch that published something is saved
    at once (its records must not be sent again after a restart); a batch of
    records that published nothing (kernel noise, about 99% of a busy node's
    log) is saved at most every ``quiet_every_s``: after a crash those records
    are read again and dropped again, which costs nothing but a little CPU.
    """

    def __init__(
        self,
        path: str | Path,
        kind: type[S],
        *,
        quiet_every_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)  # fail at start, not mid-run
        self.kind = kind
        self.error: RecordError | None = None
        """Why the saved state was unusable (the source starts over), if it was."""
        self._quiet_every_s = quiet_every_s
        self._clock = clock
        self._saved_at = clock()

    def load(self) -> S | None:
        """The saved state; ``None`` when there is none or it does not decode (``error``)."""
        try:
            return load_state(self.path, self.kind)
        except RecordError as exc:
            self.error = exc
            return None

    def save(self, state: msgspec.Struct | None, *, published: bool) -> None:
        """Save ``state`` (after its batch was acknowledged); see the class for when."""
        if state is None:
            return
        now = self._clock()
        if published or now - self._saved_at >= self._quiet_every_s:
            save_state(self.path, state)
            self._saved_at = now
