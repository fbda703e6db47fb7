"""The ``[processor]`` settings: defaults, the example file, and typos refused."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gputriage.process import processor_options
from gputriage.settings import SettingsError, load_settings
from streams.app.settings import ProcessorSettings
from tests.kafka_helpers import KafkaTestEnv
from tests.paths import EXAMPLES

EXAMPLE = EXAMPLES / "gputriage.toml"


def test_the_example_settings_are_valid_and_match_the_defaults() -> None:
    assert processor_options(load_settings(str(EXAMPLE), environ={})) == ProcessorSettings()


def test_overrides_and_environment_apply() -> None:
    settings = load_settings(None, environ={"GPUTRIAGE_PROCESSOR__SNAPSHOT_SECONDS": "2.5"})
    options = processor_options(settings, app_id="other", metrics_port=None)
    assert (options.snapshot_seconds, options.app_id, options.metrics_port) == (2.5, "other", 9464)


def test_a_typo_is_an_error_naming_the_key() -> None:
    # Refused when the settings are loaded (one conversion of the whole tree), not later.
    with pytest.raises(SettingsError, match="tick_secondz"):
        processor_options(load_settings(None, environ={"GPUTRIAGE_PROCESSOR__TICK_SECONDZ": "1"}))


@pytest.mark.parametrize(
    ("variable", "message"),
    [
        ("GPUTRIAGE_PROCESSOR__BATCH_MAX", r"processor\.batch_max: must be at least 1"),
        ("GPUTRIAGE_PROCESSOR__TICK_SECONDS", r"processor\.tick_seconds: must be more than 0"),
    ],
)
def test_a_bad_number_fails_at_load_with_its_path(variable: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_settings(None, environ={variable: "0"})


def test_the_fetchers_prefetch_backoff_is_tuned_on_a_started_consumer(kafka: KafkaTestEnv) -> None:
    """The worker sets aiokafka's private ``_prefetch_backoff`` (the consumer takes no such
    argument; ``Worker._tune`` says why): an aiokafka that renames it fails here."""
    from aiokafka import AIOKafkaConsumer  # noqa: PLC0415

    from streams.app.worker import PREFETCH_BACKOFF_SECONDS, Worker  # noqa: PLC0415

    async def tuned() -> tuple[float, float]:
        consumer = AIOKafkaConsumer(**kafka.kwargs, group_id=None)
        await consumer.start()
        try:
            before = consumer._fetcher._prefetch_backoff
            Worker._tune(consumer)
            return before, consumer._fetcher._prefetch_backoff
        finally:
            # aiokafka's no-group coordinator, stopped right after its start, can raise
            # CancelledError from its own committed-offsets task: its quirk, not ours.
            with contextlib.suppress(asyncio.CancelledError):
                await consumer.stop()

    before, after = asyncio.run(tuned())
    assert before == 0.1, "aiokafka's default: the attribute is the one its fetcher reads"
    assert after == PREFETCH_BACKOFF_SECONDS


def test_the_partition_leaders_are_known_on_a_started_consumer(kafka: KafkaTestEnv) -> None:
    """The worker reads aiokafka's cluster metadata for each partition's leader (fetch
    receipts count only within one broker's sequence: ``streams/app/announced.py``);
    without it no partition is ever caught up and a busy source's rare partitions hold
    the watermark again. An aiokafka that moves it fails here."""
    from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: PLC0415

    from streams.app.worker import _leaders  # noqa: PLC0415

    async def leader() -> object:
        await kafka.acreate_topics()
        consumer = AIOKafkaConsumer(**kafka.kwargs, group_id=None)
        await consumer.start()
        try:
            tp = TopicPartition(kafka.layout.raw["pods"].name, 0)
            consumer.assign([tp])
            await consumer._client.force_metadata_update()
            leaders = _leaders(consumer)
            assert leaders is not None, "aiokafka's cluster metadata moved"
            return leaders(tp)
        finally:
            with contextlib.suppress(asyncio.CancelledError):
                await consumer.stop()

    assert asyncio.run(leader()) not in (None, -1), "the partition's leader, a broker id"


def test_the_start_of_a_partition_not_read_yet_is_known_without_waiting(
    kafka: KafkaTestEnv,
) -> None:
    """A partition nothing was read from holds its lane until the consumer knows where it
    starts; the worker reads that from aiokafka's subscription state (``position()`` is a
    coroutine that waits): an aiokafka that moves it fails here, not the busy rule."""
    from aiokafka import AIOKafkaConsumer, TopicPartition  # noqa: PLC0415

    from streams.app.worker import _UNKNOWN, _start_position  # noqa: PLC0415

    async def starts() -> tuple[object, object]:
        await kafka.acreate_topics()
        consumer = AIOKafkaConsumer(**kafka.kwargs, group_id=None)
        await consumer.start()
        try:
            tp = TopicPartition(kafka.layout.raw["pods"].name, 0)
            other = TopicPartition(kafka.layout.raw["pods"].name, 1)
            consumer.assign([tp])
            consumer.seek(tp, 7)
            return _start_position(consumer, tp), _start_position(consumer, other)
        finally:
            with contextlib.suppress(asyncio.CancelledError):
                await consumer.stop()

    assigned, unassigned = asyncio.run(starts())
    assert assigned == 7, "the position the consumer will read from"
    assert unassigned is _UNKNOWN
