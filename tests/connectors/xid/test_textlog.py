"""Following a kernel log file: appends, half-written lines, rotation, truncation, restarts.

The log is a real file that the test appends to, renames and truncates as
syslog daemons and logrotate do; the reader is :class:`TextLogReader` with its
real state file, opened with ``contextlib.closing`` so that every reader's file is
closed, also when an assertion fails.
"""

from __future__ import annotations

import io
import os
from contextlib import closing
from pathlib import Path

import pytest

from connectors.xid.run import run_kmsg
from connectors.xid.settings import KmsgSettings
from connectors.xid.textlog import TextLogReader
from schemas.codec import decode_event
from schemas.events import XidEvent
from tests.kafka_helpers import KafkaTestEnv, consume_events

NOISE = "Dec  1 01:02:03 gpu-node-01 kernel: [ 1234.5] eth0: Link is Up\n"


def xid_line(n: int, code: int = 79) -> str:
    """A syslog kern.log line (rsyslog's traditional format) carrying XID ``code``."""
    return (
        f"Dec  1 01:02:{n % 60:02d} gpu-node-01 kernel: [{1000 + n}.000000] NVRM: Xid "
        f"(PCI:0000:9b:00): {code}, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
    )


def source(log: Path, state: Path) -> TextLogReader:
    return TextLogReader(path=log, node="gpu-node-01", cluster="c", state_path=state, year=2026)


def drain(reader: TextLogReader) -> list[XidEvent]:
    """Poll until idle, committing every batch (as the loop does after publishing)."""
    events: list[XidEvent] = []
    while True:
        batch = reader.poll(limit=3)
        if batch.idle:
            return events
        events += [e for e in batch.events if isinstance(e, XidEvent)]
        reader.commit(batch)


def test_appended_lines_are_read_once_and_a_half_line_waits(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    log.write_text(NOISE + xid_line(1))
    with closing(source(log, state)) as reader:
        [first] = drain(reader)
        assert (first.code, first.pci_bus_id, first.source) == (79, "0000:9b:00.0", "syslog")
        with log.open("a") as out:
            out.write(xid_line(2)[:30])  # the writer is mid-line
        assert drain(reader) == []
        with log.open("a") as out:
            out.write(xid_line(2)[30:] + xid_line(3, code=48))
        later = drain(reader)
    assert [e.code for e in later] == [79, 48]
    assert first.id not in {e.id for e in later}


def test_a_restart_neither_resends_nor_skips(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    log.write_text("".join(xid_line(n) for n in range(5)))
    with closing(source(log, state)) as reader:
        batch = reader.poll()  # read but never published: not committed
        first_ids = [e.id for e in batch.events]
        assert len(first_ids) == 5
    with closing(source(log, state)) as again:  # the restart
        seen = drain(again)
        assert [e.id for e in seen] == first_ids, "the unpublished batch comes again, same ids"
        with log.open("a") as out:
            out.write(xid_line(5) + xid_line(6))
    with closing(source(log, state)) as third:
        assert [e.time.second for e in drain(third)] == [5, 6], "only what is new since the commit"


def test_rotation_by_rename_finishes_the_old_file_then_reads_the_new(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    log.write_text(xid_line(1))
    with closing(source(log, state)) as reader:
        assert len(drain(reader)) == 1
        with log.open("a") as out:  # the last line before the rotation ...
            out.write(xid_line(2))
        os.rename(log, tmp_path / "kern.log.1")  # ... logrotate moves the file away ...
        log.write_text(xid_line(3))  # ... and the daemon writes a new one
        assert [e.time.second for e in drain(reader)] == [2, 3]
        assert drain(reader) == []


def test_truncation_starts_over_and_counts_the_gap(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    log.write_text(xid_line(1) + xid_line(2))
    with closing(source(log, state)) as reader:
        assert len(drain(reader)) == 2
        log.write_text(xid_line(7))  # copytruncate: same inode, shorter
        assert [e.time.second for e in drain(reader)] == [7]
        assert reader.stats.skipped == 1


def test_identical_lines_stay_two_events(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    log.write_text(xid_line(1) + xid_line(1))
    with closing(source(log, state)) as reader:
        events = drain(reader)
    assert len({e.id for e in events}) == 2


@pytest.mark.asyncio
async def test_connect_kmsg_follows_a_file_into_kafka(kafka: KafkaTestEnv, tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "state.json"
    log.write_text(NOISE + xid_line(1) + "Dec  1 01:02:09 n kernel: NVRM: Xid (PCI:zz): 79, x\n")
    options = KmsgSettings(
        node="gpu-node-01",
        cluster="c",
        log_file=str(log),
        state_path=str(state),
        year=2026,
        once=True,
        metrics_port=None,
    )
    assert await run_kmsg(options, kafka.kwargs, kafka.layout, io.StringIO()) == 0
    xids = await consume_events(kafka.bootstrap, [kafka.layout.raw["xids"].name], 1)
    [event] = [decode_event(r.value) for r in xids]
    assert isinstance(event, XidEvent)
    assert event.id.startswith("file:gpu-node-01:")
    dead = await consume_events(kafka.bootstrap, [kafka.layout.dead_letters.name], 1)
    assert len(dead) == 1, "the unreadable XID line is a dead letter"
