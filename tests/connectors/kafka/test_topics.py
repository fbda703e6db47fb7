"""The topic layout (names, keys, configs from settings) and creating missing topics."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from connectors.kafka.admin import TopicError, check_copartitioned, ensure_topics
from connectors.kafka.config import KafkaUnreachable
from gputriage.settings import SettingsError, load_settings
from schemas.events import (
    EVENT_TYPES,
    AutoscalerEvent,
    Event,
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
from schemas.topics import (
    SOURCE_SCHEMAS,
    STATE_RECORD_MAX_BYTES,
    TopicSettings,
    state_topic,
    topic_layout,
)
from tests.cli_helpers import gputriage, load_tables
from tests.kafka_helpers import KafkaTestEnv, as_mapping
from tests.sample_records import SAMPLES


def test_default_names_keys_and_partitions() -> None:
    layout = topic_layout()
    assert layout.raw_topics == (
        "gputriage.raw.pods",
        "gputriage.raw.nodes",
        "gputriage.raw.k8s-events",
        "gputriage.raw.xids",
        "gputriage.raw.gpu-bindings",
        "gputriage.raw.topology",
        "gputriage.raw.autoscaler",
        "gputriage.raw.resource-slices",
        "gputriage.raw.resource-claims",
    )
    assert layout.incidents.name == "gputriage.incidents"
    assert layout.dead_letters.name == "gputriage.dead-letters"
    assert {spec.partitions for spec in layout.all()} == {6}
    assert {spec.replication_factor for spec in layout.all()} == {1}
    assert layout.incidents.configs == {
        "cleanup.policy": "compact,delete",
        "retention.ms": str(30 * 24 * 3600 * 1000),
    }
    assert all(not spec.configs for spec in layout.raw.values())


def test_every_event_schema_but_tick_has_its_raw_topic() -> None:
    layout = topic_layout()
    expected = {
        PodEvent: "gputriage.raw.pods",
        NodeEvent: "gputriage.raw.nodes",
        KubeEvent: "gputriage.raw.k8s-events",
        XidEvent: "gputriage.raw.xids",
        GpuBindingEvent: "gputriage.raw.gpu-bindings",
        GpuTopologyEvent: "gputriage.raw.topology",
        AutoscalerEvent: "gputriage.raw.autoscaler",
        ResourceSliceEvent: "gputriage.raw.resource-slices",
        ResourceClaimEvent: "gputriage.raw.resource-claims",
    }
    assert {t: layout.raw_topic(t) for t in EVENT_TYPES if t is not Tick} == expected
    assert set(SOURCE_SCHEMAS.values()) == set(expected)
    for sample in SAMPLES:
        if isinstance(sample, Event) and not isinstance(sample, Tick):
            assert layout.raw_topic(sample) == expected[type(sample)]
    with pytest.raises(TypeError, match="Tick"):
        layout.raw_topic(Tick)


def test_settings_change_prefix_counts_retention_and_single_names() -> None:
    settings = load_settings(
        None,
        environ={
            "GPUTRIAGE_TOPICS__PREFIX": "prod",
            "GPUTRIAGE_TOPICS__PARTITIONS": "12",
            "GPUTRIAGE_TOPICS__REPLICATION_FACTOR": "3",
            "GPUTRIAGE_TOPICS__INCIDENT_RETENTION_MS": "-1",
            "GPUTRIAGE_TOPICS__NAMES__XIDS": "nvidia.xid",
            "GPUTRIAGE_TOPICS__NAMES__K8S_EVENTS": "k8s.events",
        },
    ).topic_settings()
    layout = topic_layout(settings)
    assert layout.raw["xids"].name == "nvidia.xid"
    assert layout.raw["k8s-events"].name == "k8s.events"
    assert layout.raw["pods"].name == "prod.raw.pods"
    assert {(s.partitions, s.replication_factor) for s in layout.all()} == {(12, 3)}
    assert layout.incidents.configs == {"cleanup.policy": "compact"}
    assert topic_layout(TopicSettings(prefix="")).incidents.name == "incidents"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"partitionz": 3}, r"topics\.partitionz: unknown key"),
        ({"partitions": 0}, r"topics\.partitions: must be at least 1"),
        ({"partitions": "six"}, r"topics\.partitions"),
        ({"replication_factor": 0}, r"topics\.replication_factor"),
        ({"incident_retention_ms": 0}, r"topics\.incident_retention_ms"),
        ({"names": {"logs": "x"}}, r"topics\.names\.logs: unknown topic"),
        ({"prefix": "bad prefix"}, r"'bad prefix\.raw\.pods'"),
    ],
)
def test_bad_topic_settings_name_the_key(table: dict[str, Any], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        load_tables({"topics": table}).topic_settings()


def test_bad_topic_settings_are_settings_errors() -> None:
    # Refused when the settings are loaded (one conversion of the whole tree), not later.
    with pytest.raises(SettingsError, match=r"invalid configuration: topics\.partitions"):
        load_settings(None, environ={"GPUTRIAGE_TOPICS__PARTITIONS": "0"}).topic_settings()


async def _describe(bootstrap: str, names: list[str]) -> tuple[dict[str, int], dict[str, Any]]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        described = await admin.describe_topics(names)
        partitions = {t["topic"]: len(t["partitions"]) for t in described}
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        )
        configs = {
            resource[3]: as_mapping(resource[4])
            for response in responses
            for resource in response.resources
        }
    finally:
        await admin.close()
    return partitions, configs


async def _precreate(bootstrap: str, topics: list[NewTopic]) -> None:
    """Create ``topics`` with a plain admin client, as an operator or a broker would."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(topics)
    finally:
        await admin.close()


@pytest.mark.asyncio
async def test_ensure_topics_creates_exactly_the_missing_ones(kafka: KafkaTestEnv) -> None:
    layout = kafka.layout
    names = [spec.name for spec in layout.all()]
    # Two topics exist already, one of them with a different partition count:
    # both must be left exactly as they are.
    odd = layout.raw["pods"].name
    await _precreate(
        kafka.bootstrap, [NewTopic(odd, 1, 1), NewTopic(layout.dead_letters.name, 3, 1)]
    )
    created = await kafka.acreate_topics()
    assert created == sorted(set(names) - {odd, layout.dead_letters.name})
    assert await kafka.acreate_topics() == [], "a second run creates nothing"

    partitions, configs = await _describe(kafka.bootstrap, names)
    assert partitions[odd] == 1
    assert all(partitions[name] == layout.incidents.partitions for name in names if name != odd)
    incident_configs = configs[layout.incidents.name]
    assert "compact" in incident_configs["cleanup.policy"].split(",")
    assert incident_configs["retention.ms"] == str(kafka.settings.incident_retention_ms)


@pytest.mark.asyncio
async def test_ensure_topics_against_an_unreachable_broker_raises() -> None:
    with pytest.raises(KafkaUnreachable, match=r"^cannot reach Kafka at 127\.0\.0\.1:1: Conn"):
        await ensure_topics(
            {"bootstrap_servers": "127.0.0.1:1", "request_timeout_ms": 1000}, topic_layout()
        )


@pytest.mark.asyncio
async def test_a_topic_with_another_partition_count_is_refused_by_the_processor(
    kafka: KafkaTestEnv,
) -> None:
    layout = kafka.layout
    odd = layout.raw["xids"].name
    await _precreate(kafka.bootstrap, [NewTopic(odd, 1, 1)])  # as a broker auto-creates it
    await kafka.acreate_topics()
    raw = tuple(layout.raw.values())
    with pytest.raises(TopicError, match=f"{odd} has 1"):
        await check_copartitioned(kafka.kwargs, raw)
    others = tuple(spec for spec in raw if spec.name != odd)
    await check_copartitioned(kafka.kwargs, others)  # the rest agree: no error
    # The CLI runs as a blocking subprocess: off the event loop.
    result = await asyncio.to_thread(gputriage, "process", "--metrics-port", "0", env=kafka.env)
    assert result.returncode == 1
    assert "co-partitioning" in result.stderr.decode().splitlines()[-1]


@pytest.mark.asyncio
async def test_the_state_topic_takes_a_big_cluster_keys_state(kafka: KafkaTestEnv) -> None:
    """The cluster key's state grows with the nodes (~1.06 MB at 2,000): the state topic is
    created compacted with a ``max.message.bytes`` the processors' producers also allow,
    and a record of several MB is accepted on it."""
    from aiokafka import AIOKafkaProducer  # noqa: PLC0415

    from streams.app.worker import MAX_REQUEST_BYTES  # noqa: PLC0415

    layout = topic_layout(kafka.settings)
    spec = state_topic(layout, "app")
    assert spec.configs == {
        "cleanup.policy": "compact",
        "max.message.bytes": str(STATE_RECORD_MAX_BYTES),
    }
    assert MAX_REQUEST_BYTES == STATE_RECORD_MAX_BYTES
    await ensure_topics(kafka.kwargs, layout, extra=(spec,))
    producer = AIOKafkaProducer(**kafka.kwargs, max_request_size=MAX_REQUEST_BYTES)
    await producer.start()
    try:
        sent = await producer.send_and_wait(spec.name, b"s" * (3 << 20), key=b"cluster-a")
    finally:
        await producer.stop()
    assert sent.offset == 0
