"""Small state files that let a node-local connector resume where it stopped.

Each node-local reader keeps one msgspec struct as JSON, written only after what it covers
was acknowledged by Kafka. Traps handled here, once: the file is replaced atomically
(temp file, ``fsync``, ``rename``, ``fsync`` of the directory); the temp file has a unique
name (``mkstemp``: a fixed name let two writers clobber each other and wrote through a
planted symlink); one writer per file (:class:`StateLock`, an ``flock`` on ``NAME.lock``,
else :class:`StateInUse` naming the holder's pid); a file that does not decode raises
:class:`~schemas.codec.RecordError` and the caller decides; a file that cannot be used at
all raises :class:`StateError`, one line naming the file and the OS's reason (never an
``OSError`` naming the lock or temp file), at start and mid-run alike.
In full: docs/connectors.md, design notes: connectors/state.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

import msgspec

from connectors.bounded import read_small
from schemas.codec import RecordError, decode_as, encode

S = TypeVar("S", bound=msgspec.Struct)


class StateError(RuntimeError):
    """A state file that cannot be used: one line, naming the file and the OS's reason."""


def _reason(exc: OSError, path: str | Path) -> str:
    """The OS's reason, naming the file it is about unless that is the state file itself.

    Trap: ``mkdir`` of a directory whose name a plain file holds says "File exists",
    which reads as if nothing were wrong: it is said as "is not a directory".
    """
    name = os.fsdecode(exc.filename) if exc.filename is not None else None
    if isinstance(exc, FileExistsError) and name is not None and not os.path.isdir(name):
        return f"{name} is not a directory"
    reason = exc.strerror or str(exc)
    return f"{name}: {reason}" if name is not None and name != os.fspath(path) else reason


def load_state(path: str | Path, kind: type[S]) -> S | None:
    """The saved state, or ``None`` when there is none; ``RecordError`` if it does not decode.

    :class:`StateError` when it cannot be read. The read is bounded
    (:func:`connectors.bounded.read_small`): a state path pointed at ``/dev/zero``
    or a log is refused at once instead of filling memory.
    """
    try:
        data = read_small(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StateError(f"cannot read state file {path}: {_reason(exc, path)}") from None
    try:
        return decode_as(data, kind)
    except RecordError as exc:
        raise RecordError(f"state file {path}: {exc}") from None


class StateInUse(StateError):
    """Another process holds this state file's lock: two writers of one position."""


class StateLock:
    """An exclusive advisory lock on ``<state file>.lock``, held until :meth:`close`.

    ``flock`` locks belong to the open file: they go away when the process dies
    (even by SIGKILL), so a crashed reader never leaves a stale lock behind. The
    lock file holds the holder's pid, for the refusal message only.

    Taking the lock is the first thing every state file's user does, so this is where
    its directory is made and where an unusable one is found (:class:`StateError`),
    before anything is read or sent.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(f"{path}.lock")
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, flags, 0o600)
        except OSError as exc:
            raise StateError(f"cannot use state file {path}: {_reason(exc, path)}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StateInUse(
                f"state file {path} is in use by another process (pid {holder}): "
                "give each reader its own --state-path file"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError as exc:  # a full disk: the write names no file, so name the lock
            os.close(fd)
            reason = exc.strerror or str(exc)
            raise StateError(f"cannot use state file {path}: {self.path}: {reason}") from None
        self._fd: int | None = fd

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def save_state(path: str | Path, state: msgspec.Struct) -> None:
    """Replace the state file atomically: a unique temporary file, ``fsync``, ``rename``."""
    target = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(encode(state) + b"\n")
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory
        directory = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


def _loop_time() -> float:
    """The running loop's clock, the one the publish loop's sleeps follow (a test's fake
    clock, looptime, moves both); outside a loop (a reader polled by hand) ``time.monotonic``,
    which is what asyncio's own loop reads in production."""
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        return time.monotonic()


class StateFile(Generic[S]):
    """One source's state file: loaded once at start, saved after each delivered batch.

    Saving costs two ``fsync`` calls. A batch that published something is saved
    at once (its records must not be sent again after a restart); a batch of
    records that published nothing (kernel noise, about 99% of a busy node's
    log) is saved at most every ``quiet_every_seconds``: after a crash those records
    are read again and dropped again, which costs nothing but a little CPU.
    Trap: the interval starts at the first save, not here: readers are built before
    the loop runs, and a clock read now would be another clock than the saves'.
    """

    def __init__(
        self,
        path: str | Path,
        kind: type[S],
        *,
        quiet_every_seconds: float = 5.0,
        clock: Callable[[], float] = _loop_time,
    ) -> None:
        self.path = Path(path)
        self.lock = StateLock(self.path)  # makes the directory: fails at start, not mid-run
        """Held for the life of this object (:meth:`close`): one writer per file."""
        self.kind = kind
        self.error: RecordError | None = None
        """Why the saved state was unusable (the source starts over), if it was."""
        self._quiet_every_seconds = quiet_every_seconds
        self._clock = clock
        self._saved_at: float | None = None

    def load(self) -> S | None:
        """The saved state; ``None`` when there is none or it does not decode (``error``).

        :class:`StateError` when it cannot be read at all (see the module).
        """
        try:
            return load_state(self.path, self.kind)
        except RecordError as exc:
            self.error = exc
            return None

    def save(self, state: msgspec.Struct | None, *, published: bool) -> None:
        """Save ``state`` (after its batch was acknowledged); see the class for when.

        :class:`StateError` when it cannot be written (a full disk): fatal to the caller.
        """
        if state is None:
            return
        now = self._clock()
        if self._saved_at is None:
            self._saved_at = now
        if published or now - self._saved_at >= self._quiet_every_seconds:
            try:
                save_state(self.path, state)
            except OSError as exc:  # the temporary file's name would only confuse
                reason = exc.strerror or str(exc)
                raise StateError(f"cannot save state file {self.path}: {reason}") from None
            self._saved_at = now

    def close(self) -> None:
        """Release the lock (the process exiting does it too)."""
        self.lock.close()
