"""A node source's heartbeats say who is alive: ``Tick.node``, ``Tick.source``, ``Tick.read_at``.

The processor's ``monitoring_gap`` reads them. The trap tested on the real broker: a
dcgm-exporter that refuses every scrape still lets its source's progress advance (a failed
scrape is an idle batch, "caught up"), so the heartbeat's ``time`` keeps moving while its
``read_at`` stays at the last scrape that answered.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
import pytest

from connectors.dcgm.scrape import DcgmSource
from connectors.kafka.producer import EventProducer
from connectors.publish import Publisher, PublishOptions
from connectors.source import Batch
from schemas import progress as wire
from schemas.codec import decode_event
from schemas.events import GpuBindingEvent, Tick
from tests.connectors.dcgm.test_scrape import Exporter, burst, fast_poller, serving
from tests.connectors.test_publish_progress import Recorder, Script, batch, running, stop
from tests.kafka_helpers import KafkaTestEnv, consume_until, eventually


def heartbeat_ticks(records: list[Any]) -> list[Tick]:
    """The heartbeats among raw records: keyless, no partition announcement."""
    ticks = []
    for record in records:
        if record.key is None and not wire.read_partitions(record.headers):
            tick = decode_event(record.value)
            assert isinstance(tick, Tick)
            ticks.append(tick)
    return ticks


@pytest.mark.asyncio
async def test_a_refusing_exporter_keeps_its_last_ok_read_while_the_heartbeats_time_advances(
    kafka: KafkaTestEnv,
) -> None:
    await kafka.acreate_topics()
    exporter = Exporter()
    exporter.queue = [(200, burst(1), {})]  # one scrape answers, every later one is refused
    exporter.current = (503, "Service Unavailable", {})
    async with (
        EventProducer(kafka.kwargs, kafka.layout) as producer,
        serving(exporter) as url,
        aiohttp.ClientSession() as session,
    ):
        poller = fast_poller(url, interval_seconds=0.01)
        source = DcgmSource(poller, session)
        publisher = Publisher(source, producer, options=PublishOptions(heartbeat_seconds=0.05))
        task = await running(publisher)
        try:
            await eventually(lambda: poller.failures >= 3, timeout=10, what="refused scrapes")
            last_ok = source.read_at()
            assert last_ok is not None
            beats = publisher.heartbeats
            await eventually(
                lambda: publisher.heartbeats >= beats + 3, timeout=10, what="heartbeats"
            )
        finally:
            await stop(task)
        assert source.read_at() == last_ok, "a refused scrape is no read"
    topic = kafka.layout.raw_topic(GpuBindingEvent)
    records = await consume_until(
        kafka.bootstrap,
        [topic],
        lambda rs: len(heartbeat_ticks(rs)) >= 3,
        what="heartbeats on the bindings topic",
    )
    ticks = heartbeat_ticks(records)
    assert {(t.cluster, t.node, t.source) for t in ticks} == {("c1", "gpu-node-1", "dcgm")}
    assert {t.read_at for t in ticks} == {last_ok}
    assert max(t.time for t in ticks) > last_ok, "progress moves on while the exporter refuses"


class Family(Script):
    """A scripted node source of a family, with or without ``read_at``."""

    family = "nvml"


class Reading(Family):
    def __init__(self, batches: list[Batch], read_at: datetime | None) -> None:
        super().__init__(batches)
        self.last_read = read_at

    def read_at(self) -> datetime | None:
        return self.last_read


class Ticks(Recorder):
    """The recorder, keeping the heartbeat records themselves (announcements apart)."""

    def __init__(self) -> None:
        super().__init__()
        self.ticks: list[Tick] = []
        self.announced: list[Tick] = []

    async def send_heartbeats(self, tick: Tick, partitions: Any, headers: Any) -> int:
        (self.announced if wire.read_partitions(headers) else self.ticks).append(tick)
        return await super().send_heartbeats(tick, partitions, headers)


async def beats(source: Script, count: int = 2) -> Ticks:
    producer = Ticks()
    publisher = Publisher(source, producer, options=PublishOptions(heartbeat_seconds=0.01))
    task = await running(publisher)
    try:
        await eventually(lambda: len(producer.ticks) >= count, what="heartbeats")
    finally:
        await stop(task)
    return producer


@pytest.mark.asyncio
async def test_a_source_without_read_at_is_heard_at_its_heartbeats_time() -> None:
    """A kernel-log reader: no ``read_at`` method, reading whenever it progresses."""
    producer = await beats(Family([batch([0, 1])]))
    for tick in [*producer.ticks, *producer.announced]:
        assert (tick.cluster, tick.node, tick.source, tick.read_at) == ("c1", "gpu-0", "nvml", None)


@pytest.mark.asyncio
async def test_a_source_that_never_read_vouches_for_progress_only() -> None:
    producer = await beats(Reading([batch([0, 1])], read_at=None))
    for tick in [*producer.ticks, *producer.announced]:
        assert (tick.node, tick.source, tick.read_at) == ("", "", None)


@pytest.mark.asyncio
async def test_read_at_is_never_later_than_the_ticks_time() -> None:
    """A read still in the buffer behind the heartbeat: capped at what the tick vouches for."""
    ahead = datetime.now(UTC) + timedelta(hours=1)
    producer = await beats(Reading([batch([0, 1])], read_at=ahead))
    assert producer.ticks
    assert producer.announced
    for tick in [*producer.ticks, *producer.announced]:
        assert tick.source == "nvml"
        assert tick.read_at == tick.time


@pytest.mark.asyncio
async def test_a_cluster_wide_source_names_no_node() -> None:
    """No ``family`` (the k8s watch, a test source): every tick as it always was."""
    producer = await beats(Script([batch([0, 1])]))
    for tick in [*producer.ticks, *producer.announced]:
        assert (tick.node, tick.source, tick.read_at) == ("", "", None)
