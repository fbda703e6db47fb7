"""cluster-autoscaler klog lines to :class:`~schemas.events.AutoscalerEvent`: the pure parser.

A klog line is ``Lmmdd hh:mm:ss.uuuuuu <pid> <file>:<line>] <message>``.
:func:`parse_message` turns one message into the records it states (``action``,
``reason``), most lines giving none: pods unschedulable, a scale-up planned, failed, timed
out, backed off or capped at a size, and scale-down. The wording is cluster-autoscaler's
across releases 0.4 to 1.3x; every shape is a line of ``tests/data/autoscaler`` whose
SOURCES.md cites it. The Events it logs are read by :mod:`connectors.autoscaler.kube_events`.

Traps: klog prints no year (the line takes the year nearest the reference time; an
impossible date is a ``RecordError``); most lines are noise, rejected by one ``in`` test per
message family before any regular expression; headerless pastes parse like a full line's
message; a GCE node group is a URL, ended at a space or ``": "``; the autoscaler's own
limits are ``max_size``, never ``quota``. Each message: docs/connectors.md, design notes.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from connectors.autoscaler.classify import classify, classify_failure
from schemas.codec import RecordError
from schemas.events import AutoscalerEvent, PodRef

HEADER: Final = re.compile(
    r"(?P<sev>[IWEF])(?P<mm>\d\d)(?P<dd>\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d{1,9}))?"
    r" +(?P<pid>\d+) (?P<file>[^\s:\]]+):(?P<no>\d+)\] ?"
)
HEADERLESS: Final = re.compile(r"(?P<file>[\w.-]+\.go):(?P<no>\d+)\] ?")


@dataclass(slots=True, frozen=True)
class Fact:
    """One record's content before it gets an id, a time and a cluster."""

    action: str
    reason: str = ""
    node_group: str = ""
    size_from: int | None = None
    size_to: int | None = None
    max_size: int | None = None
    until: datetime | None = None
    cloud_code: str = ""
    error_class: str = ""
    pods: tuple[PodRef, ...] = ()


_SURELY_NEAREST: Final = timedelta(days=150)


def klog_time(month: int, day: int, hms: str, frac: str, reference: datetime) -> datetime | None:
    """The time of a klog header, its year the one nearest ``reference``; ``None`` if invalid."""
    try:
        hour, minute, second = (int(part) for part in hms.split(":"))
        micro = int(frac[:6].ljust(6, "0")) if frac else 0
    except ValueError:
        return None
    try:
        best: datetime | None = datetime(
            reference.year, month, day, hour, minute, second, micro, tzinfo=UTC
        )
    except ValueError:
        best = None
    if best is not None and abs(best - reference) <= _SURELY_NEAREST:
        return best  # the neighbouring years are at least 200 days further
    for year in (reference.year - 1, reference.year + 1):
        try:
            candidate = datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)
        except ValueError:
            continue
        if best is None or abs(candidate - reference) < abs(best - reference):
            best = candidate
    return best


_GO_TIME: Final = re.compile(
    r"(?P<date>\d{4}-\d\d-\d\d) (?P<hms>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d{1,9}))?"
    r" (?P<off>[+-]\d{4})"
)


def go_time(text: str) -> datetime | None:
    """Go's ``time.String()`` (``2024-03-13 12:54:40.13918732 +0000 UTC m=+2030.4``)."""
    match = _GO_TIME.match(text)
    if match is None:
        return None
    frac = (match["frac"] or "0")[:6].ljust(6, "0")
    off = match["off"]
    try:
        parsed = datetime.fromisoformat(f"{match['date']}T{match['hms']}.{frac}{off[:3]}:{off[3:]}")
        return parsed.astimezone(UTC)
    except (ValueError, OverflowError):  # OverflowError: year 1 east of UTC is year 0 in UTC
        return None


# --- message families -------------------------------------------------------------------

_GROUP = r"(?P<g>\S+?)"
_BACKOFF_RE: Final = re.compile(
    rf"Disabling scale-up for node group {_GROUP} until (?P<until>\S+ \S+ \S+)[^;]*"
    r"(?:; errorClass=(?P<cls>[^;\s]+); errorCode=(?P<code>\S+))?"
)
_NOT_READY_RE: Final = re.compile(
    rf"Node group {_GROUP} is not ready for scaleup(?: - (?P<why>\w+)"
    r"(?: with status: \{true \{(?P<cls>\S+) (?P<code>\S+) ?(?P<msg>.*)\}\})?)?"
)
_MAX_SKIP_RE: Final = re.compile(rf"Skipping node group {_GROUP} - max size reached")
_TIMEOUT_RE: Final = re.compile(
    rf"(?:Scale-up timed out|Reverting timed-out scale-up) for node(?: group {_GROUP}(?: |$)| ?$)"
)
"""The group is optional only at the end of the message: the GCE paste of #2557 stops at
``Scale-up timed out for node`` (the user cut the line); what remains still says a
scale-up timed out, so it is a ``scale_up_timeout`` with no group."""
_FAILED_ADDING_RE: Final = re.compile(
    rf"Failed adding (?P<n>\d+) nodes \(\d+ unseen previously\) to group {_GROUP} due to "
    r"(?P<cls>[^.\s]+)\.(?P<code>[^;\s]+);?(?: errorMessages=(?P<msg>.*))?"
)
_FOUND_ERR_RE: Final = re.compile(
    r"Found (?P<n>\d+) instances with errorCode (?P<cls>[^.\s]+)\.(?P<code>\S+) in nodeGroup "
    r"(?P<g>\S+)"
)
_CANNOT_PROVISION_RE: Final = re.compile(r"Instance group (?P<g>\S+) cannot provision any more")
_ASG_FAILED_RE: Final = re.compile(r"ASG (?P<g>\S+) scaling failed with description: (?P<msg>.*)")
_AZURE_SET_RE: Final = re.compile(r"for scale set \"(?P<g>[^\"]+)\" failed")
PLAN_ITEM_RE: Final = re.compile(r"\{(?P<g>\S+) (?P<a>\d+)->(?P<b>\d+) \(max: (?P<m>\d+)\)\}")
_BEST_RE: Final = re.compile(r"Best option to resize: (?P<g>\S+)")
_ESTIMATED_RE: Final = re.compile(r"Estimated (?P<n>\d+) nodes needed in (?P<g>\S+)")
_SETTING_RE: Final = re.compile(
    r"Scale-up: (?:setting )?group (?P<g>\S+) size (?:set )?to (?P<b>\d+)"
    r"(?: instead of (?P<a>\d+))?(?: \(max: (?P<m>\d+)\))?"
)
_SETTING_ASG_RE: Final = re.compile(r"Setting asg (?P<g>\S+) size to (?P<b>\d+)")
_AKS_SIZE_RE: Final = re.compile(r"Current size: (?P<a>\d+), Target size requested: (?P<b>\d+)")
_CAPPING_RE: Final = re.compile(r"Capping size to max cluster total size \((?P<m>\d+)\)")
_GROUP_LIMITS_RE: Final = re.compile(r"Can only add (?P<n>\d+) nodes due to node group limits")
_CA_QUOTA_RE: Final = re.compile(
    r"Only (?P<n>\d+) nodes can be added to (?P<g>\S+) due to resource quotas"
    r"|Ignoring node group (?P<g2>\S+) when balancing: quota exceeded"
)
_POD_UNSCHED_RE: Final = re.compile(r"Pod (?P<pod>\S+) is unschedulable")
_OTHER_PODS_RE: Final = re.compile(r"(?P<n>\d+) other pods are also unschedulable")
_FOUND_PODS_RE: Final = re.compile(r"Found \d+ pods in the cluster: .*?(?P<n>\d+) unschedulable")
_CANT_SCHEDULE_RE: Final = re.compile(
    r"Pod (?P<pod>\S+) can't be scheduled on (?P<g>[^\s,]+?)[,.]?(?: |$)"
)
_NO_FIT_RE: Final = re.compile(r"No pod can fit to (?P<g>\S+)")
_NO_PLACE_RE: Final = re.compile(r"failed to find place for (?P<pod>[^\s:]+/[^\s:]+)")
_PRIORITY_RE: Final = re.compile(r"priority expander: (?P<g>\S+) chosen as the highest available")
_PREDICATE_RE: Final = re.compile(r"cannot put (?P<pod>\S+) on")
_REMOVING_RE: Final = re.compile(r"Scale-down: removing (?:empty )?node (?P<node>\S+?),?(?: |$)")
_EMPTY_DELETION_RE: Final = re.compile(r"empty node deletion in nodegroup (?P<g>\S+?)(?=:? |:?$)")
_UNNEEDED_RE: Final = re.compile(r"^(?P<node>\S+) (?:is unneeded since|was unneeded for)")


def small_int(text: str | None) -> int | None:
    """A logged count as an int; None when absent or absurdly long (never a huge int)."""
    return int(text) if text is not None and len(text) < 10 else None


def _pod(text: str) -> PodRef:
    namespace, _, name = text.rpartition("/")
    return PodRef(namespace=namespace, name=name)


def _backoff(message: str) -> tuple[Fact, ...]:
    match = _BACKOFF_RE.search(message)
    if match is None:
        return ()
    code = match["code"] or ""
    reason = classify("", code)[0] if code else "backoff"
    if code == "cloudProviderError":
        reason = "other"
    return (
        Fact(
            "backoff",
            reason,
            match["g"],
            until=go_time(match["until"]),
            cloud_code=code,
            error_class=match["cls"] or "",
        ),
    )


def _not_ready(message: str) -> tuple[Fact, ...]:
    match = _NOT_READY_RE.search(message)
    if match is None:
        return ()
    code = match["code"] or ""
    if code:
        reason, code = classify(match["msg"] or "", code)
    else:
        reason = "other" if match["why"] == "unhealthy" else "backoff"
    return (Fact("backoff", reason, match["g"], cloud_code=code, error_class=match["cls"] or ""),)


def _failed(message: str) -> tuple[Fact, ...]:
    match = _FAILED_ADDING_RE.search(message) or _FOUND_ERR_RE.search(message)
    if match is None:
        return ()
    text = match.groupdict().get("msg") or ""
    reason, code = classify(text, match["code"])
    return (Fact("scale_up_failed", reason, match["g"], cloud_code=code, error_class=match["cls"]),)


def _generic_failure(message: str) -> tuple[Fact, ...]:
    group = ""
    if (match := _CANNOT_PROVISION_RE.search(message)) is not None:
        return (Fact("scale_up_failed", "capacity", match["g"]),)
    if (match := _ASG_FAILED_RE.search(message)) is not None:
        reason, code = classify(match["msg"])
        return (Fact("scale_up_failed", reason, match["g"], cloud_code=code),)
    if (match := _AZURE_SET_RE.search(message)) is not None:
        group = match["g"]
    reason, code = classify_failure(message)
    return (Fact("scale_up_failed", reason, group, cloud_code=code),)


def _planned(message: str) -> tuple[Fact, ...]:
    if "Final scale-up plan" in message or "triggered scale-up: [" in message:
        return tuple(
            Fact(
                "scale_up_planned",
                node_group=m["g"],
                size_from=small_int(m["a"]),
                size_to=small_int(m["b"]),
                max_size=small_int(m["m"]),
            )
            for m in PLAN_ITEM_RE.finditer(message)
        )
    if (match := _SETTING_RE.search(message)) is not None:
        return (
            Fact(
                "scale_up_planned",
                node_group=match["g"],
                size_from=small_int(match["a"]),
                size_to=small_int(match["b"]),
                max_size=small_int(match["m"]),
            ),
        )
    if (match := _SETTING_ASG_RE.search(message)) is not None:
        return (Fact("scale_up_planned", node_group=match["g"], size_to=small_int(match["b"])),)
    if (match := _BEST_RE.search(message)) is not None:
        return (Fact("scale_up_planned", node_group=match["g"]),)
    if (match := _PRIORITY_RE.search(message)) is not None:
        return (Fact("scale_up_planned", node_group=match["g"]),)
    if (match := _ESTIMATED_RE.search(message)) is not None:
        return (Fact("scale_up_planned", node_group=match["g"]),)
    if (match := _AKS_SIZE_RE.search(message)) is not None:
        return (
            Fact(
                "scale_up_planned", size_from=small_int(match["a"]), size_to=small_int(match["b"])
            ),
        )
    return ()


def _max(message: str) -> tuple[Fact, ...]:
    if (match := _MAX_SKIP_RE.search(message)) is not None:
        return (Fact("max_size_reached", "max_size", match["g"]),)
    if (match := _CAPPING_RE.search(message)) is not None:
        return (Fact("max_size_reached", "max_size", max_size=small_int(match["m"])),)
    if _GROUP_LIMITS_RE.search(message) is not None:
        return (Fact("max_size_reached", "max_size"),)
    if (match := _CA_QUOTA_RE.search(message)) is not None:
        return (Fact("max_size_reached", "max_size", match["g"] or match["g2"] or ""),)
    return ()


def _unschedulable(message: str) -> tuple[Fact, ...]:
    if (match := _CANT_SCHEDULE_RE.search(message)) is not None:
        return (Fact("unschedulable", "config", match["g"], pods=(_pod(match["pod"]),)),)
    if (match := _POD_UNSCHED_RE.search(message)) is not None:
        return (Fact("unschedulable", pods=(_pod(match["pod"]),)),)
    if "predicate failed" in message:
        match = _PREDICATE_RE.search(message)
        pods = (_pod(match["pod"]),) if match else ()
        return (Fact("unschedulable", "config", pods=pods),)
    if (match := _NO_FIT_RE.search(message)) is not None:
        return (Fact("unschedulable", "config", match["g"]),)
    if (match := _NO_PLACE_RE.search(message)) is not None:
        return (Fact("unschedulable", pods=(_pod(match["pod"]),)),)
    if message.startswith(("No expansion options", "No expansion optiions")):
        return (Fact("unschedulable", "config"),)
    if _OTHER_PODS_RE.search(message) is not None:
        return (Fact("unschedulable"),)
    if (match := _FOUND_PODS_RE.search(message)) is not None and match["n"] != "0":
        return (Fact("unschedulable"),)
    return ()


def _scale_down(message: str) -> tuple[Fact, ...]:
    if "Error while trying to delete nodes" in message or "Failed to scale down" in message:
        return (Fact("scale_down", "other"),)
    if "Problem with empty node deletion" in message:
        match = _EMPTY_DELETION_RE.search(message)
        return (Fact("scale_down", "other", match["g"] if match else ""),)
    if (
        _REMOVING_RE.search(message)
        or _UNNEEDED_RE.search(message)
        or "ToBeDeletedTaint on node" in message
        or "DeletionCandidateTaint on node" in message
    ):
        return (Fact("scale_down"),)
    return ()


def _timeout(message: str) -> tuple[Fact, ...]:
    match = _TIMEOUT_RE.search(message)
    if match is None:
        return ()
    return (Fact("scale_up_timeout", "timeout", match["g"] or ""),)


_FAMILIES: Final[tuple[tuple[tuple[str, ...], Callable[[str], tuple[Fact, ...]]], ...]] = (
    (("Disabling scale-up",), _backoff),
    (("not ready for scaleup",), _not_ready),
    (("Failed adding", "instances with errorCode"), _failed),
    (("Scale-up timed out for node", "timed-out scale-up"), _timeout),
    (
        (
            "Final scale-up plan",
            "Scale-up: setting group",
            "Scale-up: group",
            "Setting asg",
            "Best option to resize",
            "nodes needed in",
            "Target size requested",
            "chosen as the highest available",
        ),
        _planned,
    ),
    (
        (
            "max size reached",
            "max cluster total size",
            "node group limits",
            "resource quotas",
            "when balancing: quota",
        ),
        _max,
    ),
    (
        (
            "cannot provision any more nodes",
            "scaling failed with description",
            "Failed to scale up",
            "increase node group size",
            "#CreateOrUpdate",
        ),
        _generic_failure,
    ),
    (
        (
            "unschedulable",
            "can't be scheduled",
            "predicate failed",
            "No pod can fit",
            "No expansion opti",
            "failed to find place for",
        ),
        _unschedulable,
    ),
    (
        (
            "Scale-down: removing",
            "unneeded",
            "ToBeDeletedTaint",
            "DeletionCandidateTaint",
            "delete nodes",
            "Failed to scale down",
            "empty node deletion",
        ),
        _scale_down,
    ),
)


TRIGGERS: Final = tuple(word for words, _ in _FAMILIES for word in words)
"""Every message with a fact contains one of these (the fast path's test)."""


def parse_message(message: str) -> tuple[Fact, ...]:
    """The facts one cluster-autoscaler message states (usually none)."""
    for words, family in _FAMILIES:
        for word in words:
            if word in message:
                facts = family(message)
                if facts:
                    return facts
                break
    return ()


def header_time(match: re.Match[str], reference: datetime) -> datetime | RecordError:
    """The time of a matched klog header, or the error that says why it has none."""
    month, day = int(match["mm"]), int(match["dd"])
    stamp = klog_time(month, day, match["hms"], match["frac"] or "", reference)
    if stamp is None:
        return RecordError(f"klog header has an impossible date {match['mm']}{match['dd']}")
    return stamp


def to_event(
    fact: Fact,
    *,
    event_id: str,
    cluster: str,
    time: datetime,
    message: str,
    cloud: str,
    line: str,
    source: str = "cluster-autoscaler",
) -> AutoscalerEvent:
    """The record of one fact."""
    return AutoscalerEvent(
        id=event_id,
        cluster=cluster,
        time=time,
        action=fact.action,
        node_group=fact.node_group,
        reason=fact.reason,
        message=message,
        pods=fact.pods,
        source=source,
        size_from=fact.size_from,
        size_to=fact.size_to,
        max_size=fact.max_size,
        until=fact.until,
        cloud=cloud,
        cloud_code=fact.cloud_code,
        error_class=fact.error_class,
        line=line,
    )
