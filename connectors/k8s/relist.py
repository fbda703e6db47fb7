"""What changed while we were not watching: the known set versus a fresh list, as changes.

A watch ending with ``410 Gone`` has missed an unknown number of changes, and only a new
list brings them back. Emitting it as ``added`` (a naive informer restart) hides what
matters most: objects *deleted* while away, and objects that did *not* change.
:func:`diff` makes both explicit. The known set is ``uid -> Known`` (last resourceVersion,
and the last slim event, since a deletion seen by absence has no object to slim).

Traps: identity is the uid, not the name (a StatefulSet pod recreated under its name is a
deletion and an addition); resourceVersions are compared for equality only, never
ordered; a deletion's id uses the list's resourceVersion, newer than anything in it; items
without a usable uid are returned as ``added`` so slimming dead-letters them.
In full: docs/connectors.md, design notes: connectors/k8s/relist.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from connectors.k8s.dra import ClaimTemplate, TaintRule
from schemas.events import NodeEvent, PodEvent, ResourceClaimEvent, ResourceSliceEvent
from schemas.ids import k8s_event_id, resource_version_number
from schemas.types import Op

Tracked = PodEvent | NodeEvent | ResourceSliceEvent | ResourceClaimEvent | ClaimTemplate | TaintRule
"""What the known set remembers of an object: its last slimmed record (a DRA template or
rule too, which is never published, so that its deletion still reaches the DRA join)."""


@dataclass(frozen=True, slots=True)
class Known:
    """What we last emitted for one object: its resourceVersion and slimmed state."""

    resource_version: str
    event: Tracked | None = None
    """The last slimmed pod/node (for deletions seen only by absence); None for Events
    and for objects we do not forward (filtered out, or not slimmable)."""


@dataclass(frozen=True, slots=True)
class Change:
    """One difference: an object to slim (``added``/``modified``) or a ``deleted`` known one."""

    op: Op
    uid: str
    obj: dict[str, Any] | None = None
    """The raw object from the list (None for deletions)."""
    last: Known | None = None
    """What we knew (for modifications and deletions)."""


def identity(obj: object) -> tuple[str, str]:
    """``(uid, resourceVersion)`` of a raw object; empty strings when absent or malformed."""
    if not isinstance(obj, dict):
        return "", ""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return "", ""
    uid = meta.get("uid")
    version = meta.get("resourceVersion")
    return (
        uid if isinstance(uid, str) else "",
        version if isinstance(version, str) else "",
    )


def diff(known: Mapping[str, Known], items: Sequence[Any]) -> list[Change]:
    """The changes that turn ``known`` into ``items``: list order first, then deletions by uid.

    Unchanged objects (same uid, same resourceVersion) give nothing.
    """
    changes: list[Change] = []
    seen: set[str] = set()
    for item in items:
        uid, version = identity(item)
        if not uid:
            changes.append(Change("added", "", item if isinstance(item, dict) else {"item": item}))
            continue
        seen.add(uid)
        last = known.get(uid)
        if last is None:
            changes.append(Change("added", uid, item))
        elif last.resource_version != version:
            changes.append(Change("modified", uid, item, last))
    for uid in sorted(known.keys() - seen):
        changes.append(Change("deleted", uid, None, known[uid]))
    return changes


def repeated(last: Known | None, event: Tracked) -> Tracked | None:
    """The record last published for the object when ``event`` only repeats it; else None.

    Most updates of a GPU pod or node change nothing slimming keeps (a probe, a heartbeat,
    ``managedFields``), so their slim record differs from the last published one only in
    ``id``, ``resource_version``, ``time`` and ``op``: such an update is not published. Every
    other field is compared; every timestamp that is a fact of its own is a field too.

    Why the core loses nothing: a skipped update is a watch event never received, which
    Kubernetes allows anyway. Traps: only what it would have *moved* is missing: the applied
    version (a tombstone keeps the last published one), containers' ``seen_at`` (a successor
    has a new uid, so its first record is published), a shutdown note, and the key's event
    time (heartbeats move it). ``last`` is the known set's entry: no memory added, an exact
    comparison. docs/connectors.md, design notes: repeated (connectors/k8s/relist.py).
    """
    previous = None if last is None else last.event
    if previous is None or type(previous) is not type(event):
        return None
    blanked = msgspec.structs.replace(
        event,
        id=previous.id,
        time=previous.time,
        op=previous.op,
        resource_version=previous.resource_version,
    )
    return previous if blanked == previous else None


def deletion(last: Tracked, uid: str, list_version: str, when: datetime) -> Tracked:
    """The ``deleted`` event for an object that vanished: its last state, a newer id, version
    and time."""
    return msgspec.structs.replace(
        last,
        op="deleted",
        id=k8s_event_id(uid, list_version),
        time=when,
        resource_version=resource_version_number(list_version),
    )
