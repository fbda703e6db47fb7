"""Following kernel messages in the systemd journal, where ``/dev/kmsg`` is out of reach.

Runs ``journalctl -o json --follow _TRANSPORT=kernel`` and parses its lines with the one
parser (:func:`connectors.xid.lines.parse_line`). The journal's cursor is the position,
saved with the boot id after acknowledgement and passed back as ``--after-cursor``.

Traps: ``journalctl -k`` implies ``-b``, and resuming after a reboot would skip the end of
the previous boot, where the XIDs that led to it are: so ``_TRANSPORT=kernel`` (``-b`` only
on a first start); ``_BOOT_ID`` is undashed hex, ``/proc``'s a UUID (both normalised; a new
boot is a ``Rebooted`` event); the key/value separator differs between systemd versions;
only entries containing ``Xid`` are decoded, and one last entry per chunk for its cursor;
if ``journalctl`` exits, the source ends and the DaemonSet restarts it from the cursor.
In full: docs/connectors.md, design notes: connectors/xid/journal.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Final

import msgspec

from connectors.source import Batch, DeadLine
from connectors.state import StateFile
from connectors.xid.kmsg import EPOCH, ReadStats, canonical_boot_id, reboot_event
from connectors.xid.lines import LineContext, parse_line
from connectors.xid.paths import JOURNALCTL as JOURNALCTL  # noqa: PLC0414 - re-exported
from schemas import codec
from schemas.codec import RecordError
from schemas.events import KubeEvent

_BOOT_KEY: Final = b'"_BOOT_ID"'
_CHUNK: Final = 1 << 16


class JournalState(msgspec.Struct, frozen=True, kw_only=True):
    """The journal cursor of the last entry handled, and the boot it belonged to."""

    cursor: str
    boot_id: str


def journal_command(
    executable: str, cursor: str, *, follow: bool, directory: str = ""
) -> list[str]:
    """The ``journalctl`` command line: resume after ``cursor``, or start at this boot."""
    command = [executable, "-o", "json", "--no-pager", "-q"]
    if directory:
        command += ["-D", directory]
    command += ["--after-cursor", cursor] if cursor else ["-b"]
    if follow:
        command.append("--follow")
    command.append("_TRANSPORT=kernel")
    return command


class JournalReader:
    """Kernel entries from ``journalctl``, as batches of events, resuming at the saved cursor."""

    def __init__(
        self,
        *,
        node: str,
        cluster: str,
        state_path: str | Path,
        boot_id: str,
        executable: str = JOURNALCTL,
        directory: str = "",
        follow: bool = True,
    ) -> None:
        self.stats = ReadStats()
        self.name = "journal"
        self.state_file = StateFile(state_path, JournalState)
        self.context = LineContext(node=node, cluster=cluster)
        saved = self.state_file.load()
        self.state_error = self.state_file.error
        self.cursor = saved.cursor if saved else ""
        self.boot_id = saved.boot_id if saved else canonical_boot_id(boot_id)
        self.command = journal_command(executable, self.cursor, follow=follow, directory=directory)
        self._process: asyncio.subprocess.Process | None = None
        self._status: int | None = None
        self._rest = b""

    async def start(self) -> None:
        """Start ``journalctl`` (``OSError`` if it cannot be run)."""
        self._process = await asyncio.create_subprocess_exec(
            *self.command, stdout=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL
        )

    async def next_batch(self, wait_seconds: float) -> Batch | None:
        """What ``journalctl`` printed within ``wait_seconds``; ``None`` once it has exited."""
        process = self._process
        if process is None or process.stdout is None:
            raise RuntimeError("JournalReader is not started")
        try:
            data = await asyncio.wait_for(process.stdout.read(_CHUNK), wait_seconds)
        except TimeoutError:
            return Batch()
        if not data:
            return None
        *lines, self._rest = (self._rest + data).split(b"\n")
        return self._batch([line for line in lines if line.strip()])

    def _batch(self, lines: Sequence[bytes]) -> Batch:
        batch = Batch(records=len(lines))
        for line in lines:
            self.stats.records += 1
            boot = _boot_of(line)
            if boot and boot != self.boot_id:
                batch.events.append(self._reboot(boot, line))
            result = parse_line(line, self.context)
            if result is None:
                continue
            if isinstance(result, RecordError):
                self.stats.bad += 1
                batch.dead.append(DeadLine(line, result, None))
                continue
            self.stats.xids += 1
            batch.events.append(result)
        if lines:  # progress: the last entry's journal time (decoded once per chunk)
            last = lines[-1]
            batch.progress = _entry_time(last) if b"__REALTIME_TIMESTAMP" in last else None
        cursor = _last_cursor(lines)
        if cursor:
            self.cursor = cursor
            batch.state = JournalState(cursor=cursor, boot_id=self.boot_id)
        return batch

    def _reboot(self, boot: str, line: bytes) -> KubeEvent:
        previous, self.boot_id = self.boot_id, boot
        self.stats.reboots += 1
        return reboot_event(self.context, boot, previous, _entry_time(line))

    def commit(self, batch: Batch) -> None:
        """Save the batch's cursor: only after its events and dead letters are acknowledged."""
        self.state_file.save(batch.state, published=bool(batch.events or batch.dead))

    async def close(self) -> None:
        """Stop ``journalctl`` (it follows forever) and reap it; release the state lock."""
        self.state_file.close()
        process, self._process = self._process, None
        if process is None:
            return
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        self._status = await process.wait()

    @property
    def exit_status(self) -> int | None:
        """``journalctl``'s exit status once it has ended (negative: killed by that signal)."""
        if self._process is not None:
            return self._process.returncode
        return self._status


def _boot_of(line: bytes) -> str:
    """The entry's ``_BOOT_ID`` without decoding the JSON (``"K":"v"`` or ``"K" : "v"``)."""
    key = line.find(_BOOT_KEY)
    if key < 0:
        return ""
    start = line.find(b'"', key + len(_BOOT_KEY)) + 1
    end = line.find(b'"', start) if start > 0 else -1
    return canonical_boot_id(line[start:end].decode("ascii", "replace")) if end > start else ""


def _decode(line: bytes) -> dict[str, Any]:
    try:
        obj = codec.loads(line)
    except RecordError:
        return {}
    return obj if isinstance(obj, dict) else {}


def _last_cursor(lines: Sequence[bytes]) -> str:
    for line in reversed(lines):
        cursor = _decode(line).get("__CURSOR")
        if isinstance(cursor, str) and cursor:
            return cursor
    return ""


def _entry_time(line: bytes) -> datetime:
    stamp = _decode(line).get("__REALTIME_TIMESTAMP")
    text = str(stamp) if isinstance(stamp, str | int) else ""
    return EPOCH + timedelta(microseconds=int(text) if text.isdigit() and len(text) < 18 else 0)
