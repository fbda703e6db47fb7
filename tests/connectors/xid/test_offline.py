"""``gputriage ingest kmsg`` and ``gputriage connect kmsg``, end to end through subprocesses.

The connector runs against the real embedded broker with a fake ``/dev/kmsg``
(a regular file in the record format), a fake boot id and a fake ``/proc/stat``.
"""

from __future__ import annotations

import asyncio
import gzip
import io
import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from connectors.state import StateLock, load_state
from connectors.xid.journal import JournalState
from connectors.xid.kmsg import KmsgState
from connectors.xid.run import KmsgMetrics, run_kmsg
from connectors.xid.settings import KmsgSettings
from schemas.codec import decode_dead_letter, decode_event, decode_incident
from schemas.events import KubeEvent, XidEvent
from tests import paths
from tests.cli_helpers import clean_env, gputriage
from tests.connectors.xid.test_kmsg import BOOT_A, JOURNAL_BOOT_A, fake_journalctl, journal_entry
from tests.kafka_helpers import KafkaTestEnv, consume_events, wait_until
from tests.paths import EXAMPLES

DATA = paths.DATA / "kmsg"
BOOT = "2026-11-30T08:00:00Z"


def xids_of(stdout: bytes) -> list[XidEvent]:
    events = [decode_event(line) for line in stdout.splitlines()]
    assert all(isinstance(e, XidEvent) for e in events)
    return [e for e in events if isinstance(e, XidEvent)]


def test_ingest_dmesg(tmp_path: Path) -> None:
    args = ("ingest", "kmsg", "--file", str(DATA / "dmesg.log"), "--node", "gpu-node-01")
    proc = gputriage(*args, "--cluster", "prod", "--boot-time", BOOT)
    assert proc.returncode == 1, proc.stderr
    events = xids_of(proc.stdout)
    assert [(e.code, e.sxid) for e in events] == [
        (12028, True),
        (79, False),
        (79, False),  # "NVRM: GPU 0000:9b:00.0: GPU has fallen off the bus.": the same fault
        (154, False),
        (45, False),
        (45, False),
    ]
    assert events[1].time == datetime(2026, 11, 30, 9, 0, 0, 500000, tzinfo=UTC)
    assert events[2].pci_bus_id == events[1].pci_bus_id == "0000:9b:00.0"
    assert events[3].recovery_action == "Node Reboot Required"
    assert events[4].caused_by == 149
    assert events[4].pci_bus_id == "0001:3b:00.0"
    # Two identical lines: two events, distinct and stable ids.
    assert events[5].id == f"{events[4].id}:2"
    assert {e.cluster for e in events} == {"prod"}
    assert proc.stderr.decode().splitlines() == [
        f"{DATA / 'dmesg.log'}:12: unrecognised XID line: NVRM: Xid (PCI:0000:66:00): abc, "
        "pid=2280636 (at message)",
        "gputriage: 1 bad XID line of 7 skipped",
    ]
    again = gputriage(*args, "--cluster", "prod", "--boot-time", BOOT)
    assert again.stdout == proc.stdout, "a re-read gives the same events and ids"


def test_ingest_without_boot_time_reports_relative_lines(tmp_path: Path) -> None:
    """Relative lines without --boot-time are no longer refused
    (they were 5 "boot time is unknown" errors and no output). They get the file's
    modification time, and ONE warning names the count, the first line and the reason."""
    log = tmp_path / "dmesg.log"
    log.write_bytes((DATA / "dmesg.log").read_bytes())
    os.utime(log, ns=(MTIME_NS, MTIME_NS))
    proc = gputriage("ingest", "kmsg", "--file", str(log), "--node", "n")
    assert proc.returncode == 1, "the unreadable XID part of line 12 is still an error"
    events = xids_of(proc.stdout)
    assert len(events) == 6
    assert {e.time for e in events} == {MTIME}
    lines = proc.stderr.decode().splitlines()
    assert proc.stderr.count(b"boot time is unknown") == 1
    assert lines[-1] == (
        f"gputriage: warning: 6 XID lines of {log} had no usable time (first: line 5, dmesg "
        "time is relative to boot and the boot time is unknown); stamped "
        "2026-11-30T12:34:56.789012Z, the file's modification time (give --boot-time or "
        "--default-time to choose)"
    )


MTIME = datetime(2026, 11, 30, 12, 34, 56, 789012, tzinfo=UTC)
MTIME_NS = int(MTIME.timestamp()) * 10**9 + 789012 * 1000
PUBLIC = DATA / "public_prefixes.log"


def public_copy(tmp_path: Path) -> Path:
    """tests/data/kmsg/public_prefixes.log with a known modification time."""
    log = tmp_path / "public_prefixes.log"
    log.write_bytes(PUBLIC.read_bytes())
    os.utime(log, ns=(MTIME_NS, MTIME_NS))
    return log


def test_ingest_never_refuses_real_pasted_lines_for_their_prefix(tmp_path: Path) -> None:
    """The 28 real lines of public_prefixes.log (sources in its header): before the rule,
    26 were refused for their time prefix (23 even with --boot-time); now every one is an
    event, those without a usable time at the file's modification time."""
    log = public_copy(tmp_path)
    proc = gputriage("ingest", "kmsg", "--file", str(log), "--node", "n", "--year", "2024")
    assert proc.returncode == 0, proc.stderr
    events = xids_of(proc.stdout)
    assert len(events) == 28
    assert [e.code for e in events[:9]] == [79, 45, 45, 45, 45, 45, 45, 45, 32]
    assert events[1].caused_by == 149
    timed = {e.code: e.time for e in events if e.time != MTIME}
    assert timed == {
        79: datetime(2025, 5, 27, 4, 18, 56, 89671, tzinfo=UTC),  # syslog:err   : <ISO>
        43: datetime(2024, 7, 31, 23, 14, 18, tzinfo=UTC),  # dmesg -T
        31: datetime(2024, 8, 5, 3, 54, 13, tzinfo=UTC),
    }
    assert proc.stderr.decode().splitlines() == [
        f"gputriage: warning: 25 XID lines of {log} had no usable time (first: line 15, XID "
        "line without a timestamp); stamped 2026-11-30T12:34:56.789012Z, the file's "
        "modification time (give --boot-time or --default-time to choose)"
    ]
    again = gputriage("ingest", "kmsg", "--file", str(log), "--node", "n", "--year", "2024")
    assert again.stdout == proc.stdout, "the same file gives the same events, ids and times"
    assert len({e.id for e in events}) == 28


def test_ingest_boot_time_and_default_time_choose_the_times(tmp_path: Path) -> None:
    log = public_copy(tmp_path)
    base = ("ingest", "kmsg", "--file", str(log), "--node", "n", "--year", "2024")
    proc = gputriage(*base, "--boot-time", BOOT, "--default-time", "2026-12-01T09:00:00+01:00")
    assert proc.returncode == 0, proc.stderr
    events = xids_of(proc.stdout)
    relative = [e.time for e in events if e.code in (31, 32) and e.pid is None]
    assert relative == [
        datetime(2026, 11, 30, 14, 42, 8, 828315, tzinfo=UTC),
        datetime(2026, 11, 30, 14, 42, 8, 828608, tzinfo=UTC),
        datetime(2026, 11, 30, 14, 42, 8, 834365, tzinfo=UTC),
    ]
    assumed = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
    assert sum(e.time == assumed for e in events) == 22
    (warning,) = proc.stderr.decode().splitlines()
    assert "22 XID lines" in warning
    assert "first: line 15" in warning
    assert "stamped 2026-12-01T09:00:00+01:00, from --default-time" in warning
    bad = gputriage(*base, "--default-time", "soon")
    assert bad.returncode == 2
    assert b"RFC 3339" in bad.stderr


def test_ingest_from_a_pipe_assumes_the_time_of_reading(tmp_path: Path) -> None:
    before = datetime.now(UTC).replace(microsecond=0)
    proc = gputriage(
        "ingest", "kmsg", "--file", "-", "--node", "n", stdin=b"NVRM: Xid (PCI:0000:44:00): 79, x\n"
    )
    assert proc.returncode == 0, proc.stderr
    (event,) = xids_of(proc.stdout)
    assert before <= event.time <= datetime.now(UTC)
    (warning,) = proc.stderr.decode().splitlines()
    assert warning.startswith("gputriage: warning: 1 XID line of <stdin> had no usable time")
    assert "the time of reading" in warning
    # Lines that all carry their own time: no warning at all.
    dated = gputriage("ingest", "kmsg", "--file", str(DATA / "dmesg_ctime.log"), "--node", "n")
    assert dated.stderr == b""


def test_ingest_ctime_journal_and_kmsg_dump() -> None:
    ctime = gputriage(
        "ingest",
        "kmsg",
        "--file",
        str(DATA / "dmesg_ctime.log"),
        "--node",
        "n",
        "--tz",
        "America/New_York",
    )
    assert ctime.returncode == 0, ctime.stderr
    events = xids_of(ctime.stdout)
    assert [e.code for e in events] == [13, 13, 109]
    assert events[2].time == datetime(2024, 8, 30, 15, 43, 14, tzinfo=UTC)
    assert (events[2].pid, events[2].process) == (1797828, "pt_main_thread")

    journal = gputriage("ingest", "kmsg", "--file", str(DATA / "journal.jsonl"), "--node", "n")
    assert journal.returncode == 0, journal.stderr
    (nvlink,) = xids_of(journal.stdout)
    assert (nvlink.code, nvlink.source, nvlink.pci_bus_id) == (149, "journal", "0018:01:00.0")

    kmsg = gputriage(
        "ingest",
        "kmsg",
        "--file",
        str(DATA / "kmsg.txt"),
        "--node",
        "n",
        "--boot-id",
        "b-1",
        "--boot-time",
        "1764489600",
    )
    assert kmsg.returncode == 0, kmsg.stderr
    assert [e.id for e in xids_of(kmsg.stdout)] == ["kmsg:n:b-1:1001", "kmsg:n:b-1:1002"]


def test_ingest_gzip_from_stdin() -> None:
    data = gzip.compress((DATA / "dmesg_ctime.log").read_bytes())
    proc = gputriage("ingest", "kmsg", "--file", "-", "--node", "n", stdin=data)
    assert proc.returncode == 0, proc.stderr
    assert len(xids_of(proc.stdout)) == 3


def test_ingest_prints_the_mig_instance_an_xid_names() -> None:
    """The driver's MIG-attributed XID 94 (open-gpu-kernel-modules kern_gpu_error_cont_ga100.c,
    and NVIDIA's A100 memory error management docs) and its GPU-I/GPU-CI form (kernel_rc.c's
    format string), as dmesg prints them: the instance ids are fields on the wire, the bus
    id is the parent's, the message the driver's text after the colon."""
    log = (
        b"[ 3600.000001] NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User "
        b"Channel (0x9). RST: No, D-RST: No\n"
        b"[ 3600.000002] NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 13, pid=9, name=a, "
        b"Graphics Exception\n"
    )
    proc = gputriage("ingest", "kmsg", "--file", "-", "--node", "n", "--boot-time", BOOT, stdin=log)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    assert b'"pci_bus_id":"0000:01:00.0"' in first
    assert b'"message":"Contained: CE User Channel (0x9). RST: No, D-RST: No"' in first
    assert b'"gpu_instance":5,"compute_instance":null,' in first
    assert b'"gpu_instance":1,"compute_instance":2,' in second


def test_ingest_usage_errors() -> None:
    path = str(DATA / "dmesg.log")
    for args, needle in (
        (("--node", "n", "--boot-time", "yesterday"), b"RFC 3339"),
        (("--node", "n", "--boot-time", "2026-11-30T08:00:00"), b"no UTC offset"),
        (("--node", "n", "--tz", "Mars/Olympus"), b"unknown time zone"),
        ((), b"--node"),
    ):
        proc = gputriage("ingest", "kmsg", "--file", path, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr
        assert len(proc.stderr.splitlines()) == 1
        assert b"Traceback" not in proc.stderr


@pytest.mark.asyncio
async def test_connect_kmsg_publishes_resumes_and_reports_reboots(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """Each run is a whole ``connect kmsg --once`` subprocess that has exited before the
    test reads the topics: nothing else runs on the test's loop while it blocks."""
    device, state = tmp_path / "kmsg", tmp_path / "state.json"
    boot_id, stat = tmp_path / "boot_id", tmp_path / "stat"
    boot_id.write_text("boot-a\n")
    stat.write_text("cpu 1 2 3\nbtime 1764489600\n")
    device.write_bytes(
        (DATA / "kmsg.txt").read_bytes() + b"3,1003,3700000000,-;NVRM: Xid (PCI:0000:66:00): abc\n"
    )
    args = (
        "connect", "kmsg", "--cluster", "prod", "--device", str(device), "--state-path", str(state),
        "--boot-id-file", str(boot_id), "--proc-stat", str(stat), "--metrics-port", "0", "--once",
    )  # fmt: skip
    env = {**kafka.env, "NODE_NAME": "gpu-node-01"}
    first = gputriage(*args, env=env)
    assert first.returncode == 0, first.stderr
    assert b"2 XIDs, 1 bad" in first.stderr
    assert load_state(state, KmsgState) == KmsgState(boot_id="boot-a", seq=1003)
    layout = kafka.layout
    records = await consume_events(
        kafka.bootstrap, [layout.raw["xids"].name, layout.dead_letters.name], 3
    )
    xids = [decode_event(r.value) for r in records if r.topic == layout.raw["xids"].name]
    assert [e.id for e in xids] == ["kmsg:gpu-node-01:boot-a:1001", "kmsg:gpu-node-01:boot-a:1002"]
    assert {r.key for r in records} == {b"prod/gpu-node-01"}
    (dead,) = [decode_dead_letter(r.value) for r in records if r.topic == layout.dead_letters.name]
    assert (dead.topic, dead.partition, dead.offset) == (f"kmsg:{device}", -1, 1003)
    assert dead.value is not None
    assert dead.value.startswith(b"3,1003,")

    again = gputriage(*args, env=env)
    assert again.returncode == 0, again.stderr
    assert b"0 XIDs, 0 bad" in again.stderr
    assert b"4 already handled" in again.stderr

    boot_id.write_text("boot-b\n")
    stat.write_text("btime 1764495000\n")
    device.write_text("3,0,5000000,-;NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus.\n")
    rebooted = gputriage(*args, env=env)
    assert rebooted.returncode == 0, rebooted.stderr
    assert load_state(state, KmsgState) == KmsgState(boot_id="boot-b", seq=0)
    topics = [layout.raw["xids"].name, layout.raw["k8s-events"].name]
    records = await consume_events(kafka.bootstrap, topics, 4)
    events = [decode_event(r.value) for r in records]
    (reboot,) = [e for e in events if isinstance(e, KubeEvent)]
    assert (reboot.reason, reboot.node, reboot.time) == (
        "Rebooted",
        "gpu-node-01",
        datetime.fromtimestamp(1764495000, UTC),
    )
    assert "boot-a" in reboot.message
    assert [e.id for e in events if isinstance(e, XidEvent)][-1] == "kmsg:gpu-node-01:boot-b:0"


def test_connect_kmsg_missing_device_is_a_usage_error(tmp_path: Path) -> None:
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("boot-a\n")
    proc = gputriage(
        "connect", "kmsg", "--node", "n", "--cluster", "c", "--device", str(tmp_path / "nope"),
        "--boot-id-file", str(boot_id), "--boot-time", BOOT, "--state-path", str(tmp_path / "s"),
        "--brokers", "127.0.0.1:1", "--metrics-port", "0", "--once",
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert b"nope" in proc.stderr
    assert b"Traceback" not in proc.stderr


@pytest.mark.asyncio
async def test_reader_follows_the_device_until_stopped(kafka: KafkaTestEnv, tmp_path: Path) -> None:
    """The daemon path (no --once): records appended while it runs are published, then
    a stop ends it after committing; the counters match. Real time, not looptime: the
    20 ms polls run while the producer talks to Tansu, another process."""
    device, boot_id = tmp_path / "kmsg", tmp_path / "boot_id"
    boot_id.write_text("boot-a\n")
    device.write_text("6,0,1,-;usb 1-1: new device\n")
    options = KmsgSettings(
        node="gpu-node-07",
        cluster="prod",
        device=str(device),
        state_path=str(tmp_path / "state" / "kmsg.json"),
        boot_id_file=str(boot_id),
        boot_time=datetime(2026, 11, 30, 8, 0, tzinfo=UTC).isoformat(),
        poll_interval_seconds=0.02,
        metrics_port=None,
    )
    metrics = KmsgMetrics()
    layout = kafka.layout
    await kafka.acreate_topics()
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_kmsg(options, kafka.kwargs, layout, io.StringIO(), stop=stop, metrics=metrics)
    )
    with device.open("a") as out:
        out.write("3,1,2000000,-;NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus.\n")
        out.write("6,4,2000100,-;NVRM: Xid (PCI:0000:9b:00): 154, GPU recovery action ")
        out.flush()
        out.write("changed from 0x0 (None) to 0x2 (Node Reboot Required)\n")
    records = await consume_events(kafka.bootstrap, [layout.raw["xids"].name], 2)
    stop.set()
    assert await asyncio.wait_for(task, 10) == 0
    events = [decode_event(r.value) for r in records]
    xid79, xid154 = [e for e in events if isinstance(e, XidEvent)]
    assert (xid79.code, xid154.recovery_action) == (79, "Node Reboot Required")
    assert load_state(options.state_path, KmsgState) == KmsgState(boot_id="boot-a", seq=4)

    def sample(name: str) -> float | None:
        labels = {"source": "kmsg"}
        return metrics.registry.get_sample_value(f"gputriage_kmsg_{name}_total", labels)

    assert (sample("records"), sample("xids"), sample("skipped_records"), sample("bad_lines")) == (
        3.0,
        2.0,
        2.0,
        0.0,
    )


def test_connect_kmsg_stops_cleanly_on_sigterm(kafka: KafkaTestEnv, tmp_path: Path) -> None:
    """A DaemonSet pod is stopped with SIGTERM: the reader commits and exits 0."""
    device, state = tmp_path / "kmsg", tmp_path / "state.json"
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("boot-a\n")
    device.write_bytes((DATA / "kmsg.txt").read_bytes())
    command = [
        sys.executable, "-m", "gputriage", "connect", "kmsg", "--node", "gpu-node-01",
        "--cluster", "prod", "--device", str(device), "--state-path", str(state),
        "--boot-id-file", str(boot_id), "--boot-time", BOOT, "--metrics-port", "0",
        "--poll-interval-seconds", "0.05",
    ]  # fmt: skip
    proc = subprocess.Popen(
        command, env=clean_env(kafka.env), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_until(
            lambda: (
                state.exists()
                and load_state(state, KmsgState) == KmsgState(boot_id="boot-a", seq=1002)
            ),
            timeout=30,
            what="the reader to commit the device's records",
        )
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, stderr
    assert b"3 records, 2 XIDs, 0 bad" in stderr


@pytest.mark.asyncio
async def test_connect_journal_once(kafka: KafkaTestEnv, tmp_path: Path) -> None:
    """--journal: journalctl's kernel entries instead of /dev/kmsg; the cursor is saved.
    The ``--once`` subprocess has exited before the test reads the topics."""
    script, entries, _argv = fake_journalctl(tmp_path)
    entries.write_text(
        journal_entry(1, JOURNAL_BOOT_A, "NVRM: Xid (PCI:0000:3b:00): 48, DBE")
        + journal_entry(2, JOURNAL_BOOT_A, "NVRM: Xid (PCI:0000:3b:00): x, broken")
    )
    boot_id, state = tmp_path / "boot_id", tmp_path / "state.json"
    boot_id.write_text(BOOT_A)
    args = (
        "connect", "kmsg", "--node", "gpu-node-01", "--cluster", "prod", "--journal",
        "--journalctl", str(script), "--state-path", str(state), "--boot-id-file", str(boot_id),
        "--metrics-port", "0", "--once",
    )  # fmt: skip
    proc = gputriage(*args, env=kafka.env)
    assert proc.returncode == 0, proc.stderr
    assert b"journal: 2 records, 1 XIDs, 1 bad" in proc.stderr
    layout = kafka.layout
    topics = [layout.raw["xids"].name, layout.dead_letters.name]
    records = await consume_events(kafka.bootstrap, topics, 2)
    by_topic = {r.topic: r.value for r in records}
    event = decode_event(by_topic[layout.raw["xids"].name])
    assert isinstance(event, XidEvent)
    assert (event.code, event.source) == (48, "journal")
    assert event.id.startswith("journal:gpu-node-01:")
    dead = decode_dead_letter(by_topic[layout.dead_letters.name])
    assert (dead.topic, dead.offset) == ("journal", -1)
    saved = load_state(state, JournalState)
    assert saved is not None
    assert saved.cursor.startswith("s=f00;i=2;")


def test_a_kernel_xid_79_line_joins_the_eviction_incident(tmp_path: Path) -> None:
    """ingest kmsg output replays with recorded Kubernetes events into ONE
    device_unhealthy_eviction incident that names the GPU UUID and the evicted pods.

    The Kubernetes and binding events are gpu-node-01's from the example
    scenario; its recorded XID is replaced by one parsed from a dmesg line."""
    scenario = EXAMPLES / "scenario.jsonl"
    others = [
        line
        for line in scenario.read_bytes().splitlines()
        if b'"node":"gpu-node-01"' in line and b'"schema":"xid.v1"' not in line
    ]
    events_file = tmp_path / "k8s.jsonl"
    events_file.write_bytes(b"\n".join(others) + b"\n")
    dmesg = tmp_path / "dmesg.log"
    dmesg.write_text(
        "[ 3599.900000] eth0: Link is Up\n"
        "[ 3600.000000] NVRM: Xid (PCI:0000:9b:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.\n"
    )
    ingest = gputriage(
        "ingest", "kmsg", "--file", str(dmesg), "--node", "gpu-node-01", "--cluster",
        "prod-us-east", "--boot-time", "2026-11-30T09:05:00Z",
    )  # fmt: skip
    assert ingest.returncode == 0, ingest.stderr
    xids = tmp_path / "xids.jsonl"
    xids.write_bytes(ingest.stdout)

    replay = gputriage("replay", str(events_file), str(xids), "-o", "json")
    assert replay.returncode == 0, replay.stderr
    revisions = [decode_incident(line) for line in replay.stdout.splitlines()]
    chains = [r for r in revisions if r.type == "device_unhealthy_eviction"]
    assert len({r.id for r in chains}) == 1, "one incident for the whole chain"
    final = chains[-1]
    assert [g.uuid for g in final.gpus] == ["GPU-6f1c2a9e-79aa-4c1e-9d3b-000000000001"]
    assert [g.pci_bus_id for g in final.gpus] == ["0000:9b:00.0"]
    assert sorted(p.name for p in final.pods) == [
        "llama-pretrain-0",
        "llama-pretrain-1",
        "llama-pretrain-2",
    ]
    (xid_id,) = decode_lines(ingest.stdout)
    assert any(e.event_id == xid_id for e in final.evidence), "the kernel line is evidence"


def decode_lines(stdout: bytes) -> list[str]:
    return [decode_event(line).id for line in stdout.splitlines()]


def test_connect_kmsg_refuses_a_state_file_another_reader_holds(tmp_path: Path) -> None:
    """Two readers of one device with one state file would move each other's
    position. The second is refused at start, in one line, before it reads anything."""
    device, state, boot_id = tmp_path / "kmsg", tmp_path / "state.json", tmp_path / "boot_id"
    device.write_text("3,0,5000000,-;NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus.\n")
    boot_id.write_text("boot-a\n")
    holder = StateLock(state)
    try:
        proc = gputriage(
            "connect", "kmsg", "--node", "n", "--cluster", "c", "--device", str(device),
            "--boot-id-file", str(boot_id), "--boot-time", BOOT, "--state-path", str(state),
            "--brokers", "127.0.0.1:1", "--metrics-port", "0", "--once", "--no-nvml",
        )  # fmt: skip
    finally:
        holder.close()
    assert proc.returncode == 1, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert b"is in use by another process" in proc.stderr
    assert b"Traceback" not in proc.stderr
    assert not state.exists()


def test_a_followed_journal_whose_journalctl_dies_exits_1(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """Following never ends by itself: when journalctl dies, the connector exits 1 (and says
    so), so its pod restarts, instead of 0 as if it had been asked to stop."""
    script = tmp_path / "journalctl"
    script.write_text(f"#!{sys.executable}\nimport sys\nsys.exit(3)\n")
    script.chmod(0o755)
    boot_id = tmp_path / "boot_id"
    boot_id.write_text(BOOT_A)
    args = (
        "connect", "kmsg", "--node", "gpu-node-01", "--cluster", "prod", "--journal",
        "--journalctl", str(script), "--state-path", str(tmp_path / "state.json"),
        "--boot-id-file", str(boot_id), "--metrics-port", "0",
    )  # fmt: skip
    proc = gputriage(*args, env=kafka.env)
    assert proc.returncode == 1, proc.stderr
    assert b"journalctl exited with status" in proc.stderr
