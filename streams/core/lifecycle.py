"""Opening, updating, resolving and publishing incidents.

Rules mutate :class:`~streams.core.state.OpenIncident` objects through a
:class:`Step`, which collects every incident a single event (or timer) touched
and publishes *one* revision per incident at the end. So an event that adds a pod
and an evidence line to an incident yields one ``updated`` revision, not two.

Evidence is published sorted by (time, event id): a chain whose trigger arrived
after the first failure (the look-back case) still reads in causal order.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec

from schemas.ids import incident_id
from schemas.incidents import Evidence, GpuRef, Incident, PodInfo
from schemas.types import IncidentStatus
from streams.core.config import CoreSettings
from streams.core.state import NEVER, ClusterState, NodeState, OpenIncident
from streams.core.timeconv import to_datetime, to_seconds

_ROLE_RANK = {
    role: rank
    for rank, role in enumerate(
        (
            "evicted",
            "oom_killed",
            "failed",
            "restarting",
            "bound",
            "candidate",
            "running",
            "scheduled",
            "gone",
            "pending",
        )
    )
}
"""When one pod reaches an incident twice, the role earlier in this list is kept."""


def _evidence_key(item: Evidence) -> tuple[float, str]:
    return (to_seconds(item.time), item.event_id)


S = TypeVar("S", NodeState, ClusterState)


class KeyStep(Generic[S]):
    """The transient context of one event or timer applied to one key's state (a node's:
    :data:`Step`, or a cluster's: :data:`ClusterStep`)."""

    __slots__ = ("config", "dirty", "now", "out", "state", "version")

    def __init__(self, state: S, config: CoreSettings, now: float) -> None:
        self.state: S = state
        self.config = config
        self.now = now
        self.version = 0
        """The event's object resourceVersion (pods, nodes), 0 when none or unknown."""
        self.dirty: list[OpenIncident] = []
        self.out: list[Incident] = []

    # -- finding and creating -------------------------------------------------
    def find(self, kind: str, subject: str) -> OpenIncident | None:
        """The open incident of ``kind`` about ``subject``, if any. Most keys hold none:
        then no ``kind|subject`` string is built (rules ask on most events)."""
        incidents = self.state.incidents
        if not incidents:
            return None
        return incidents.get(f"{kind}|{subject}")

    def open(self, kind: str, subject: str, anchor: str, first_seen: float) -> OpenIncident:
        """A new incident whose id derives from ``anchor`` (the first evidence's id)."""
        state = self.state
        inc = OpenIncident(
            id=incident_id(kind, state.cluster, state.node, subject, anchor),
            type=kind,
            subject=subject,
            severity=self.config.severity.get(kind, "ticket"),
            first_seen=first_seen,
            last_seen=first_seen,
        )
        state.incidents[f"{kind}|{subject}"] = inc
        self.touch(inc)
        return inc

    # -- mutating ---------------------------------------------------------------
    def touch(self, inc: OpenIncident) -> None:
        if inc not in self.dirty:
            self.dirty.append(inc)

    def add_evidence(self, inc: OpenIncident, item: Evidence, *, context: bool = False) -> bool:
        """Attach ``item`` unless already there; past ``max_evidence`` only count it.

        ``context``: the item is background (an earlier XID on the node attached to a
        drop's ``gpu_degraded``), not part of the fault: it never moves ``first_seen``
        back, which says when the fault began (unrelated XIDs minutes before
        a drop made its detection look minutes late)."""
        for known in inc.evidence:
            if known.event_id == item.event_id:
                return False
        if len(inc.evidence) >= self.config.max_evidence:
            inc.evidence_omitted += 1
        else:
            inc.evidence.append(item)
        seen = to_seconds(item.time)
        inc.last_seen = max(inc.last_seen, seen)
        if not context:
            inc.first_seen = min(inc.first_seen, seen)
        self.touch(inc)
        return True

    def add_pod(self, inc: OpenIncident, pod: PodInfo) -> bool:
        """Name a pod once per incident; a stronger role (``evicted`` over ``running``) wins."""
        key = f"{pod.namespace}/{pod.name}"
        known = inc.pods.get(key)
        if known is not None:
            if _ROLE_RANK.get(pod.role, 99) >= _ROLE_RANK.get(known.role, 99):
                if known.container or not pod.container:
                    return False
                pod = msgspec.structs.replace(known, container=pod.container)
            elif not pod.container and known.container:
                pod = msgspec.structs.replace(pod, container=known.container)
        inc.pods[key] = pod
        self.touch(inc)
        return True

    def add_gpu(self, inc: OpenIncident, key: str, gpu: GpuRef) -> None:
        if inc.gpus.get(key) != gpu:
            inc.gpus[key] = gpu
            self.touch(inc)

    def set_deadline(self, inc: OpenIncident, when: float) -> None:
        if inc.resolve_at != when:
            inc.resolve_at = when
            self.state.timers_dirty = True

    def resolve(self, inc: OpenIncident, at: float, note: str = "") -> None:
        """Publish the final revision now and forget the incident."""
        incidents = self.state.incidents
        if incidents.pop(f"{inc.type}|{inc.subject}", None) is not None:
            # A dict keeps its largest table when entries leave (a node that had an
            # incident kept ~230 bytes for none): built anew, the smallest for what is left.
            self.state.incidents = dict(incidents.items())
        if inc in self.dirty:
            self.dirty.remove(inc)
        if note:
            inc.attributes["resolution"] = note
        inc.resolve_at = NEVER
        self.state.timers_dirty = True
        self.out.append(self._record(inc, "resolved", at))

    # -- publishing -------------------------------------------------------------
    def release_held(self) -> None:
        """Touch every incident whose held changes are due now (a timer step)."""
        interval = self.config.revision_interval_seconds
        for inc in self.state.incidents.values():
            if inc.held and inc.published_at + interval <= self.now:
                self.touch(inc)

    def finish(self, *, hold: bool = True) -> list[Incident]:
        """One revision per touched incident, in the order they were first touched.

        An update less than ``revision_interval_seconds`` after the incident's last
        published revision is held (:func:`held_until` gives its timer), unless its
        severity changed. Trap: the interval is measured in event time from the held
        incident's own last revision, so live and replay hold the same changes.
        ``hold=False`` publishes everything (the end of the input)."""
        interval = self.config.revision_interval_seconds if hold else -NEVER
        now = self.now
        for inc in self.dirty:
            if inc.revision == 0:
                status: IncidentStatus = "open"
            elif now < inc.published_at + interval and inc.severity == inc.published_severity:
                if not inc.held:
                    inc.held = True
                    self.state.timers_dirty = True
                continue
            else:
                status = "updated"
            if inc.held:
                inc.held = False
                self.state.timers_dirty = True
            inc.published_at = max(inc.published_at, now)
            inc.published_severity = inc.severity
            self.out.append(self._record(inc, status, None))
        self.dirty.clear()
        return self.out

    def _record(
        self, inc: OpenIncident, status: IncidentStatus, resolved: float | None
    ) -> Incident:
        inc.revision += 1
        evidence = tuple(sorted(inc.evidence, key=_evidence_key))
        attributes = dict(inc.attributes)
        state = self.state
        if isinstance(state, NodeState) and (state.pool or state.product):
            # Where the node is, for the fleet view and the people paged: named when
            # its labels say it, nothing added otherwise.
            if state.pool:
                attributes["pool"] = state.pool
            if state.product:
                attributes["gpu_product"] = state.product
        return Incident(
            id=inc.id,
            type=inc.type,
            status=status,
            revision=inc.revision,
            severity=inc.severity,
            cluster=self.state.cluster,
            node=self.state.node,
            gpus=tuple(inc.gpus.values()),
            pods=tuple(inc.pods.values()),
            first_seen=to_datetime(inc.first_seen),
            last_seen=to_datetime(inc.last_seen),
            resolved_at=None if resolved is None else to_datetime(resolved),
            summary=inc.summary,
            action=inc.action,
            evidence=evidence,
            evidence_omitted=inc.evidence_omitted,
            attributes=attributes,
        )


def publish_held(
    state: NodeState | ClusterState, now: float, config: CoreSettings
) -> list[Incident]:
    """The held changes of every incident of ``state``, published now (end of input: a
    replay that ends less than the interval after an update still shows it)."""
    step: Step | ClusterStep = (
        ClusterStep(state, config, now)
        if isinstance(state, ClusterState)
        else Step(state, config, now)
    )
    for inc in state.incidents.values():
        if inc.held:
            step.touch(inc)
    return step.finish(hold=False)


def held_until(inc: OpenIncident, config: CoreSettings) -> float:
    """When ``inc``'s held changes are due to be published; ``NEVER`` if none are held."""
    return inc.published_at + config.revision_interval_seconds if inc.held else NEVER


class Step(KeyStep[NodeState]):
    """A step of a node's key (the node rules). A subclass, not the alias
    ``KeyStep[NodeState]``: calling a subscripted generic goes through ``typing``'s
    ``__call__``, 1 µs per event on the hot path."""

    __slots__ = ()


class ClusterStep(KeyStep[ClusterState]):
    """A step of a cluster's key (:mod:`streams.core.cluster`)."""

    __slots__ = ()
