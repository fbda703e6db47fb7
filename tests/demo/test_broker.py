"""The embedded broker: starts, answers Kafka requests, stops, and never outlives us."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

import gputriage.demo.broker
from gputriage.demo.broker import BrokerError, EmbeddedBroker
from tests.kafka_helpers import wait_until
from tests.paths import ROOT


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (a container's PID 1 may never reap it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as file:
            state = file.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False
    return state in ("Z", "X")


async def _cluster_id(bootstrap: str) -> str:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        cluster = await admin.describe_cluster()
    finally:
        await admin.close()
    return str(cluster["cluster_id"])


def test_starts_answers_and_stops_without_a_trace() -> None:
    with EmbeddedBroker() as broker:
        pid = broker.pid
        assert pid is not None
        assert broker.running
        assert broker.bootstrap == f"127.0.0.1:{broker.port}"
        assert asyncio.run(_cluster_id(broker.bootstrap)) == broker.cluster_id
        log_path = broker.log_path
        assert log_path is not None
        assert log_path.exists()
    assert broker.pid is None
    assert _gone(pid)
    assert not log_path.exists(), "the temporary log is removed with the broker"
    with pytest.raises(BrokerError, match="not running"):
        _ = broker.bootstrap
    broker.stop()  # idempotent


@pytest.mark.asyncio
async def test_async_context_manager_and_a_kept_log(tmp_path: Path) -> None:
    log_path = tmp_path / "tansu.log"
    async with EmbeddedBroker(log_path=log_path) as broker:
        assert await _cluster_id(broker.bootstrap) == broker.cluster_id
        with pytest.raises(BrokerError, match="inside an event loop"):
            broker.start()
        pid = broker.pid
    assert pid is not None
    assert _gone(pid)
    assert log_path.exists(), "a log path the caller chose is kept"


@pytest.mark.asyncio
async def test_stopping_with_a_client_still_connected_is_prompt() -> None:
    # Tansu drains for 5 s on SIGTERM while a client is connected; the stop
    # signal must be one it obeys at once. Wall-clock time on purpose: the
    # broker is another process, which no fake loop clock can speed up.
    broker = await EmbeddedBroker(stop_timeout_seconds=10).start_async()
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait("connected", b"x")
        started = time.monotonic()
        await broker.stop_async()
        stopped_in = time.monotonic() - started
    finally:
        await producer.stop()
    assert stopped_in < 2.0


def test_a_taken_port_is_retried_on_another(monkeypatch: pytest.MonkeyPatch) -> None:
    # Something that accepts connections but never speaks Kafka holds the first
    # port: our broker dies of AddrInUse, the probe must not hang, and the
    # second port works.
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        ports: Iterator[int] = iter([taken])
        real_free_port = gputriage.demo.broker.free_port

        def next_port(host: str = "127.0.0.1") -> int:
            return next(ports, None) or real_free_port(host)

        monkeypatch.setattr(gputriage.demo.broker, "free_port", next_port)
        with EmbeddedBroker() as broker:
            assert broker.port != taken
            assert asyncio.run(_cluster_id(broker.bootstrap)) == broker.cluster_id


def test_another_kafka_on_the_port_is_not_mistaken_for_ours(
    broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = iter([broker.port])
    real_free_port = gputriage.demo.broker.free_port
    monkeypatch.setattr(
        gputriage.demo.broker,
        "free_port",
        lambda host="127.0.0.1": next(ports, None) or real_free_port(host),
    )
    with EmbeddedBroker() as second:
        assert second.port != broker.port
        assert second.cluster_id != broker.cluster_id


def test_a_missing_binary_is_a_broker_error() -> None:
    with pytest.raises(BrokerError, match="cannot run the broker"):
        EmbeddedBroker(binary="/nonexistent/tansu").start()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_the_broker_dies_with_a_killed_parent(tmp_path: Path) -> None:
    # A parent that starts a broker and is then SIGKILLed (no cleanup code runs)
    # must not leave the broker behind. (Its log is ours to remove: tmp_path.)
    script = textwrap.dedent(
        """
        import sys, threading
        from gputriage.demo.broker import EmbeddedBroker
        broker = EmbeddedBroker(log_path=sys.argv[1]).start()
        print(broker.pid, flush=True)
        threading.Event().wait()
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path / "tansu.log")],
        stdout=subprocess.PIPE,
        cwd=str(ROOT),
    )
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip().isdigit(), line
        pid = int(line)
        assert not _gone(pid)
    finally:
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        if parent.stdout is not None:
            parent.stdout.close()
    wait_until(lambda: _gone(pid), timeout=10, what=f"broker pid {pid} to die with its parent")
