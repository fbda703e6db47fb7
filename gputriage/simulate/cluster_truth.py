"""Ground truth for the cluster-scoped autoscaler types: ``scale_up_failure`` and
``gpu_pods_starved`` (docs/detection.md), counted at the end from what was emitted.

Counted, not told by the scenario: any pending GPU pod is starved by the rule once it has
pended 10 min while some GPU node group failed 3 times, whichever story made it pend. So
the recorder keeps what every scenario emitted and applies the rule (an attempt is a
group's failure record >= 60 s after its previous one; one ``scale_up_failure`` per group,
closed after 30 min quiet; one ``gpu_pods_starved`` per owner), with the documented
defaults, not imported from the core.

Trap: the records are the connector's own parse of the lines (``connectors.autoscaler``),
so the recorder reads ``action`` and ``reason``, never the text.
docs/replay.md, design notes: the cluster-scoped truth.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from schemas.events import AutoscalerEvent
from schemas.truth import ExpectedIncident

STARVED_PENDING = timedelta(minutes=10)
STARVED_FAILURES = 3
SCALE_UP_WINDOW = timedelta(hours=1)
ATTEMPT_GAP = timedelta(seconds=60)
SCALE_UP_QUIET = timedelta(minutes=30)
FAILURES = frozenset({"scale_up_failed", "scale_up_timeout", "max_size_reached"})
CAUSES = ("quota", "capacity", "max_size", "timeout", "other")
"""Most telling first: a group's incident is named by the best it has shown."""
GPU_GROUP = re.compile(r"gpu|nvidia|p5|p4de|a100|h100|h200", re.IGNORECASE)
"""The simulator's group names (``eks-gpu-p5-48xlarge-...``, Karpenter ``gpu-h100``)
all say GPU; the core's pattern is configuration, this is the domain's plain reading."""


@dataclass
class _PendingPod:
    owner: str
    owner_label: str
    created: datetime
    seen: datetime
    """When it was first emitted pending (the core starts tracking it then)."""
    unschedulable: datetime | None = None
    left: datetime | None = None
    ties: dict[str, datetime] = field(default_factory=dict)
    resource: str = ""
    """What it asks for: ``nvidia.com/gpu``, or its claims' device class (``gpu.nvidia.com``)."""

    def pending(self, at: datetime) -> bool:
        return self.seen <= at and (self.left is None or at < self.left)


@dataclass
class _Group:
    records: list[tuple[datetime, str, str]] = field(default_factory=list)
    """(time, reason, cloud code) of every failure record."""
    attempts: list[datetime] = field(default_factory=list)


class ClusterTruth:
    """Watches pending pods and autoscaler records; :meth:`expected` applies the rule."""

    def __init__(self, slack: timedelta) -> None:
        self._slack = slack
        self._pods: dict[tuple[str, str], _PendingPod] = {}
        self._groups: dict[tuple[str, str], _Group] = defaultdict(_Group)
        self._claims: dict[tuple[str, str], list[tuple[datetime, str]]] = defaultdict(list)
        self._offers: dict[tuple[str, str], list[tuple[datetime, str]]] = defaultdict(list)
        """(time, resource) of each pod a record tied to the group: what it is known to offer."""

    def claim(self, *, cluster: str, group: str, fault: str, at: datetime) -> None:
        """A fault story starts making ``group`` fail at ``at`` (names its truths)."""
        self._claims[(cluster, group)].append((at, fault))

    def _fault(self, cluster: str, group: str, at: datetime, make_id: Callable[[str], str]) -> str:
        claims = [f for t, f in self._claims.get((cluster, group), ()) if t <= at]
        return claims[-1] if claims else make_id("scale_up")

    def pending(
        self,
        *,
        cluster: str,
        pod: str,
        owner: str,
        owner_label: str,
        created: datetime,
        at: datetime,
        unschedulable: bool,
        resource: str = "",
    ) -> None:
        """A GPU pod was emitted pending (``pod`` is ``namespace/name``) asking for
        ``resource``."""
        known = self._pods.get((cluster, pod))
        if known is None or (known.left is not None and known.left <= at):
            known = self._pods[(cluster, pod)] = _PendingPod(
                owner, owner_label, created, at, resource=resource
            )
        if unschedulable and known.unschedulable is None:
            known.unschedulable = at

    def failed_scheduling(self, *, cluster: str, pod: str, at: datetime) -> None:
        known = self._pods.get((cluster, pod))
        if known is not None and known.pending(at) and known.unschedulable is None:
            known.unschedulable = at

    def left(self, *, cluster: str, pod: str, at: datetime) -> None:
        """The pod was emitted scheduled (on a node) or being deleted."""
        known = self._pods.get((cluster, pod))
        if known is not None and known.left is None:
            known.left = at

    def autoscaler(self, record: AutoscalerEvent) -> None:
        """An emitted autoscaler record: a tie, a failure, or neither."""
        cluster, group = record.cluster, record.node_group
        if not group:
            return
        for ref in record.pods:
            known = self._pods.get((cluster, f"{ref.namespace}/{ref.name}"))
            if known is not None and known.pending(record.time):
                known.ties.setdefault(group, record.time)
                self._offers[(cluster, group)].append((record.time, known.resource))
        failure = record.action in FAILURES or (
            record.action == "backoff" and record.reason in CAUSES
        )
        if not failure:
            return
        track = self._groups[(cluster, group)]
        reason = record.reason if record.reason in CAUSES else "other"
        track.records.append((record.time, reason, record.cloud_code))
        if not track.attempts or record.time - track.attempts[-1] >= ATTEMPT_GAP:
            track.attempts.append(record.time)

    # ---------------------------------------------------------------- the rule

    def expected(self, make_id: Callable[[str], str], end: datetime) -> list[ExpectedIncident]:
        """The incidents a stream ending at ``end`` gives; ``make_id`` makes an id for one
        no fault :meth:`claim` ed (``TruthRecorder.fault_id``)."""
        found = self._scale_up_failures(make_id)
        found.extend(self._starved(make_id, end))
        return found

    def _scale_up_failures(self, make_id: Callable[[str], str]) -> list[ExpectedIncident]:
        found = []
        for (cluster, group), track in sorted(self._groups.items(), key=lambda kv: kv[0]):
            if not GPU_GROUP.search(group):
                continue
            records = sorted(track.records)
            k = 0
            while k < len(records):
                first = records[k][0]
                episode = [records[k]]
                k += 1
                while k < len(records) and records[k][0] - episode[-1][0] <= SCALE_UP_QUIET:
                    episode.append(records[k])
                    k += 1
                reason = min((r for _, r, _ in episode), key=CAUSES.index)
                fault = self._fault(cluster, group, first, make_id)
                found.append(
                    ExpectedIncident(
                        id=f"{fault}/scale_up_failure",
                        fault=fault.rsplit("-", 1)[0],
                        type="scale_up_failure",
                        cluster=cluster,
                        node_group=group,
                        start=first,
                        not_before=first - self._slack,
                        not_after=first + self._slack,
                        severity="page" if reason == "quota" else "ticket",
                    )
                )
        return found

    def _failing(self, cluster: str, at: datetime) -> dict[str, _Group]:
        return {
            group: track
            for (c, group), track in self._groups.items()
            if c == cluster
            and GPU_GROUP.search(group)
            and sum(1 for t in track.attempts if at - SCALE_UP_WINDOW <= t <= at)
            >= STARVED_FAILURES
        }

    def _starved(self, make_id: Callable[[str], str], end: datetime) -> list[ExpectedIncident]:
        owners: dict[tuple[str, str], list[tuple[str, _PendingPod]]] = defaultdict(list)
        for (cluster, pod), known in self._pods.items():
            if known.unschedulable is not None:
                owners[(cluster, known.owner)].append((pod, known))
        found = []
        for (cluster, _owner), pods in sorted(owners.items(), key=lambda kv: kv[0]):
            moments: set[datetime] = set()
            for _, p in pods:
                assert p.unschedulable is not None
                moments.update((p.created + STARVED_PENDING, p.unschedulable, *p.ties.values()))
            for (c, _), track in self._groups.items():
                if c == cluster:
                    moments.update(track.attempts)
            open_until: datetime | None = None
            for at in sorted(moments):
                if at > end:
                    break  # past the stream's end: no replay can see it
                if open_until is not None and at < open_until:
                    continue
                starving = [
                    (name, p)
                    for name, p in pods
                    if p.pending(at)
                    and p.unschedulable is not None
                    and p.unschedulable <= at
                    and p.created <= at
                    and at - p.created >= STARVED_PENDING
                ]
                if not starving:
                    continue
                failing = self._failing(cluster, at)
                tied = {g for _, p in starving for g, t in p.ties.items() if t <= at}
                untied = self._may_offer(cluster, failing, starving, at)
                named = sorted(tied & failing.keys()) if tied else untied
                if not named:
                    continue
                first = min(p.created for _, p in starving)
                recent = [
                    (t, r)
                    for g in named
                    for t, r, _ in self._groups[(cluster, g)].records
                    if at - SCALE_UP_WINDOW <= t <= at
                ]
                reasons = [r for _, r in recent]
                reason = min(reasons, key=CAUSES.index) if reasons else "other"
                fault = self._fault(cluster, named[0], at, make_id)
                until = _none_pending_after(at, [p for _, p in pods])
                joined = self._joining_lines(cluster, pods, at, until or end)
                earliest = min([first, *(t for t, _ in recent), *joined])
                found.append(
                    ExpectedIncident(
                        id=f"{fault}/gpu_pods_starved",
                        fault=fault.rsplit("-", 1)[0],
                        type="gpu_pods_starved",
                        cluster=cluster,
                        pods=tuple(sorted(name for name, _ in starving)),
                        owner=starving[0][1].owner_label,
                        node_group=named[0],
                        start=first,
                        not_before=earliest - self._slack,
                        not_after=first + self._slack,
                        severity="page" if reason == "quota" else "ticket",
                    )
                )
                open_until = until
                if open_until is None:
                    break
        return found

    def _may_offer(
        self,
        cluster: str,
        groups: dict[str, _Group],
        pods: list[tuple[str, _PendingPod]],
        at: datetime,
    ) -> list[str]:
        """The failing groups untied ``pods`` may be waiting on: not one known (by the pods
        tied to it so far) to offer only other resources than theirs (a DRA pool does not
        starve a pod that asks for ``nvidia.com/gpu``, nor the other way round)."""
        wanted = {p.resource for _, p in pods}
        found = []
        for group in sorted(groups):
            known = {r for t, r in self._offers.get((cluster, group), ()) if t <= at and r}
            if not known or "" in wanted or known & wanted:
                found.append(group)
        return found

    def _joining_lines(
        self,
        cluster: str,
        pods: list[tuple[str, _PendingPod]],
        opened: datetime,
        until: datetime,
    ) -> list[datetime]:
        """Failure lines of the groups that start failing while the incident is open (its
        pods still pending): the group joins it and its recent lines are evidence, so
        one an hour old can become its ``first_seen``."""
        lines: list[datetime] = []
        for (c, _), track in self._groups.items():
            if c != cluster:
                continue
            for t in track.attempts:
                if not opened < t <= until:
                    continue
                waiting = [p for _, p in pods if p.pending(t)]
                tied = {g for p in waiting for g, when in p.ties.items() if when <= t}
                failing = self._failing(cluster, t)
                for g in tied & failing.keys() if tied else failing:
                    lines.extend(
                        r
                        for r, _, _ in self._groups[(cluster, g)].records
                        if t - SCALE_UP_WINDOW <= r <= t
                    )
        return lines


def _none_pending_after(at: datetime, pods: list[_PendingPod]) -> datetime | None:
    """The first moment after ``at`` when none of ``pods`` pends (None: never, in the
    stream): the owner's incident resolves then."""
    end = at
    moved = True
    while moved:
        moved = False
        for p in pods:
            if p.seen <= end and (p.left is None or p.left > end):
                if p.left is None:
                    return None
                end = p.left
                moved = True
    return end
