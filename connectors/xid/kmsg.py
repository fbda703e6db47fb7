"""Reading ``/dev/kmsg`` exactly once across restarts and reboots.

:class:`KmsgReader` turns the device's records into batches of events and dead letters
and remembers how far it got in a small state file; the caller commits only after the
broker acknowledged, so a crash re-sends one batch (ids ``kmsg:<node>:<boot id>:<seq>``
make that harmless) and never loses one.

Traps: one ``read()`` is one record (a short buffer is ``EINVAL``); a fresh open starts at
the oldest record and cannot seek, so a restart skips by ``seq``; overwritten records show
as ``seq`` gaps (``EPIPE``), counted, not recoverable; ``seq`` restarts each boot, so it
means nothing without the boot id; the event time is ``btime`` plus ``usec``; the device is
polled, not ``epoll``-ed; the state file is replaced atomically. The device's behaviour in
full: docs/connectors.md, design notes: connectors/xid/kmsg.py.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

import msgspec

from connectors.bounded import read_small
from connectors.source import Batch, DeadLine
from connectors.state import StateFile
from connectors.xid import falloff
from connectors.xid.lines import MARKER, LineContext, event_from_kmsg, parse_kmsg_record
from connectors.xid.paths import BOOT_ID_PATH as BOOT_ID_PATH  # noqa: PLC0414 - re-exported
from connectors.xid.paths import DEFAULT_STATE as DEFAULT_STATE  # noqa: PLC0414 - re-exported
from connectors.xid.paths import DEVICE as DEVICE  # noqa: PLC0414 - re-exported
from connectors.xid.paths import PROC_STAT as PROC_STAT  # noqa: PLC0414 - re-exported
from schemas.codec import AnyEvent, RecordError
from schemas.events import KubeEvent, ObjectRef

READ_SIZE: Final = 16384
REBOOT_REASON: Final = "Rebooted"
"""The reason kubelet gives its own reboot event; consumers already know it."""
REBOOT_SOURCE: Final = "gputriage-kmsg"
EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class KmsgState(msgspec.Struct, frozen=True, kw_only=True):
    """What survives a restart: the boot and the last sequence number handled in it."""

    boot_id: str
    seq: int
    """The last record handled (published or deliberately skipped); -1 for none."""


def read_boot_id(path: str | Path = BOOT_ID_PATH) -> str:
    """The current boot's id (a UUID the kernel draws at every boot)."""
    return canonical_boot_id(read_small(path).decode("ascii"))


def read_boot_time(path: str | Path = PROC_STAT) -> datetime:
    """Boot time from ``btime`` in ``/proc/stat`` (whole seconds since the epoch)."""
    for line in read_small(path).decode("ascii").splitlines():
        if line.startswith("btime "):
            return datetime.fromtimestamp(int(line.split()[1]), UTC)
    raise ValueError(f"{path}: no btime line")


def canonical_boot_id(raw: str) -> str:
    """Boot ids as ``/proc`` writes them (a dashed UUID); journald drops the dashes."""
    text = raw.strip().lower()
    if len(text) == 32 and "-" not in text:
        return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
    return text


def reboot_event(ctx: LineContext, boot_id: str, previous: str, time: datetime) -> KubeEvent:
    """A reboot as kubelet reports its own (reason ``Rebooted``); one id per node and boot."""
    node = ctx.node
    return KubeEvent(
        id=f"reboot:{node}:{boot_id}",
        cluster=ctx.cluster,
        time=time,
        node=node,
        reason=REBOOT_REASON,
        message=f"Node {node} has been rebooted, boot id: {boot_id} (previous boot id: {previous})",
        type="Warning",
        involved=ObjectRef(kind="Node", name=node),
        source=REBOOT_SOURCE,
    )


@dataclass
class ReadStats:
    """Counters for metrics and the final summary."""

    records: int = 0
    """Records read from the device (including ones already handled before a restart)."""
    replayed: int = 0
    """Records at or below the saved sequence number: handled before a restart, skipped."""
    skipped: int = 0
    """Records lost to the ring buffer (sequence gaps): never seen, cannot be recovered."""
    overwritten: int = 0
    """``EPIPE`` reads: the ring buffer overwrote records before we read them."""
    xids: int = 0
    bad: int = 0
    reboots: int = 0


class KmsgDevice:
    """``/dev/kmsg`` (or a file or FIFO in its record format), opened non-blocking."""

    def __init__(self, path: str | Path = DEVICE) -> None:
        self.path = str(path)
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._rest = b""
        self._ready: list[bytes] = []
        self.overwritten = 0

    def read_records(self, limit: int) -> list[bytes]:
        """Up to ``limit`` complete records available now (never blocks).

        One ``read()`` of a file or FIFO may return many records; those beyond
        ``limit`` wait for the next call.
        """
        records = self._ready
        while len(records) < limit:
            try:
                data = os.read(self._fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    self.overwritten += 1
                    continue
                raise
            if not data:
                break
            records.extend(self._split(data))
        self._ready = records[limit:]
        return records[:limit]

    def _split(self, data: bytes) -> list[bytes]:
        """Whole lines, dictionary lines dropped; a partial last line waits for more data."""
        data = self._rest + data
        *lines, self._rest = data.split(b"\n")
        return [line for line in lines if line and not line.startswith(b" ")]

    def close(self) -> None:
        """Close the device (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class KmsgReader:
    """Turns the records of one boot's kmsg into batches, resuming from the state file.

    Opening the device happens here, so a missing or unreadable device is an
    ``OSError`` before anything is published. If publishing a batch fails, drop
    this source (end the process): it has already moved past that batch in
    memory, and only a new source, starting from the state file, re-reads it.
    """

    def __init__(
        self,
        *,
        node: str,
        cluster: str,
        state_path: str | Path,
        boot_id: str,
        boot_time: datetime,
        device: str | Path = DEVICE,
    ) -> None:
        self.stats = ReadStats()
        self.name = f"kmsg:{device}"
        """Where dead letters say they came from."""
        self.state_file = StateFile(state_path, KmsgState)
        self.boot_id = boot_id
        self.boot_time = boot_time
        self.context = LineContext(node=node, cluster=cluster, boot_time=boot_time, boot_id=boot_id)
        saved = self.state_file.load()
        self.state_error = self.state_file.error
        self.previous_boot = saved.boot_id if saved and saved.boot_id != boot_id else ""
        self._last = saved.seq if saved and saved.boot_id == boot_id else -1
        self._pending: list[AnyEvent] = []
        if self.previous_boot:
            self.stats.reboots += 1
            self._pending.append(self._reboot_event())
        self.device = KmsgDevice(device)

    @property
    def last_seq(self) -> int:
        """The last sequence number handled in this boot (-1: none yet)."""
        return self._last

    def _reboot_event(self) -> KubeEvent:
        return reboot_event(self.context, self.boot_id, self.previous_boot, self.boot_time)

    def poll(self, limit: int = 1000) -> Batch:
        """Read what is available now (at most ``limit`` records) into one batch."""
        batch = Batch(events=self._pending)
        self._pending = []
        before = self.device.overwritten
        last = self._last
        raws = self.device.read_records(limit)
        batch.records = len(raws)
        for raw in raws:
            self.stats.records += 1
            # Only the sequence number is needed for most records: split, no decoding.
            fields = raw.split(b",", 2)
            if len(fields) < 3 or not fields[1].isdigit() or len(fields[1]) > 20:
                self.stats.bad += 1
                error = RecordError("kmsg record prefix is not prio,seq,usec,flags", "prefix")
                batch.dead.append(DeadLine(raw, error, None))
                continue
            seq = int(fields[1])
            if seq <= last:
                self.stats.replayed += 1
                continue
            if seq > last + 1:
                self.stats.skipped += seq - last - 1
            last = seq
            if MARKER not in fields[2] and falloff.MARKER not in fields[2]:
                continue
            record = parse_kmsg_record(raw)
            if isinstance(record, RecordError):
                self.stats.bad += 1
                batch.dead.append(DeadLine(raw, record, seq))
                continue
            result = event_from_kmsg(record, self.context, raw=raw)
            if result is None:
                continue
            if isinstance(result, RecordError):
                self.stats.bad += 1
                batch.dead.append(DeadLine(raw, result, record.seq))
                continue
            self.stats.xids += 1
            batch.events.append(result)
        self.stats.overwritten += self.device.overwritten - before
        if raws:
            batch.progress = self._record_time(raws[-1])
        if last != self._last or (batch.events and self.previous_boot):
            batch.state = KmsgState(boot_id=self.boot_id, seq=last)
        self._last = last
        return batch

    def _record_time(self, raw: bytes) -> datetime | None:
        """The wall time of a record (boot time + ``usec``); None if its prefix is bad."""
        fields = raw.split(b";", 1)[0].split(b",", 3)
        if len(fields) < 3 or not fields[2].isdigit() or len(fields[2]) > 17:
            return None
        return self.boot_time + timedelta(microseconds=int(fields[2]))

    def commit(self, batch: Batch) -> None:
        """Save the batch's state: call only after its events and dead letters are acknowledged."""
        self.state_file.save(batch.state, published=bool(batch.events or batch.dead))

    def close(self) -> None:
        """Close the device and release the state file's lock."""
        self.device.close()
        self.state_file.close()
