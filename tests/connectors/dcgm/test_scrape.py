"""The dcgm-exporter poller against a local aiohttp server and the real embedded Kafka broker.

The server serves real-format expositions (tests/data/dcgm/); the tests drive
the poller round by round (:meth:`DcgmPoller.poll_once`) or let :meth:`run`
loop and wait on a condition with a deadline -- never a sleep.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from connectors.backoff import Backoff
from connectors.dcgm.scrape import DcgmMetrics, DcgmPoller, PollOptions
from connectors.kafka.producer import EventProducer
from gputriage.demo.broker import EmbeddedBroker
from schemas.codec import decode_dead_letter, decode_event
from schemas.events import GpuBindingEvent, PodRef, XidEvent
from tests import paths
from tests.kafka_helpers import KafkaTestEnv, consume_all, eventually

DATA = paths.DATA / "dcgm"
RTX = "GPU-a8394b51-c086-568a-9f1a-c1e1c934c44c"
FAST = Backoff(initial_s=0.001, max_s=0.01)


def burst(n: int) -> str:
    return (DATA / "burst" / f"{n:02d}.prom").read_text()


class Exporter:
    """A stand-in dcgm-exporter: answers queued (status, body, headers), then ``current``."""

    def __init__(self) -> None:
        self.queue: list[tuple[int, str, dict[str, str]]] = []
        self.current: tuple[int, str, dict[str, str]] = (200, burst(1), {})
        self.hits = 0
        self.hang = asyncio.Event()  # set() releases a hanging request
        self.hanging = False

    async def handle(self, _request: web.Request) -> web.Response:
        self.hits += 1
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


def options(url: str, **kw: Any) -> PollOptions:
    return PollOptions(url=url, cluster="c1", node="gpu-node-1", backoff=FAST, **kw)


async def published(kafka: KafkaTestEnv, count: int) -> list[Any]:
    topics = [kafka.layout.raw_topic(XidEvent), kafka.layout.raw_topic(GpuBindingEvent)]
    records = await consume_all(kafka.bootstrap, topics, count)
    events = [decode_event(r.value) for r in records]
    return sorted(events, key=lambda e: (e.time, e.id))


@pytest.mark.asyncio
async def test_burst_and_pod_bindings_reach_kafka_and_a_restart_resumes(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    await kafka.acreate_topics()
    state = tmp_path / "dcgm-state.json"
    exporter = Exporter()
    async with (
        EventProducer(kafka.kwargs, kafka.layout) as producer,
        serving(exporter) as url,
        aiohttp.ClientSession() as session,
    ):
        poller = DcgmPoller(options(url, state_path=state), producer)
        for n in (1, 2):
            exporter.current = (200, burst(n), {})
            assert await poller.poll_once(session) == "ok"
        assert state.exists()
        # A restart: a new poller reads the saved state, so scrape 3 is no baseline.
        restarted = DcgmPoller(options(url, state_path=state), producer)
        assert restarted.state == poller.state
        exporter.current = (200, burst(3), {})
        assert await restarted.poll_once(session) == "ok"
        assert sample(restarted.metrics, "gputriage_dcgm_baseline_xids_total") == 0
        assert sample(poller.metrics, "gputriage_dcgm_baseline_xids_total") == 2
    events = await published(kafka, 5)
    xids = [e for e in events if isinstance(e, XidEvent)]
    bindings = [e for e in events if isinstance(e, GpuBindingEvent)]
    # The gauge said 79 all along; the count went 1 -> 4: three XIDs, through the count.
    assert [(x.code, x.gpu_uuid, x.pci_bus_id, x.source) for x in xids] == [
        (79, RTX, "0000:00:02.0", "dcgm")
    ] * 3
    assert [b.pods for b in bindings] == [
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
    async with (
        EventProducer(kafka.kwargs, kafka.layout) as producer,
        serving(exporter) as url,
        aiohttp.ClientSession() as session,
    ):
        poller = DcgmPoller(options(url), producer)
        assert await poller.poll_once(session) == "bad_exposition"
        assert sample(poller.metrics, "gputriage_dcgm_dead_letters_total") == 1
        assert await poller.poll_once(session) == "ok"  # the next good scrape is used
    (record,) = await consume_all(kafka.bootstrap, [kafka.layout.dead_letters.name], 1)
    letter = decode_dead_letter(record.value)
    assert "invalid Prometheus text exposition" in letter.reason
    assert letter.value == html.encode()
    assert letter.topic.endswith("/metrics")
    assert record.key == b"c1/gpu-node-1"


@pytest.mark.asyncio
async def test_http_errors_refusals_and_timeouts_are_survived_and_retried(
    kafka: KafkaTestEnv,
) -> None:
    """Real time, not looptime: the 0.2 s scrape timeout elapses while the started
    producer talks to Tansu, another process, whose answers looptime cannot see coming."""
    await kafka.acreate_topics()
    exporter = Exporter()
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    async with (
        EventProducer(kafka.kwargs, kafka.layout) as producer,
        aiohttp.ClientSession() as session,
    ):
        poller = DcgmPoller(options(url, timeout_s=0.2), producer)
        # Nobody listens yet: connection refused.
        assert await poller.poll_once(session) == "unreachable"
        assert poller.failures == 1
        assert 0 <= poller.next_delay() <= FAST.initial_s
        async with serving(exporter, port):
            exporter.queue = [(500, "oops", {}), (503, "busy", {"Retry-After": "0"})]
            assert await poller.poll_once(session) == "http_error"
            assert await poller.poll_once(session) == "http_error"
            assert poller.next_delay() == 0  # the server's Retry-After wins
            exporter.hanging = True
            assert await poller.poll_once(session) == "timeout"
            exporter.hanging = False
            assert await poller.poll_once(session) == "ok"
            assert poller.failures == 0
            assert poller.next_delay() == poller.options.interval_s
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
        poller = DcgmPoller(options(url, interval_s=0.01), producer)
        stop = asyncio.Event()
        task = asyncio.create_task(poller.run(stop))
        ok = ("gputriage_dcgm_scrapes_total", "ok")
        await eventually(
            lambda: sample(poller.metrics, ok[0], outcome=ok[1]) >= 2, timeout=10, what="two ok"
        )
        stop.set()
        await asyncio.wait_for(task, 5)
        assert sample(poller.metrics, ok[0], outcome="http_error") == 2


@pytest.mark.asyncio
async def test_a_failed_publish_is_resent_with_the_same_ids(kafka: KafkaTestEnv) -> None:
    await kafka.acreate_topics()
    exporter = Exporter()
    producer = EventProducer(kafka.kwargs, kafka.layout)  # not started yet: sends fail
    async with serving(exporter) as url, aiohttp.ClientSession() as session:
        poller = DcgmPoller(options(url), producer)
        assert await poller.poll_once(session) == "publish_error"
        assert poller.state is None  # the state advances only once the events are acked
        pending = poller.pending
        assert pending is not None
        await producer.start()
        try:
            exporter.current = (200, burst(2), {})
            assert await poller.poll_once(session) == "ok"
        finally:
            await producer.stop()
        assert poller.pending is None
        (binding,) = pending.events
        assert sample(poller.metrics, "gputriage_dcgm_events_total", schema="gpu_binding.v1") == 1
        assert sample(poller.metrics, "gputriage_dcgm_events_total", schema="xid.v1") == 3
    events = await published(kafka, 4)
    assert [e.id for e in events if isinstance(e, GpuBindingEvent)] == [binding.id]


@pytest.mark.asyncio
async def test_run_keeps_scraping_while_kafka_is_down_and_saves_state_only_once_acked(
    tmp_path: Path,
) -> None:
    """The live path (the one publish loop): a broker outage is waited out, not fatal.

    Scrapes go on meanwhile, each diffed against the previous scrape, so every
    event is counted exactly once when it is finally acknowledged; the state
    file is written only then. The outage is real: a broker of this test's own,
    frozen with SIGSTOP (an unstarted producer would be a programming error,
    which the loop rightly does not retry).
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
                poller = DcgmPoller(options(url, interval_s=0.01, state_path=state), producer)

                def acked() -> object:  # read anew each time (no narrowing across the outage)
                    return poller.state

                stop = asyncio.Event()
                os.kill(broker.pid or 0, signal.SIGSTOP)  # the outage begins before any send
                try:
                    task = asyncio.create_task(poller.run(stop))
                    await eventually(
                        lambda: exporter.hits >= 3 and sample(poller.metrics, failures) >= 1,
                        timeout=10,
                        what="scrapes while the sends fail",
                    )
                    assert acked() is None, "nothing acknowledged: the state has not moved"
                    assert not state.exists()
                    exporter.current = (200, burst(2), {})
                finally:
                    os.kill(broker.pid or 0, signal.SIGCONT)  # the outage ends
                try:
                    xids = ("gputriage_dcgm_events_total", "xid.v1")
                    await eventually(
                        lambda: sample(poller.metrics, xids[0], schema=xids[1]) >= 3,
                        timeout=20,
                        what="the burst acknowledged",
                    )
                finally:
                    stop.set()
                    await asyncio.wait_for(task, 20)
        finally:
            await producer.stop()
    assert acked() is not None
    assert state.exists()
    events = "gputriage_dcgm_events_total"
    assert sample(poller.metrics, events, schema="gpu_binding.v1") == 1, "once, not per retry"
    assert sample(poller.metrics, events, schema="xid.v1") == 3
    assert sample(poller.metrics, "gputriage_dcgm_scrapes_total", outcome="publish_error") == 0
