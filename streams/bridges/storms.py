"""Storms: many incidents of one chain on one route become at most a few pages.

What the core emits for a storm (measured, ``tests/connectors/bridges/test_runner_storm.py``):
200 pods evicted after an XID 79 on one node are ONE ``device_unhealthy_eviction``
incident (the chain: the XID anchors its id) with 200 revisions, each adding a pod; its
``pods`` lists every one of them (the evidence is capped, the pods are not). So the
storm a bridge must absorb is first a storm of *revisions*, which the runner's
coalescing and ``min_update_seconds`` turn into an open and a few updates; and then,
when other incidents of the same node open in the same minutes (a ``gpu_degraded``,
per-pod incidents), a storm of *pages*, which this module limits.

The group of an incident is its chain's place: ``cluster/node`` for node-scoped
incidents (the chain and everything else on that node), ``cluster/type`` for
cluster-scoped ones. Per route and group, at most ``storm_pages`` incidents open as
pages of their own within ``storm_window_seconds``; a further one is *folded* into
the group's latest page (its *lead*): the lead is delivered again as an update whose
``pods`` are the union of its own and every folded incident's, and whose
``attributes`` name what was folded. The endpoint sees a normal incident.

Traps:

* The merged view must be deterministic (a restart rebuilds it from the ledger and
  sends the same thing): pods are unioned in a fixed order (the lead's first, then the
  folded ones sorted by namespace and name), never by arrival.
* A merged view is a new revision for the endpoint (CloudEvents ids, Slack's update
  check key on it) although the lead's own revision did not move: it is handed over
  as ``max(lead revision, last handed + 1)`` (``endpoint_revision`` in the ledger).
* A resolved lead takes no more folds: the next incident of the group pages.
* The group's state is a ledger record (:class:`~schemas.bridges.BridgeGroup`), so a
  restart neither forgets the rate limit nor pages again for what was folded.
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
