""" "GPU has fallen off the bus" without an Xid number is XID 79; a redacted bus id is an
XID of an unknown GPU.

Sources (cited in full in tests/data/kmsg/real/SOURCES.md):

[drv]  NVIDIA/open-gpu-kernel-modules@df1c9a3: ``osHandleGpuLost`` (osinit.c:368/374,
       ``NV_DEV_PRINTF(..., "GPU has fallen off the bus.\\n")`` with ``"NVRM: GPU %04x:%02x:
       %02x.%x: "`` in front) and the probe's three-line message (osapi.c:3659-3661).
[155]  NVIDIA/NVSentinel#155: the probe message as dmesg prints it, indented.
[gpud] leptonai/gpud components/accelerator/nvidia/sxid/README.md: the Xid 79 line and
       the NV_DEV_PRINTF line 4 us apart; kmsg_test.go's multi-line fixture.
[pyrite] a syslog excerpt of two K80s falling off (kernel 5.x: each line its own prefix).
[akash] akash-network/support#209: ``dmesg -T`` of XID 79 and its NV_DEV_PRINTF line.
[bb]   Bumblebee-Project/Bumblebee#554: the oldest driver's ``NVRM: GPU at 0000:01:00.0 has
       fallen off the bus.``
"""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.files import FileReader
from connectors.xid.lines import LineContext, Untimed, XidFields, parse_line, parse_message
from connectors.xid.offline import read_xids
from connectors.xid.reader import LineReader
from connectors.xid.textlog import TextLogReader
from schemas.codec import AnyEvent, RecordError, decode_event, encode
from schemas.events import XidEvent
from tests.core_helpers import of_type, run
from tests.factories import Cluster
from tests.xid_lines import kmsg

BOOT = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
CTX = LineContext(node="n", boot_time=BOOT, year=2024)
ONE_LINE = "NVRM: GPU 0000:29:00.0: GPU has fallen off the bus."  # [drv], gpud kmsg_test.go
PROBE = (  # [155], [drv]
    "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0\n"
    "               NVRM: (PCI ID: 10de:26b5) installed in this system has\n"
    "               NVRM: fallen off the bus and is not responding to commands.\n"
)


def xid(line: bytes | str, ctx: LineContext = CTX) -> XidEvent:
    raw = line.encode() if isinstance(line, str) else line
    result = parse_line(raw, ctx)
    assert isinstance(result, XidEvent), result
    assert decode_event(encode(result)) == result
    return result


def read(text: str, ctx: LineContext = CTX) -> list[AnyEvent | RecordError]:
    """What ``gputriage ingest kmsg`` reads from a file holding ``text``."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "kern.log"
        path.write_text(text)
        source = FileReader(str(path))
        try:
            return [r.event for r in read_xids(source, ctx)]
        finally:
            source.close()


# -- the one-line shape -----------------------------------------------------------------------
def test_the_one_line_shape_is_xid_79_on_its_gpu() -> None:
    ev = xid(f"[ 5.5] {ONE_LINE}")
    assert (ev.code, ev.pci_bus_id, ev.pid) == (79, "0000:29:00.0", None)
    assert ev.message == "GPU 0000:29:00.0: GPU has fallen off the bus."
    # Behind every framing: dmesg -T, syslog, kmsg, journal JSON.
    assert xid(f"[Fri Apr  5 21:29:39 2024] {ONE_LINE}").time == datetime(
        2024, 4, 5, 21, 29, 39, tzinfo=UTC
    )
    assert xid(f"Jan 16 14:04:39 pyrite kernel: [44643.002806] {ONE_LINE}").source == "syslog"
    assert xid(f"3,1002,3600500100,-;{ONE_LINE}").source == "kmsg"
    entry = {"MESSAGE": ONE_LINE, "__REALTIME_TIMESTAMP": "1712352579000000"}
    assert xid(orjson.dumps(entry)).pci_bus_id == "0000:29:00.0"
    # The oldest drivers' wording [bb], and a domain-less bus (gpud's normalisation test).
    assert xid("[ 49.2] NVRM: GPU at 0000:01:00.0 has fallen off the bus.").pci_bus_id == (
        "0000:01:00.0"
    )
    assert xid("[ 1.0] NVRM: GPU 18:00.0: GPU has fallen off the bus.").pci_bus_id == (
        "0000:18:00.0"
    )


# -- the multi-line probe message -------------------------------------------------------------
def test_the_probe_message_arrives_whole_from_kmsg_the_journal_and_rsyslog() -> None:
    body = (
        "NVRM: The NVIDIA GPU 0000:b3:00.0\nNVRM: (PCI ID: 10de:26b5) installed in this "
        "system has\nNVRM: fallen off the bus and is not responding to commands."
    )
    kmsg_record = "6,900,1843308145,-;" + body.replace("\n", "\\x0a")
    journal = orjson.dumps({"MESSAGE": body, "__REALTIME_TIMESTAMP": "1764489600000000"})
    rsyslog = "Nov 30 08:30:43 host kernel: " + body.replace("\n", "#012")
    for raw in (kmsg_record.encode(), journal, rsyslog.encode(), PROBE.encode()):
        ev = xid(raw)
        assert (ev.code, ev.pci_bus_id) == (79, "0000:b3:00.0"), raw
        assert ev.message == (
            "The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system has "
            "fallen off the bus and is not responding to commands."
        )


def test_a_probe_message_split_by_dmesg_is_one_record_with_the_headers_gpu_and_time() -> None:
    """dmesg prints the three lines of one printk as a header and two indented lines.
    Only the last says what happened and only the first names the GPU and the time."""
    text = PROBE + "[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).\n"
    [ev] = read(text)
    assert isinstance(ev, XidEvent)
    assert (ev.code, ev.pci_bus_id) == (79, "0000:b3:00.0")
    assert ev.time == BOOT + timedelta(seconds=1843.308145)
    assert ev.message.startswith("The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5)")
    # Older kernels' syslog: every line with its own prefix; older drivers' line breaks.
    old = (
        "Jan 16 14:04:39 h kernel: [9.5] NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: "
        "10de:1e07) installed in this\n"
        "Jan 16 14:04:39 h kernel: [9.5] NVRM: system has fallen off the bus and is not "
        "responding to commands.\n"
    )
    [ev] = read(old)
    assert isinstance(ev, XidEvent)
    assert (ev.code, ev.pci_bus_id, ev.source) == (79, "0000:01:00.0", "syslog")
    assert ev.time == datetime(2024, 1, 16, 14, 4, 39, tzinfo=UTC)


def test_the_last_line_alone_is_xid_79_of_an_unknown_gpu() -> None:
    """No header before it (cut by grep, or a rotation between the lines): the driver's
    own words still say a GPU fell off; which one is unknown."""
    [ev] = read("[ 9.0] NVRM: fallen off the bus and is not responding to commands.\n")
    assert isinstance(ev, XidEvent)
    assert (ev.code, ev.pci_bus_id) == (79, "")
    # A header too far back (another message in between) is not joined.
    lines = PROBE.splitlines()
    far = "\n".join([lines[0], *["[ 1843.4] NVRM: loading NVIDIA UNIX"] * 5, lines[2]]) + "\n"
    [ev] = read(far)
    assert isinstance(ev, XidEvent)
    assert ev.pci_bus_id == ""


def test_the_live_file_follower_joins_the_split_message(tmp_path: Path) -> None:
    log = tmp_path / "dmesg.log"
    log.write_text(PROBE)
    reader = TextLogReader(
        path=log, node="n", cluster="c", state_path=tmp_path / "s.json", boot_time=BOOT
    )
    try:
        batch = reader.poll()
    finally:
        reader.close()
    assert batch.dead == []
    [ev] = batch.events
    assert isinstance(ev, XidEvent)
    assert (ev.code, ev.pci_bus_id) == (79, "0000:b3:00.0")


# -- redacted bus ids -------------------------------------------------------------------------
def test_a_redacted_bus_id_is_an_xid_of_an_unknown_gpu() -> None:
    for redacted in ("PCI:...", "PCI:xxxx:xx:xx", "PCI:0000:XX:00", "0000:XX:00.0", "PCI:…"):
        ev = xid(f"[ 1.0] NVRM: Xid ({redacted}): 79, pid=1234, name=python3, GPU has fallen")
        assert (ev.code, ev.pci_bus_id, ev.pid) == (79, "", 1234), redacted
    assert xid("[ 1.0] NVRM: Xid (PCI:xxxx:xx:xx): 13, Graphics Exception").code == 13
    ev = xid("[ 1.0] nvidia-nvswitch0: SXid (PCI:XXXX:XX:XX.X): 20034, Fatal, Link 48")
    assert (ev.code, ev.sxid, ev.pci_bus_id) == (20034, True, "")
    for line in (
        "[ 1.0] NVRM: GPU 0000:XX:00.0: GPU has fallen off the bus.",
        "[ 1.0] NVRM: The NVIDIA GPU ... has fallen off the bus and is not responding to commands",
    ):
        assert (xid(line).code, xid(line).pci_bus_id) == (79, "")
    # A bus id that is wrong rather than blanked out is still a dead letter.
    for line in ("[1.0] NVRM: Xid (PCI:zz:66:00): 13, x", "[1.0] NVRM: Xid (): 13, x"):
        assert isinstance(parse_line(line.encode(), CTX), RecordError), line


# -- what is not a fall-off -------------------------------------------------------------------
def test_mentions_that_are_not_the_driver_saying_a_gpu_fell_off_are_not_records() -> None:
    for line in (
        "[ 2.0] NVRM: *** BR04 has fallen off the bus after we tried to train it to Gen2!",
        "gpud[811]: XID 79(GPU has fallen off the bus) detected on PCI:0000:ae:00",
        "[ 2.0] NVRM: The NVIDIA GPU 0000:b3:00.0",  # a header alone says nothing yet
        "[ 2.0] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x22:0x56:894)",
        "[ 2.0] NVRM: GPU at PCI:0000:05:00: GPU-97363126-e553-8dd4-9ad8-56844b42694a",
        "[ 2.0] NVRM: GPU 0000:05:00.0: GPU serial number is 0325015054694.",
    ):
        assert parse_line(line.encode(), CTX) is None, line
        assert read(line + "\n") == [], line


# -- one fault, one incident ------------------------------------------------------------------
XID79 = (
    "NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
)
DEV_PRINTF = "NVRM: GPU 0000:91:00.0: GPU has fallen off the bus."
WHOLE_PROBE = (
    "NVRM: The NVIDIA GPU 0000:91:00.0\nNVRM: (PCI ID: 10de:2330) installed in this system "
    "has\nNVRM: fallen off the bus and is not responding to commands."
)
UUID = "GPU-b6c3b2be-c55b-d076-fa0e-d464e4c7e08b"


def _node(c: Cluster) -> None:
    c.node("n1", 0)
    c.pod("n1", "trainer-0", 1)
    c.bind("n1", 2, UUID, "0000:91:00.0", ["trainer-0"])


def test_the_xid_line_and_its_fall_off_lines_are_one_incident_of_one_episode() -> None:
    """[gpud]: the Xid 79 line, then 4 us later the NV_DEV_PRINTF line (and here the probe
    message seconds later): one gpu_degraded, one episode, every line evidence."""
    c = Cluster()
    _node(c)
    kmsg(c, "n1", 600.0, XID79)
    kmsg(c, "n1", 600.000004, DEV_PRINTF)
    kmsg(c, "n1", 605.0, WHOLE_PROBE)
    c.tick(1800.0)
    revisions = run(c.events)
    [inc] = of_type(revisions, "gpu_degraded")
    assert inc.attributes["xids"] == "79"
    assert [g.pci_bus_id for g in inc.gpus] == ["0000:91:00.0"]
    assert len(inc.evidence) == 3
    assert of_type(revisions, "xid_repeat") == []
    assert len({r.id for r in revisions}) == 1


def test_a_fall_off_without_an_xid_number_raises_what_xid_79_raises() -> None:
    """NVSentinel#155: the probe message with no Xid line at all. Before, nothing."""
    c = Cluster()
    _node(c)
    kmsg(c, "n1", 600.0, WHOLE_PROBE)
    c.tick(1800.0)
    alone = run(c.events)
    d = Cluster()
    _node(d)
    kmsg(d, "n1", 600.0, XID79)
    d.tick(1800.0)
    with_xid = run(d.events)
    assert [(r.type, r.severity, r.action) for r in of_type(alone, "gpu_degraded")] == [
        (r.type, r.severity, r.action) for r in of_type(with_xid, "gpu_degraded")
    ]
    assert len(of_type(alone, "gpu_degraded")) == 1


# -- never a traceback ------------------------------------------------------------------------
SHAPES = st.sampled_from(
    [
        b"NVRM: GPU ",
        b"NVRM: The NVIDIA GPU ",
        b"NVRM: fallen off the bus",
        b" has fallen off the bus",
        b"NVRM: Xid (PCI:",
        b"NVRM: Xid (",
        b"\n",
        b"#012",
        b"0000:b3:00.0",
        b"xx:xx",
        b"...",
    ]
)
PREFIXES = st.sampled_from([b"", b"[ 1.5] ", b"6,1,2,-;", b"Dec  1 01:02:03 h kernel: ", b"  "])


def _check(result: object) -> None:
    assert result is None or isinstance(result, XidEvent | RecordError | Untimed | XidFields)
    if isinstance(result, RecordError):
        assert not result.reason.startswith("internal parser error"), result.reason
    if isinstance(result, XidEvent):
        encode(result)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(PREFIXES, st.lists(SHAPES, max_size=4), st.binary(max_size=20))))
def test_no_line_sequence_near_the_fall_off_shapes_raises(
    lines: list[tuple[bytes, list[bytes], bytes]],
) -> None:
    reader = LineReader()
    for prefix, parts, noise in lines:
        raw = prefix + b"".join(parts) + noise
        _check(parse_line(raw, CTX))
        _check(reader.parse(raw, CTX))
        _check(parse_message(raw.decode("utf-8", "replace")))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=120), max_size=6))
def test_no_byte_string_raises_in_the_line_reader(lines: list[bytes]) -> None:
    reader = LineReader()
    for raw in lines:
        _check(reader.parse(raw, CTX))
