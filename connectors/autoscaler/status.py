"""The ``cluster-autoscaler-status`` ConfigMap (``data.status``) to ``autoscaler.v1`` records.

Pure: :func:`parse_status` reads either format (text up to 1.28, YAML from 1.29) into a
:class:`Status`; :func:`new_facts` turns it into records *minus* the facts the previous
parse had, so a resync every scan publishes nothing. Facts per node group: ``backoff``,
``scale_up_planned``, ``max_size_reached``, ``unhealthy``.

Traps: the text format never says why a group is in backoff (``reason="backoff"``); the
status carries no until-time for a backoff; Go times carry a monotonic suffix
(``m=+238.23``) and a zone name; unquoted YAML timestamps may come back as ``datetime``.
Ids hash the fact and its ``lastTransitionTime``: a re-read gives the same id, a group
entering backoff again a new one.
In full: docs/connectors.md, design notes: connectors/autoscaler/status.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import yaml

from connectors.autoscaler.classify import classify, cloud_of
from schemas.codec import RecordError, time_problem
from schemas.events import AutoscalerEvent
from schemas.ids import hashed_id

_GO_TIME: Final = re.compile(
    r"(?P<date>\d{4}-\d\d-\d\d)[ T](?P<clock>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?"
    r"\s*(?P<zone>Z|[+-]\d\d:?\d\d)?"
)
_HEADER: Final = re.compile(r"^Cluster-autoscaler status at (?P<time>.+?):\s*$")
_CONDITION: Final = re.compile(r"^  (?P<key>Name|Health|ScaleUp|ScaleDown):\s+(?P<value>.*?)\s*$")
_TRANSITION: Final = re.compile(r"^\s+LastTransitionTime:\s+(?P<time>.+)$")
_NUMBER: Final = re.compile(r"\b(?P<key>minSize|maxSize|cloudProviderTarget)=(?P<value>\d{1,9})\b")
"""A node group's sizes: nine digits at most (a longer number is no size, and is not read)."""


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """What the status says of one node group."""

    name: str
    health: str = ""
    scale_up: str = ""
    min_size: int | None = None
    max_size: int | None = None
    target: int | None = None
    error_code: str = ""
    error_message: str = ""
    since: datetime | None = None
    """The scale-up condition's ``lastTransitionTime`` (else the health's)."""


@dataclass(frozen=True, slots=True)
class Status:
    time: datetime | None
    groups: tuple[GroupStatus, ...]
    text: str


def go_time(value: object) -> datetime | None:
    """A Go ``time.Time`` string (``2019-09-02 14:57:47.68 +0000 UTC m=+238.2``) or RFC 3339."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str):
        return None
    match = _GO_TIME.search(value)
    if match is None:
        return None
    frac = (match["frac"] or "")[:6].ljust(6, "0")
    zone = match["zone"] or "Z"
    if zone != "Z" and ":" not in zone:
        zone = f"{zone[:3]}:{zone[3:]}"
    try:
        stamp = datetime.fromisoformat(f"{match['date']}T{match['clock']}.{frac}{zone}")
        return stamp.astimezone(UTC)
    except (ValueError, OverflowError):  # OverflowError: year 1 east of UTC is year 0 in UTC
        return None


def parse_status(text: str) -> Status | RecordError:
    """Either format (by its first line); a RecordError when it is neither."""
    first = text.lstrip().split("\n", 1)[0]
    if _HEADER.match(first):
        return _parse_text(text)
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        return RecordError(f"status is neither the text nor the YAML format: {exc}"[:300])
    except RecursionError:  # PyYAML composes nested collections by recursion
        return RecordError("status is YAML nested too deep to read")
    if not isinstance(doc, dict):
        return RecordError("status is neither the text nor the YAML format", "$.data.status")
    return _parse_yaml(doc, text)


def _parse_text(text: str) -> Status:
    lines = text.splitlines()
    header = _HEADER.match(lines[0].strip()) if lines else None
    groups: list[GroupStatus] = []
    current: dict[str, Any] | None = None
    last_key = ""
    in_groups = False
    for line in lines:
        if line.startswith("NodeGroups:"):
            in_groups = True
            continue
        if not in_groups:
            continue
        condition = _CONDITION.match(line)
        if condition is not None:
            key, value = condition["key"], condition["value"]
            last_key = key
            if key == "Name":
                current = {"name": value}
                groups.append(GroupStatus(name=value))  # replaced as lines come
                continue
            if current is None:
                continue
            status, _, detail = value.partition(" ")
            if key == "Health":
                current["health"] = status
                for number in _NUMBER.finditer(detail):
                    field = {"minSize": "min_size", "maxSize": "max_size"}.get(
                        number["key"], "target"
                    )
                    current[field] = int(number["value"])
            elif key == "ScaleUp":
                current["scale_up"] = status
            groups[-1] = GroupStatus(**current)
            continue
        transition = _TRANSITION.match(line)
        if transition is not None and current is not None:
            stamp = go_time(transition["time"])
            if last_key == "ScaleUp" or (last_key == "Health" and "since" not in current):
                current["since"] = stamp
                groups[-1] = GroupStatus(**current)
    return Status(go_time(header["time"]) if header else None, tuple(groups), text)


def _parse_yaml(doc: dict[str, Any], text: str) -> Status:
    groups: list[GroupStatus] = []
    raw_groups = doc.get("nodeGroups")
    for raw in raw_groups if isinstance(raw_groups, list) else []:
        if not isinstance(raw, dict) or not isinstance(raw.get("name"), str):
            continue
        health = _map(raw, "health")
        scale_up = _map(raw, "scaleUp")
        backoff = _map(scale_up, "backoffInfo")
        groups.append(
            GroupStatus(
                name=raw["name"],
                health=str(health.get("status") or ""),
                scale_up=str(scale_up.get("status") or ""),
                min_size=_int(health.get("minSize")),
                max_size=_int(health.get("maxSize")),
                target=_int(health.get("cloudProviderTarget")),
                error_code=str(backoff.get("errorCode") or ""),
                error_message=str(backoff.get("errorMessage") or ""),
                since=go_time(scale_up.get("lastTransitionTime"))
                or go_time(health.get("lastTransitionTime")),
            )
        )
    return Status(go_time(doc.get("time")), tuple(groups), text)


def _map(parent: dict[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def facts(status: Status, cluster: str, observed: datetime) -> tuple[AutoscalerEvent, ...]:
    """Every fact the status states now (see the module for which). A status time no event
    may carry (:func:`~schemas.codec.time_problem`) is unreadable: ``observed`` stands in."""
    time = status.time or observed
    if time_problem(time) is not None:
        time = observed
    found: list[AutoscalerEvent] = []
    for group in status.groups:
        if group.scale_up == "Backoff":
            if group.error_code or group.error_message:
                reason, code = classify(group.error_message, group.error_code)
            else:
                reason, code = "backoff", ""
            found.append(_event(group, cluster, time, "backoff", reason, code))
        elif group.scale_up == "InProgress":
            found.append(
                _event(group, cluster, time, "scale_up_planned", "", "", size_to=group.target)
            )
        if group.max_size and group.target is not None and group.target >= group.max_size:
            found.append(_event(group, cluster, time, "max_size_reached", "max_size", ""))
        if group.health == "Unhealthy":
            found.append(_event(group, cluster, time, "unhealthy", "other", ""))
    return tuple(found)


def new_facts(
    status: Status, previous: Status | None, cluster: str, observed: datetime
) -> tuple[AutoscalerEvent, ...]:
    """The facts of ``status`` that ``previous`` did not state (all of them without one)."""
    now = facts(status, cluster, observed)
    if previous is None:
        return now
    before = {_key(e) for e in facts(previous, cluster, observed)}
    return tuple(e for e in now if _key(e) not in before)


def _key(event: AutoscalerEvent) -> tuple[object, ...]:
    return (event.node_group, event.action, event.reason, event.cloud_code, event.size_to)


def _event(
    group: GroupStatus,
    cluster: str,
    time: datetime,
    action: str,
    reason: str,
    code: str,
    *,
    size_to: int | None = None,
) -> AutoscalerEvent:
    line = f"{group.name}: health={group.health} scaleUp={group.scale_up}"
    if group.error_code or group.error_message:
        line += f" errorCode={group.error_code} errorMessage={group.error_message}"
    key = (cluster, group.name, action, reason, code, size_to, group.since)
    return AutoscalerEvent(
        id=hashed_id("as-st", *key),
        cluster=cluster,
        time=time,
        action=action,
        node_group=group.name,
        reason=reason,
        message=group.error_message,
        cloud=cloud_of(f"{group.name} {group.error_code} {group.error_message}"),
        cloud_code=code,
        line=line,
        size_to=size_to,
        max_size=group.max_size,
    )
