"""Kernel-log lines to :class:`~schemas.events.XidEvent`: the pure, fast XID line parser.

:func:`parse_line` takes one raw line in any framing a GPU node's kernel log comes in
(``/dev/kmsg``, dmesg with or without ``-T``/iso, syslog, ``journalctl -k`` text or JSON,
lines pasted into bug reports) and returns an ``XidEvent``, ``None`` (not an XID line, by
far the common case) or a :class:`~schemas.codec.RecordError`; it never raises. Framings
are told apart by content, never by file name. Ids are deterministic (``kmsg:<node>:<boot
id>:<seq>``, ``journal:...``, ``log:...``): reading a log twice gives the same events.

Traps: speed (``b"Xid" in raw`` rejects most lines before any decoding); a line that looks
like an XID but does not parse is a dead letter, never dropped (a new driver's format must
show); kmsg escapes bytes as ``\\xNN``; relative times need a boot time, syslog a year; MIG
``GPU-I:NN`` names an instance under the parent's bus id; a redacted bus id is an unknown
GPU, not a dead letter. Each framing and shape: docs/connectors.md, design notes.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, Final

from connectors.xid import falloff
from schemas import codec
from schemas.codec import RecordError
from schemas.events import XidEvent
from schemas.pci import canonical_bus_id
from schemas.types import MAX_XID_CODE

MARKER: Final = b"Xid"
"""Every XID and SXid line contains this; with :data:`connectors.xid.falloff.MARKER`, the
fast path rejects all others."""
_FALL_OFF: Final = falloff.MARKER
"""A module global, not an attribute lookup per line on the fast path."""
FALL_OFF_CODE: Final = 79
"""ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: what a fall-off message without a number is."""
_JSON_BYTES_MESSAGE: Final = re.compile(rb'"MESSAGE"\s*:\s*\[')
"""journald's MESSAGE as an array of bytes (``":"`` or ``" : "``, by systemd version)."""
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MAX_UPTIME_US: Final = 10**15
"""About 31 years: a larger kmsg ``usec`` is garbage, and would overflow ``datetime``."""
_MAX_DIGITS: Final = 9
"""XID codes and pids longer than this are not real (and would not fit the wire format)."""

_BUS = falloff.BUS_PATTERN
_REDACTED = r"(?P<redacted>(?:[0-9a-fA-F:.xX*#?_\u2026]|<[\w -]{0,20}>|(?i:redacted))+)"
"""A bus id the reporter blanked out: ``PCI:...``, ``PCI:xxxx:xx:xx``, ``0000:XX:00``."""
_PLACEHOLDER_RE: Final = re.compile(r"[xX*#?_<\u2026]|\.\.|redacted", re.IGNORECASE)
_ID = r"(?:PCI:)?(?:" + _BUS + "|" + _REDACTED + ")"
_XID_RE: Final = re.compile(
    r"NVRM: Xid \(" + _ID + r"(?P<mig>(?: GPU-C?I:\s?\d{1,5})*)\):\s*"
    r"(?P<code>\d+)(?:,\s?(?P<rest>.*))?\Z",
    re.DOTALL,
)
_SXID_RE: Final = re.compile(
    r"SXid \(" + _ID + r"\):\s*(?P<code>\d+)(?:,\s?(?P<rest>.*))?\Z", re.DOTALL
)
_PID_RE: Final = re.compile(
    r"pid=(?:'(?P<quoted>[^']*)'|(?P<bare>[^,\s]*))(?:,\s?name=(?P<name>[^,]*))?(?:,\s?|\Z)"
)
_MIG_RE: Final = re.compile(r"GPU-(C?I):\s?(\d+)")
"""``GPU-I:05`` / ``GPU-CI:00`` (the driver's ``%02u`` of a 16-bit id: at most 5 digits)."""
_CAUSED_BY_RE: Final = re.compile(r"caused by previous Xid (\d{1,9})")
_RECOVERY_RE: Final = re.compile(
    r"recovery action changed from (?P<old>\S+)(?: \((?P<old_name>[^)]*)\))? to "
    r"(?P<new>[^\s,]+)(?: \((?P<new_name>[^)]*)\))?"
)

_KMSG_RE: Final = re.compile(r"(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),(?P<flags>[^;,]*)[^;]*;")
_DMESG_REL_RE: Final = re.compile(r"\[\s*(?P<sec>\d+)(?:\.(?P<frac>\d{1,9}))?\]\s?")
"""``[ 5678.901234]``, and ``[123]`` (whole seconds, as some tools and bug reports print it)."""
_WORD: Final = r"[^\W\d_]{2,5}\.?"
"""A month or weekday name in any locale: ``Dec``, ``Dez``, ``déc.``, ``janv.``, ``Mi``."""
_DMESG_CTIME_RE: Final = re.compile(
    rf"\[{_WORD} (?P<mon>{_WORD}) +(?P<day>\d{{1,2}}) (?P<hms>\d\d:\d\d:\d\d) "
    r"(?P<year>\d{4})\]\s?"
)
_ISO: Final = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
_ISO_RE: Final = re.compile(rf"(?P<ts>{_ISO})\s+")
_BRACKET_ISO_RE: Final = re.compile(rf"\[(?P<ts>{_ISO})\]:?\s?")
"""Talos (``talosctl dmesg``): ``[2025-01-14T15:56:38.491526611Z]:``."""
_SYSLOG_RE: Final = re.compile(
    rf"(?P<mon>{_WORD}) +(?P<day>\d{{1,2}}) (?P<hms>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d{{1,9}}))?"
    r"\s+(?P<host>\S+)\s+"
)
_LINE_NUMBER_RE: Final = re.compile(r"\d{1,9}\t\s*")
"""An editor's or ``cat -n``'s line number and tab in front of a pasted line."""
_PRIORITY_RE: Final = re.compile(r"<\d{1,3}>\s*")
"""``dmesg -r`` / kmsg's raw ``<prio>``."""
_FACILITY: Final = "kern|user|mail|daemon|auth|authpriv|syslog|lpr|news|uucp|cron|ftp|local[0-7]"
_LEVEL: Final = "emerg|alert|crit|err|error|warn|warning|notice|info|debug"
_LABEL_RE: Final = re.compile(
    rf"(?:\S+:\s+)?(?:{_FACILITY})(?:\s*:\s*(?:{_LEVEL})\s*:|\.(?:{_LEVEL})(?=[\s:]):?)\s*"
)
"""``kern  :err   :`` (``dmesg -x``), ``syslog:err :``, ``kern.err``, Talos' ``n: kern: err:``."""
_MONTHS: Final = {
    name: number
    for number, names in enumerate(
        (
            "jan janv ene gen",
            "feb febr févr fév fev",
            "mar mär mrz mars mrt",
            "apr avr avril abr",
            "may mai mei mag",
            "jun juin giu",
            "jul juil lug",
            "aug août aoû ago",
            "sep sept set",
            "oct okt out ott",
            "nov",
            "dec dez déc dic",
        ),
        start=1,
    )
    for name in names.split()
}
"""Abbreviated month names (glibc ``%b``) of English, German, French, Spanish, Italian,
Portuguese and Dutch, lower case without the trailing dot. No two locales here use one
abbreviation for different months, so the table needs no locale to be given."""
_HOST_KERNEL_RE: Final = re.compile(r"(?:\S+\s+)?kernel:\s?")
_UNESCAPE_RE: Final = re.compile(rb"\\x([0-9a-fA-F]{2})")


@dataclass(frozen=True, slots=True)
class LineContext:
    """What a line does not say about itself: which node, which boot, which clock."""

    node: str
    cluster: str = ""
    boot_time: datetime | None = None
    """Wall time of boot: turns kmsg ``usec`` and dmesg ``[secs]`` into event times."""
    boot_id: str = ""
    """``/proc/sys/kernel/random/boot_id`` of the boot the kmsg records belong to."""
    tz: tzinfo = UTC
    """Time zone of ``dmesg -T`` and syslog wall times (the host's local zone)."""
    year: int | None = None
    """Year of syslog timestamps, which carry none."""
    default_time: datetime | None = None
    """Offline only: the time of an XID line whose framing gives none that can be used
    (no prefix, ``[...]``, relative without :attr:`boot_time`, ...). ``None``: such a
    line is a ``RecordError``, as the live readers want it."""


@dataclass(frozen=True, slots=True)
class XidFields:
    """What one XID or SXid message says, before framing adds time and id."""

    code: int
    pci_bus_id: str
    pid: int | None
    process: str
    message: str
    sxid: bool = False
    recovery_action: str = ""
    caused_by: int | None = None
    gpu_instance: int | None = None
    compute_instance: int | None = None


@dataclass(frozen=True, slots=True)
class KmsgRecord:
    """One ``/dev/kmsg`` record: ``prio,seq,usec,flags[,...];message`` (message unescaped)."""

    prio: int
    seq: int
    usec: int
    flags: str
    message: str


@dataclass(frozen=True, slots=True)
class Untimed:
    """An XID line that parses, but whose framing gives no usable event time.

    Everything but the time is known, the id included (it never depends on the
    time, so a line gets the same id whichever time it is given).
    """

    fields: XidFields
    event_id: str
    source: str
    error: RecordError
    """Why there is no time: what :func:`parse_line` returns without a default time."""

    def event(self, ctx: LineContext, time: datetime) -> XidEvent:
        """The event, stamped with ``time`` (an assumption the caller states)."""
        return _event(self.fields, ctx, self.event_id, time, self.source)


def digest(data: bytes) -> str:
    """A short, stable hash for ids (not a security measure)."""
    return hashlib.blake2b(data, digest_size=8).hexdigest()


def _decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def unescape_kmsg(data: bytes) -> bytes:
    """Undo kmsg's ``\\xNN`` escaping (control bytes, non-ASCII bytes, the backslash)."""
    if b"\\x" not in data:
        return data
    return _UNESCAPE_RE.sub(lambda m: bytes((int(m[1], 16),)), data)


def parse_kmsg_record(raw: bytes) -> KmsgRecord | RecordError:
    """Split one kmsg record; continuation lines (`` KEY=value``) after it are dropped.

    The kernel may append dictionary lines (``\\n SUBSYSTEM=pci``) to a record
    in the same ``read()``; they start with a space and are not part of the
    message.
    """
    head, sep, body = raw.partition(b";")
    if not sep:
        return RecordError("kmsg record without ';'", "prefix")
    fields = head.split(b",")
    if len(fields) < 4 or not all(f.isdigit() and len(f) <= 20 for f in fields[:3]):
        return RecordError("kmsg record prefix is not prio,seq,usec,flags", "prefix")
    line = body.split(b"\n", 1)[0]
    message = _decode(unescape_kmsg(line)).replace("\n", " ").rstrip("\r")
    return KmsgRecord(
        prio=int(fields[0]),
        seq=int(fields[1]),
        usec=int(fields[2]),
        flags=_decode(fields[3]),
        message=message,
    )


def parse_message(message: str) -> XidFields | RecordError | None:
    """The XID/SXid fields of one kernel message, ``None`` if it is not an XID message."""
    start = message.find("NVRM: Xid")
    sxid = False
    if start < 0:
        start = message.find("SXid (")
        if start < 0:
            return _fall_off(message)
        sxid = True
    text = message[start:].rstrip()
    match = (_SXID_RE if sxid else _XID_RE).match(text)
    kind = "SXid" if sxid else "XID"
    if match is None:
        return RecordError(f"unrecognised {kind} line: {_clip(text)}", "message")
    code_text = match["code"]
    if len(code_text) > _MAX_DIGITS or int(code_text) > MAX_XID_CODE:
        return RecordError(f"{kind} code out of range: {code_text[:20]}", "code")
    if match["bus"] is not None:
        bus_id = canonical_bus_id(match["bus"])
        if not bus_id:
            return RecordError(f"bad PCI bus id {match['bus']!r}", "pci_bus_id")
    elif _PLACEHOLDER_RE.search(match["redacted"]):
        bus_id = ""  # redacted by whoever pasted it: the XID of an unknown GPU
    else:
        return RecordError(f"bad PCI bus id {_clip(match['redacted'], 40)!r}", "pci_bus_id")
    rest = (match["rest"] or "").strip()
    pid: int | None = None
    process = ""
    if not sxid and rest.startswith("pid="):
        pid_match = _PID_RE.match(rest)
        if pid_match is not None:
            value = pid_match["quoted"] if pid_match["quoted"] is not None else pid_match["bare"]
            # isascii: str.isdigit() is true for '²' too, which int() refuses.
            if value.isascii() and value.isdigit() and len(value) <= _MAX_DIGITS:
                pid = int(value)
            name = (pid_match["name"] or "").strip()
            process = "" if name == "<unknown>" else name
            rest = rest[pid_match.end() :].strip()
    gpu_instance = compute_instance = None
    if not sxid and match["mig"]:
        for kind, number in _MIG_RE.findall(match["mig"]):
            if kind == "I":
                gpu_instance = int(number)
            else:
                compute_instance = int(number)
    recovery = ""
    if "recovery action changed" in rest:
        rec = _RECOVERY_RE.search(rest)
        if rec is not None:
            recovery = (rec["new_name"] or rec["new"]).strip()
    caused_by: int | None = None
    if "caused by previous Xid" in rest:
        cause = _CAUSED_BY_RE.search(rest)
        if cause is not None and int(cause[1]) <= MAX_XID_CODE:  # else no XID: not a fact
            caused_by = int(cause[1])
    return XidFields(
        code=int(code_text),
        pci_bus_id=bus_id,
        pid=pid,
        process=process,
        message=rest,
        sxid=sxid,
        recovery_action=recovery,
        caused_by=caused_by,
        gpu_instance=gpu_instance,
        compute_instance=compute_instance,
    )


def _fall_off(message: str) -> XidFields | None:
    """XID 79 from a "GPU has fallen off the bus" message without an Xid number
    (:mod:`connectors.xid.falloff`)."""
    found = falloff.fall_off(message)
    if found is None:
        return None
    bus_id, text = found
    return XidFields(code=FALL_OFF_CODE, pci_bus_id=bus_id, pid=None, process="", message=text)


def parse_line(raw: bytes, ctx: LineContext) -> XidEvent | RecordError | None:
    """One raw line (any framing above) to an event, ``None``, or a :class:`RecordError`.

    Never raises: an unexpected failure is a ``RecordError`` whose reason
    starts with ``internal parser error`` (a bug to report, not a reason to
    stop a DaemonSet).
    """
    if (
        MARKER not in raw
        and _FALL_OFF not in raw
        and not (raw[:1] == b"{" and _JSON_BYTES_MESSAGE.search(raw))
    ):
        return None
    return _resolve(_parse_guarded(raw, ctx), ctx)


def parse_line_or_untimed(raw: bytes, ctx: LineContext) -> XidEvent | RecordError | Untimed | None:
    """:func:`parse_line`, but a line without a usable time is returned as :class:`Untimed`
    (even when :attr:`LineContext.default_time` is set), so that the caller can count
    and report the lines it stamps with an assumed time."""
    if (
        MARKER not in raw
        and _FALL_OFF not in raw
        and not (raw[:1] == b"{" and _JSON_BYTES_MESSAGE.search(raw))
    ):
        return None
    return _parse_guarded(raw, ctx)


def _resolve(
    result: XidEvent | RecordError | Untimed | None, ctx: LineContext
) -> XidEvent | RecordError | None:
    if isinstance(result, Untimed):
        if ctx.default_time is None:
            return result.error
        return result.event(ctx, ctx.default_time)
    return result


def _parse_guarded(raw: bytes, ctx: LineContext) -> XidEvent | RecordError | Untimed | None:
    try:
        return _parse_framed(raw, ctx)
    except Exception as exc:  # the never-raise contract; see parse_line
        return RecordError(f"internal parser error: {type(exc).__name__}: {exc}")


def _parse_framed(raw: bytes, ctx: LineContext) -> XidEvent | RecordError | Untimed | None:
    data = raw.strip()
    if data[:1] == b"{":
        return _parse_journal(data, ctx)
    if data[:1].isdigit():
        head = data.split(b";", 1)[0]
        if len(head) < 200 and _KMSG_RE.match(_decode(head) + ";") is not None:
            return _from_kmsg(data, ctx)
    text = _decode(data)
    fields = parse_message(text)
    if fields is None or isinstance(fields, RecordError):
        return fields
    start = text.find("NVRM: Xid")
    if start < 0:
        start = text.find("SXid (")
        if start < 0:
            start = text.find("NVRM:")  # a fall-off message: parse_message found one
    prefix = text[:start]
    event_id = f"log:{ctx.node}:{digest(data)}"
    when = _prefix_time(prefix, ctx)
    if isinstance(when, RecordError):
        source = "syslog" if "kernel:" in prefix else "dmesg"
        return Untimed(fields, event_id, source, when)
    source, time = when
    return _event(fields, ctx, event_id, time, source)


def _from_kmsg(data: bytes, ctx: LineContext) -> XidEvent | RecordError | Untimed | None:
    record = parse_kmsg_record(data)
    if isinstance(record, RecordError):
        return record
    return _kmsg_event(record, ctx, data)


def event_from_kmsg(
    record: KmsgRecord, ctx: LineContext, *, raw: bytes = b""
) -> XidEvent | RecordError | None:
    """The XID event of one kmsg record (``None`` when it is not an XID record)."""
    return _resolve(_kmsg_event(record, ctx, raw), ctx)


def _kmsg_event(
    record: KmsgRecord, ctx: LineContext, raw: bytes
) -> XidEvent | RecordError | Untimed | None:
    if "Xid" not in record.message and falloff.PHRASE not in record.message:
        return None
    fields = parse_message(record.message)
    if fields is None or isinstance(fields, RecordError):
        return fields
    if ctx.boot_id:
        event_id = f"kmsg:{ctx.node}:{ctx.boot_id}:{record.seq}"
    else:
        event_id = f"log:{ctx.node}:{digest(raw or record.message.encode())}"
    if ctx.boot_time is None:
        error = RecordError("kmsg time is relative to boot and the boot time is unknown", "usec")
        return Untimed(fields, event_id, "kmsg", error)
    if record.usec > _MAX_UPTIME_US:
        error = RecordError(f"kmsg usec {record.usec} is not a time since boot", "usec")
        return Untimed(fields, event_id, "kmsg", error)
    time = ctx.boot_time + timedelta(microseconds=record.usec)
    return _event(fields, ctx, event_id, time, "kmsg")


def _parse_journal(data: bytes, ctx: LineContext) -> XidEvent | RecordError | Untimed | None:
    try:
        obj: Any = codec.loads(data)
    except RecordError:
        if MARKER in data:  # a fall-off mention in broken JSON is not worth a dead letter
            return RecordError("journal line is not valid JSON", "$")
        return None
    if not isinstance(obj, dict):
        return None
    raw_message = obj.get("MESSAGE")
    if isinstance(raw_message, list):
        if not all(isinstance(b, int) and 0 <= b < 256 for b in raw_message):
            return RecordError("MESSAGE is neither a string nor bytes", "$.MESSAGE")
        message = _decode(bytes(raw_message))
    elif isinstance(raw_message, str):
        message = raw_message
    else:
        return None
    fields = parse_message(message.replace("\n", " "))
    if fields is None or isinstance(fields, RecordError):
        return fields
    cursor = obj.get("__CURSOR")
    anchor = cursor.encode() if isinstance(cursor, str) and cursor else data
    event_id = f"journal:{ctx.node}:{digest(anchor)}"
    stamp = obj.get("__REALTIME_TIMESTAMP")
    text = str(stamp) if isinstance(stamp, str | int) else ""
    if not (text.isascii() and text.isdigit()) or len(text) > 17:
        error = RecordError("missing or bad __REALTIME_TIMESTAMP", "$.__REALTIME_TIMESTAMP")
        return Untimed(fields, event_id, "journal", error)
    time = _EPOCH + timedelta(microseconds=int(text))
    return _event(fields, ctx, event_id, time, "journal")


def _prefix_time(prefix: str, ctx: LineContext) -> tuple[str, datetime] | RecordError:
    """``(source, event time)`` from the text in front of ``NVRM:``/``SXid``.

    Decorations that carry no time (a pasted line number, ``<prio>``, a facility
    label, ``kernel:``) are peeled off first, in the order they are stacked.
    """
    text = prefix.lstrip()
    if text[:1].isdigit() and (number := _LINE_NUMBER_RE.match(text)) is not None:
        text = text[number.end() :]
    if text[:1] == "<" and (priority := _PRIORITY_RE.match(text)) is not None:
        text = text[priority.end() :]
    if (label := _LABEL_RE.match(text)) is not None:
        text = text[label.end() :]
    if text.startswith("kernel:"):
        text = text[7:].lstrip()
    if not text:
        return RecordError("XID line without a timestamp", "time")
    if text[0] == "[":
        return _bracket_time(text, ctx)
    iso = _ISO_RE.match(text)
    if iso is not None:
        stamp = _iso_time(iso["ts"], ctx)
        if isinstance(stamp, RecordError):
            return stamp
        rest = text[iso.end() :]
        return ("syslog" if _HOST_KERNEL_RE.match(rest) else "dmesg"), stamp
    syslog = _SYSLOG_RE.match(text)
    if syslog is not None:
        if ctx.year is None:
            return RecordError("syslog time has no year and none was given", "time")
        parsed = _wall_time(ctx.year, syslog["mon"], syslog["day"], syslog["hms"], ctx)
        if isinstance(parsed, RecordError):
            return parsed
        frac = syslog["frac"]
        if frac:
            parsed += timedelta(microseconds=int(frac.ljust(6, "0")[:6]))
        return "syslog", parsed
    return RecordError(f"unrecognised time prefix {_clip(text)}", "time")


def _bracket_time(text: str, ctx: LineContext) -> tuple[str, datetime] | RecordError:
    """``[secs]``, ``[Tue Dec  1 01:02:03 2026]`` (any locale) or ``[ISO time]``."""
    rel = _DMESG_REL_RE.match(text)
    if rel is not None:
        if ctx.boot_time is None:
            return RecordError(
                "dmesg time is relative to boot and the boot time is unknown", "time"
            )
        if len(rel["sec"]) > 10:
            return RecordError(f"dmesg time {rel['sec']} is not a time since boot", "time")
        frac = rel["frac"] or ""
        micros = int(rel["sec"]) * 1_000_000 + int(frac.ljust(6, "0")[:6])
        return "dmesg", ctx.boot_time + timedelta(microseconds=micros)
    ctime = _DMESG_CTIME_RE.match(text)
    if ctime is not None:
        year = int(ctime["year"])
        parsed = _wall_time(year, ctime["mon"], ctime["day"], ctime["hms"], ctx)
        return parsed if isinstance(parsed, RecordError) else ("dmesg", parsed)
    iso = _BRACKET_ISO_RE.match(text)
    if iso is not None:
        stamp = _iso_time(iso["ts"], ctx)
        return stamp if isinstance(stamp, RecordError) else ("dmesg", stamp)
    return RecordError(f"unrecognised time prefix {_clip(text)}", "time")


def _iso_time(text: str, ctx: LineContext) -> datetime | RecordError:
    try:
        stamp = datetime.fromisoformat(text.replace(",", "."))
    except ValueError:
        return RecordError(f"bad ISO time {text!r}", "time")
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=ctx.tz)


def _wall_time(
    year: int, month: str, day: str, hms: str, ctx: LineContext
) -> datetime | RecordError:
    """A local wall time from its parts; the month name in any locale of :data:`_MONTHS`."""
    number = _MONTHS.get(month.rstrip(".").lower())
    if number is None:
        return RecordError(f"unknown month name {month!r}", "time")
    hour, minute, second = (int(part) for part in hms.split(":"))
    try:
        return datetime(year, number, int(day), hour, minute, second, tzinfo=ctx.tz)
    except ValueError:
        return RecordError(f"bad time {month} {day} {hms}", "time")


def _event(
    fields: XidFields, ctx: LineContext, event_id: str, time: datetime, source: str
) -> XidEvent:
    return XidEvent(
        id=event_id,
        cluster=ctx.cluster,
        time=time,
        node=ctx.node,
        code=fields.code,
        pci_bus_id=fields.pci_bus_id,
        pid=fields.pid,
        process=fields.process,
        message=fields.message,
        source=source,
        sxid=fields.sxid,
        recovery_action=fields.recovery_action,
        caused_by=fields.caused_by,
        gpu_instance=fields.gpu_instance,
        compute_instance=fields.compute_instance,
    )


def _clip(text: str, limit: int = 120) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
