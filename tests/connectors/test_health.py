"""``/healthz`` and ``/readyz``: what each answers, served over real HTTP next to ``/metrics``."""

from __future__ import annotations

import asyncio
import threading

import pytest
from prometheus_client import CollectorRegistry, Counter

from connectors.health import Health, observe_consumer
from connectors.prometheus import serve_metrics
from tests.http_helpers import http_get


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_failing_dependency_is_unready_at_once_and_never_unlive() -> None:
    """Kafka down for an hour: unready all along, live all along (a restart would drop
    the connector's buffer and crash-loop it on the unreachable broker)."""
    clock = Clock()
    health = Health(fail_after_seconds=300, clock=clock)
    kafka = health.condition("kafka", detail="not connected yet")
    assert not health.ready().ok  # not shown to work yet
    kafka.set(True)
    assert health.ready().ok
    assert health.live().ok
    clock.now += 10
    kafka.set(False, "produce failed")
    clock.now += 3599
    kafka.set(False, "produce failed again")  # the same outage: its age is kept
    ready, live = health.ready(), health.live()
    assert not ready.ok
    assert "[-]kafka failing for 3599 s: produce failed again" in ready.lines
    assert live.ok
    assert "[+]kafka failing for 3599 s: produce failed again" in live.lines
    kafka.set(True)
    assert health.ready().ok


def test_a_condition_a_restart_fixes_fails_liveness_after_fail_after() -> None:
    clock = Clock()
    health = Health(fail_after_seconds=300, clock=clock)
    wedged = health.condition("client", ok=True, detail="", affects="live")
    wedged.set(False, "stuck")
    clock.now += 299
    assert health.live().ok
    clock.now += 2
    assert not health.live().ok
    wedged.set(True)
    assert health.live().ok


def test_a_reported_only_condition_fails_no_probe() -> None:
    clock = Clock()
    health = Health(fail_after_seconds=10, clock=clock)
    exporter = health.condition("dcgm-exporter", affects="none")
    exporter.set(False, "scrape unreachable")
    clock.now += 3600
    assert health.live().ok
    ready = health.ready()
    assert ready.ok  # an unready agent would stall the DaemonSet's rollouts
    assert "[+]dcgm-exporter failing for 3600 s: scrape unreachable" in ready.lines


def test_the_report_text_reads_like_the_api_servers() -> None:
    health = Health()
    health.condition("kafka", ok=True, detail="")
    assert health.ready().text("readyz") == "[+]kafka ok\nreadyz check passed\n"


def test_a_blocked_loop_is_unlive_and_a_turning_one_is_live() -> None:
    loop = asyncio.new_event_loop()
    runner = threading.Thread(target=loop.run_forever, daemon=True)
    runner.start()
    try:
        health = Health(loop_timeout_seconds=0.5)
        health.watch_loop(loop)
        assert health.live().lines == ("[+]loop ok",)
        release = threading.Event()
        loop.call_soon_threadsafe(release.wait, 30)  # a synchronous call blocks the loop
        report = health.live()
        release.set()
        assert not report.ok
        assert report.lines[0].startswith("[-]loop failed: no answer in 0.5 s")
    finally:
        loop.call_soon_threadsafe(loop.stop)
        runner.join(10)
        loop.close()
    assert health.live().lines == ("[-]loop failed: the event loop is closed",)


@pytest.mark.parametrize(
    ("assigned", "ago", "ok", "detail"),
    [
        (0, None, False, "no partitions assigned (joining or rebalancing)"),
        (4, None, True, "4 partitions assigned"),
        (4, 1.0, True, "4 partitions assigned"),
        (4, 31.0, False, "no fetch response for 31 s"),
    ],
)
def test_a_consumers_kafka_condition(
    assigned: int, ago: float | None, ok: bool, detail: str
) -> None:
    condition = Health().condition("kafka")
    observe_consumer(condition, assigned, ago)
    assert (condition.state.ok, condition.state.detail) == (ok, detail)


@pytest.fixture
def served() -> tuple[str, Health]:
    registry = CollectorRegistry()
    Counter("gputriage_test_things", "Things.", registry=registry).inc()
    health = Health()
    port = serve_metrics(registry, 0, "127.0.0.1", health)
    return f"http://127.0.0.1:{port}", health


def test_the_endpoints_answer_over_http_next_to_metrics(served: tuple[str, Health]) -> None:
    base, health = served
    kafka = health.condition("kafka", detail="not connected yet")
    status, body = http_get(f"{base}/readyz")
    assert status == 503
    assert body.endswith("[-]kafka failing for 0 s: not connected yet\nreadyz check failed\n")
    assert http_get(f"{base}/healthz")[0] == 200  # just started: not yet a reason to restart
    kafka.set(True, "connected")
    assert http_get(f"{base}/readyz") == (200, "[+]kafka ok: connected\nreadyz check passed\n")
    status, body = http_get(f"{base}/metrics")
    assert status == 200
    assert "gputriage_test_things_total 1.0" in body


def test_without_health_the_probes_are_not_found() -> None:
    port = serve_metrics(CollectorRegistry(), 0, "127.0.0.1")
    assert http_get(f"http://127.0.0.1:{port}/healthz")[0] == 404
    assert http_get(f"http://127.0.0.1:{port}/metrics")[0] == 200
