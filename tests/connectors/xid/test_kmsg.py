"""The /dev/kmsg reader over a fake device: restarts, crashes, ring-buffer gaps and reboots.

The fake device is a regular file (or a FIFO) in kmsg's record format, read
through the same non-blocking code path as the real device. A "restart" is a
new :class:`KmsgReader` on the same state file, which reopens the device from
its oldest record, exactly as a restarted pod reopens ``/dev/kmsg``.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from connectors.source import DeadLine
from connectors.state import load_state, save_state
from connectors.xid.journal import JournalReader, JournalState
from connectors.xid.kmsg import (
    KmsgDevice,
    KmsgReader,
    KmsgState,
    read_boot_id,
    read_boot_time,
)
from schemas.codec import AnyEvent, RecordError
from schemas.events import KubeEvent, XidEvent
from tests.kafka_helpers import wait_until

BOOT_A = "5c1b7a2e-0000-4000-8000-00000000000a"
BOOT_B = "5c1b7a2e-0000-4000-8000-00000000000b"
T_A = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
T_B = datetime(2026, 11, 30, 9, 30, tzinfo=UTC)
NOISE = "usb 1-1: new high-speed USB device number 2 using xhci_hcd"


def record(seq: int, message: str, usec: int | None = None) -> str:
    return f"6,{seq},{usec if usec is not None else seq * 1000},-;{message}\n"


def xid_message(seq: int) -> str:
    """A distinct XID line per sequence number (the bus id carries the seq)."""
    return f"NVRM: Xid (PCI:0000:{seq % 256:02x}:00): 79, pid=1, name=t, seq {seq}"


def ring(seqs: range, *, every: int = 3) -> str:
    """Records for ``seqs``: every ``every``-th is an XID, the rest noise."""
    return "".join(record(s, xid_message(s) if s % every == 0 else NOISE) for s in seqs)


def source(
    device: Path, state: Path, boot_id: str = BOOT_A, boot_time: datetime = T_A
) -> KmsgReader:
    return KmsgReader(
        node="gpu-node-01",
        cluster="prod",
        state_path=state,
        boot_id=boot_id,
        boot_time=boot_time,
        device=device,
    )


def xid_seqs(events: list[AnyEvent]) -> list[int]:
    return [int(e.id.rsplit(":", 1)[1]) for e in events if isinstance(e, XidEvent)]


def test_a_batch_carries_the_time_of_its_last_record_as_progress(tmp_path: Path) -> None:
    device, state = tmp_path / "kmsg", tmp_path / "state.json"
    device.write_text(record(0, xid_message(0), usec=1_000_000) + record(1, NOISE, usec=2_500_000))
    reader = source(device, state)
    batch = reader.poll()
    # The last record published nothing, but the kernel clock got that far: that counts.
    assert batch.progress == T_A + timedelta(microseconds=2_500_000)
    reader.commit(batch)
    idle = reader.poll()
    assert idle.idle
    assert idle.progress is None, "no new record: no new information (not a step back)"
    reader.close()


def test_restart_in_the_middle_no_duplicate_no_gap(tmp_path: Path) -> None:
    device, state = tmp_path / "kmsg", tmp_path / "state.json"
    device.write_text(ring(range(30)))
    first = source(device, state)
    batch = first.poll(limit=10)
    assert xid_seqs(batch.events) == [0, 3, 6, 9]
    assert batch.state == KmsgState(boot_id=BOOT_A, seq=9)
    first.commit(batch)
    # Read further, then "crash" before the broker acknowledged: not committed.
    lost_in_flight = first.poll(limit=10)
    assert xid_seqs(lost_in_flight.events) == [12, 15, 18]
    first.close()
    assert load_state(state, KmsgState) == KmsgState(boot_id=BOOT_A, seq=9)

    # The kernel keeps logging while the pod restarts.
    with device.open("a") as out:
        out.write(ring(range(30, 40)))
    second = source(device, state)
    assert not second.previous_boot
    events: list[AnyEvent] = []
    while not (batch := second.poll(limit=7)).idle:
        events.extend(batch.events)
        second.commit(batch)
    second.close()
    seen = [0, 3, 6, 9, *xid_seqs(events)]
    assert seen == list(range(0, 40, 3)), "every XID exactly once, in order"
    assert second.stats.replayed == 10
    assert second.stats.skipped == 0
    assert load_state(state, KmsgState) == KmsgState(boot_id=BOOT_A, seq=39)
    # Ids and times come from the record itself.
    first_event = events[0]
    assert isinstance(first_event, XidEvent)
    assert first_event.id == f"kmsg:gpu-node-01:{BOOT_A}:12"
    assert first_event.time == T_A + timedelta(microseconds=12_000)

    # A third start finds nothing new.
    third = source(device, state)
    assert not third.poll().events
    assert third.stats.replayed == 40
    third.close()


def test_records_lost_to_the_ring_buffer_are_counted(tmp_path: Path) -> None:
    device, state = tmp_path / "kmsg", tmp_path / "state.json"
    save_state(state, KmsgState(boot_id=BOOT_A, seq=4))
    # While the reader was down the ring wrapped: the oldest record left is seq 9.
    device.write_text(ring(range(9, 12)) + ring(range(20, 22)))
    reader = source(device, state)
    batch = reader.poll()
    assert xid_seqs(batch.events) == [9, 21]
    assert reader.stats.skipped == (9 - 5) + (20 - 12)
    reader.close()


def test_reboot_is_reported_and_reading_restarts(tmp_path: Path) -> None:
    device, state = tmp_path / "kmsg", tmp_path / "state.json"
    device.write_text(ring(range(10)))
    before = source(device, state)
    before.commit(before.poll())
    before.close()
    assert load_state(state, KmsgState) == KmsgState(boot_id=BOOT_A, seq=9)

    # Reboot: a new boot id, and the ring starts again at seq 0.
    device.write_text(ring(range(6)))
    after = source(device, state, boot_id=BOOT_B, boot_time=T_B)
    assert after.previous_boot == BOOT_A
    batch = after.poll()
    reboot, *xids = batch.events
    assert isinstance(reboot, KubeEvent)
    assert (reboot.reason, reboot.type, reboot.node, reboot.involved.kind) == (
        "Rebooted",
        "Warning",
        "gpu-node-01",
        "Node",
    )
    assert reboot.time == T_B
    assert reboot.id == f"reboot:gpu-node-01:{BOOT_B}"
    assert BOOT_A in reboot.message
    assert BOOT_B in reboot.message
    assert xid_seqs(xids) == [0, 3]
    assert all(e.id.startswith(f"kmsg:gpu-node-01:{BOOT_B}:") for e in xids)
    assert after.stats.reboots == 1
    assert after.stats.replayed == 0
    after.commit(batch)
    after.close()
    assert load_state(state, KmsgState) == KmsgState(boot_id=BOOT_B, seq=5)

    # Restarting within the new boot reports no second reboot.
    again = source(device, state, boot_id=BOOT_B, boot_time=T_B)
    assert not again.previous_boot
    assert not again.poll().events
    again.close()


def test_reboot_with_an_empty_ring_still_moves_the_state(tmp_path: Path) -> None:
    device, state = tmp_path / "kmsg", tmp_path / "state.json"
    save_state(state, KmsgState(boot_id=BOOT_A, seq=99))
    device.write_text("")
    reader = source(device, state, boot_id=BOOT_B)
    batch = reader.poll()
    assert [type(e) for e in batch.events] == [KubeEvent]
    reader.commit(batch)
    reader.close()
    assert load_state(state, KmsgState) == KmsgState(boot_id=BOOT_B, seq=-1)


def test_bad_xid_records_become_dead_lines(tmp_path: Path) -> None:
    device, state = tmp_path / "kmsg", tmp_path / "state.json"
    device.write_text(
        record(0, "NVRM: Xid (PCI:0000:66:00): abc, pid=1")
        + "garbage without a prefix\n"
        + record(1, xid_message(1))
    )
    reader = source(device, state)
    batch = reader.poll()
    assert xid_seqs(batch.events) == [1]
    dead = [d for d in batch.dead if isinstance(d, DeadLine)]
    assert len(dead) == len(batch.dead), "the kmsg source's dead records are DeadLines"
    assert [(d.seq, d.raw[:5]) for d in dead] == [(0, b"6,0,0"), (None, b"garba")]
    assert all(isinstance(d.error, RecordError) for d in dead)
    assert reader.stats.bad == 2
    assert batch.state == KmsgState(boot_id=BOOT_A, seq=1)
    reader.close()


def test_dictionary_lines_and_partial_records(tmp_path: Path) -> None:
    device = tmp_path / "kmsg"
    device.write_bytes(
        b"6,0,1,-;" + xid_message(0).encode() + b"\n SUBSYSTEM=pci\n DEVICE=+pci:0000:00:00.0\n"
        b"6,1,2,-;half a rec"
    )
    reader = KmsgDevice(device)
    assert [r[:7] for r in reader.read_records(100)] == [b"6,0,1,-"]
    with device.open("ab") as out:
        out.write(b"ord\n")
    assert reader.read_records(100) == [b"6,1,2,-;half a record"]
    reader.close()


def test_unreadable_state_starts_over(tmp_path: Path) -> None:
    device, state = tmp_path / "kmsg", tmp_path / "state.json"
    state.write_text("{not json")
    device.write_text(ring(range(4)))
    reader = source(device, state)
    assert reader.state_error is not None
    assert xid_seqs(reader.poll().events) == [0, 3]
    reader.close()


def test_fifo_device(tmp_path: Path) -> None:
    device, state = tmp_path / "kmsg", tmp_path / "state.json"
    os.mkfifo(device)
    # O_RDWR keeps the FIFO open without blocking on a reader.
    writer = os.open(device, os.O_RDWR)
    try:
        reader = source(device, state)
        assert reader.poll().idle, "an empty FIFO reads as idle, it does not block"
        got: list[int] = []
        # A record split across two writes waits for its end.
        data = ring(range(7)).encode()
        os.write(writer, data[:50])
        os.write(writer, data[50:])

        def collected() -> bool:
            got.extend(xid_seqs(reader.poll().events))
            return got == [0, 3, 6]

        wait_until(collected, timeout=5, what="XIDs from the FIFO")
        reader.close()
    finally:
        os.close(writer)


def test_boot_id_and_boot_time_files(tmp_path: Path) -> None:
    boot_id = tmp_path / "boot_id"
    boot_id.write_text(f"{BOOT_A}\n")
    assert read_boot_id(boot_id) == BOOT_A
    stat = tmp_path / "stat"
    stat.write_text("cpu  1 2 3\nbtime 1764489600\nprocesses 5\n")
    assert read_boot_time(stat) == datetime(2025, 11, 30, 8, 0, tzinfo=UTC)
    stat.write_text("cpu 1\n")
    with pytest.raises(ValueError, match="btime"):
        read_boot_time(stat)


def test_state_file_is_replaced_atomically(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    save_state(state, KmsgState(boot_id=BOOT_A, seq=1))
    save_state(state, KmsgState(boot_id=BOOT_A, seq=2))
    assert load_state(state, KmsgState) == KmsgState(boot_id=BOOT_A, seq=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]
    # A write that fails half-way (here: the state cannot be encoded, after the
    # temporary file was created) must leave the previous state whole, never a
    # truncated file, and no temporary file behind.
    with pytest.raises(TypeError):
        save_state(state, object())  # type: ignore[arg-type]
    assert load_state(state, KmsgState) == KmsgState(boot_id=BOOT_A, seq=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


# --- the journal follower -------------------------------------------------------------------

JOURNAL_BOOT_A = BOOT_A.replace("-", "")  # journald writes boot ids without dashes
JOURNAL_BOOT_B = BOOT_B.replace("-", "")
FAKE_JOURNALCTL = """#!{python}
# A stand-in for journalctl: logs its argv, prints the entries of a JSON-lines file
# after --after-cursor (or those of the last boot with -b), then follows if asked.
import json, sys, time
args = sys.argv[1:]
with open({argv!r}, "a") as log:
    log.write(json.dumps(args) + "\\n")
entries = [json.loads(line) for line in open({entries!r}) if line.strip()]
if "--after-cursor" in args:
    cursors = [e["__CURSOR"] for e in entries]
    entries = entries[cursors.index(args[args.index("--after-cursor") + 1]) + 1 :]
elif "-b" in args:
    entries = [e for e in entries if e["_BOOT_ID"] == entries[-1]["_BOOT_ID"]]
for entry in entries:
    sys.stdout.write(json.dumps(entry) + "\\n")
sys.stdout.flush()
if "--follow" in args:
    time.sleep(60)
"""


def journal_entry(index: int, boot: str, message: str) -> str:
    entry = {
        "__CURSOR": f"s=f00;i={index:x};b={boot};m={index:x};t=1;x=2",
        "__REALTIME_TIMESTAMP": str(1764489600_000000 + index * 1_000_000),
        "_BOOT_ID": boot,
        "_TRANSPORT": "kernel",
        "MESSAGE": message,
    }
    return json.dumps(entry) + "\n"


def fake_journalctl(tmp_path: Path) -> tuple[Path, Path, Path]:
    """``(script, entries file, argv log)``."""
    script, entries, argv = tmp_path / "journalctl", tmp_path / "entries", tmp_path / "argv"
    entries.write_text("")
    script.write_text(
        FAKE_JOURNALCTL.format(python=sys.executable, argv=str(argv), entries=str(entries))
    )
    script.chmod(0o755)
    return script, entries, argv


def journal_source(script: Path, state: Path, *, follow: bool = False) -> JournalReader:
    return JournalReader(
        node="gpu-node-01",
        cluster="prod",
        state_path=state,
        boot_id=BOOT_A,
        executable=str(script),
        follow=follow,
    )


async def drain(source: JournalReader) -> list[AnyEvent]:
    """Run a non-following source to its end, committing every batch."""
    await source.start()
    events: list[AnyEvent] = []
    try:
        while (batch := await source.next_batch(5.0)) is not None:
            events.extend(batch.events)
            source.commit(batch)
    finally:
        await source.close()
    return events


@pytest.mark.asyncio
async def test_journal_resumes_at_the_cursor_and_reports_reboots(tmp_path: Path) -> None:
    """Real time, not looptime: the journal is a journalctl subprocess."""
    script, entries, argv = fake_journalctl(tmp_path)
    state = tmp_path / "state.json"
    old_boot = journal_entry(0, JOURNAL_BOOT_B, xid_message(0))  # an earlier boot: not read
    entries.write_text(
        old_boot
        + journal_entry(1, JOURNAL_BOOT_A, NOISE)
        + journal_entry(2, JOURNAL_BOOT_A, xid_message(2))
    )
    first = journal_source(script, state)
    events = await drain(first)
    assert [e.code for e in events if isinstance(e, XidEvent)] == [79]
    assert all(isinstance(e, XidEvent) for e in events), "no reboot on a first start"
    calls = [json.loads(line) for line in argv.read_text().splitlines()]
    assert "-b" in calls[0]
    assert "_TRANSPORT=kernel" in calls[0]
    assert "-k" not in calls[0], "-k would imply -b and skip the end of a previous boot"
    saved = load_state(state, JournalState)
    assert saved is not None
    assert saved.cursor.startswith("s=f00;i=2;")
    assert saved.boot_id == BOOT_A

    # More entries, then a reboot: the restarted reader continues after the cursor.
    with entries.open("a") as out:
        out.write(journal_entry(3, JOURNAL_BOOT_A, xid_message(3)))
        out.write(journal_entry(4, JOURNAL_BOOT_B, NOISE))
        out.write(journal_entry(5, JOURNAL_BOOT_B, xid_message(5)))
    second = journal_source(script, state)
    events = await drain(second)
    calls = [json.loads(line) for line in argv.read_text().splitlines()]
    assert calls[1][calls[1].index("--after-cursor") + 1] == saved.cursor
    assert "-b" not in calls[1]
    xid3, reboot, xid5 = events
    assert isinstance(xid3, XidEvent)
    assert isinstance(xid5, XidEvent)
    assert (xid3.pci_bus_id, xid5.pci_bus_id) == ("0000:03:00.0", "0000:05:00.0")
    assert isinstance(reboot, KubeEvent)
    assert (reboot.reason, reboot.id) == ("Rebooted", f"reboot:gpu-node-01:{BOOT_B}")
    assert reboot.time == datetime(2025, 11, 30, 8, 0, 4, tzinfo=UTC)
    assert load_state(state, JournalState) == JournalState(
        cursor=json.loads(journal_entry(5, JOURNAL_BOOT_B, ""))["__CURSOR"], boot_id=BOOT_B
    )
    # Nothing new: nothing published.
    assert await drain(journal_source(script, state)) == []


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_journal_follow_is_stopped_by_close(tmp_path: Path) -> None:
    """Real time, not looptime: the journal is a journalctl subprocess."""
    script, entries, _argv = fake_journalctl(tmp_path)
    entries.write_text(journal_entry(1, JOURNAL_BOOT_A, xid_message(1)))
    source = journal_source(script, tmp_path / "state.json", follow=True)
    await source.start()
    events: list[AnyEvent] = []
    try:
        while not events:
            batch = await source.next_batch(5.0)
            assert batch is not None, "a following journalctl does not end by itself"
            events.extend(batch.events)
    finally:
        await source.close()
    assert [e.code for e in events if isinstance(e, XidEvent)] == [79]
    assert source.exit_status is not None, "journalctl was reaped"
