"""The bridge runner: the incident topic in, one vendor endpoint out, nothing lost or doubled.

One consumer group serves one kind and several routes; each ``(route, incident)`` pair is
a lane whose revisions go out in order, one at a time, while lanes run side by side, so a
vendor's 429 or a dead endpoint holds back only its own lanes. Per lane, duplicates are
dropped by the ledger, queued revisions coalesce, an intent is written before each call and
a delivered entry after; offsets commit up to the lowest record not done (the processor's
group discipline, :mod:`streams.app.group`).

Traps: a revision is "maybe delivered" only between its intent and its delivered entry (a
restart re-sends it); coalescing may commit past an older revision (the newer one shares its
partition); secrets are scrubbed from every text written; on revoke every lane is
cancelled, on assignment the ledger is read again. The steps in full:
docs/bridges.md, design notes: the bridge runner.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from connectors.backoff import Backoff
from connectors.bridges.base import (
    Accepted,
    Delivered,
    Endpoint,
    Outcome,
    Periodic,
    Rejected,
    Retry,
    Route,
    Skipped,
)
from connectors.bridges.scrub import Scrubber
from connectors.health import fetched_ago, observe_consumer
from schemas.bridges import BridgeDelivery
from schemas.codec import RecordError, decode_incident, encode, fitted_dead_letter
from schemas.dead_letters import DeadLetter
from schemas.incidents import Incident
from streams.app.group import Listener, commit, committable, group_consumer
from streams.app.offsets import PartitionOffsets
from streams.bridges.ledger import Ledger
from streams.bridges.metrics import BridgeMetrics
from streams.bridges.settings import BridgeSettings
from streams.bridges.storms import StormPolicy, folded, group_of, merged, paged, with_lead_view

log = logging.getLogger("gputriage.bridge")

RESUME_AT = 0.8
FALLBACK_LETTER_BYTES = 64 << 10
REVOKE_GRACE_SECONDS = 2.0
"""On a revocation, how long deliveries in flight may finish before they are cut."""


@dataclass(eq=False, slots=True)
class _Ticket:
    """One record's deliveries still to do (one per matching route, or one dead letter)."""

    tp: TopicPartition
    offset: int
    remaining: int = 0
    generation: int = 0


@dataclass(eq=False, slots=True)
class _Item:
    route: str
    incident: Incident
    tickets: list[_Ticket]
    timestamp_ms: int
    record: tuple[str, int, int, bytes | None, bytes | None]
    """(topic, partition, offset, key, value) for a dead letter."""
    refresh: bool = False
    """A storm fold: deliver the lead's merged view even at the ledger's revision."""
    members: list[BridgeDelivery] = field(default_factory=list)
    """Entries of folded incidents, written once this view was delivered."""


@dataclass(eq=False, slots=True)
class _Lane:
    route: Route
    incident_id: str
    items: list[_Item] = field(default_factory=list)
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class _Abandoned(Exception):
    """A lane stops mid-retry because the bridge is stopping (its records stay unfinished)."""


class BridgeRunner:
    """One bridge process's loop around one endpoint."""

    def __init__(
        self,
        *,
        kind: str,
        endpoint: Endpoint,
        routes: Sequence[Route],
        settings: BridgeSettings,
        client_kwargs: Mapping[str, Any],
        incident_topic: str,
        dead_letter_topic: str,
        ledger_topic: str,
        group_id: str,
        metrics: BridgeMetrics | None = None,
        scrub: Scrubber | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.kind = kind
        self.endpoint = endpoint
        self.routes = tuple(routes)
        self.settings = settings
        self.incident_topic = incident_topic
        self.dead_letter_topic = dead_letter_topic
        self.group_id = group_id
        self.metrics = metrics or BridgeMetrics()
        self.scrub = scrub or Scrubber()
        self.clock = clock
        self.ledger = Ledger(client_kwargs, ledger_topic)
        self.storms = StormPolicy(settings.storm_pages, settings.storm_window_seconds)
        self.backoff = Backoff(
            initial_seconds=settings.retry_initial_seconds,
            max_seconds=settings.retry_max_seconds,
            max_retry_after_seconds=settings.max_retry_after_seconds,
        )
        self.consumer = group_consumer(
            client_kwargs,
            group_id=group_id,
            session_timeout_seconds=settings.session_timeout_seconds,
            fetch_max_wait_ms=100,
        )
        self._partitions: dict[TopicPartition, PartitionOffsets] = {}
        """Per partition read: its records not done, so its committable offset."""
        self._committed: dict[TopicPartition, int] = {}
        self._lanes: dict[tuple[str, str], _Lane] = {}
        self._slots = {r.name: asyncio.Semaphore(settings.max_in_flight) for r in self.routes}
        self._halt = asyncio.Event()
        """Set at the stop and during a revocation: lanes start no new delivery, a retrying
        one gives up (its records stay unfinished, so they are read again)."""
        self._fatal: BaseException | None = None
        self._queued = 0
        self._paused = False
        self._health_at = 0.0
        self._generation = 0
        self._assignments = 0
        self._letters: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()
        """Held by a batch's intake and by the rebalance callbacks: they never interleave."""
        self.resends = 0
        """Revisions sent again after a restart found their intent unconfirmed."""

    # -- running ---------------------------------------------------------------------------
    async def run(self, stop: asyncio.Event) -> None:
        """Restore the ledger, consume until ``stop``, then drain, commit and leave."""
        await self.ledger.start()
        ticker: asyncio.Task[None] | None = None
        try:
            restored = await self.ledger.restore(self.settings.restore_timeout_seconds)
            log.info(
                "bridge %s: %d ledger entries restored from %s",
                self.kind,
                restored,
                self.ledger.topic,
            )
            if isinstance(self.endpoint, Periodic):
                self._restore_periodic()
                ticker = asyncio.create_task(self._tick(self.endpoint), name="bridge-tick")
            await self.consumer.start()
            self.consumer.subscribe(
                topics=[self.incident_topic], listener=Listener(self, self._lock, self._failed)
            )
            loop = asyncio.get_running_loop()
            last_commit = loop.time()
            while not stop.is_set():
                self._raise_fatal(ticker)
                batches = await self.consumer.getmany(timeout_ms=200, max_records=1000)
                self._raise_fatal(ticker)
                self._observe_kafka()
                async with self._lock:
                    for tp, records in batches.items():
                        for record in records:
                            self._take(tp, record)
                    self._bound()
                if loop.time() - last_commit >= self.settings.commit_seconds:
                    last_commit = loop.time()
                    await self._commit()
            await self._drain()
            await self._commit()
        finally:
            if ticker is not None:
                ticker.cancel()
                with contextlib.suppress(BaseException):
                    await ticker
            await self._cancel_lanes()
            for closing in (self.consumer.stop, self.ledger.stop, self.endpoint.close):
                try:
                    await closing()
                except Exception:  # closing must close the rest
                    log.exception("stopping %s failed", closing)

    def _raise_fatal(self, ticker: asyncio.Task[None] | None) -> None:
        if self._fatal is not None:
            raise self._fatal
        if ticker is not None and ticker.done() and not ticker.cancelled():
            error = ticker.exception()
            if error is not None:
                raise error

    async def _drain(self) -> None:
        """SIGTERM: no new deliveries; those in flight get ``stop_timeout_seconds``."""
        self._halt.set()
        for lane in self._lanes.values():
            lane.wake.set()
        tasks = [lane.task for lane in self._lanes.values() if lane.task is not None]
        tasks += list(self._letters)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=self.settings.stop_timeout_seconds)
            if pending:
                log.warning(
                    "%d deliveries still in flight at the stop: they are re-read", len(pending)
                )
        await self._cancel_lanes()

    async def _cancel_lanes(self) -> None:
        tasks = [lane.task for lane in self._lanes.values() if lane.task and not lane.task.done()]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task

    def _restore_periodic(self) -> None:
        assert isinstance(self.endpoint, Periodic)
        names = frozenset(r.name for r in self.routes)
        entries = {
            (e.route, e.incident_id): Delivered(e.revision, e.status, dict(e.memo))
            for e in self.ledger.entries(names)
            if e.revision
        }
        self.endpoint.restore(entries)

    async def _tick(self, endpoint: Periodic) -> None:
        while True:
            await asyncio.sleep(endpoint.interval_seconds)
            try:
                await endpoint.tick(self.clock())
            except asyncio.CancelledError:
                raise
            except Exception:  # a failing tick is retried at the next one
                log.exception("bridge %s: periodic tick failed", self.kind)

    # -- records in --------------------------------------------------------------------------
    def _take(self, tp: TopicPartition, record: Any) -> None:
        tracker = self._partitions.get(tp)
        if tracker is None:  # lost in a rebalance since the fetch
            return
        if tracker.next_offset is not None and record.offset < tracker.next_offset:
            return
        tracker.add(record.offset)
        ticket = _Ticket(tp, record.offset, generation=self._generation)
        coordinates = (tp.topic, tp.partition, record.offset, record.key, record.value)
        try:
            if record.value is None:
                raise RecordError("a tombstone on the incident topic")
            incident = decode_incident(record.value)
        except RecordError as exc:
            ticket.remaining = 1
            self._dead_letter(
                ticket,
                coordinates,
                record.timestamp,
                f"undecodable incident: {exc.reason}",
                exc.field,
            )
            return
        for route in self.routes:
            if not route.matches(incident):
                continue
            ticket.remaining += 1
            self._push(route, _Item(route.name, incident, [ticket], record.timestamp, coordinates))
        if ticket.remaining == 0:
            self._release(ticket)

    def _push(self, route: Route, item: _Item) -> None:
        key = (route.name, item.incident.id)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane(route, item.incident.id)
        lane.items.append(item)
        self._queued += 1
        lane.wake.set()
        if lane.task is None or lane.task.done():
            lane.task = asyncio.create_task(self._drive(lane), name=f"bridge-lane-{route.name}")
            lane.task.add_done_callback(self._lane_done)

    def _lane_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None and self._fatal is None:
            self._fatal = error

    def _release(self, ticket: _Ticket) -> None:
        ticket.remaining -= 1
        if ticket.remaining > 0 or ticket.generation != self._generation:
            return
        tracker = self._partitions.get(ticket.tp)
        if tracker is not None:
            tracker.release(ticket.offset)

    def _done(self, item: _Item, outcome: str) -> None:
        self._queued -= 1
        self.metrics.deliveries.labels(self.kind, item.route, outcome).inc()
        for ticket in item.tickets:
            self._release(ticket)

    def _bound(self) -> None:
        self.metrics.queued.labels(self.kind).set(self._queued)
        assignment = list(self._partitions)
        if not self._paused and self._queued >= self.settings.max_queued:
            self.consumer.pause(*assignment)
            self._paused = True
        elif self._paused and self._queued < self.settings.max_queued * RESUME_AT:
            self.consumer.resume(*assignment)
            self._paused = False

    # -- one lane --------------------------------------------------------------------------
    async def _drive(self, lane: _Lane) -> None:
        route = lane.route
        while lane.items and not self._halt.is_set():
            lane.wake.clear()
            entry = self.ledger.get(route.name, lane.incident_id)
            item = self._plan(lane, entry)
            if item is None:
                continue
            wait = self._hold(item, entry)
            if wait > 0:
                lane.items.insert(0, item)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(lane.wake.wait(), wait)
                continue
            async with self._slots[route.name]:
                if self._halt.is_set():
                    lane.items.insert(0, item)
                    return
                try:
                    await self._deliver(route, item, entry)
                except _Abandoned:
                    lane.items.insert(0, item)
                    return
        if not lane.items:
            self._lanes.pop((route.name, lane.incident_id), None)

    def _plan(self, lane: _Lane, entry: BridgeDelivery | None) -> _Item | None:
        """Take the lane's next revision to deliver (dropping what it supersedes)."""
        delivered = entry.revision if entry is not None else 0
        items = sorted(lane.items, key=lambda i: (i.incident.revision, not i.refresh))
        lane.items.clear()
        fresh: list[_Item] = []
        for item in items:
            if item.incident.revision <= delivered and not item.refresh:
                self._done(item, "duplicate_skipped")
            else:
                fresh.append(item)
        if not fresh:
            return None
        chosen: _Item | None = None
        if delivered == 0:
            opens = [i for i in fresh if i.incident.status == "open"]
            chosen = next((i for i in opens if not i.refresh), opens[0] if opens else None)
        if chosen is None:
            chosen = next((i for i in fresh if i.incident.status == "resolved"), None)
        if chosen is None:
            chosen = fresh[-1]
        index = fresh.index(chosen)
        refreshes = [i for i in fresh[:index] if i.refresh]
        for item in fresh[:index]:
            if not item.refresh:
                self._done(item, "coalesced")
        for item in refreshes:  # a fold's record is done with the view that shows it
            chosen.tickets.extend(item.tickets)
            chosen.members.extend(item.members)
            self._queued -= 1
        lane.items.extend(fresh[index + 1 :])
        return chosen

    def _hold(self, item: _Item, entry: BridgeDelivery | None) -> float:
        """Seconds an ``updated`` revision must still wait (``min_update_seconds``)."""
        update = item.incident.status == "updated" or item.refresh
        if not update or entry is None or not entry.revision:
            return 0.0
        return entry.updated_at + self.settings.min_update_seconds - self.clock()

    async def _deliver(self, route: Route, item: _Item, entry: BridgeDelivery | None) -> None:
        incident = item.incident
        now = self.clock()
        key = group_of(incident)
        group = self.ledger.group(route.name, key)
        newer = group.lead_view if item.refresh and group is not None else None
        if newer is not None and newer.revision > incident.revision:
            # A fold's poke carries the lead as it was then; the lead may have moved on
            # since (a newer revision delivered meanwhile): never show an older one.
            incident = newer
        if entry is not None and entry.folded_into:
            await self._fold(route, item, entry, entry.folded_into, key)
            return
        if group is not None and incident.id in group.folded and group.lead != incident.id:
            await self._fold(route, item, entry, group.lead, key)  # folded before a crash
            return
        new = (entry is None or not entry.revision) and incident.status != "resolved"
        if (
            new
            and self.storms.folds(group, now)
            and group is not None
            and group.lead != incident.id
        ):
            await self._fold(route, item, entry, group.lead, key)
            return
        if new:
            # A new page of its group: counted now, before any await, so that lanes of the
            # same group running beside this one see it (else a burst all pages at once).
            group = paged(group, route.name, key, incident, now, self.storms)
            self.ledger.keep(group)
            await self.ledger.write(group)
        handed = incident.revision
        if entry is not None and entry.endpoint_revision >= handed:
            handed = entry.endpoint_revision + 1
        view = merged(incident, group, handed, first=entry is None or not entry.revision)
        previous = None
        if entry is not None and entry.revision:
            previous = Delivered(entry.revision, entry.status, dict(entry.memo))
        base = entry or BridgeDelivery(route=route.name, incident_id=incident.id, group=key)
        if base.state == "sending" and base.sending_revision == incident.revision:
            self.resends += 1
            self.metrics.resends.labels(self.kind).inc()
            log.warning(
                "bridge %s route %s: sending %s revision %d again (its delivery was not "
                "confirmed before the last stop)",
                self.kind,
                route.name,
                incident.id,
                incident.revision,
            )
        await self.ledger.write(
            msgspec.structs.replace(
                base, state="sending", sending_revision=incident.revision, updated_at=now
            )
        )
        outcome = await self._call(route, view, previous)
        memo = dict(entry.memo) if entry is not None else {}
        if isinstance(outcome, Accepted):
            name = "accepted"
            if outcome.memo is not None:
                memo = dict(outcome.memo)
            self.metrics.latency.labels(self.kind).observe(
                max(0.0, time.time() - item.timestamp_ms / 1000)
            )
        elif isinstance(outcome, Skipped):
            name = "skipped"
        else:
            assert isinstance(outcome, Rejected)
            name = "rejected"
            reason = f"bridge {self.kind} route {route.name}: rejected: {outcome.reason}"
            if outcome.detail:
                reason = f"{reason}: {outcome.detail}"
            await self._write_letter(item.record, item.timestamp_ms, reason, "")
            log.warning(
                "bridge %s route %s: %s revision %d dead-lettered: %s",
                self.kind,
                route.name,
                incident.id,
                incident.revision,
                self.scrub(outcome.reason),
            )
        if name == "rejected" and new and group is not None and group.lead == incident.id:
            # A page the vendor refused is no page to fold into: the next one pages.
            group = msgspec.structs.replace(group, lead="", lead_view=None)
            self.ledger.keep(group)
            await self.ledger.write(group)
        delivered = msgspec.structs.replace(
            base,
            revision=max(incident.revision, entry.revision if entry is not None else 0),
            status=incident.status,
            memo=memo,
            state="delivered",
            sending_revision=0,
            endpoint_revision=handed,
            outcome=name,
            group=key,
            updated_at=self.clock(),
        )
        await self.ledger.write(delivered)
        for member in item.members:
            await self.ledger.write(member)
        if name != "rejected" and entry is not None and entry.revision:
            current = self.ledger.group(route.name, key)  # as it is now, folds included
            if current is not None and current.lead == incident.id:
                current = with_lead_view(current, incident)
                self.ledger.keep(current)
                await self.ledger.write(current)
        self._done(item, name)

    async def _fold(
        self, route: Route, item: _Item, entry: BridgeDelivery | None, lead: str, key: str
    ) -> None:
        """Fold ``item`` into the page of ``lead``: the lead's lane delivers the merged view.

        Order (kill safety): the group is written first (a fold is idempotent, so a crash
        after it folds the re-read record again), the member's own entry only after the
        lead's merged view was delivered (until then a re-read record is not a duplicate).
        """
        incident = item.incident
        base = entry or BridgeDelivery(route=route.name, incident_id=incident.id, group=key)
        member = msgspec.structs.replace(
            base,
            revision=incident.revision,
            status=incident.status,
            state="delivered",
            outcome="folded",
            folded_into=lead,
            group=key,
            updated_at=self.clock(),
        )
        group = self.ledger.group(route.name, key)
        self.metrics.deliveries.labels(self.kind, route.name, "folded").inc()
        if group is None or group.lead != lead or group.lead_view is None:
            await self.ledger.write(member)  # the lead is gone (a new lead pages on its own)
            self._queued -= 1
            for ticket in item.tickets:
                self._release(ticket)
            return
        group = folded(group, incident)  # read, changed and kept with no await between
        self.ledger.keep(group)
        await self.ledger.write(group)
        view = group.lead_view
        assert view is not None
        self._queued -= 1
        if view.status == "resolved":
            await self.ledger.write(member)
            for ticket in item.tickets:
                self._release(ticket)
            return
        poke = _Item(route.name, view, item.tickets, item.timestamp_ms, item.record, refresh=True)
        poke.members.append(member)
        self._push(route, poke)

    async def _call(self, route: Route, view: Incident, previous: Delivered | None) -> Outcome:
        """The endpoint's answer, retried until it is not :class:`Retry`."""
        attempt = 0
        while True:
            try:
                outcome = await self.endpoint.deliver(view, previous, route)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bug in the endpoint: logged, retried
                self.metrics.endpoint_errors.labels(self.kind).inc()
                log.exception(
                    "bridge %s route %s: the endpoint raised (a bug; retried)",
                    self.kind,
                    route.name,
                )
                outcome = Retry(f"endpoint raised {exc.__class__.__name__}")
            if not isinstance(outcome, Retry):
                self.metrics.endpoint(route.name).set(True)
                return outcome
            self.metrics.endpoint(route.name).set(False, self.scrub(outcome.reason))
            delay = self.backoff.after(attempt, outcome.after_seconds)
            attempt += 1
            self.metrics.retries.labels(self.kind, route.name).inc()
            log.warning(
                "bridge %s route %s: %s revision %d: %s; retry %d in %.1f s",
                self.kind,
                route.name,
                view.id,
                view.revision,
                self.scrub(outcome.reason),
                attempt,
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._halt.wait(), delay)
            if self._halt.is_set():
                raise _Abandoned

    def _observe_kafka(self) -> None:
        """The health's ``kafka`` condition, at most once a second. While paused (the
        lanes are full) nothing is fetched, so fetch times say nothing then."""
        now = asyncio.get_running_loop().time()
        if now - self._health_at < 1.0:
            return
        self._health_at = now
        consumer = self.consumer
        ago = None if self._paused else fetched_ago(consumer, time.time())
        observe_consumer(self.metrics.kafka, len(consumer.assignment()), ago)

    # -- dead letters ----------------------------------------------------------------------
    def _dead_letter(
        self,
        ticket: _Ticket,
        record: tuple[str, int, int, bytes | None, bytes | None],
        timestamp_ms: int,
        reason: str,
        at: str,
    ) -> None:
        log.warning(
            "bridge %s: dead letter %s[%d]@%d: %s",
            self.kind,
            record[0],
            record[1],
            record[2],
            self.scrub(reason),
        )

        async def send() -> None:
            await self._write_letter(record, timestamp_ms, reason, at)
            self._release(ticket)

        task = asyncio.create_task(send())
        self._letters.add(task)
        task.add_done_callback(self._letters.discard)
        task.add_done_callback(self._lane_done)

    async def _write_letter(
        self,
        record: tuple[str, int, int, bytes | None, bytes | None],
        timestamp_ms: int,
        reason: str,
        at: str,
    ) -> None:
        """Deliver one dead letter (fitted; cut smaller once if refused); never raise."""
        topic, partition, offset, key, value = record
        letter = DeadLetter(
            topic=topic,
            partition=partition,
            offset=offset,
            reason=" ".join(self.scrub(reason).split())[:4000],
            field=at,
            key=key,
            value=value,
            timestamp_ms=timestamp_ms,
        )
        self.metrics.dead_letters.labels(self.kind).inc()
        for budget in (None, FALLBACK_LETTER_BYTES):
            fitted = (
                fitted_dead_letter(letter) if budget is None else fitted_dead_letter(letter, budget)
            )
            try:
                await self.ledger.send(self.dead_letter_topic, letter.key, encode(fitted))
                return
            except KafkaError as exc:
                error = exc
        log.error(
            "bridge %s: dead letter for %s[%d]@%d could not be written (%r): committed past it",
            self.kind,
            topic,
            partition,
            offset,
            error,
        )

    # -- offsets and rebalances ------------------------------------------------------------
    async def _commit(self) -> None:
        commits = committable(self._partitions, self._committed)
        if await commit(self.consumer, commits, log):
            self._committed.update((tp, c.offset) for tp, c in commits.items())

    async def on_revoked(self, revoked: set[TopicPartition]) -> None:
        """Deliveries in flight get ``REVOKE_GRACE_SECONDS`` to finish (fewer re-sends for
        the next owner), then lanes are cancelled and what is done is committed."""
        if not self._partitions and not self._lanes:
            return
        stopping = self._halt.is_set()
        self._halt.set()
        for lane in self._lanes.values():
            lane.wake.set()
        tasks = [lane.task for lane in self._lanes.values() if lane.task and not lane.task.done()]
        if tasks:
            await asyncio.wait(tasks, timeout=REVOKE_GRACE_SECONDS)
        await self._cancel_lanes()
        if not stopping:
            self._halt.clear()
        for task in list(self._letters):
            with contextlib.suppress(BaseException):
                await task
        await self._commit()
        self._generation += 1
        self._lanes.clear()
        self._partitions.clear()
        self._committed.clear()
        self._queued = 0
        self._paused = False

    async def on_assigned(self, assigned: set[TopicPartition]) -> None:
        """Read the ledger again (not the first time: another process may have delivered
        for these partitions) and track the assigned partitions afresh."""
        if self._assignments:
            await self.ledger.restore(self.settings.restore_timeout_seconds)
            if isinstance(self.endpoint, Periodic):
                self._restore_periodic()
        self._assignments += 1
        self._partitions = {tp: PartitionOffsets() for tp in assigned}
        self._committed = {}
        log.info(
            "bridge %s: partitions %s of %s",
            self.kind,
            sorted(tp.partition for tp in assigned),
            self.incident_topic,
        )

    def _failed(self, exc: BaseException) -> None:
        """A rebalance callback failed: the main loop raises it."""
        self._fatal = exc
