"""The event-time engine: watermark, grace, ordering, timers, and keyed state.

How it stays deterministic while events arrive out of order:

* Every event waits in a buffer until the watermark passes its time. The
  watermark is ``max(event time seen, tick time) - grace`` and never goes back.
* Released events are applied in a total order, ``(time, schema rank, event
  id)``, which does not depend on arrival order. So any arrival order in which
  no event is more than ``grace`` late yields the same state and the same
  incidents, live or replayed.
* Timers (windows closing, quiet periods) are merged into the same timeline: a
  timer due at ``T`` fires after every event with time ``< T`` and before any
  event with time ``>= T``... except that events at exactly ``T`` go first, so a
  timer sees everything that happened at its instant.
* An event later than the watermark (beyond grace) is not dropped: it is applied
  at once and counted in ``stats.late``. Its result may then differ from an
  in-order run; that is the one place arrival order can matter, and it is visible.

State is keyed by correlation key (``cluster/node`` or ``cluster``), so a
partitioned deployment can hold each key's state next to its partition.
"""

from __future__ import annotations

import heapq
import math
from sys import intern
from typing import Any

import msgspec

from schemas.codec import AnyEvent
from schemas.events import (
    AutoscalerEvent,
    GpuBindingEvent,
    KubeEvent,
    NodeEvent,
    PodEvent,
    Tick,
    XidEvent,
)
from schemas.incidents import Incident
from streams.core import node as node_rules
from streams.core.config import CoreConfig
from streams.core.state import NEVER, ClusterState, KeyState, NodeState

RANK: dict[type[Any], int] = {
    XidEvent: 0,
    NodeEvent: 1,
    GpuBindingEvent: 2,
    KubeEvent: 3,
    PodEvent: 4,
    AutoscalerEvent: 5,
    Tick: 6,
}
"""Order of schemas at the same instant: hardware first, then what Kubernetes made of it."""


class CoreStats(msgspec.Struct):
    """Counters the engine keeps; exported as metrics by the processes that run it."""

    events: int = 0
    late: int = 0
    """Events that arrived behind the watermark (more than ``grace`` out of order)."""
    duplicates: int = 0
    """Events delivered twice while still buffered (same time, schema and id)."""
    revisions: int = 0
    timers: int = 0


def correlation_key(event: AnyEvent) -> str:
    """``cluster/node`` for node-scoped events, ``cluster`` for cluster-scoped ones."""
    node: str = getattr(event, "node", "")
    return f"{event.cluster}/{node}" if node else event.cluster


def new_state(event: AnyEvent) -> KeyState:
    node: str = getattr(event, "node", "")
    cluster = intern(event.cluster)
    if node:
        return NodeState(cluster=cluster, node=node)
    return ClusterState(cluster=cluster)


def step(
    state: KeyState | None,
    event: AnyEvent,
    config: CoreConfig,
) -> tuple[KeyState, list[Incident]]:
    """The pure transition ``(state, event) -> (state, incidents)`` for one key.

    The caller owns ``state`` and must apply events of one key in event-time order
    (the :class:`Correlator` does). The state object is updated in place and
    returned, which avoids copying ~1 KB per pod on every event.
    """
    if state is None:
        state = new_state(event)
    incidents = _transition(state, event, event.time.timestamp(), config)
    if isinstance(state, NodeState):
        _refresh_deadline(state, config)
    return state, incidents


def _transition(
    state: KeyState,
    event: AnyEvent,
    when: float,
    config: CoreConfig,
) -> list[Incident]:
    """Apply one event to one key's state at event time ``when``."""
    if isinstance(state, ClusterState):
        state.events += 1
        return []
    return node_rules.apply_event(state, event, when, config)


def advance(state: KeyState, now: float, config: CoreConfig) -> tuple[KeyState, list[Incident]]:
    """Fire the timers of one key that are due at or before event time ``now``."""
    if isinstance(state, ClusterState) or state.deadline > now:
        return state, []
    incidents = node_rules.apply_timer(state, now, config)
    _refresh_deadline(state, config)
    return state, incidents


def _refresh_deadline(state: NodeState, config: CoreConfig) -> bool:
    """Recompute the key's deadline if a rule touched a timer; True if it changed."""
    if not state.timers_dirty:
        return False
    state.timers_dirty = False
    deadline = node_rules.next_deadline(state, config)
    if deadline == state.deadline:
        return False
    state.deadline = deadline
    return True


class Correlator:
    """All keys' state plus the shared event-time machinery. Pure: no I/O, no clock.

    ``ingest`` and ``advance`` return the incident revisions they caused, in the
    order they happened in event time.
    """

    def __init__(self, config: CoreConfig) -> None:
        self.config = config
        self.grace = config.grace_seconds
        self.watermark = -math.inf
        self.max_time = -math.inf
        self.stats = CoreStats()
        # cluster -> node ("" for the cluster-scoped key) -> state. Two levels, so no
        # "cluster/node" string is built per event or stored per key.
        self._states: dict[str, dict[str, KeyState]] = {}
        self._pending: list[tuple[float, int, str, int, AnyEvent]] = []
        self._timers: list[tuple[float, str, str]] = []
        self._seq = 0
        self._pushes = 0
        self._last: tuple[float, int, str] | None = None

    def ingest(self, event: AnyEvent) -> list[Incident]:
        """Accept one event (in any order); return the revisions now decided."""
        out: list[Incident] = []
        when = event.time.timestamp()
        self.stats.events += 1
        if type(event) is Tick:
            self._advance_to(when - self.grace, out)
            return out
        if when <= self.watermark:
            self.stats.late += 1
            self._apply(event, when, out)
        else:
            heapq.heappush(self._pending, (when, RANK[type(event)], event.id, self._seq, event))
            self._seq += 1
        if when > self.max_time:
            self.max_time = when
            self._advance_to(when - self.grace, out)
        return out

    def advance(self, now: float) -> list[Incident]:
        """A clock reading (seconds since the epoch): lets quiet keys' timers fire."""
        out: list[Incident] = []
        self._advance_to(now - self.grace, out)
        return out

    def flush(self) -> list[Incident]:
        """End of input: release everything buffered and fire timers up to the last event."""
        out: list[Incident] = []
        self._advance_to(self.max_time, out)
        return out

    @property
    def keys(self) -> dict[str, KeyState]:
        """A snapshot of every key's state by correlation key (for inspection and tests)."""
        return {
            f"{cluster}/{node}" if node else cluster: state
            for cluster, nodes in self._states.items()
            for node, state in nodes.items()
        }

    def _node_states(self) -> list[NodeState]:
        return [
            s for nodes in self._states.values() for s in nodes.values() if isinstance(s, NodeState)
        ]

    def tracked_pods(self) -> int:
        return sum(len(s.pods) for s in self._node_states())

    def open_incidents(self) -> int:
        return sum(len(s.incidents) for s in self._node_states())

    # -- internals -------------------------------------------------------------------
    def _advance_to(self, watermark: float, out: list[Incident]) -> None:
        if watermark <= self.watermark:
            return
        pending, timers = self._pending, self._timers
        while True:
            event_at = pending[0][0] if pending else NEVER
            timer_at = timers[0][0] if timers else NEVER
            if timer_at < event_at and timer_at <= watermark:
                due, cluster, node = heapq.heappop(timers)
                state = self._states[cluster].get(node)
                if isinstance(state, NodeState) and state.deadline == due:
                    self._fire(state, due, out)
            elif event_at <= watermark:
                when, rank, event_id, _, event = heapq.heappop(pending)
                ident = (when, rank, event_id)
                if ident == self._last:
                    self.stats.duplicates += 1
                    continue
                self._last = ident
                self._apply(event, when, out)
            else:
                break
        self.watermark = watermark

    def _apply(self, event: AnyEvent, when: float, out: list[Incident]) -> None:
        nodes = self._states.get(event.cluster)
        if nodes is None:
            nodes = self._states[intern(event.cluster)] = {}
        node: str = getattr(event, "node", "")
        state = nodes.get(node)
        if state is None:
            state = nodes[node] = new_state(event)
        incidents = _transition(state, event, when, self.config)
        if not isinstance(state, NodeState):
            return
        if incidents:
            self.stats.revisions += len(incidents)
            out.extend(incidents)
        if _refresh_deadline(state, self.config) and state.deadline < NEVER:
            self._schedule(state)

    def _fire(self, state: NodeState, due: float, out: list[Incident]) -> None:
        self.stats.timers += 1
        incidents = node_rules.apply_timer(state, due, self.config)
        if incidents:
            self.stats.revisions += len(incidents)
            out.extend(incidents)
        _refresh_deadline(state, self.config)
        if state.deadline <= due:
            # A rule left a deadline it cannot consume: never spin on it.
            state.deadline = NEVER
        if state.deadline < NEVER:
            self._schedule(state)

    def _schedule(self, state: NodeState) -> None:
        """Push the key's timer. Superseded entries stay in the heap (lazy deletion);
        every few thousand pushes, a heap mostly made of them is rebuilt."""
        heapq.heappush(self._timers, (state.deadline, state.cluster, state.node))
        self._pushes += 1
        if self._pushes % 4096 == 0:
            live = [
                (s.deadline, s.cluster, s.node) for s in self._node_states() if s.deadline < NEVER
            ]
            if len(self._timers) > 2 * len(live):
                heapq.heapify(live)
                self._timers = live
