"""A client's start is bounded and quiet: one ``KafkaUnreachable`` naming the brokers.

A broker that accepts TCP and never answers held every verb for aiokafka's 40 s
request timeout; an unreachable one printed aiokafka's ERROR lines and a repr of its
address tuples. The silent broker here is a server on this test's own loop that takes
connections and says nothing, and the timeout passes on the loop's fake clock
(looptime): both ends are on one loop, so the clock only jumps through the silence.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
import pytest_asyncio

from connectors.kafka.admin import check_copartitioned, ensure_topics
from connectors.kafka.config import (
    ClientKwargs,
    KafkaSettings,
    KafkaUnreachable,
    client_kwargs,
    start_client,
)
from connectors.kafka.producer import EventProducer, start_producer
from schemas.topics import topic_layout


@pytest_asyncio.fixture
async def silent() -> AsyncIterator[str]:
    """``host:port`` of a "broker" that accepts every connection and never answers."""
    held: list[asyncio.StreamWriter] = []

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        for writer in held:
            writer.close()
        server.close()
        await server.wait_closed()


def _kwargs(brokers: str, timeout_seconds: float) -> ClientKwargs:
    return client_kwargs(KafkaSettings(brokers=(brokers,), connect_timeout_seconds=timeout_seconds))


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.parametrize("start", ["ensure_topics", "check_copartitioned", "producer"])
async def test_a_silent_broker_ends_a_start_at_the_connect_timeout(
    silent: str, looptime: float, caplog: pytest.LogCaptureFixture, start: str
) -> None:
    kwargs = _kwargs(silent, 7.0)
    layout = topic_layout()
    starts: dict[str, Callable[[], Awaitable[object]]] = {
        "ensure_topics": lambda: ensure_topics(kwargs, layout),
        "check_copartitioned": lambda: check_copartitioned(kwargs, layout.all()),
        "producer": lambda: start_producer(kwargs, layout),
    }
    started = float(looptime)
    with pytest.raises(KafkaUnreachable) as refused:
        await starts[start]()
    waited = float(looptime) - started
    assert 7.0 <= waited < 7.5, "the connect timeout, not aiokafka's 40 s request timeout"
    assert str(refused.value) == (
        f"cannot reach Kafka at {silent}: no answer within 7 s (kafka.connect_timeout_seconds)"
    )
    assert refused.value.reason == "no answer"
    assert [r for r in caplog.records if r.name.startswith("aiokafka")] == []


@pytest.mark.asyncio
async def test_an_unreachable_broker_is_its_reason_and_nothing_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    producer = EventProducer(_kwargs("127.0.0.1:1", 5.0), topic_layout())
    with pytest.raises(KafkaUnreachable) as refused:
        await producer.start()
    assert str(refused.value) == "cannot reach Kafka at 127.0.0.1:1: Connection refused"
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    aiokafka = logging.getLogger("aiokafka")
    assert aiokafka.propagate, "the logger is given back as it was"
    assert aiokafka.handlers == []


@pytest.mark.asyncio
async def test_a_cancelled_start_stops_the_client_and_is_raised(silent: str) -> None:
    class Client:
        stopped = False

        async def start(self) -> None:
            await asyncio.Event().wait()

        async def stop(self) -> None:
            self.stopped = True

    client = Client()
    task = asyncio.create_task(start_client(client, _kwargs(silent, 60.0)))
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert client.stopped
