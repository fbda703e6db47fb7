"""The processor as a faust-streaming app: ``gputriage process --engine faust``.

The same :class:`~streams.app.pipeline.Pipeline` as the default engine, in one faust agent,
each key's state in a faust ``Table`` whose changelog is the processor's state topic, for
teams that run faust fleets (the default engine is several times faster). Events are
iterated ``noack``; at each flush states are written, sends awaited, and only then are
events acked, in offset order, below what the core has released.

Traps (read in faust-streaming 0.15.3): never ack out of order (faust would commit past a
held record); ``stream_wait_empty`` must be off (a deadlock at revoke); eager rebalances
drop the old generation's events; faust can skip records of a partition, so the agent
checks offsets and seeks back; table writes bypass ``table[key] = value`` (too slow, it
stalled); the changelog is the default engine's state topic; standby replicas are off.
In full: docs/operations.md, design notes: the faust engine.
"""

from __future__ import annotations

import asyncio
import logging
import math
import tempfile
import time
from collections import deque
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer
from faust.types import TP, EventT, StreamT

from schemas.codec import encode
from schemas.dead_letters import DeadLetter
from schemas.topics import TopicLayout, TopicSpec
from streams.app import dead_letters
from streams.app.changelog import partition_for
from streams.app.faust_tuning import FAUST_VERSION, NoopMonitor, install
from streams.app.metrics import Metrics
from streams.app.offsets import PartitionOffsets
from streams.app.pipeline import BatchOutcome, Partition, Pipeline, RawRecord
from streams.app.published import is_mark
from streams.app.settings import ProcessorSettings
from streams.app.worker import MAX_REQUEST_BYTES, new_pipeline
from streams.core import CoreSettings
from streams.core.snapshot import decode_state

log = logging.getLogger("gputriage.processor")


class FaustVersionError(RuntimeError):
    """``--engine faust`` on a faust-streaming release the engine was not checked with."""


STALL_SECONDS = 2.0
"""A partition behind its high watermark that delivered nothing for this long is read
again from the agent's position (module docstring: faust can skip records)."""
TABLE = "state"
"""The faust table's name (its changelog topic is the state topic, named apart)."""
FLUSH_KEY = b"\x00faust/flushed"
"""The key of the tombstone that ends every flush's writes to a state partition.

Why: faust's recovery reads a changelog partition up to its end offset minus one, and
Tansu answers an end offset with the *base* offset of the partition's last record batch
plus one (:mod:`streams.app.ranges`): the rest of the last batch, the newest states of a
flush (the producer batches them), would not be recovered, while the raw records they
cover are committed: lost events (seen in the SIGKILL test). A record sent alone, after
the states are acknowledged, is a batch of its own: recovery reads everything before
it. A tombstone, so no reader stores it (faust's store deletes the key, the default
engine's reader skips null values), and a NUL-led key, which no correlation key is."""


def faust_app_config(
    client_kwargs: Mapping[str, Any], options: ProcessorSettings, datadir: str
) -> dict[str, Any]:
    """faust ``App`` settings for the processor (module docstring, last trap).

    Only PLAINTEXT brokers are mapped: faust takes TLS and SASL as its own
    ``broker_credentials``, which this engine does not build yet (refused by
    :func:`check_client_kwargs`).
    """
    servers = client_kwargs["bootstrap_servers"]
    if isinstance(servers, str):
        servers = servers.split(",")
    session = options.session_timeout_seconds
    return {
        "broker": [f"kafka://{server}" for server in servers],
        "broker_client_id": client_kwargs.get("client_id") or "gputriage",
        "store": "memory://",
        "datadir": datadir,
        "web_enabled": False,
        "autodiscover": False,
        "consumer_auto_offset_reset": "earliest",
        "broker_session_timeout": session,
        "broker_heartbeat_interval": min(1.0, session / 3),
        "broker_rebalance_timeout": options.rebalance_timeout_seconds,
        "broker_request_timeout": max(40.0, session),
        "broker_max_poll_records": options.batch_max,
        "broker_commit_interval": options.snapshot_seconds,
        "consumer_max_fetch_size": 4 << 20,
        "stream_wait_empty": False,
        "stream_recovery_delay": 0.0,
        "table_standby_replicas": 0,
        "producer_acks": -1,
        "producer_linger": 0.005,
        "producer_max_batch_size": 1 << 20,
        # One key's state is one record; the cluster key's grows with the nodes (~1.06 MB
        # at 2,000): faust's 1,000,000-byte default would fail it at every restart.
        "producer_max_request_size": MAX_REQUEST_BYTES,
        "Monitor": NoopMonitor,
    }


def check_client_kwargs(client_kwargs: Mapping[str, Any]) -> str | None:
    """Why the faust engine cannot use these Kafka settings (None: it can)."""
    protocol = client_kwargs.get("security_protocol", "PLAINTEXT")
    if protocol != "PLAINTEXT" or "ssl_context" in client_kwargs:
        return (
            f"--engine faust supports PLAINTEXT brokers only (kafka.security_protocol is "
            f"{protocol}); use the default engine"
        )
    return None


class FaustWorker:
    """One processor worker as a faust app around one :class:`Pipeline`."""

    def __init__(
        self,
        core: CoreSettings,
        client_kwargs: Mapping[str, Any],
        layout: TopicLayout,
        state: TopicSpec,
        options: ProcessorSettings,
        metrics: Metrics | None = None,
    ) -> None:
        self.core = core
        self.client_kwargs = dict(client_kwargs)
        self.layout = layout
        self.options = options
        self.metrics = metrics or Metrics()
        self.state_topic = state.name
        self.partitions = state.partitions
        self._raw_names = frozenset(layout.raw_topics)
        self.pipeline = self._new_pipeline()
        self._lock = asyncio.Lock()
        self._trackers: dict[Partition, PartitionOffsets] = {}
        self._held: dict[Partition, deque[EventT[bytes]]] = {}
        """Events handed to the pipeline and not acked yet, per partition, in offset order."""
        self._pending: list[asyncio.Future[Any]] = []
        self._ready = False
        """The pipeline holds the table's state for the current assignment."""
        self._generation: int | None = None
        self._owned: frozenset[int] = frozenset()
        self._assigned_at = _now()
        self._last_flush = _now()
        self._stale_seen = 0
        self._heard: dict[Partition, float] = {}
        """Partition -> when its last record reached the agent (or it was assigned)."""
        self._reread_at: dict[Partition, float] = {}
        """Partition -> when it was last sought back to the agent's position."""
        self.rereads = 0
        """Times faust was sought back because it skipped records (logged)."""
        self._offsets_client: AIOKafkaConsumer | None = None
        self._channel: Any = None
        """The agent's input channel (its queue tells whether records wait)."""
        self._queue_seen = _now()
        """When the clock last found records waiting in the agent's queue."""
        self._failed = asyncio.Event()
        self._fatal: BaseException | None = None
        self.app: faust.App | None = None
        self.table: Any = None

    def _new_pipeline(self) -> Pipeline:
        return new_pipeline(self.core, self.layout, self.options)

    # -- the app -----------------------------------------------------------------------
    def _build(self, datadir: str) -> faust.App:
        options = self.options
        installed = install(options.fetch_max_wait_ms)
        if "batch drain" not in installed:
            # Not only slower: faust's own drain records a skipped record as a "gap" and
            # its commit walks through it (the engine re-reads skipped records, but faust
            # would already have committed past them). The patched drain does not.
            raise FaustVersionError(
                f"--engine faust needs faust-streaming {FAUST_VERSION} "
                f"(this is {faust.__version__}): streams/app/faust_tuning.py patches it"
            )
        log.info("faust tuning installed: %s", ", ".join(installed))
        app = faust.App(options.app_id, **faust_app_config(self.client_kwargs, options, datadir))
        raw = app.topic(
            *self.layout.raw_topics,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        changelog = app.topic(
            self.state_topic,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
            partitions=self.partitions,
        )
        self.table = app.Table(
            TABLE,
            partitions=self.partitions,
            key_type=bytes,
            value_type=bytes,
            changelog_topic=changelog,
            on_recover=self._on_recovered,
        )
        app.agent(raw, name="gputriage-processor", concurrency=1)(self._agent)
        app.timer(options.tick_seconds, name="gputriage-clock")(self._clock)
        app.on_partitions_revoked.connect(self._on_revoked)  # type: ignore[arg-type]
        return app

    async def run(self, stop: asyncio.Event) -> None:
        """Run the app until ``stop`` is set (or a task failed: raised); flush, leave."""
        for name in ("faust", "mode", "aiokafka"):
            if logging.getLogger(name).getEffectiveLevel() < logging.WARNING:
                logging.getLogger(name).setLevel(logging.WARNING)
        with tempfile.TemporaryDirectory(prefix="gputriage-faust-") as datadir:
            app = self.app = self._build(datadir)
            # The group's committed offsets, asked by a consumer that never subscribes
            # (so never joins the group): where each assigned partition's reading starts.
            self._offsets_client = AIOKafkaConsumer(
                **self.client_kwargs, group_id=self.options.app_id, enable_auto_commit=False
            )
            await self._offsets_client.start()
            await app.start()
            try:
                stopping = asyncio.ensure_future(stop.wait())
                failing = asyncio.ensure_future(self._failed.wait())
                # faust's own failures (a crashed service or task) go to ``app.crash``,
                # which marks the app crashed and stops nothing: supervised here too, or
                # the worker would live on reading nothing and exit 0 at SIGTERM.
                crashed = asyncio.ensure_future(app._crashed.wait())
                waiting = {stopping, failing, crashed}
                try:
                    await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for task in waiting:
                        task.cancel()
                if self._fatal is not None:
                    raise self._fatal
                if app.crashed:
                    raise RuntimeError(f"faust crashed: {app.crash_reason!r}")
                async with self._lock:
                    if self._ready and not app.rebalancing:
                        await self._flush()
            finally:
                await app.stop()
                await self._offsets_client.stop()

    def _fail(self, exc: BaseException) -> None:
        """A task's error ends the worker (non-zero): nothing undelivered was acked."""
        if self._fatal is None:
            self._fatal = exc
            log.error("faust engine failed: %r; exiting", exc)
        self._failed.set()

    # -- the agent and the clock -------------------------------------------------------
    async def _agent(self, stream: StreamT[bytes]) -> None:
        """The faust agent: runs of events through the pipeline, no acks of its own."""
        batch: list[EventT[bytes]] = []
        batch_max = self.options.batch_max
        channel: Any = stream.channel
        self._channel = channel
        try:
            async for event in stream.noack().events():  # type: ignore[attr-defined]
                batch.append(event)
                if len(batch) >= batch_max or channel.empty():
                    async with self._lock:
                        await self._step(batch)
                    batch = []
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(exc)

    async def _clock(self) -> None:
        """The worker's clock (a faust timer): ticks, gauges and the flush cadence."""
        try:
            async with self._lock:
                if not self._ready or self.app is None or self.app.rebalancing:
                    return
                await self._send(self.pipeline.tick(time.time(), self._busy()), 0.0)
                self._observe_gauges()
                await self._check_stalls()
                if _now() - self._last_flush >= self.options.snapshot_seconds:
                    await self._flush()
        except Exception as exc:
            self._fail(exc)

    async def _step(self, events: list[EventT[bytes]]) -> None:
        app = self.app
        if not self._ready or app is None:
            return
        generation = self._generation
        trackers = self._trackers
        held = self._held
        records = []
        newest = 0.0
        for event in events:
            message = event.message
            if message.generation_id != generation:
                continue  # fetched before a rebalance: read again from the commit
            where = (message.topic, message.partition)
            tracker = trackers.get(where)
            if tracker is None:
                continue
            offset = message.offset
            expected = tracker.next_offset
            if expected is not None and offset != expected:
                if offset > expected:  # faust skipped records: read them again
                    await self._reread(where, expected, f"record {offset} came next")
                continue  # below: a copy of a record already handed to the pipeline
            tracker.add(offset)
            self._heard[where] = _now()
            held[where].append(event)
            stamp = message.timestamp
            if stamp and stamp > newest:
                newest = stamp
            records.append(
                RawRecord(
                    topic=message.topic,
                    partition=message.partition,
                    offset=offset,
                    key=message.key,
                    value=message.value,
                    timestamp_ms=int(stamp * 1000) if stamp is not None else None,
                    token=(where, offset),
                    headers=_headers(message.headers),
                )
            )
        if records:
            outcome = self.pipeline.process(records, self._busy(), time.time())
            await self._send(outcome, newest)
        if _now() - self._last_flush >= self.options.snapshot_seconds:
            await self._flush()

    async def _reread(self, where: Partition, offset: int, why: str) -> None:
        """Seek faust's consumer back to the agent's position on ``where`` (at most once
        a second per partition: the records already queued behind the skip arrive first)."""
        app = self.app
        assert app is not None
        now = _now()
        if now - self._reread_at.get(where, -math.inf) < 1.0:
            return
        self._reread_at[where] = now
        self._heard[where] = now
        self.rereads += 1
        log.warning(
            "faust skipped records of %s[%d] (%s; the agent expects %d): reading again from "
            "%d (%d times so far)",
            where[0],
            where[1],
            why,
            offset,
            offset,
            self.rereads,
        )
        tp = TP(*where)
        # faust may also have left it out of the partitions it fetches (a stream-buffer
        # pause it never lifted): asked to fetch it again, then to read from here.
        app.consumer.resume_partitions({tp})
        # On the consumer's own thread: faust's ``seek`` calls aiokafka's from this loop,
        # while a fetch runs on that thread, and aiokafka's fetcher then fails on the
        # partition the seek took away from under it (``KeyError: TopicPartition``).
        await app.consumer.seek_wait({tp: offset})

    async def _check_stalls(self) -> None:
        """Read again any partition behind its high watermark that delivered nothing
        for ``STALL_SECONDS`` while the agent's queue was empty (faust skipped its last
        records). Not while records wait in the queue: faust pauses fetching a
        partition while its stream buffer is under pressure, and resumes it when the
        agent empties the queue, so silence then is no sign of a skip."""
        app = self.app
        channel = self._channel
        assert app is not None
        now = _now()
        if channel is None or not channel.empty():
            self._queue_seen = now
            return
        since = self._queue_seen
        for where, tracker in self._trackers.items():
            position = tracker.next_offset
            if position is None or now - max(since, self._heard.get(where, now)) < STALL_SECONDS:
                continue
            try:
                highwater = app.consumer.highwater(TP(*where))
            except Exception:  # not assigned any more (a rebalance under way)
                continue
            if highwater is None or position < highwater:
                await self._reread(where, position, f"nothing for {STALL_SECONDS:g} s")

    # -- sending, flushing, acking -----------------------------------------------------
    async def _send(self, outcome: BatchOutcome, newest: float) -> None:
        """Queue the outcome's records on faust's producer and release its tokens."""
        app = self.app
        assert app is not None
        metrics = self.metrics
        send = app.producer.send
        pending = self._pending
        topic = self.layout.incidents.name
        for incident in outcome.incidents:
            future = await send(topic, incident.id.encode(), encode(incident), None, None, None)
            labels = metrics.incidents_out.labels(incident.type, incident.severity, incident.status)
            metrics.observe_published(incident)
            pending.append(asyncio.ensure_future(_counted(future, labels, metrics, newest)))
        send_letter = partial(self._try_send, self.layout.dead_letters.name)
        dead_letters.queue(outcome.dead_letters, send_letter, metrics, pending)
        metrics.count_events(outcome.events_by_source)
        trackers = self._trackers
        for where, offset in outcome.released:
            tracker = trackers.get(where)
            if tracker is not None:
                tracker.release(offset)

    async def _try_send(self, topic: str, letter: DeadLetter) -> Exception | None:
        app = self.app
        assert app is not None
        try:
            await (await app.producer.send(topic, letter.key, encode(letter), None, None, None))
        except Exception as exc:  # faust wraps aiokafka's errors in its own
            return exc
        return None

    async def _flush(self) -> None:
        """Write changed states to the table, await every send, then ack and commit
        what they cover (module docstring, 2)."""
        app = self.app
        assert app is not None
        self._last_flush = _now()
        generation = self._generation
        commits = {}
        for where, tracker in self._trackers.items():
            offset = tracker.committable()
            if offset is not None:
                commits[where] = offset
        data = self.table.data
        send = app.producer.send
        topic = self.state_topic
        n = self.partitions
        touched: set[int] = set()
        for key, value, _ in self.pipeline.snapshots():
            raw_key = key.encode()
            data[raw_key] = value
            partition = partition_for(key, n)
            touched.add(partition)
            sent = await send(topic, raw_key, value, partition, None, None)
            self._pending.append(asyncio.ensure_future(sent))
        pending, self._pending = self._pending, []
        if pending:
            await asyncio.gather(*pending)  # a failed send raises: nothing more is acked
        if touched:  # each alone in its batch, after the states: see FLUSH_KEY
            ends = [await send(topic, FLUSH_KEY, None, p, None, None) for p in sorted(touched)]
            await asyncio.gather(*(asyncio.ensure_future(end) for end in ends))
        if app.rebalancing or generation != self._generation or not self._ready:
            return  # faust forgot its acks at the revoke: the next owner re-reads these
        for where, offset in commits.items():
            held = self._held[where]
            while held and held[0].message.offset < offset:
                held.popleft().ack()
        # faust's commit timer (``broker_commit_interval`` = ``snapshot_seconds``) commits
        # what is acked. Not awaited here: a faust commit waits on the consumer's thread
        # and on any commit already under way, and this runs under the engine's lock.

    # -- rebalances --------------------------------------------------------------------
    async def _on_revoked(self, sender: Any, revoked: Any = None, **_: Any) -> None:
        """faust's revoke signal: stop using the pipeline (it is rebuilt at recovery)."""
        async with self._lock:
            self._ready = False

    async def _on_recovered(self) -> None:
        """The table holds the assignment's state: build the pipeline from it."""
        try:
            async with self._lock:
                await self._adopt()
        except Exception as exc:
            self._fail(exc)
            raise

    async def _starts(self, raw: set[Partition]) -> dict[Partition, int]:
        """Where reading each partition starts: the group's committed offset, else the
        partition's first offset (``auto_offset_reset`` is earliest)."""
        app = self.app
        client = self._offsets_client
        assert app is not None
        assert client is not None
        tps = [TP(*where) for where in sorted(raw)]
        committed = await asyncio.gather(*(client.committed(tp) for tp in tps))
        missing = [tp for tp, offset in zip(tps, committed, strict=True) if offset is None]
        earliest = await app.consumer.earliest_offsets(*missing) if missing else {}
        return {
            (tp.topic, tp.partition): offset if offset is not None else earliest.get(tp, 0)
            for tp, offset in zip(tps, committed, strict=True)
        }

    async def _adopt(self) -> None:
        app = self.app
        assert app is not None
        raw = {
            (tp.topic, tp.partition)
            for tp in app.consumer.assignment()
            if tp.topic in self._raw_names
        }
        owned = frozenset(p for _, p in raw)
        if len(raw) != len(owned) * len(self._raw_names):
            raise RuntimeError(
                f"assignment is not co-partitioned (do all raw topics have {self.partitions} "
                f"partitions?): {sorted(raw)}"
            )
        n = self.partitions
        data = self.table.data
        states: dict[int, list[Any]] = {}
        corrupt = 0
        for key in list(data):
            if is_mark(key) or key.startswith(b"\x00"):
                continue
            lane = partition_for(key.decode(errors="replace"), n)
            if lane not in owned:
                del data[key]  # a lost partition's key: read again if it comes back
                continue
            try:
                states.setdefault(lane, []).append(decode_state(data[key]))
            except Exception as exc:  # one bad snapshot must not stop the worker for good
                corrupt += 1
                log.error("state of %r does not decode (%r); it starts empty", key, exc)
        dropped = self.pipeline.lanes.pending()
        pipeline = self._new_pipeline()
        pipeline.retain(raw)
        for lane, restored in states.items():
            pipeline.restore(restored, lane)
        self.pipeline = pipeline
        starts = await self._starts(raw)
        self._trackers = {}
        for where in raw:
            tracker = self._trackers[where] = PartitionOffsets()
            tracker.next_offset = starts[where]  # the read position: nothing outstanding
        now = _now()
        self._heard = dict.fromkeys(raw, now)
        self._reread_at = {}
        self._held = {where: deque() for where in raw}
        self._pending = []
        kept = len(owned & self._owned)
        self._owned = owned
        self._generation = app.consumer_generation_id
        self._assigned_at = _now()
        self._last_flush = _now()
        self._ready = True
        log.info(
            "partitions %s: restored %d keys from %s, kept %d, dropped %d buffered events "
            "(faust engine, generation %s)",
            sorted(owned),
            sum(map(len, states.values())),
            self.state_topic,
            kept,
            dropped,
            self._generation,
        )

    # -- the watermark and gauges ------------------------------------------------------
    def _busy(self) -> list[Partition]:
        """Assigned raw partitions with records left to read: they hold the watermark.

        The default engine's rule, with the read position known from the start (the
        committed offset): behind a known high watermark, busy; a partition whose high
        watermark is not known yet (nothing fetched) holds during the start-up hold.
        """
        app = self.app
        assert app is not None
        consumer = app.consumer
        holding = _now() - self._assigned_at < self.options.startup_hold_seconds
        busy = []
        for where, tracker in self._trackers.items():
            try:
                highwater: int | None = consumer.highwater(TP(*where))
            except Exception:  # not assigned any more (a rebalance under way)
                highwater = None
            position = tracker.next_offset
            if highwater is not None and position is not None:
                if position < highwater:
                    busy.append(where)
            elif holding:
                busy.append(where)
        return busy

    def _observe_gauges(self) -> None:
        metrics = self.metrics
        if not metrics.gauges_due(_now()):
            return
        lanes = self.pipeline.lanes
        metrics.observe_lanes(lanes)
        metrics.buffered.set(lanes.pending())
        stale = lanes.stats.stale - self._stale_seen
        if stale > 0:
            metrics.stale.inc(stale)
        self._stale_seen = lanes.stats.stale
        # faust hides aiokafka's fetch times: partitions owned is all this engine can say.
        app = self.app
        try:
            assigned = 0 if app is None else len(app.consumer.assignment())
        except Exception:  # no consumer yet, or one being rebuilt by a rebalance
            assigned = 0
        metrics.observe_kafka(assigned, None)


def _now() -> float:
    """The running loop's clock (its timers' and ``asyncio.sleep``'s), as the default engine.

    Trap: faust runs aiokafka on a consumer thread with an event loop of its own. Every
    caller here runs on the app's loop (the agent, the clock timer, the revoke signal, the
    table's recovery callback); code moved onto that thread would read *its* loop's clock
    through this (another clock under a test's fake one), and calling the app loop's
    ``time()`` from there is no better: take the time on the app's loop and pass it.
    """
    return asyncio.get_running_loop().time()


def _headers(headers: Any) -> Sequence[tuple[str, bytes]]:
    """The record's headers as the pipeline reads them (aiokafka's list of pairs; faust
    types them as a mapping too, which a consumed record never is)."""
    if not headers:
        return ()
    if isinstance(headers, Mapping):
        return list(headers.items())
    return headers  # type: ignore[no-any-return]


async def _counted(future: Any, labels: Any, metrics: Metrics, newest: float) -> None:
    """Await one incident's send; count it once the broker has it."""
    await future
    labels.inc()
    if newest:
        metrics.latency.observe(max(0.0, time.time() - newest))
