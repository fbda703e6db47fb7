"""One raw autoscaler log line to its ``autoscaler.v1`` records: unwrap, tell the format, parse.

:func:`parse_line` never raises: a tuple of records (most often empty: an unrecognised
line), or a :class:`~schemas.codec.RecordError` for a klog record that cannot be read.
Formats ``klog``, ``karpenter``, ``gke`` or ``auto`` (per line, by content); wrappers are
peeled first and ``line`` keeps the original. Time: the klog header's, else the record's,
else the wrapper's, else the reference time. Ids hash source, position, text and index.

Traps: a line is cut at 64 KiB, except a JSON line up to 256 KiB (Cloud Logging's limit)
that is a visibility entry, so a scale-down naming many pods is not lost; the
:data:`ANCHORS` prefilter searches the raw line, so a wrapper that escaped ASCII in the
words would hide it (docker, CRI and zap do not).
In full: docs/connectors.md, design notes: connectors/autoscaler/lines.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from connectors.autoscaler import gke, karpenter, klog, kube_events
from connectors.autoscaler.classify import cloud_of
from connectors.autoscaler.unwrap import Unwrapped, parse_time, unwrap
from schemas import codec
from schemas.codec import RecordError
from schemas.events import AutoscalerEvent
from schemas.ids import hashed_id

Format = Literal["auto", "klog", "karpenter", "gke"]
FORMATS: Final = ("auto", "klog", "karpenter", "gke")
_MAX_LINE: Final = 65536
"""Longer lines are cut before parsing (the evidence keeps the cut line)."""
_KARPENTER_KEYS: Final = ("logger", "controller", "commit", "NodeClaim", "nodeclaim")
KLOG_ANCHORS: Final = (
    "cale",
    "scaling failed",
    "Failed adding",
    "nodes",
    "rror",
    "node group",
    "max ",
    "quota",
    "sched",
    "Setting asg",
    "Best option",
    "Target size",
    "predicate",
    "No pod can fit",
    "expansion",
    "unneeded",
    "ToBeDeleted",
    "DeletionCandidate",
    "#CreateOrUpdate",
    "reason: '",
    "node deletion",
    "chosen as the highest",
    "find place for",
)
"""The fast path of a line that starts with a klog header (``I0313 ...``): every key word
of cluster-autoscaler's messages (``klog.TRIGGERS``) contains one of these (a test
checks it). A log is mostly such lines, most of them noise: this list is kept short."""
_KARPENTER_ANCHORS: Final = (
    "provisionable",
    "atched ",
    "nodeclaim",
    "reating instance",
    "isrupting",
    "ainted node",
    "eleted node",
    "omputed packing",
    "limits",
    "erminating due",
)
_EVENT_ANCHORS: Final = (
    "Normal",
    "Warning",
    "NodePool requirements",
    " event: ",
    "Launching ",
    "Waiting on ",
    "Cannot ",
    "No allowed disruptions",
    "Evicted pod",
    "Failed to drain",
    "Nodes added",
    "eprovision",
)
"""Words of pasted Events (``kubectl`` rows, bare messages): never inside a JSON line."""
RECORD_ANCHORS: Final = (
    *KLOG_ANCHORS,
    *_KARPENTER_ANCHORS,
    *karpenter.ANCHORS,
)
"""The fast path of a JSON line (Karpenter's records, klog in a docker or CRI wrapper)."""
ANCHORS: Final = (*RECORD_ANCHORS, *_EVENT_ANCHORS)
"""The fast path of any other line: every key word of every message family
(``klog.TRIGGERS``, ``karpenter.TRIGGERS``, ``kube_events.TRIGGERS``) contains one of
these (a test checks it), so a line with none states no fact; that is most lines of a
real log. Karpenter's parser keeps the few words its messages need beyond these
(``karpenter.ANCHORS``): a new wording there needs no edit here."""
_KLOG_SEVERITIES: Final = frozenset("IWEF")
_KLOG_FIRST: Final = frozenset({*_KLOG_SEVERITIES, *(c.encode() for c in _KLOG_SEVERITIES)})
_JSON_FIRST: Final = frozenset({"{", b"{"})
_STR_ANCHORS: Final = (KLOG_ANCHORS, RECORD_ANCHORS, ANCHORS)
_BYTES_ANCHORS: Final = tuple(tuple(a.encode() for a in group) for group in _STR_ANCHORS)


def _may_state_fact(raw: str | bytes) -> bool:
    first = raw[:1]
    kind = 0 if first in _KLOG_FIRST and raw[1:2].isdigit() else 1 if first in _JSON_FIRST else 2
    anchors = _BYTES_ANCHORS[kind] if isinstance(raw, bytes) else _STR_ANCHORS[kind]
    for anchor in anchors:  # noqa: SIM110 - a plain loop is faster than any() here
        if anchor in raw:  # type: ignore[operator]
            return True
    return False


@dataclass(slots=True, frozen=True)
class LineContext:
    """What a line does not say: the cluster, the year, the source's name for ids."""

    cluster: str
    reference: datetime
    """klog has no year: a line gets the year that puts it nearest this time."""
    source: str = ""
    """The file or pod the lines come from (part of every id)."""
    cloud: str = ""
    """The cloud to record when a line shows none."""
    fmt: Format = "auto"


def parse_line(
    raw: str | bytes, ctx: LineContext, position: object = ""
) -> tuple[AutoscalerEvent, ...] | RecordError:
    """The records of one line (see the module docstring); never raises.

    A record the codec would refuse (a pod name longer than Kubernetes allows, a time
    before 1970 in a wrapper) makes the line a RecordError here, where it was read,
    rather than a dead letter at the processor.
    """
    events = _parse_line(raw, ctx, position)
    if isinstance(events, RecordError):
        return events
    for event in events:
        refused = codec.checked(event)
        if isinstance(refused, RecordError):
            return refused
    return events


def _parse_line(
    raw: str | bytes, ctx: LineContext, position: object
) -> tuple[AutoscalerEvent, ...] | RecordError:
    if len(raw) > _MAX_LINE:
        if ctx.fmt in ("auto", "gke") and len(raw) <= gke.MAX_ENTRY and raw[:1] in _JSON_OPEN:
            whole = _gke_line(raw, ctx, position)
            if whole is not None:
                return whole
        raw = raw[:_MAX_LINE]
    if not _may_state_fact(raw):
        return ()
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if raw[:1] == "[" and ctx.fmt in ("auto", "gke"):
        listed = _gke_line(raw, ctx, position)
        if listed is not None:
            return listed
    original = raw.rstrip("\r\n")
    if raw[:1] in _KLOG_SEVERITIES and raw[1:2].isdigit():
        peeled = Unwrapped(original)  # a bare klog line: nothing to peel
    else:
        peeled = unwrap(raw)
    if ctx.fmt != "klog":
        record = peeled.record
        if record is None and ctx.fmt != "gke" and peeled.text[:1].isdigit():
            record = karpenter.console_record(peeled.text)
        if (
            record is not None
            and ctx.fmt != "gke"
            and (ctx.fmt == "karpenter" or any(key in record for key in _KARPENTER_KEYS))
        ):
            return _karpenter(record, peeled, ctx, position, original)
        if record is not None and ctx.fmt != "karpenter" and gke.is_entry(record):
            return _gke(record, ctx, position, original)
        if ctx.fmt == "gke":
            return ()
    return _klog(peeled, ctx, position, original, klog_lines=ctx.fmt != "karpenter")


def _klog(
    peeled: Unwrapped, ctx: LineContext, position: object, original: str, *, klog_lines: bool = True
) -> tuple[AutoscalerEvent, ...] | RecordError:
    """A klog line, or a pasted Event (``kubectl describe``/``get events`` row, bare
    message); with ``klog_lines`` False (``--format karpenter``) only a pasted Event."""
    text = peeled.text
    header = klog.HEADER.match(text) if klog_lines else None
    if header is not None:
        message = text[header.end() :]
        facts, source, message = _message_facts(message, pasted_rows=False)
        if not facts:
            return ()
        stamp = klog.header_time(header, ctx.reference)
        if isinstance(stamp, RecordError):
            return stamp
        where = header["file"]
    else:
        headerless = klog.HEADERLESS.match(text) if klog_lines else None
        message = text[headerless.end() :] if headerless else text
        facts, source, message = _message_facts(message, pasted_rows=True, klog_lines=klog_lines)
        if not facts:
            return ()
        stamp = peeled.time or ctx.reference
        where = headerless["file"] if headerless else peeled.source
    cloud = cloud_of(f"{where} {message}", ctx.cloud)
    return _events(facts, ctx, position, original, stamp, message, cloud, source)


def _message_facts(
    message: str, *, pasted_rows: bool, klog_lines: bool = True
) -> tuple[tuple[klog.Fact, ...], str, str]:
    """The facts of a klog message or a pasted Event, whose they are, and the message to
    record (a pasted row's Event message, without its columns; else the klog message).

    An Event the autoscaler logged (``reason: '...'``) is read as the Event; a headerless
    line is tried as a pasted Event first (a ``describe`` row of a failed scale-up also
    holds the cloud's error, which the klog families would read without its group).
    """
    logged = "reason: '" in message
    if logged or pasted_rows:
        event = kube_events.pasted(message)
        if event is not None:
            return event.facts(), event.source, message if logged else event.message
    if not klog_lines:
        return (), "", message
    facts = klog.parse_message(message)
    if (
        not facts
        and not pasted_rows
        and (event := kube_events.bare(message, named_only=True)) is not None
    ):
        return event.facts(), event.source, event.message  # a watcher's "<object>: <message>"
    return facts, "cluster-autoscaler", message


def _karpenter(
    record: dict[str, Any], peeled: Unwrapped, ctx: LineContext, position: object, original: str
) -> tuple[AutoscalerEvent, ...]:
    facts = karpenter.parse_record(record)
    if not facts:
        return ()
    stamp = _record_time(record) or peeled.time or ctx.reference
    message = karpenter.message_of(record)
    error = record.get("error")
    if isinstance(error, str) and error:
        message = f"{message}: {error}"
    cloud = cloud_of(original, ctx.cloud)
    return _events(facts, ctx, position, original, stamp, message, cloud, "karpenter")


_JSON_OPEN: Final = ("{", "[", b"{", b"[")


def _gke_line(
    raw: str | bytes, ctx: LineContext, position: object
) -> tuple[AutoscalerEvent, ...] | None:
    """The records of a line read as visibility entries: one entry, or a JSON array of
    them (``gcloud logging read --format=json | jq -c .``); ``None`` when it is neither."""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    original = text.rstrip("\r\n")
    if original.lstrip()[:1] not in ("{", "["):
        return None
    try:
        value = codec.loads(original)
    except RecordError:
        return None
    if isinstance(value, dict):
        return _gke(value, ctx, position, original) if gke.is_entry(value) else None
    if not isinstance(value, list) or not value:
        return None
    entries = [item for item in value[: gke.MAX_ITEMS] if isinstance(item, dict)]
    if not entries or not all(gke.is_entry(entry) for entry in entries):
        return None
    return tuple(
        event
        for index, entry in enumerate(entries)
        for event in _gke(entry, ctx, (position, index), original)
    )


def _gke(
    record: dict[str, Any], ctx: LineContext, position: object, original: str
) -> tuple[AutoscalerEvent, ...]:
    line = original[:_MAX_LINE]
    stamp = gke.entry_time(record) or ctx.reference
    return tuple(
        klog.to_event(
            found.fact,
            event_id=hashed_id("as", ctx.source, position, original, index),
            cluster=ctx.cluster,
            time=stamp,
            message=found.message,
            cloud="gce",
            line=line,
        )
        for index, found in enumerate(gke.parse_entry(record))
    )


def _record_time(record: dict[str, Any]) -> datetime | None:
    value = record.get("time")
    if isinstance(value, str):
        return parse_time(value)
    value = record.get("ts")
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < 1e11:
        return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=value)
    return None


def _events(
    facts: tuple[klog.Fact, ...],
    ctx: LineContext,
    position: object,
    original: str,
    stamp: datetime,
    message: str,
    cloud: str,
    source: str,
) -> tuple[AutoscalerEvent, ...]:
    return tuple(
        klog.to_event(
            fact,
            event_id=hashed_id("as", ctx.source, position, original, index),
            cluster=ctx.cluster,
            time=stamp,
            message=message,
            cloud=cloud,
            line=original,
            source=source,
        )
        for index, fact in enumerate(facts)
    )
