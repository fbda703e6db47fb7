"""The XID line parser over every shape the kernel prints, with real lines from public sources.

Sources of the real lines (quoted verbatim in the message part; the framing
around them is ours where the source gave the bare message):

[drv]  NVIDIA/open-gpu-kernel-modules, src/nvidia/src/kernel/gpu/rc/kernel_rc.c,
       krcReportXid_IMPL: the format strings "NVRM: Xid (PCI:%04x:%02x:%02x[ GPU-I:%02u
       [ GPU-CI:%02u]]): %d, pid=%s, name=%s, %s%s" and " caused by previous Xid %d".
[nvs]  NVIDIA/NVSentinel, health-monitors/syslog-health-monitor/pkg/xid/parser/csv_test.go
       (XID 149 NETIR_LINK_EVT, 13 with pid='<unknown>', 32, 46 minimal, 154, malformed lines).
[nvs-e2e] NVIDIA/NVSentinel e2e tests: "kernel: [123.456789] nvidia-nvswitch0: SXid
       (PCI:0000:c3:00.0): 20009, Non-fatal, Link 28 RX Short Error Rate".
[gpud] leptonai/gpud, components/accelerator/nvidia/error/xid/README.md (dmesg --ctime
       output, XID 13 and 109) and its xid package comments ("NVRM: Xid (0000:03:00): 14,
       Channel 00000001", the legacy form without "PCI:").
[gpud-sxid] leptonai/gpud sxid tests: "nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028,
       Non-fatal, Link 32 egress non-posted PRIV error (First)".
[a100] NVIDIA A100 GPU memory error management docs, MIG-attributed XID 94:
       "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9).
       RST: No, D-RST: No".
[ec]   NVIDIA/open-gpu-kernel-modules, src/nvidia/src/kernel/gpu/arch/ampere/
       kern_gpu_error_cont_ga100.c, _gpuGenerateErrorLog's examples: the same MIG-attributed
       XID 94 as [a100] ("Contained Error with SMC Partition attribution"), and XID 94/95
       without attribution on the same GPU ("NVRM: Xid (PCI:0000:01:00): 95, pid=7062,
       Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No").
[gpud-mig] leptonai/gpud, its NVRM XID extraction tests: "Contained error with MIG enabled"
       (the [a100] line) beside "Contained error with MIG disabled" (the same without GPU-I).
[dra]  kubernetes-sigs/dra-driver-nvidia-gpu#904 ("XID Reporting with MIG"): on a MIG GPU
       the kernel log line and the NVML event may carry a valid GPU instance id, a compute
       instance id, or both; XID events are watched through the parent GPU's handle.
[forum] Ubuntu forums syslog excerpt: "May 10 22:25:01 jambi kernel: [176830.774761] NVRM:
       Xid (0000:03:00): 13, 0003 00000000 00008297 00001098 00000000 00000044".
[bugs] public bug reports of XID 79 followed by 154 ("NVRM: Xid (PCI:0000:01:00): 79, GPU has
       fallen off the bus." / "...: 154, GPU recovery action changed from 0x0 (None) to 0x2
       (Node Reboot Required)"), and of XID 45 "caused by previous Xid 149" after an NVLink5
       fault (driver format [drv]).
[pub]  the real lines of tests/data/kmsg/public_prefixes.log (sources listed in its header):
       NVIDIA/NVSentinel#155, NVIDIA/open-gpu-kernel-modules#1150, Bumblebee-Project/
       Bumblebee#677 and #329, docs.nvidia.com/deploy/xid-errors ("[…]"), leptonai/gpud#870
       ("syslog:err   : <ISO>"), leptonai/gpud#1174. Where no public XID line in a prefix
       shape was found (line number and tab, <prio>, locale month names, Talos'
       "10.69.128.243: kern:    info: [<ISO>]:" from siderolabs/talos#10129), the framing
       around a real [pub] message is ours, built from the tool's documented output format.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.xid.lines import (
    LineContext,
    Untimed,
    parse_kmsg_record,
    parse_line,
    parse_line_or_untimed,
    parse_message,
    unescape_kmsg,
)
from schemas.codec import RecordError, decode_event, encode
from schemas.events import XidEvent

BOOT = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)
CTX = LineContext(node="gpu-node-01", cluster="prod", boot_time=BOOT, boot_id="b-1", year=2026)


def xid(line: bytes | str, ctx: LineContext = CTX) -> XidEvent:
    raw = line.encode() if isinstance(line, str) else line
    result = parse_line(raw, ctx)
    assert isinstance(result, XidEvent), result
    # Every event survives the wire format.
    assert decode_event(encode(result)) == result
    return result


def bad(line: bytes | str, ctx: LineContext = CTX) -> RecordError:
    raw = line.encode() if isinstance(line, str) else line
    result = parse_line(raw, ctx)
    assert isinstance(result, RecordError), result
    return result


# --- message shapes -------------------------------------------------------------------------


def test_modern_form_with_pid_and_name() -> None:
    # [gpud] dmesg --ctime output
    ev = xid(
        "[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, "
        "name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"
    )
    assert (ev.code, ev.pci_bus_id, ev.pid, ev.process) == (
        109,
        "0000:cb:00.0",
        1797828,
        "pt_main_thread",
    )
    assert ev.message == "Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005"
    assert ev.time == datetime(2024, 8, 30, 11, 43, 14, tzinfo=UTC)
    assert (ev.source, ev.sxid, ev.node, ev.cluster) == ("dmesg", False, "gpu-node-01", "prod")


def test_quoted_unknown_pid_and_name() -> None:
    # [nvs] XID 13 with pid='<unknown>'
    ev = xid(
        "[ 5.000001] NVRM: Xid (PCI:0000:b5:00): 13, pid='<unknown>', name=<unknown>, "
        "Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address"
    )
    assert (ev.code, ev.pid, ev.process) == (13, None, "")
    assert ev.message == "Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address"
    assert ev.time == BOOT + timedelta(seconds=5, microseconds=1)


def test_missing_pid() -> None:
    # [bugs] the driver's "no process" form: "NVRM: Xid (...): %d, %s"
    ev = xid("[   77.5] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.")
    assert (ev.code, ev.pid, ev.process, ev.message) == (
        79,
        None,
        "",
        "GPU has fallen off the bus.",
    )


def test_pid_without_name_and_a_mig_gpu_instance() -> None:
    """[a100] [ec] [gpud-mig]: the driver attributes a contained error to MIG GPU instance 5
    of the GPU at 0000:01:00 (``GPU-I:%02u``). The bus id is the parent's (instances have
    none of their own), the instance is its own field, and the message is the driver's text
    after the colon, as on a GPU without MIG; pid without ``name=``."""
    ev = xid(
        "[1.0] NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel "
        "(0x9). RST: No, D-RST: No"
    )
    assert (ev.code, ev.pid, ev.process, ev.pci_bus_id) == (94, 7194, "", "0000:01:00.0")
    assert (ev.gpu_instance, ev.compute_instance) == (5, None)
    assert ev.message == "Contained: CE User Channel (0x9). RST: No, D-RST: No"


def test_an_xid_without_attribution_on_a_mig_gpu_names_no_instance() -> None:
    """[ec]: the uncontained XID 95 on the same MIG GPU carries no ``GPU-I``: it is
    device-level (every instance of the GPU is concerned), so no instance is named."""
    ev = xid(
        "[1.0] NVRM: Xid (PCI:0000:01:00): 95, pid=7062, Uncontained: LTC TAG (0x2, 0x1). "
        "RST: Yes, D-RST: No"
    )
    assert (ev.code, ev.pci_bus_id, ev.gpu_instance, ev.compute_instance) == (
        95,
        "0000:01:00.0",
        None,
        None,
    )
    assert ev.message == "Uncontained: LTC TAG (0x2, 0x1). RST: Yes, D-RST: No"


def test_mig_gpu_and_compute_instance() -> None:
    """[drv] ``"PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u"``: both instances attributed
    (the driver prints ``GPU-CI`` only after ``GPU-I``), the id parsed as decimal."""
    ev = xid("[1.0] NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:02): 13, pid=9, name=a, Graphics")
    assert (ev.code, ev.pid, ev.process, ev.pci_bus_id) == (13, 9, "a", "0000:3b:00.0")
    assert (ev.gpu_instance, ev.compute_instance) == (1, 2)
    assert ev.message == "Graphics"
    # [drv] "%02u" pads, never truncates nor writes hex: GPU instance 10 is "10", not "0a".
    ev = xid("[1.0] NVRM: Xid (PCI:0000:3b:00 GPU-I:10 GPU-CI:00): 31, Ch 00000010")
    assert (ev.gpu_instance, ev.compute_instance, ev.message) == (10, 0, "Ch 00000010")


def test_mig_instance_in_every_framing() -> None:
    """[a100] The instance is parsed from the message, so kmsg, journal and syslog framings
    of one MIG XID agree on it (and the SXid of a switch never has one)."""
    message = (
        "NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel "
        "(0x9). RST: No, D-RST: No"
    )
    framed = (
        f"6,4711,5678901234,-;{message}",
        orjson.dumps({"MESSAGE": message, "__REALTIME_TIMESTAMP": "1764576000000000"}).decode(),
        f"Nov 30 10:00:00 gpu-node-01 kernel: {message}",
    )
    for line in framed:
        ev = xid(line)
        assert (ev.pci_bus_id, ev.gpu_instance, ev.compute_instance) == ("0000:01:00.0", 5, None)
        assert ev.message.startswith("Contained: CE User Channel")
    assert xid("[1.0] nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, x").gpu_instance is None


def test_minimal_form_without_text() -> None:
    # [nvs] "Minimal XID format"
    ev = xid("[2.0] NVRM: Xid (PCI:0000:3f:00): 46")
    assert (ev.code, ev.pci_bus_id, ev.message) == (46, "0000:3f:00.0", "")


def test_legacy_form_without_pci_prefix() -> None:
    # [gpud] xid package comment; [forum] syslog excerpt
    assert xid("[9.9] NVRM: Xid (0000:03:00): 14, Channel 00000001").pci_bus_id == "0000:03:00.0"
    ev = xid(
        "May 10 22:25:01 jambi kernel: [176830.774761] NVRM: Xid (0000:03:00): 13, "
        "0003 00000000 00008297 00001098 00000000 00000044"
    )
    assert (ev.code, ev.pci_bus_id, ev.source) == (13, "0000:03:00.0", "syslog")
    # The syslog wall time wins over the relative [secs] inside the message.
    assert ev.time == datetime(2026, 5, 10, 22, 25, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("bus", "canonical"),
    [
        ("PCI:00000001:3b:00", "0001:3b:00.0"),  # 32-bit domain, zero-padded to 8 digits
        ("PCI:10000:01:00", "10000:01:00.0"),  # domain above 0xffff (VMD, some hypervisors)
        ("PCI:0018:01:00", "0018:01:00.0"),  # [nvs] GB200 domains
        ("PCI:0000:9B:00", "0000:9b:00.0"),
    ],
)
def test_pci_domains(bus: str, canonical: str) -> None:
    assert xid(f"[1.0] NVRM: Xid ({bus}): 79, GPU has fallen off the bus.").pci_bus_id == canonical


def test_nvlink5_codes_keep_their_subcode_text() -> None:
    # [nvs] "NL5 XID"
    text = (
        "NETIR_LINK_EVT  Fatal   XC0 i0 Link 09 "
        "(0x025525c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"
    )
    ev = xid(f"[3.0] NVRM: Xid (PCI:0018:01:00): 149, {text}")
    assert (ev.code, ev.pci_bus_id, ev.message) == (149, "0018:01:00.0", text)
    for code in range(144, 151):
        assert xid(f"[3.0] NVRM: Xid (PCI:0018:01:00): {code}, {text}").code == code


def test_154_names_the_recovery_action() -> None:
    # [nvs] XID 154; [bugs] 0x2 (Node Reboot Required)
    ev = xid(
        "[4.0] NVRM: Xid (PCI:0008:01:00): 154, GPU recovery action changed from 0x0 (None) "
        "to 0x1 (GPU Reset Required)"
    )
    assert (ev.code, ev.recovery_action) == (154, "GPU Reset Required")
    ev = xid(
        "[4.0] NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 (None) "
        "to 0x2 (Node Reboot Required)"
    )
    assert ev.recovery_action == "Node Reboot Required"
    # An action without a name keeps its number.
    assert (
        xid(
            "[4.0] NVRM: Xid (PCI:0000:01:00): 154, GPU recovery action changed from 0x0 to 0x5"
        ).recovery_action
        == "0x5"
    )


def test_45_names_the_xid_it_follows() -> None:
    # [drv] rootCauseXidStr, appended right after the message
    ev = xid(
        "[5.0] NVRM: Xid (PCI:0018:01:00): 45, pid=4242, name=python3, Ch 00000010 "
        "caused by previous Xid 149"
    )
    assert (ev.code, ev.caused_by, ev.pid, ev.process) == (45, 149, 4242, "python3")
    assert xid("[5.0] NVRM: Xid (PCI:0018:01:00): 45, pid=1, name=x, Ch 00000010").caused_by is None


def test_sxid_lines() -> None:
    # [gpud-sxid]
    ev = xid(
        "[6.0] nvidia-nvswitch3: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress "
        "non-posted PRIV error (First)"
    )
    assert (ev.sxid, ev.code, ev.pci_bus_id, ev.pid) == (True, 12028, "0000:05:00.0", None)
    assert ev.message == "Non-fatal, Link 32 egress non-posted PRIV error (First)"
    # [nvs-e2e] a bare "kernel:" prefix in front of dmesg's relative time
    ev = xid(
        "kernel: [123.456789] nvidia-nvswitch0: SXid (PCI:0000:c3:00.0): 20009, Non-fatal, "
        "Link 28 RX Short Error Rate"
    )
    assert (ev.sxid, ev.code, ev.time) == (True, 20009, BOOT + timedelta(seconds=123.456789))


def test_unknown_codes_are_kept() -> None:
    # [nvs] "Unknown XID": never dropped, classed `unknown` by the core's policy.
    assert xid("[1.0] NVRM: Xid (PCI:0000:66:00): 999, pid=1234, name=test").code == 999


@pytest.mark.parametrize(
    ("code", "field", "why"),
    [
        ("-79", "message", "unrecognised XID line"),  # no sign in the driver's %d of a code
        ("100000000000000000000000", "code", "XID code out of range"),
        ("999999999", "code", "XID code out of range"),
        ("65536", "code", "XID code out of range"),
    ],
)
def test_a_code_no_driver_prints_is_a_dead_line_with_its_reason(
    code: str, field: str, why: str
) -> None:
    """Never an exception, never an event the codec refuses later (its bound: 0 to 65535)."""
    error = bad(f"[1.0] NVRM: Xid (PCI:0000:66:00): {code}, pid=1234, name=test")
    assert (error.field, error.reason.startswith(why)) == (field, True), error
    sxid = bad(f"[1.0] nvidia-nvswitch3: SXid (PCI:0000:05:00.0): {code}, Non-fatal")
    assert sxid.field == field


def test_the_largest_code_in_range_is_kept_and_an_absurd_cause_is_not_a_fact() -> None:
    assert xid("[1.0] NVRM: Xid (PCI:0000:66:00): 65535, pid=1, name=x").code == 65535
    ev = xid(
        "[5.0] NVRM: Xid (PCI:0018:01:00): 45, pid=1, name=x, Ch 00000010 "
        "caused by previous Xid 999999999"
    )
    assert (ev.code, ev.caused_by) == (45, None)


# --- framings -------------------------------------------------------------------------------


def test_kmsg_record() -> None:
    ev = xid("4,9921,9370042162,-;NVRM: Xid (PCI:0000:17:00): 119, pid=5678, name=python3, Timeout")
    assert ev.id == "kmsg:gpu-node-01:b-1:9921"
    assert ev.time == BOOT + timedelta(microseconds=9370042162)
    assert (ev.source, ev.code, ev.pci_bus_id) == ("kmsg", 119, "0000:17:00.0")


def test_kmsg_record_with_caller_field_and_escapes() -> None:
    # Kernels with CONFIG_PRINTK_CALLER add ",caller=T123"; kmsg escapes \n and non-ASCII bytes.
    raw = (
        rb"3,17,1000000,-,caller=T812;NVRM: Xid (PCI:0000:3b:00): 13, pid=7, name=caf\xc3\xa9, "
        rb"Graphics Exception\x0aESR 0x1 \x5c done"
    )
    ev = xid(raw)
    assert (ev.process, ev.message) == ("café", "Graphics Exception ESR 0x1 \\ done")
    assert ev.id == "kmsg:gpu-node-01:b-1:17"


def test_kmsg_record_split() -> None:
    record = parse_kmsg_record(b"6,42,100,-;hello\n SUBSYSTEM=pci\n DEVICE=+pci:0000:3b:00.0")
    assert not isinstance(record, RecordError)
    assert (record.prio, record.seq, record.usec, record.flags, record.message) == (
        6,
        42,
        100,
        "-",
        "hello",
    )
    assert isinstance(parse_kmsg_record(b"no separator"), RecordError)
    assert isinstance(parse_kmsg_record(b"6,x,1,-;text"), RecordError)
    assert isinstance(parse_kmsg_record(b"6," + b"9" * 5000 + b",1,-;text"), RecordError)
    assert unescape_kmsg(rb"a\x0ab\x5c") == b"a\nb\\"


def test_dmesg_ctime_uses_the_given_zone() -> None:
    ctx = LineContext(node="n", tz=ZoneInfo("Europe/Berlin"))
    ev = xid("[Tue Dec  1 01:02:03 2026] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off", ctx)
    assert ev.time == datetime(2026, 12, 1, 0, 2, 3, tzinfo=UTC)


def test_dmesg_iso_and_rsyslog_iso() -> None:
    ev = xid("2026-12-01T01:02:03,123456+00:00 NVRM: Xid (PCI:0000:3b:00): 48, DBE")
    assert (ev.time, ev.source) == (datetime(2026, 12, 1, 1, 2, 3, 123456, tzinfo=UTC), "dmesg")
    ev = xid("2026-12-01T01:02:03.5+01:00 gpu-node-01 kernel: NVRM: Xid (PCI:0000:3b:00): 48, DBE")
    assert (ev.time, ev.source) == (datetime(2026, 12, 1, 0, 2, 3, 500000, tzinfo=UTC), "syslog")


def test_journalctl_short_and_precise() -> None:
    ev = xid("Dec 01 01:02:03.250000 gpu-node-01 kernel: NVRM: Xid (PCI:0000:3b:00): 79, gone")
    assert ev.time == datetime(2026, 12, 1, 1, 2, 3, 250000, tzinfo=UTC)


def test_journal_json() -> None:
    entry = {
        "__CURSOR": "s=0b1;i=4711;b=b-1;m=1a;t=1;x=2",
        "__REALTIME_TIMESTAMP": "1764550923123456",
        "_BOOT_ID": "b-1",
        "MESSAGE": "NVRM: Xid (PCI:0000:9b:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
    }
    ev = xid(orjson.dumps(entry))
    assert ev.time == datetime(2025, 12, 1, 1, 2, 3, 123456, tzinfo=UTC)
    assert (ev.source, ev.code, ev.pci_bus_id) == ("journal", 79, "0000:9b:00.0")
    assert ev.id.startswith("journal:gpu-node-01:")
    # journald writes a message that is not valid UTF-8 as an array of bytes.
    as_bytes = {**entry, "MESSAGE": list(b"NVRM: Xid (PCI:0000:9b:00): 79, bad \xff byte")}
    assert xid(orjson.dumps(as_bytes)).message == "bad \ufffd byte"
    # Some systemd versions print '"KEY" : "value"'.
    spaced = orjson.dumps(as_bytes).replace(b'":', b'" : ')
    assert xid(spaced).message == "bad \ufffd byte"


# --- errors and skips -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        b"[1.0] NVRM: Xid (PCI:0000:66:00): abc, pid=2280636",  # [nvs] invalid number
        b"[1.0] NVRM: Xid : 32, pid=2280636",  # [nvs] missing PCI
        b"[1.0] NVRM: Xid (PCI:zz:66:00): 13, x",
        b"[1.0] NVRM: Xid (PCI:0000:66:00): 13 no comma",
        b"[1.0] NVRM: Xid (PCI:0000:66:00): 99999999999999999999999, x",
        b"[1.0] nvidia-nvswitch3: SXid (PCI:0000:c1:00.0): garbled, Fatal",
        b"NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",  # no timestamp
        b"[what] NVRM: Xid (PCI:0000:01:00): 79, x",
        b"Dec 32 01:02:03 host kernel: NVRM: Xid (PCI:0000:01:00): 79, x",
        b"3,1,99999999999999999999,-;NVRM: Xid (PCI:0000:01:00): 79, x",
        b'{"MESSAGE":"NVRM: Xid (PCI:0000:01:00): 79, x"}',  # no __REALTIME_TIMESTAMP
        b'{"MESSAGE":"NVRM: Xid (PCI:0000:01:00): 79, x"',  # truncated JSON
    ],
)
def test_lines_that_look_like_xids_but_do_not_parse_are_errors(line: bytes) -> None:
    error = bad(line)
    assert error.reason
    assert not error.reason.startswith("internal")


def test_relative_times_need_a_boot_time() -> None:
    no_boot = LineContext(node="n")
    assert "boot time" in bad(b"[1.0] NVRM: Xid (PCI:0000:01:00): 79, x", no_boot).reason
    assert "boot time" in bad(b"6,1,1,-;NVRM: Xid (PCI:0000:01:00): 79, x", no_boot).reason
    no_year = LineContext(node="n")
    assert (
        "year"
        in bad(b"Dec  1 01:02:03 h kernel: NVRM: Xid (PCI:0000:01:00): 79, x", no_year).reason
    )


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"[    0.000000] Linux version 6.8.0-45-generic (buildd@lcy02-amd64-075)",
        b"6,4470,3023054000,-;EXT4-fs (nvme0n1p2): mounted filesystem",
        b"[  12.1] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.54.15",
        b"[  12.1] NVRM: GPU at PCI:0000:66:00: GPU-12345678-1234-5678-9abc-def012345678",
        b"[  99.0] gpud[811]: scanning dmesg for Xid errors",  # mentions Xid, is not one
        b'{"MESSAGE":"usb 1-1: new device","__REALTIME_TIMESTAMP":"1"}',
        b'{"MESSAGE":[104,105],"__REALTIME_TIMESTAMP":"1"}',
    ],
)
def test_other_lines_are_skipped(line: bytes) -> None:
    assert parse_line(line, CTX) is None


def test_parse_message_alone() -> None:
    fields = parse_message("NVRM: Xid (PCI:0000:66:00): 32, pid=2280636, name=train.3, Channel ID")
    assert not isinstance(fields, RecordError)
    assert fields is not None
    assert (fields.code, fields.pid, fields.process, fields.message) == (
        32,
        2280636,
        "train.3",
        "Channel ID",
    )


def test_ids_are_deterministic() -> None:
    line = b"[1.5] NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus."
    first, again = xid(line), xid(line)
    assert first.id == again.id
    assert first.id.startswith("log:gpu-node-01:")
    assert xid(line.replace(b"1.5", b"1.6")).id != first.id
    other_node = LineContext(node="gpu-node-02", boot_time=BOOT)
    assert xid(line, other_node).id != first.id


# --- pasted prefixes ------------------------------------------------------------------------

# [pub] Bumblebee#677 and gpu-operator-style messages, real; the framings below are ours.
MSG_32 = "NVRM: Xid (PCI:0000:01:00): 32, Channel ID 00000000 intr 00004000"
MSG_48 = "NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable"
MSG_79 = "NVRM: Xid (PCI:0000:04:00): 79, GPU has fallen off the bus"
REL = BOOT + timedelta(seconds=24128, microseconds=828315)
WALL = datetime(2026, 12, 2, 10, 43, 35, tzinfo=UTC)
ISO_TIME = datetime(2025, 5, 27, 4, 18, 56, 89671, tzinfo=UTC)


@pytest.mark.parametrize(
    ("line", "time"),
    [
        (f"12\t[24128.828315] {MSG_32}", REL),  # an editor's line number and a tab
        (f"   12\t[24128.828315] {MSG_32}", REL),  # cat -n
        (f"<3>[24128.828315] {MSG_32}", REL),  # dmesg -r
        (f"kern  :err   : [24128.828315] {MSG_32}", REL),  # dmesg -x
        (f"syslog:err   : 2025-05-27T04:18:56,089671+00:00 {MSG_79}", ISO_TIME),  # [pub] gpud#870
        (f"<3>2025-05-27T04:18:56,089671+00:00 {MSG_79}", ISO_TIME),
        (f"kern.err 2025-05-27T04:18:56.089671+00:00 worker4 kernel: {MSG_79}", ISO_TIME),
        (f"kern.err: 2025-05-27T04:18:56.089671Z {MSG_79}", ISO_TIME),
        (f"10.69.128.243: kern:     err: [2025-05-27T04:18:56.089671123Z]: {MSG_79}", ISO_TIME),
        (f"[123] {MSG_32}", BOOT + timedelta(seconds=123)),  # whole seconds since boot
        (f"[  123] {MSG_32}", BOOT + timedelta(seconds=123)),
        (f"Dez  2 10:43:35 worker4 kernel: {MSG_48}", WALL),  # de_DE syslog
        (f"déc.  2 10:43:35 worker4 kernel: {MSG_48}", WALL),  # fr_FR syslog
        (f"dic  2 10:43:35 worker4 kernel: {MSG_48}", WALL),  # es_ES syslog
        (f"Dec 02 10:43:35.250000 worker4 kernel: {MSG_48}", WALL + timedelta(seconds=0.25)),
        (f"[Mi Dez  2 10:43:35 2026] {MSG_48}", WALL),  # de_DE dmesg -T
        (f"[mer. déc.  2 10:43:35 2026] {MSG_48}", WALL),  # fr_FR dmesg -T
        (f"[Wed Dec  2 10:43:35 2026] {MSG_48}", WALL),
        (f"17\tDez  2 10:43:35 worker4 kernel: [240314.528856] {MSG_48}", WALL),
    ],
)
def test_pasted_prefixes_that_carry_a_time_are_read(line: str, time: datetime) -> None:
    """Labels, line numbers and locale month names are peeled off; the time in them is used."""
    ev = xid(line)
    assert ev.time == time
    assert ev.code in (32, 48, 79)


PREFIXES_WITHOUT_TIME = [
    "",  # [pub] NVSentinel#155, Bumblebee#329, gpud#1174
    "kernel: ",  # [pub] open-gpu-kernel-modules#1150
    "[…] ",  # [pub] docs.nvidia.com xid-errors
    "[...] ",
    "12\t",
    "<3>",
    "kern  :err   : ",
    "[    ....    ] ",
    "Foo  2 10:43:35 worker4 kernel: ",  # a month name we do not know
    "[what] ",
]


@pytest.mark.parametrize("prefix", PREFIXES_WITHOUT_TIME)
def test_a_line_without_a_usable_time_takes_the_default_time(prefix: str) -> None:
    """Without ``default_time`` such a line stays a RecordError (the live readers' contract);
    with it, the line is an event at that time, with the same id either way."""
    line = f"{prefix}{MSG_79}".encode()
    assert isinstance(parse_line(line, CTX), RecordError)
    default = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    ev = xid(line, LineContext(node="gpu-node-01", cluster="prod", default_time=default))
    assert (ev.time, ev.code, ev.pci_bus_id) == (default, 79, "0000:04:00.0")
    untimed = parse_line_or_untimed(line, LineContext(node="gpu-node-01", default_time=default))
    assert isinstance(untimed, Untimed)
    assert untimed.error.field == "time"
    assert untimed.event_id == ev.id


def test_relative_times_without_boot_time_take_the_default_time() -> None:
    default = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    ctx = LineContext(node="n", default_time=default)
    for line in (f"[24128.828315] {MSG_32}", f"6,7,24128828315,-;{MSG_32}"):
        result = parse_line_or_untimed(line.encode(), ctx)
        assert isinstance(result, Untimed)
        assert "boot time is unknown" in result.error.reason
        assert xid(line, ctx).time == default
    assert xid(f"6,7,24128828315,-;{MSG_32}", ctx).source == "kmsg"
    # journald JSON without __REALTIME_TIMESTAMP: the same rule.
    assert xid(orjson.dumps({"MESSAGE": MSG_32}), ctx).time == default
    # A boot time still wins over the default for relative lines.
    with_boot = LineContext(node="n", boot_time=BOOT, default_time=default)
    assert xid(f"[24128.828315] {MSG_32}", with_boot).time == REL


def test_default_time_never_hides_a_bad_xid_part() -> None:
    ctx = LineContext(node="n", default_time=BOOT)
    assert "unrecognised XID" in bad(b"NVRM: Xid (PCI:0000:66:00): abc, pid=2280636", ctx).reason
    assert parse_line(b"[...] NVRM: loading NVIDIA UNIX x86_64 Kernel Module", ctx) is None


# --- never raises ---------------------------------------------------------------------------

PREFIXES = st.sampled_from(
    [
        b"",
        b"[ 12.5] ",
        b"[Mon Dec  1 01:02:03 2026] ",
        b"6,12,345,-;",
        b"Dec  1 01:02:03 host kernel: ",
        b"2026-12-01T01:02:03+00:00 ",
        b'{"__REALTIME_TIMESTAMP":"1","MESSAGE":"',
    ]
)
BODIES = st.sampled_from([b"NVRM: Xid (", b"NVRM: Xid (PCI:", b"SXid (", b"Xid", b""])


def _check(result: object) -> None:
    assert result is None or isinstance(result, XidEvent | RecordError)
    if isinstance(result, RecordError):
        assert not result.reason.startswith("internal parser error"), result.reason
    if isinstance(result, XidEvent):
        encode(result)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_never_raises_on_arbitrary_bytes(raw: bytes) -> None:
    _check(parse_line(raw, CTX))


@settings(max_examples=500, deadline=None)
@given(PREFIXES, BODIES, st.binary(max_size=120), st.text(max_size=80))
def test_never_raises_near_the_xid_shapes(
    prefix: bytes, body: bytes, noise: bytes, text: str
) -> None:
    for raw in (
        prefix + body + noise,
        prefix + body + text.encode("utf-8", "surrogatepass"),
        prefix + b"NVRM: Xid (PCI:0000:3b:00): " + text.encode("utf-8", "surrogatepass"),
        prefix + b"NVRM: Xid (PCI:0000:3b:00): 13, pid=" + noise,
    ):
        _check(parse_line(raw, CTX))
        _check(parse_line(raw, LineContext(node="n")))


PASTED_PREFIXES = st.sampled_from(
    [p.encode() for p in PREFIXES_WITHOUT_TIME]
    + [b"[ 12.5] ", b"12\t", b"<3>", b"kern.err ", b"10.0.0.5: kern: err: ", b"Dez  1 01:02:03 h "]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(PASTED_PREFIXES, max_size=3), st.binary(max_size=40), st.text(max_size=40))
def test_with_a_default_time_no_xid_line_is_refused_for_its_prefix(
    prefixes: list[bytes], noise: bytes, text: str
) -> None:
    """Any stack of pasted prefixes in front of a good XID message gives an event."""
    ctx = LineContext(node="n", default_time=BOOT)
    message = b"NVRM: Xid (PCI:0000:3b:00): 13, pid=1, name=x, Graphics"
    result = parse_line(b"".join(prefixes) + message, ctx)
    assert isinstance(result, XidEvent), result
    for raw in (noise + message, text.encode("utf-8", "surrogatepass") + b" " + message):
        _check(parse_line(raw, ctx))
        untimed = parse_line_or_untimed(raw, ctx)
        _check(untimed.event(ctx, BOOT) if isinstance(untimed, Untimed) else untimed)


@pytest.mark.parametrize(
    "raw",
    [
        "NVRM: Xid (PCI:0000:3b:00): 13, pid=\u00b2, name=x".encode(),
        "NVRM: Xid (PCI:0000:3b:00): 13, pid='\u00b2', name=x".encode(),
        b'{"MESSAGE": "NVRM: Xid (PCI:0000:3b:00): 13, pid=1", "__REALTIME_TIMESTAMP": "\\u00b2"}',
    ],
)
def test_a_digit_that_is_not_a_decimal_is_no_number(raw: bytes) -> None:
    """``str.isdigit()`` is true for a superscript two, which ``int()`` refuses (found by
    Hypothesis): a pid like that is no pid, a journal stamp like that no time."""
    result = parse_line(raw, LineContext(node="n", default_time=BOOT))
    _check(result)
    assert isinstance(result, XidEvent)
    assert result.code == 13
    assert result.pid in (None, 1)
