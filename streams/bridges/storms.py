"""Storms: many incidents of one chain on one route become at most a few pages.

A storm is first one of revisions (200 evicted pods are one chain incident with 200
revisions), which the runner's coalescing turns into a few updates, then one of pages
when other incidents of the same node open in the same minutes: this module limits those.
Per route and group (``cluster/node``, or ``cluster/type`` for cluster-scoped types), at
most ``storm_pages`` incidents page within ``storm_window_seconds``; a further one is folded
into the group's latest page (its lead), re-delivered with the union of the pods.

Traps: the merged view is deterministic (pods in a fixed order, never by arrival), since
a restart rebuilds it from the ledger; it is a new revision for the endpoint
(``max(lead revision, last handed + 1)``); a resolved lead takes no more folds; the group's
state is a ledger record, so a restart neither forgets the limit nor pages again.
docs/bridges.md, design notes: storms.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec

from schemas.bridges import BridgeGroup
from schemas.incidents import Incident, PodInfo


def group_of(incident: Incident) -> str:
    """The storm group: ``cluster/node``, or ``cluster/type`` for a cluster-scoped incident."""
    if incident.node:
        return f"{incident.cluster}/{incident.node}"
    return f"{incident.cluster}/{incident.type}"


@dataclass(frozen=True, slots=True)
class StormPolicy:
    pages: int = 3
    window_seconds: float = 600.0

    def recent(self, group: BridgeGroup | None, now: float) -> tuple[float, ...]:
        """The group's pages still inside the window."""
        if group is None:
            return ()
        return tuple(t for t in group.pages if now - t < self.window_seconds)

    def folds(self, group: BridgeGroup | None, now: float) -> bool:
        """Whether a new incident of ``group`` folds into its lead instead of paging."""
        if group is None or not group.lead or group.lead_view is None:
            return False
        if group.lead_view.status == "resolved":
            return False
        return len(self.recent(group, now)) >= self.pages


def paged(
    group: BridgeGroup | None, route: str, key: str, lead: Incident, now: float, policy: StormPolicy
) -> BridgeGroup:
    """The group after ``lead`` opened as a page of its own (it is the new lead)."""
    pages = (*policy.recent(group, now), now)
    if group is None:
        return BridgeGroup(route=route, group=key, lead=lead.id, pages=pages, lead_view=lead)
    return msgspec.structs.replace(
        group, lead=lead.id, pages=pages, lead_view=lead, folded={}, pods=(), resolved=()
    )


def folded(group: BridgeGroup, incident: Incident) -> BridgeGroup:
    """The group after ``incident`` (a revision of a non-lead member) was folded in."""
    members = {**group.folded, incident.id: incident.revision}
    pods = _union(group.pods, incident.pods)
    resolved = (
        tuple(sorted({*group.resolved, incident.id}))
        if incident.status == "resolved"
        else (tuple(r for r in group.resolved if r != incident.id))
    )
    return msgspec.structs.replace(group, folded=members, pods=pods, resolved=resolved)


def with_lead_view(group: BridgeGroup, lead: Incident) -> BridgeGroup:
    return msgspec.structs.replace(group, lead_view=lead)


def merged(
    lead: Incident, group: BridgeGroup | None, revision: int, *, first: bool = False
) -> Incident:
    """What the endpoint sees for the lead: its own revision with the group folded in.

    An ``open`` lead already paged becomes ``updated`` (the fold is an update of its page);
    its ``first`` delivery stays ``open`` (folds that came before it went are in it)."""
    if group is None or group.lead != lead.id or not group.folded:
        return (
            lead if lead.revision == revision else msgspec.structs.replace(lead, revision=revision)
        )
    attributes = {
        **lead.attributes,
        "grouped_incidents": str(len(group.folded)),
        "grouped_ids": ",".join(sorted(group.folded)),
    }
    if group.resolved:
        attributes["grouped_resolved"] = str(len(group.resolved))
    pods = _union(lead.pods, group.pods)
    extra = len(pods) - len(lead.pods)
    summary = (
        lead.summary
        if not extra
        else f"{lead.summary} (+{len(group.folded)} grouped incidents, {extra} more pods)"
    )
    status = "updated" if lead.status == "open" and not first else lead.status
    return msgspec.structs.replace(
        lead, revision=revision, status=status, pods=pods, attributes=attributes, summary=summary
    )


def _union(first: tuple[PodInfo, ...], more: tuple[PodInfo, ...]) -> tuple[PodInfo, ...]:
    """``first`` as it is, then the pods of ``more`` not in it, sorted (deterministic)."""
    seen = {(p.namespace, p.name) for p in first}
    added = {}
    for pod in more:
        key = (pod.namespace, pod.name)
        if key not in seen:
            added[key] = pod
    return (*first, *(added[k] for k in sorted(added)))
