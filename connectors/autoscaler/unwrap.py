"""Peel the wrappers autoscaler log lines arrive in, down to the line the autoscaler wrote.

:func:`unwrap` takes one raw line and returns an :class:`Unwrapped`: the payload (a klog
line, a Karpenter console line, or the text of a JSON record), the wrapper's time if any,
and for a JSON payload the decoded object. It never raises. Wrappers: CRLF, kubectl and
stern prefixes, ``--timestamps``, log-viewer exports, CRI files, docker/fluent-bit JSON,
Gardener's and AKS's JSON, klog's JSON format.

Traps: a bare container-name prefix is peeled only when a klog header follows; a viewer's
zoneless local time is peeled, not kept; a line that starts with ``{`` but is no JSON stays
text; Karpenter's console time is not a wrapper; a console line whose time a paste cut off
is decoded here. Each shape with its source: docs/connectors.md, design notes:
connectors/autoscaler/unwrap.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from connectors.autoscaler import karpenter
from schemas import codec
from schemas.codec import RecordError

_KUBECTL_PREFIX: Final = re.compile(r"\[pod/[^/\]\s]+/[^\]\s]+\] ")
_STERN_PREFIX: Final = re.compile(r"[a-z0-9][-a-z0-9.]*/[a-z0-9][-a-z0-9.]*\[[-a-z0-9.]+\]: ")
_NAME_PREFIX: Final = re.compile(r"[a-z][-a-z0-9.]{0,62} (?=[IWEF]\d{4} \d\d:\d\d:\d\d)")
_POD_CONTAINER: Final = re.compile(
    r"[a-z0-9][-a-z0-9.]{0,252} [a-z0-9][-a-z0-9]{0,62} (?=\{\"|\d{4}-\d\d-\d\dT\d\d:)"
)
"""stern's ``<pod> <container> `` before a Karpenter line (kubernetes-sigs/karpenter#1026)."""
_VIEWER_LOCAL: Final = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:\t| +(?=[{\[\d]))"
)
"""A viewer's local time (no zone) and a TAB, as Grafana/Loki exports rows
(aws/karpenter-provider-aws#3576), or spaces before a record, a prefix or another time;
the zone is unknown, so the time is not kept."""
_TS: Final = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)"
_TS_PREFIX: Final = re.compile(rf"(?P<ts>{_TS})(?::? |\t)(?:(?:stdout|stderr) [PF] )?")
_CONSOLE: Final = re.compile(r"\s+(?:DEBUG|INFO|WARN|WARNING|ERROR|DPANIC|PANIC|FATAL)\s")
"""After a timestamp: a Karpenter console record, not a wrapper."""
_MAX_FRACTION: Final = 6
_SEVERITY_LETTER: Final = {"INFO": "I", "WARN": "W", "WARNING": "W", "ERROR": "E", "FATAL": "F"}


@dataclass(slots=True, frozen=True)
class Unwrapped:
    """What is inside a raw line."""

    text: str
    """The payload line (a klog line, a console line, or a JSON record's text)."""
    time: datetime | None = None
    """The wrapper's time (receive time, docker/CRI time, TimeGenerated, JSON klog ts)."""
    record: dict[str, Any] | None = None
    """A JSON object that is not a wrapper (a Karpenter record), decoded."""
    severity: str = ""
    """A severity letter given by the wrapper (Gardener, AKS), for headerless payloads."""
    source: str = ""
    """A ``file:line`` given by the wrapper (Gardener's ``source``, JSON klog's ``caller``)."""
    wrappers: tuple[str, ...] = ()
    """The wrappers peeled, outermost first (for tests and diagnostics)."""


def parse_time(text: str) -> datetime | None:
    """An RFC 3339 time (nanoseconds cut to microseconds); ``None`` when unreadable."""
    if "." in text:
        head, _, rest = text.partition(".")
        digits = len(rest) - len(rest.lstrip("0123456789"))
        text = head + "." + rest[: min(digits, _MAX_FRACTION)].ljust(1, "0") + rest[digits:]
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def unwrap(raw: str) -> Unwrapped:
    """Peel every wrapper of ``raw`` (see the module docstring)."""
    text = raw.rstrip("\r\n")
    wrappers: list[str] = []
    time: datetime | None = None
    for _ in range(6):  # prefixes, timestamps, JSON, and a prefix inside a JSON "log"
        if text.startswith("[pod/"):
            match = _KUBECTL_PREFIX.match(text)
            if match:
                text = text[match.end() :]
                wrappers.append("kubectl-prefix")
                continue
        if text[:1].isdigit():
            local = _VIEWER_LOCAL.match(text)
            if local:
                text = text[local.end() :]
                wrappers.append("viewer-local-time")
                continue
            match = _TS_PREFIX.match(text)
            if match and not _CONSOLE.match(text, match.start("ts") + len(match["ts"])):
                stamp = parse_time(match["ts"])
                if stamp is not None:
                    time = time or stamp
                    wrappers.append("cri" if match.group(0).endswith((" P ", " F ")) else "ts")
                    text = text[match.end() :]
                    continue
            elif not match:
                break
        if text.startswith("{"):
            return _unwrap_json(text, time, wrappers)
        if text[:1].islower() and " " in text[:64]:
            match = _NAME_PREFIX.match(text)
            if match:
                text = text[match.end() :]
                wrappers.append("name-prefix")
                continue
            match = _POD_CONTAINER.match(text)
            if match:
                text = text[match.end() :]
                wrappers.append("pod-container")
                continue
        if "]: " in text[:160] and text[:1].isalnum() and "/" in text[:80]:
            match = _STERN_PREFIX.match(text)
            if match:
                text = text[match.end() :]
                wrappers.append("pod-prefix")
                continue
        break
    if text[:1].isupper():  # a Karpenter console line whose time the paste cut off
        record = karpenter.console_record(text)
        if record is not None:
            return Unwrapped(text, time, record, wrappers=tuple(wrappers))
    return Unwrapped(text, time, wrappers=tuple(wrappers))


def _unwrap_json(text: str, time: datetime | None, wrappers: list[str]) -> Unwrapped:
    try:
        obj = codec.loads(text)
    except RecordError:
        return Unwrapped(text, time, wrappers=tuple(wrappers))
    if not isinstance(obj, dict):
        return Unwrapped(text, time, wrappers=tuple(wrappers))
    inner: Any = None
    stamp: datetime | None = None
    severity = source = ""
    if isinstance(obj.get("log"), str):
        inner = obj["log"]
        wrappers.append("gardener-json" if "severity" in obj else "json-log")
        stamp = _json_time(obj.get("time"))
        severity = _SEVERITY_LETTER.get(str(obj.get("severity", "")).upper(), "")
        source = str(obj.get("source", ""))
    elif isinstance(obj.get("Message"), str):
        inner = obj["Message"]
        wrappers.append("aks-diagnostics")
        stamp = _json_time(obj.get("TimeGenerated"))
        severity = _SEVERITY_LETTER.get(str(obj.get("Level", "")).upper(), "")
    elif isinstance(obj.get("msg"), str) and "logger" not in obj and "caller" in obj:
        inner = obj["msg"]
        wrappers.append("json-klog")
        stamp = _epoch_ms(obj.get("ts"))
        severity = "E" if "err" in obj else "I"
        source = str(obj.get("caller", "")).rpartition("/")[2]
    if inner is None:
        return Unwrapped(text, time, obj, wrappers=tuple(wrappers))
    nested = unwrap(inner)
    return Unwrapped(
        nested.text,
        time or stamp or nested.time,
        nested.record,
        severity or nested.severity,
        source or nested.source,
        (*wrappers, *nested.wrappers),
    )


def _json_time(value: object) -> datetime | None:
    return parse_time(value) if isinstance(value, str) else None


def _epoch_ms(value: object) -> datetime | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    if not 0 <= value < 1e14:  # about year 5138, in milliseconds
        return None
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=value)
