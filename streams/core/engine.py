"""The event-time engine: watermark, grace, ordering, timers, and keyed state.

Deterministic while events arrive out of order: every event waits until the watermark
(``max(event time seen, tick time) - grace``, never going back) passes it, and released
events are applied in a total order ``(time, schema rank, event id, cluster, node)``, with
timers on the same timeline after every event at their instant: any arrival order with no
event more than ``grace`` late gives the same incidents, live or replayed. A key's
high-water mark skips a redelivery (``stats.stale``) unless its object's resourceVersion
is newer (a relist's copy, ``stats.late_applied``). :meth:`Correlator.take_released` hands
back the tokens of every event applied or skipped, so a Kafka caller commits exactly those.

Traps: grace is inclusive (the old ``<=`` lost an event exactly ``grace`` behind); ids are
unique per source, not across clusters, hence the key in the order; an event beyond grace
is applied at once, counted in ``stats.late``. docs/detection.md, design notes.
"""

from __future__ import annotations

import math
from datetime import datetime
from heapq import heapify, heappop, heappush
from sys import intern
from typing import Any, Final, final

import msgspec

from schemas.codec import AnyEvent
from schemas.events import (
    AutoscalerEvent,
    GpuBindingEvent,
    GpuTopologyEvent,
    KubeEvent,
    NodeEvent,
    PodEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
    Tick,
    XidEvent,
)
from schemas.incidents import Incident
from schemas.keys import key_node, key_of
from streams.core import cluster as cluster_rules
from streams.core import node as node_rules
from streams.core.config import CoreSettings
from streams.core.lifecycle import publish_held
from streams.core.state import NEVER, ClusterState, KeyState, NodeState
from streams.core.timeconv import to_seconds

RANK: Final[dict[type[Any], int]] = {
    XidEvent: 0,
    NodeEvent: 1,
    GpuBindingEvent: 2,
    GpuTopologyEvent: 2,
    ResourceSliceEvent: 2,
    ResourceClaimEvent: 2,
    KubeEvent: 3,
    PodEvent: 4,
    AutoscalerEvent: 5,
    Tick: 6,
}
"""Order of schemas at the same instant: hardware first, then what Kubernetes made of it.

A topology, a ResourceSlice and a ResourceClaim share the bindings' rank (ties sort by
id, the same in every delivery): a new rank in between would renumber the ones after it,
and a restored key state's ``applied_rank`` would then mean another schema. A slice's
device taint thus arms the eviction chain before a pod failure of the same instant."""
_TICK_RANK: Final = RANK[Tick]
"""A node agent's heartbeat (a :class:`Tick` with ``node`` and ``source``) is buffered
and released in event order like any event, then applied as a side channel
(:func:`streams.core.node.apply_heartbeat`): it never moves its key's position."""


class CoreStats(msgspec.Struct):
    """Counters the engine keeps; exported as metrics by the processes that run it."""

    events: int = 0
    late: int = 0
    """Events that arrived behind the watermark (more than ``grace`` out of order)."""
    duplicates: int = 0
    """Events delivered twice while still buffered (same time, schema, id *and key*:
    the same id in another cluster or on another node is another event)."""
    stale: int = 0
    """Events skipped as older copies: their key had already applied a later event and
    their object brings no newer version (redeliveries), or their object had already
    been applied at this version or a newer one."""
    late_applied: int = 0
    """Events that sorted behind their key's position but were applied, because their
    object's version was newer than the one applied (a relist after 410 Gone, a restart
    or a reconnect: objects changed meanwhile come stamped with their own older times)."""
    revisions: int = 0
    timers: int = 0


def _heartbeat_of_a_node(tick: Any) -> bool:
    """Is this tick a node agent's heartbeat (``node`` and ``source`` set), not a mere
    clock reading?"""
    return bool(tick.node and tick.source)


def _state_key(state: KeyState) -> tuple[str, str]:
    return (state.cluster, state.node)


def new_state(event: AnyEvent) -> KeyState:
    node = key_node(event)
    cluster = intern(event.cluster)
    if node:
        return NodeState(cluster=cluster, node=node)
    return ClusterState(cluster=cluster)


def step(
    state: KeyState | None,
    event: AnyEvent,
    config: CoreSettings,
) -> tuple[KeyState | None, list[Incident]]:
    """The pure transition ``(state, event) -> (state, incidents)`` for one key.

    The caller owns ``state`` and must apply events of one key in event-time order
    (the :class:`Correlator` does). The state object is updated in place and
    returned, which avoids copying ~1 KB per pod on every event.

    Trap: a :class:`Tick` never creates a key (a heartbeat is a node key's side
    channel; a clock reading is no key's), so ``step(None, tick)`` is ``(None, [])``:
    the state is None only then.
    """
    when = to_seconds(event.time)
    if type(event) is Tick:
        found: list[Incident] | None = None
        if isinstance(state, NodeState) and event.source:
            applied = node_rules.apply_heartbeat(state, event, when, config)
            found = applied[0] if applied is not None else None
            _refresh_deadline(state, config)
        return state, found or []
    if state is None:
        state = new_state(event)
    incidents, _ = _transition(state, event, when, RANK[type(event)], event.id, config)
    _refresh_deadline(state, config)
    return state, incidents or []


def _transition(
    state: KeyState,
    event: AnyEvent,
    when: float,
    rank: int,
    event_id: str,
    config: CoreSettings,
) -> tuple[list[Incident] | None, bool]:
    """Apply one event to one key's state at event time ``when`` (``rank``: its schema's,
    ``event_id``: its id).

    Returns ``(incidents, late)``: incidents None if the event is stale; ``late`` when
    it sorted at or before the key's position and was applied all the same, because its
    object's own version is newer (``streams.core.node.admits``; a relist's copy).
    The key's position never moves back.

    The position ``(time, rank, id)`` is compared field by field, not as tuples: this
    runs for every event, and two tuples per event were a measurable share of the core.
    The kind of key is asked as "a node's?" (here, in :func:`_timer` and
    :func:`_refresh_deadline`): the state classes are msgspec's, and ``isinstance`` answers
    a non-match through the metaclass's ``__instancecheck__`` (hundreds of instructions),
    a match of the exact class at once; most keys and events are a node's.
    """
    at = state.applied_time
    if when != at:
        late = when < at
    else:
        applied_rank = state.applied_rank
        late = rank < applied_rank or (rank == applied_rank and event_id <= state.applied_id)
    if isinstance(state, NodeState):
        incidents = node_rules.apply_event(state, event, when, config, late=late)
        if incidents is not None and not late:
            state.applied_time = when
            state.applied_rank = rank
            state.applied_id = event_id
        return incidents, late
    if late:
        return None, False
    state.applied_time = when
    state.applied_rank = rank
    state.applied_id = event_id
    state.events += 1
    return cluster_rules.apply_event(state, event, when, config), False


def advance(state: KeyState, now: float, config: CoreSettings) -> tuple[KeyState, list[Incident]]:
    """Fire the timers of one key that are due at or before event time ``now``."""
    if state.deadline > now:
        return state, []
    incidents = _timer(state, now, config)
    _refresh_deadline(state, config)
    return state, incidents


def _timer(state: KeyState, now: float, config: CoreSettings) -> list[Incident]:
    if isinstance(state, NodeState):
        return node_rules.apply_timer(state, now, config)
    return cluster_rules.apply_timer(state, now, config)


def _refresh_deadline(state: KeyState, config: CoreSettings) -> bool:
    """Recompute the key's deadline if a rule touched a timer; True if it changed."""
    if not state.timers_dirty:
        return False
    state.timers_dirty = False
    if isinstance(state, NodeState):
        deadline = node_rules.next_deadline(state, config)
    else:
        deadline = cluster_rules.next_deadline(state, config)
    if deadline == state.deadline:
        return False
    state.deadline = deadline
    return True


Token = Any
"""The caller's handle on an ingested event (a Kafka record, say); opaque to the core."""


@final
class _Pending:
    """A buffered event, ordered by ``(time, schema rank, event id, cluster, node, arrival
    seq)``.

    The key is part of its identity: event ids are unique per source, not across clusters, so
    sorting by key before the arrival number keeps a redelivered copy next to its original
    and the duplicate check never drops another cluster's event that shares the id. A class,
    not a tuple: compiled, :meth:`__lt__` compares the fields as machine values, while a
    tuple compares element by element through the generic rich comparison.

    Trap: interpreted, ``__lt__`` is a Python call and the heap is slower than with the
    tuple; the compiled core is the one that counts. docs/detection.md, design notes:
    `_Pending`.
    """

    __slots__ = ("cluster", "event", "event_id", "node", "rank", "seq", "token", "when")

    def __init__(
        self,
        when: float,
        rank: int,
        event_id: str,
        cluster: str,
        node: str,
        seq: int,
        event: AnyEvent,
        token: Token,
    ) -> None:
        self.when = when
        self.rank = rank
        self.event_id = event_id
        self.cluster = cluster
        self.node = node
        self.seq = seq
        self.event = event
        self.token = token

    def __lt__(self, other: _Pending) -> bool:
        if self.when != other.when:
            return self.when < other.when
        if self.rank != other.rank:
            return self.rank < other.rank
        if self.event_id != other.event_id:
            return self.event_id < other.event_id
        if self.cluster != other.cluster:
            return self.cluster < other.cluster
        if self.node != other.node:
            return self.node < other.node
        return self.seq < other.seq


class Correlator:
    """All keys' state plus the shared event-time machinery. Pure: no I/O, no clock.

    ``ingest`` and ``advance`` return the incident revisions they caused, in the
    order they happened in event time.
    """

    def __init__(self, config: CoreSettings, *, track_dirty: bool = False) -> None:
        """``track_dirty``: remember changed keys for :meth:`take_dirty` (a processor
        with a changelog wants this; a replay does not, and would only pay for it)."""
        self.config = config
        self._track_dirty = track_dirty
        self.grace = config.grace_seconds
        self.watermark = -math.inf
        self.max_time = -math.inf
        # The counters of :attr:`stats`, as plain attributes: a compiled core updates
        # them natively, where a Struct's fields cost a generic attribute lookup each.
        self._n_events = self._n_late = self._n_duplicates = self._n_stale = 0
        self._n_late_applied = self._n_revisions = self._n_timers = 0
        # cluster -> node ("" for the cluster-scoped key) -> state. Two levels, so no
        # "cluster/node" string is built per event or stored per key.
        self._states: dict[str, dict[str, KeyState]] = {}
        self._pending: list[_Pending] = []
        self._timers: list[tuple[float, str, str]] = []
        self._seq = 0
        self._pushes = 0
        # The identity of the last event released (time, rank, id, cluster, node): a
        # redelivered copy still buffered sorts right after its original.
        self._last_time = -math.inf
        self._last_rank = -1
        self._last_id = self._last_cluster = self._last_node = ""
        # The last event time converted: a routed copy shares its original's datetime.
        self._last_stamp: datetime | None = None
        self._last_when = 0.0
        self._released: list[Token] = []
        self._dirty: dict[tuple[str, str], KeyState] = {}

    # -- feeding ---------------------------------------------------------------------
    def ingest(self, event: AnyEvent, token: Token = None, *, hold: bool = False) -> list[Incident]:
        """Accept one event (in any order); return the revisions now decided.

        ``hold``: do not let this event's time advance the watermark; the caller
        drives it with :meth:`advance_watermark` (a consumer of several partitions
        must: each partition's clock counts, not only the fastest one's).
        """
        out: list[Incident] = []
        stamp = event.time
        if stamp is self._last_stamp:
            when = self._last_when  # the cluster key's copy of the event just ingested
        else:
            when = self._last_when = to_seconds(stamp)
            self._last_stamp = stamp
        self._n_events += 1
        kind = type(event)
        if kind is Tick and not _heartbeat_of_a_node(event):
            if token is not None:
                self._released.append(token)
            self._advance_to(when - self.grace, out)
            return out
        rank = RANK[kind]
        if when < self.watermark:
            self._n_late += 1
            self._apply(event, when, rank, event.id, event.cluster, key_node(event), out)
            if token is not None:
                self._released.append(token)
        else:
            entry = _Pending(
                when, rank, event.id, event.cluster, key_node(event), self._seq, event, token
            )
            heappush(self._pending, entry)
            self._seq += 1
        if when > self.max_time:
            self.max_time = when
            if not hold:
                self._advance_to(when - self.grace, out)
        return out

    def advance_watermark(self, watermark: float, *, tight: bool = False) -> list[Incident]:
        """Move the watermark itself (never backwards): release and fire what it passes.

        ``tight``: ``watermark`` is a limit, not a promise: release and fire what is due
        up to it, but move the watermark only to the last of those (or not at all). For
        a watermark made of the wall clock, which says nothing about the events still to
        come: a worker with nothing to fire must not declare the past closed, or the
        first backfill it is given is late from its first event.
        """
        out: list[Incident] = []
        self._advance_to(watermark, out, tight=tight)
        return out

    def advance(self, now: float) -> list[Incident]:
        """A clock reading (seconds since the epoch): lets quiet keys' timers fire."""
        out: list[Incident] = []
        self._advance_to(now - self.grace, out)
        return out

    def flush(self) -> list[Incident]:
        """End of input: release everything buffered, fire timers up to the last event,
        and publish the changes still held back by ``revision_interval_seconds``."""
        out: list[Incident] = []
        # The watermark releases strictly before itself: just past the last event time.
        self._advance_to(math.nextafter(self.max_time, math.inf), out)
        for state in sorted(self._all_states(), key=_state_key):
            if any(inc.held for inc in state.incidents.values()):
                incidents = publish_held(state, max(self.max_time, state.applied_time), self.config)
                self._n_revisions += len(incidents)
                out.extend(incidents)
                if self._track_dirty:
                    self._dirty[(state.cluster, state.node)] = state
                if _refresh_deadline(state, self.config) and state.deadline < NEVER:
                    self._schedule(state)
        return out

    # -- for a processor on a partitioned log ---------------------------------------------
    def take_released(self) -> list[Token]:
        """Tokens of the events applied (or skipped as stale/duplicate) since the last call.

        Once the incidents returned so far are delivered, these events are done: a
        processor may commit them. Tokens of events still buffered are never here.
        """
        released, self._released = self._released, []
        return released

    def pending(self) -> int:
        """Events waiting for the watermark."""
        return len(self._pending)

    def take_dirty(self) -> list[tuple[str, KeyState]]:
        """``(correlation key, state)`` of every key changed since the last call."""
        dirty, self._dirty = self._dirty, {}
        return [(key_of(c, n), state) for (c, n), state in dirty.items()]

    def restore(self, state: KeyState) -> None:
        """Adopt a key's state (from a changelog, after a restart or a rebalance)."""
        nodes = self._states.setdefault(intern(state.cluster), {})
        nodes[state.node] = state
        if state.deadline < NEVER:
            self._schedule(state)

    # -- inspection ---------------------------------------------------------------------
    @property
    def stats(self) -> CoreStats:
        """The engine's counters, as of now (a new object each time: a snapshot)."""
        return CoreStats(
            events=self._n_events,
            late=self._n_late,
            duplicates=self._n_duplicates,
            stale=self._n_stale,
            late_applied=self._n_late_applied,
            revisions=self._n_revisions,
            timers=self._n_timers,
        )

    @property
    def keys(self) -> dict[str, KeyState]:
        """A snapshot of every key's state by correlation key (for inspection and tests)."""
        return {
            key_of(cluster, node): state
            for cluster, nodes in self._states.items()
            for node, state in nodes.items()
        }

    def _all_states(self) -> list[KeyState]:
        return [s for nodes in self._states.values() for s in nodes.values()]

    def _node_states(self) -> list[NodeState]:
        return [
            s for nodes in self._states.values() for s in nodes.values() if isinstance(s, NodeState)
        ]

    def tracked_pods(self) -> int:
        return sum(len(s.pods) for s in self._node_states())

    # -- internals -------------------------------------------------------------------
    def _advance_to(self, watermark: float, out: list[Incident], *, tight: bool = False) -> None:
        if watermark <= self.watermark:
            return
        pending, timers = self._pending, self._timers
        reached = -math.inf  # the last instant released or fired (-inf: none)
        while True:
            event_at = pending[0].when if pending else NEVER
            timer_at = timers[0][0] if timers else NEVER
            if timer_at < event_at and timer_at < watermark:
                due, cluster, node = heappop(timers)
                reached = due
                state = self._states.get(cluster, {}).get(node)
                if state is not None and state.deadline == due:
                    self._fire(state, due, out)
            elif event_at < watermark:
                entry = heappop(pending)
                when, rank, event_id = entry.when, entry.rank, entry.event_id
                cluster, node, token = entry.cluster, entry.node, entry.token
                reached = when
                if (
                    when == self._last_time
                    and rank == self._last_rank
                    and event_id == self._last_id
                    and cluster == self._last_cluster
                    and node == self._last_node
                ):
                    self._n_duplicates += 1
                else:
                    self._last_time, self._last_rank, self._last_id = when, rank, event_id
                    self._last_cluster, self._last_node = cluster, node
                    self._apply(entry.event, when, rank, event_id, cluster, node, out)
                if token is not None:
                    self._released.append(token)
            else:
                break
        if tight:
            # A limit, not a promise: closed through the last instant released (the
            # watermark is exclusive, so just past it), never further.
            if reached > -math.inf:
                self.watermark = max(self.watermark, math.nextafter(reached, math.inf))
        else:
            self.watermark = watermark

    def _apply(
        self,
        event: AnyEvent,
        when: float,
        rank: int,
        event_id: str,
        cluster: str,
        node: str,
        out: list[Incident],
    ) -> None:
        """Apply ``event`` to its key's state (``rank``: its schema's, ``event_id``,
        ``cluster``: its own, ``node``: its key's node part; the buffer's entry has them
        all, read off the event once)."""
        if rank == _TICK_RANK:
            self._heartbeat(event, when, cluster, node, out)  # type: ignore[arg-type]
            return
        nodes = self._states.get(cluster)
        if nodes is None:
            cluster = intern(cluster)
            nodes = self._states[cluster] = {}
        state = nodes.get(node)
        if state is None:
            state = nodes[node] = new_state(event)
        incidents, late = _transition(state, event, when, rank, event_id, self.config)
        if incidents is None:
            self._n_stale += 1
            return
        if late:
            self._n_late_applied += 1
        if self._track_dirty:
            self._dirty[(cluster, node)] = state
        if incidents:
            self._n_revisions += len(incidents)
            out.extend(incidents)
        if state.timers_dirty and _refresh_deadline(state, self.config) and state.deadline < NEVER:
            self._schedule(state)

    def _heartbeat(
        self, tick: Tick, when: float, cluster: str, node: str, out: list[Incident]
    ) -> None:
        """A node agent's heartbeat, released in event order: its node key's side channel.

        Never creates a key (a node the core knows nothing of has nothing to be blind
        to) and never moves a key's position: a tick must not make a real event of the
        same instant or earlier, arriving later, stale."""
        nodes = self._states.get(cluster)
        state = nodes.get(node) if nodes is not None else None
        if state is None or not isinstance(state, NodeState):
            return
        applied = node_rules.apply_heartbeat(state, tick, when, self.config)
        if applied is None:
            return
        incidents, news = applied
        if self._track_dirty and (news or incidents):
            # Not every beat: its time alone is written down now and then (the rule says
            # when), not once a second for every node of the fleet.
            self._dirty[(cluster, node)] = state
        if incidents:
            self._n_revisions += len(incidents)
            out.extend(incidents)
        if state.timers_dirty and _refresh_deadline(state, self.config) and state.deadline < NEVER:
            self._schedule(state)

    def _fire(self, state: KeyState, due: float, out: list[Incident]) -> None:
        self._n_timers += 1
        incidents = _timer(state, due, self.config)
        if self._track_dirty:
            self._dirty[(state.cluster, state.node)] = state
        if incidents:
            self._n_revisions += len(incidents)
            out.extend(incidents)
        _refresh_deadline(state, self.config)
        if state.deadline <= due:
            # A rule left a deadline it cannot consume: never spin on it.
            state.deadline = NEVER
        if state.deadline < NEVER:
            self._schedule(state)

    def _schedule(self, state: KeyState) -> None:
        """Push the key's timer. Superseded entries stay in the heap (lazy deletion);
        every few thousand pushes, a heap mostly made of them is rebuilt."""
        heappush(self._timers, (state.deadline, state.cluster, state.node))
        self._pushes += 1
        if self._pushes % 4096 == 0:
            live = [
                (s.deadline, s.cluster, s.node) for s in self._all_states() if s.deadline < NEVER
            ]
            if len(self._timers) > 2 * len(live):
                heapify(live)
                self._timers = live
