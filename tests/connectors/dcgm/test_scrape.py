"""The dcgm-exporter poller against a local aiohttp server and the real embedded Kafka broker.

The server serves real-format expositions (tests/data/dcgm/). Every test
goes through the code production runs: :meth:`DcgmPoller.run` (a
:class:`DcgmSource` under the one publish loop) with a stop event, waiting on
a condition with a deadline -- never a sleep; the outcome test steps
:meth:`DcgmSource.next_batch` (the call the loop makes per round) by hand, so
that each round's outcome and backoff can be asserted one at a time.
"""

from __future__ import annotations

import asyncio
import io
import socket
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from connectors.backoff import Backoff
from connectors.dcgm.scrape import DcgmMetrics, DcgmPoller, DcgmSource
from connectors.dcgm.settings import DcgmSettings
from connectors.kafka.producer import EventProducer
from connectors.source import Batch
from gputriage.demo.broker import EmbeddedBroker
from schemas.codec import AnyEvent, decode_dead_letter, decode_event
from schemas.events import GpuBindingEvent, PodRef, XidEvent
from tests import paths
from tests.kafka_helpers import KafkaTestEnv, consume_all, consume_events, eventually, frozen

DATA = paths.DATA / "dcgm"
RTX = "GPU-a8394b51-c086-568a-9f1a-c1e1c934c44c"
FAST = Backoff(initial_seconds=0.001, max_seconds=0.01)


def burst(n: int) -> str:
    return (DATA / "burst" / f"{n:02d}.prom").read_text()


class Exporter:
    """A stand-in dcgm-exporter: answers queued (status, body, headers), then ``current``."""

    def __init__(self) -> None:
        self.queue: list[tuple[int, str, dict[str, str]]] = []
        self.current: tuple[int, str, dict[str, str]] = (200, burst(1), {})
        self.hits = 0
        self.hits_at: list[float] = []
        """The loop's time of each request."""
        self.hang = asyncio.Event()  # set() releases a hanging request
        self.hanging = False

    async def handle(self, _request: web.Request) -> web.Response:
        self.hits += 1
        self.hits_at.append(asyncio.get_running_loop().time())
        if self.hanging:
            await self.hang.wait()
        status, body, headers = self.queue.pop(0) if self.queue else self.current
        return web.Response(status=status, text=body, content_type="text/plain", headers=headers)


@asynccontextmanager
async def serving(exporter: Exporter, port: int = 0) -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/metrics", exporter.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    bound = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{bound}/metrics"
    finally:
        exporter.hang.set()
        await runner.cleanup()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def sample(metrics: DcgmMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def fast_poller(url: str, **kw: Any) -> DcgmPoller:
    """A poller of ``url`` with a fast backoff and no metrics port; ``kw``: more settings."""
    settings = DcgmSettings(url=url, cluster="c1", node="gpu-node-1", metrics_port=None, **kw)
    return DcgmPoller(settings, backoff=FAST)


OUTCOMES = ("ok", "http_error", "unreachable", "timeout", "bad_exposition", "internal_error")


async def one_round(source: DcgmSource) -> str:
    """One :meth:`DcgmSource.next_batch` (a scrape, as the loop runs it); the outcome it counted.

    The outcome is read back from ``gputriage_dcgm_scrapes_total{outcome}``, what
    production reports, and exactly one outcome must move per round.
    """
    metrics = source.poller.metrics
    before = {o: sample(metrics, "gputriage_dcgm_scrapes_total", outcome=o) for o in OUTCOMES}
    await source.next_batch()
    after = {o: sample(metrics, "gputriage_dcgm_scrapes_total", outcome=o) for o in OUTCOMES}
    moved = [o for o in OUTCOMES if after[o] > before[o]]
    assert len(moved) == 1, moved
    return moved[0]


@asynccontextmanager
async def running(poller: DcgmPoller, producer: EventProducer) -> AsyncIterator[None]:
    """``poller.run`` in a task until the block ends; then stop it and wait (bounded)."""
    stop = asyncio.Event()
    task = asyncio.create_task(poller.run(producer, io.StringIO(), stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


def counted(metrics: DcgmMetrics, schema: str) -> Callable[[], float]:
    """``gputriage_dcgm_events_total{schema}``: events acknowledged (counted on commit)."""
    return lambda: sample(metrics, "gputriage_dcgm_events_total", schema=schema)


class RecordingProducer(EventProducer):
    """The real producer, remembering every ``send_many`` attempt: its ids and whether it
    was acknowledged (to see that a retry re-sends the very ids of the failed attempt)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.attempts: list[tuple[list[str], bool]] = []

    async def send_many(self, events: Iterable[AnyEvent], **options: Any) -> int:
        events = list(events)
        ids = [e.id for e in events]
        try:
            sent = await super().send_many(events, **options)
        except BaseException:
            self.attempts.append((ids, False))
            raise
        self.attempts.append((ids, True))
        return sent


async def published(kafka: KafkaTestEnv, count: int, copies: int = 0) -> list[Any]:
    """The ``count`` events published, in time order, once their ``copies`` for the cluster
    key (pod-aware bindings: :class:`schemas.keys.Router`) are there too; without them."""
    topics = [kafka.layout.raw_topic(XidEvent), kafka.layout.raw_topic(GpuBindingEvent)]
    records = await consume_events(kafka.bootstrap, topics, count + copies)
    events = [decode_event(r.value) for r in records]
    routed = [e for e in events if getattr(e, "scope", "node") == "cluster"]
    assert len(routed) == copies
    events = [e for e in events if getattr(e, "scope", "node") == "node"]
    return sorted(events, key=lambda e: (e.time, e.id))


@pytest.mark.asyncio
async def test_burst_and_pod_bindings_reach_kafka_and_a_restart_resumes(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """Real time: the 10 ms intervals pass while the producer talks to Tansu.

    Scraping one exposition again reports nothing new (the diff is against the
    previous scrape), so the loop may scrape each one any number of times.
    """
    await kafka.acreate_topics()
    state = tmp_path / "dcgm-state.json"
    exporter = Exporter()
    async with EventProducer(kafka.kwargs, kafka.layout) as producer, serving(exporter) as url:
        poller = fast_poller(url, interval_seconds=0.01, state_path=str(state))
        bindings = counted(poller.metrics, "gpu_binding.v1")
        xids = counted(poller.metrics, "xid.v1")
        async with running(poller, producer):
            await eventually(lambda: bindings() >= 1, timeout=10, what="scrape 1 acknowledged")
            exporter.current = (200, burst(2), {})
            await eventually(lambda: xids() >= 3, timeout=10, what="scrape 2 acknowledged")
        assert state.exists()
        assert sample(poller.metrics, "gputriage_dcgm_scrapes_total", outcome="ok") >= 2
        # A restart: a new poller reads the saved state, so scrape 3 is no baseline.
        restarted = fast_poller(url, interval_seconds=0.01, state_path=str(state))
        assert restarted.state == poller.state
        exporter.current = (200, burst(3), {})
        after = counted(restarted.metrics, "gpu_binding.v1")
        async with running(restarted, producer):
            await eventually(lambda: after() >= 1, timeout=10, what="scrape 3 acknowledged")
        assert sample(restarted.metrics, "gputriage_dcgm_baseline_xids_total") == 0
        assert sample(poller.metrics, "gputriage_dcgm_baseline_xids_total") == 2
    events = await published(kafka, 5, copies=2)
    xid_events = [e for e in events if isinstance(e, XidEvent)]
    binding_events = [e for e in events if isinstance(e, GpuBindingEvent)]
    # The gauge said 79 all along; the count went 1 -> 4: three XIDs, through the count.
    assert [(x.code, x.gpu_uuid, x.pci_bus_id, x.source) for x in xid_events] == [
        (79, RTX, "0000:00:02.0", "dcgm")
    ] * 3
    assert [b.pods for b in binding_events] == [
        (PodRef(namespace="default", name="cuda-75454ffb9f-8ljq7", container="cuda"),),
        (),
    ]
    assert len({e.id for e in events}) == 5


@pytest.mark.asyncio
async def test_bad_exposition_is_a_dead_letter_and_the_poller_goes_on(
    kafka: KafkaTestEnv,
) -> None:
    await kafka.acreate_topics()
    exporter = Exporter()
    html = "<html><body><h1>502 Bad Gateway</h1></body></html>\n"
    exporter.queue = [(200, html, {})]
    async with EventProducer(kafka.kwargs, kafka.layout) as producer, serving(exporter) as url:
        poller = fast_poller(url, interval_seconds=0.01)
        m = poller.metrics
        bindings = counted(m, "gpu_binding.v1")
        async with running(poller, producer):
            # The next good scrape is used: its binding is published after the dead letter.
            await eventually(lambda: bindings() >= 1, timeout=10, what="the next good scrape")
        assert sample(m, "gputriage_dcgm_scrapes_total", outcome="bad_exposition") == 1
        assert sample(m, "gputriage_dcgm_dead_letters_total") == 1  # counted once acked
        assert sample(m, "gputriage_dcgm_scrapes_total", outcome="ok") >= 1
    (record,) = await consume_all(kafka.bootstrap, [kafka.layout.dead_letters.name], 1)
    letter = decode_dead_letter(record.value)
    assert "invalid Prometheus text exposition" in letter.reason
    assert letter.value == html.encode()
    assert letter.topic.endswith("/metrics")
    assert record.key == b"c1/gpu-node-1"


@pytest.mark.asyncio
async def test_http_errors_refusals_and_timeouts_are_survived_and_retried() -> None:
    """Each round is one :meth:`DcgmSource.next_batch`, the production round (the loop
    only calls it again); a failed scrape is an empty batch, which the loop drops.

    Real time, not looptime: the 0.2 s scrape timeout elapses while the started
    producer talks to Tansu, another process, whose answers looptime cannot see coming.
    """
    exporter = Exporter()
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    async with aiohttp.ClientSession() as session:
        poller = fast_poller(url, timeout_seconds=0.2)
        source = DcgmSource(poller, session)
        # Nobody listens yet: connection refused.
        assert await one_round(source) == "unreachable"
        assert poller.failures == 1
        exporter_health = poller.metrics.exporter.state
        assert (exporter_health.ok, exporter_health.detail) == (False, "scrape unreachable")
        assert 0 <= poller.next_delay() <= FAST.initial_seconds
        async with serving(exporter, port):
            exporter.queue = [(500, "oops", {}), (503, "busy", {"Retry-After": "0"})]
            assert await one_round(source) == "http_error"
            assert await one_round(source) == "http_error"
            assert poller.next_delay() == 0  # the server's Retry-After wins
            exporter.hanging = True
            assert await one_round(source) == "timeout"
            exporter.hanging = False
            assert await one_round(source) == "ok"
            assert poller.failures == 0
            assert poller.metrics.exporter.state.ok
            assert poller.next_delay() == poller.settings.interval_seconds
        assert poller.state is None, "scraped is not acknowledged: only a commit moves the state"
        m = poller.metrics
        assert sample(m, "gputriage_dcgm_scrapes_total", outcome="unreachable") == 1
        assert sample(m, "gputriage_dcgm_scrapes_total", outcome="http_error") == 2
        assert sample(m, "gputriage_dcgm_scrapes_total", outcome="timeout") == 1
        assert sample(m, "gputriage_dcgm_scrapes_total", outcome="ok") == 1


@pytest.mark.asyncio
async def test_run_loops_through_failures_until_stopped(kafka: KafkaTestEnv) -> None:
    """Real time, not looptime: the 10 ms intervals pass while the producer talks to Tansu."""
    await kafka.acreate_topics()
    exporter = Exporter()
    exporter.queue = [(500, "oops", {}), (500, "oops", {})]
    async with EventProducer(kafka.kwargs, kafka.layout) as producer, serving(exporter) as url:
        poller = fast_poller(url, interval_seconds=0.01)
        stop = asyncio.Event()
        task = asyncio.create_task(poller.run(producer, io.StringIO(), stop))
        ok = ("gputriage_dcgm_scrapes_total", "ok")
        await eventually(
            lambda: sample(poller.metrics, ok[0], outcome=ok[1]) >= 2, timeout=10, what="two ok"
        )
        stop.set()
        await asyncio.wait_for(task, 5)
        assert sample(poller.metrics, ok[0], outcome="http_error") == 2


@pytest.mark.asyncio
async def test_a_failed_publish_is_resent_with_the_same_ids() -> None:
    """A send that fails (a real outage: a broker of this test's own, frozen) is retried
    by the loop with the same batch: the ids of the acknowledged attempt are those of the
    failed one, the state moves only then, and Kafka holds that one binding id."""
    async with EmbeddedBroker() as broker:  # our own: the outage must not hit other tests
        env = KafkaTestEnv(broker=broker, prefix="dcgm-resend")
        await env.acreate_topics()
        producer = RecordingProducer(
            env.kwargs, env.layout, linger_ms=0, request_timeout_ms=400, retry_backoff_ms=20
        )
        await producer.start()
        exporter = Exporter()
        try:
            async with serving(exporter) as url:
                poller = fast_poller(url, interval_seconds=0.01)
                bindings = counted(poller.metrics, "gpu_binding.v1")
                xids = counted(poller.metrics, "xid.v1")

                def acked() -> object:  # read anew each time (no narrowing across the outage)
                    return poller.state

                async with running(poller, producer):
                    with frozen(broker):  # the outage begins before the first send
                        await eventually(
                            lambda: any(not ok for _, ok in producer.attempts),
                            timeout=10,
                            what="a failed send",
                        )
                        assert acked() is None, "the state advances only once the events are acked"
                        assert bindings() == 0
                    exporter.current = (200, burst(2), {})
                    await eventually(lambda: xids() >= 3, timeout=20, what="scrape 2 acknowledged")
        finally:
            await producer.stop()
        assert acked() is not None
        (failed, _), *_ = [a for a in producer.attempts if not a[1]]
        (binding_id,) = failed  # scrape 1's one binding, the first batch with events
        resent = [ids for ids, ok in producer.attempts if ok and binding_id in ids]
        assert resent == [failed], "acknowledged once, with the ids of the failed attempt"
        assert bindings() == 1, "counted once, not per retry"
        assert xids() == 3
        events = await published(env, 4, copies=1)
    assert {e.id for e in events if isinstance(e, GpuBindingEvent)} == {binding_id}


@pytest.mark.asyncio
async def test_run_keeps_scraping_while_kafka_is_down_and_saves_state_only_once_acked(
    tmp_path: Path,
) -> None:
    """The live path (the one publish loop): a broker outage is waited out, not fatal.

    Scrapes go on meanwhile, each diffed against the previous scrape, so every
    event is counted exactly once when it is finally acknowledged; the state
    file is written only then. The outage is real: a broker of this test's own,
    frozen (:func:`tests.kafka_helpers.frozen`, SIGSTOP; an unstarted producer
    would be a programming error, which the loop rightly does not retry).
    """
    async with EmbeddedBroker() as broker:  # our own: the outage must not hit other tests
        env = KafkaTestEnv(broker=broker, prefix="dcgm-outage")
        await env.acreate_topics()
        producer = EventProducer(
            env.kwargs, env.layout, linger_ms=0, request_timeout_ms=400, retry_backoff_ms=20
        )
        await producer.start()
        exporter = Exporter()
        state = tmp_path / "dcgm-state.json"
        failures = "gputriage_connector_delivery_failures_total"
        try:
            async with serving(exporter) as url:
                poller = fast_poller(url, interval_seconds=0.01, state_path=str(state))

                def acked() -> object:  # read anew each time (no narrowing across the outage)
                    return poller.state

                async with running(poller, producer):
                    with frozen(broker):  # the outage begins before any send
                        await eventually(
                            lambda: exporter.hits >= 3 and sample(poller.metrics, failures) >= 1,
                            timeout=10,
                            what="scrapes while the sends fail",
                        )
                        assert acked() is None, "nothing acknowledged: the state has not moved"
                        assert not state.exists()
                        exporter.current = (200, burst(2), {})
                    xids = ("gputriage_dcgm_events_total", "xid.v1")
                    await eventually(
                        lambda: sample(poller.metrics, xids[0], schema=xids[1]) >= 3,
                        timeout=20,
                        what="the burst acknowledged",
                    )
        finally:
            await producer.stop()
    assert acked() is not None
    assert state.exists()
    events = "gputriage_dcgm_events_total"
    assert sample(poller.metrics, events, schema="gpu_binding.v1") == 1, "once, not per retry"
    assert sample(poller.metrics, events, schema="xid.v1") == 3
    assert sample(poller.metrics, "gputriage_dcgm_scrapes_total", outcome="publish_error") == 0


@pytest.mark.asyncio
async def test_a_sample_with_a_bad_timestamp_is_a_dead_letter_and_the_scrape_is_published(
    kafka: KafkaTestEnv,
) -> None:
    """``1e999`` raised OverflowError in the parser; every round logged a
    traceback and dropped the whole scrape, with no dead letter."""
    await kafka.acreate_topics()
    exporter = Exporter()
    bad = 'DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-bad"} 0 1e999\n'
    exporter.current = (200, burst(1) + bad, {})
    async with EventProducer(kafka.kwargs, kafka.layout) as producer, serving(exporter) as url:
        poller = fast_poller(url, interval_seconds=0.01)
        m = poller.metrics
        bindings = counted(m, "gpu_binding.v1")
        async with running(poller, producer):
            await eventually(lambda: bindings() >= 1, timeout=10, what="the scrape's binding")
            await eventually(
                lambda: sample(m, "gputriage_dcgm_dead_letters_total") >= 1,
                timeout=10,
                what="the sample's dead letter acknowledged",
            )
        assert sample(m, "gputriage_dcgm_scrapes_total", outcome="internal_error") == 0
        assert sample(m, "gputriage_dcgm_scrapes_total", outcome="bad_exposition") == 0
    (record, *_) = await consume_all(kafka.bootstrap, [kafka.layout.dead_letters.name], 1)
    letter = decode_dead_letter(record.value)
    assert letter.reason == "sample timestamp inf ms is not a finite number"
    assert letter.field == "timestamp"
    assert letter.value is not None
    assert b'UUID="GPU-bad"' in letter.value
    assert record.key == b"c1/gpu-node-1"


async def rounds_until_a_scrape(source: DcgmSource, limit: float) -> tuple[int, float, Batch]:
    """Call ``next_batch`` as the publish loop does until one scrapes: (idle batches, s,
    the scrape's batch)."""
    began = asyncio.get_running_loop().time()
    idle = 0
    while True:
        batch = await source.next_batch()
        assert batch is not None
        if not batch.idle:
            return idle, asyncio.get_running_loop().time() - began, batch
        idle += 1
        assert asyncio.get_running_loop().time() - began < limit, "no scrape came"


@pytest.mark.asyncio
async def test_between_scrapes_the_source_says_it_is_caught_up() -> None:
    """Latency: waiting out its interval, a dcgm source reports idle batches
    (the publish loop then claims the wall clock and heartbeats it), instead of one long
    sleep that left its progress at the last scrape's time for the whole interval, and
    every incident of the worker waiting that long. Not after an exposition with its own
    timestamps: its next scrape may be stamped older than now.

    Real time: the interval elapses while aiohttp talks to the exporter."""
    exporter = Exporter()
    interval = 0.6
    async with serving(exporter) as url, aiohttp.ClientSession() as session:
        poller = fast_poller(url, interval_seconds=interval)
        source = DcgmSource(poller, session, claim_every_seconds=0.05)
        first = await source.next_batch()
        assert first is not None
        assert first.events, "the first scrape publishes its bindings"
        assert first.progress is not None
        idle, took, _ = await rounds_until_a_scrape(source, limit=10 * interval)
        assert idle >= 3, f"{idle} idle batches in {took:.2f} s"
        assert took >= interval * 0.9, "the interval is still waited out"
        assert exporter.hits == 2

        stamped = 'DCGM_FI_DEV_XID_ERRORS{gpu="7",UUID="GPU-stamped"} 0 1764576000000\n'
        exporter.current = (200, burst(1) + stamped, {})
        claimed = datetime.now(UTC)
        idle, _, batch = await rounds_until_a_scrape(source, limit=10 * interval)
        assert idle >= 1, "the last scrape was on the poller's clock"
        assert exporter.hits == 3
        assert batch.progress is not None
        assert batch.progress >= claimed, "stamped a year back, taken at the claim instead"
        idle, took, _ = await rounds_until_a_scrape(source, limit=10 * interval)
        assert idle == 0, "after a stamped exposition nothing is claimed"
        assert took >= interval * 0.9


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(30)
async def test_the_interval_claims_and_retry_after_pass_on_the_loops_clock() -> None:
    """The exporter is served from this loop (aiohttp on loopback) and no broker is
    started, so looptime sees every request and answer and moves its clock only while
    both ends wait. A 15 s interval is 14 claims a second apart, then the scrape; a
    503 asking ``Retry-After: 30`` is honoured on that clock, not the 1 ms backoff."""
    loop = asyncio.get_running_loop()
    exporter = Exporter()
    exporter.queue = [(200, burst(1), {}), (200, burst(1), {})]
    exporter.current = (503, "busy", {"Retry-After": "30"})
    async with serving(exporter) as url, aiohttp.ClientSession() as session:
        poller = fast_poller(url, interval_seconds=15.0)
        source = DcgmSource(poller, session, claim_every_seconds=1.0)
        started = loop.time()
        batches = []
        while len(exporter.hits_at) < 4:  # two answers, two refusals
            batches.append(await source.next_batch())
            assert len(batches) < 60, f"scrapes at {exporter.hits_at}"
    since = [round(at - started, 2) for at in exporter.hits_at]
    assert since == [0.0, 15.0, 30.0, 60.0], "the interval twice, then the Retry-After"
    idle = sum(1 for b in batches if b is not None and b.idle)
    # A claim a second while an interval runs, none while a retry waits; a refused
    # scrape is an idle batch too.
    assert idle == 14 + 14 + 2
    assert poller.failures == 2
