"""Creating the topics of a layout, and checking that they are co-partitioned.

The layout itself is data (:mod:`schemas.topics`); this is the part that talks
to a broker. Traps:

* Many brokers (Tansu included) auto-create a topic with default settings the
  first time a client names it. Run :func:`ensure_topics` before anything
  produces, or the raw topics end up with one partition and no compaction, and
  :func:`ensure_topics` will (by design) leave them alone.
* :func:`check_copartitioned` is the processor's guard against exactly that.
* Both are the first contact of a command with Kafka (the processor, every
  connector, the bridges, the demo): their client starts within the connect
  timeout (:func:`connectors.kafka.config.start_client`), so a broker that takes
  the connection and never answers is one line after ``connect_timeout_seconds``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from connectors.kafka.config import start_client
from schemas.topics import TopicLayout, TopicSpec


class TopicError(RuntimeError):
    """The broker refused to create a topic, or the topics are not co-partitioned."""


async def ensure_topics(
    admin_kwargs: Mapping[str, Any],
    layout: TopicLayout,
    *,
    extra: tuple[TopicSpec, ...] = (),
    timeout_ms: int = 30_000,
) -> list[str]:
    """Create the topics of ``layout`` (and ``extra``) that do not exist; return the
    names created.

    Idempotent: an existing topic is left exactly as it is, even when its
    partition count or configs differ from the layout (changing a live topic is
    an operator's decision). Two workers racing to create the same topic is
    fine: "already exists" counts as success for the loser.
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # noqa: PLC0415
    from aiokafka.errors import TopicAlreadyExistsError, for_code  # noqa: PLC0415

    admin = AIOKafkaAdminClient(**admin_kwargs)
    await start_client(admin, admin_kwargs)  # KafkaUnreachable, within the connect timeout
    try:
        existing = set(await admin.list_topics())
        missing = [spec for spec in (*layout.all(), *extra) if spec.name not in existing]
        if not missing:
            return []
        response = await admin.create_topics(
            [
                NewTopic(
                    spec.name,
                    spec.partitions,
                    spec.replication_factor,
                    topic_configs=dict(spec.configs),
                )
                for spec in missing
            ],
            timeout_ms=timeout_ms,
        )
    finally:
        await admin.close()
    created = []
    for error in response.topic_errors:
        # (topic, error_code) in v0, (topic, error_code, error_message) from v1.
        topic, code = error[0], error[1]
        if code == 0:
            created.append(topic)
        elif code != TopicAlreadyExistsError.errno:
            message = error[2] if len(error) > 2 and error[2] else for_code(code).__name__
            raise TopicError(f"cannot create topic {topic}: {message}")
    return sorted(created)


async def check_copartitioned(
    client_kwargs: Mapping[str, Any], specs: tuple[TopicSpec, ...]
) -> None:
    """Raise :class:`TopicError` unless the topics ``specs`` name exist with one partition count.

    :func:`ensure_topics` leaves existing topics alone, so a raw topic a broker
    auto-created with one partition (a producer that ran before the processor)
    stays that way, and the keys of one node would hash to different partition
    numbers on different topics: signals that must meet would go to different
    workers. The processor checks this before it joins its group.
    """
    from aiokafka import AIOKafkaConsumer  # noqa: PLC0415

    consumer = AIOKafkaConsumer(**client_kwargs, group_id=None)
    await start_client(consumer, client_kwargs)
    try:
        await consumer.topics()
        counts = {spec.name: len(consumer.partitions_for_topic(spec.name) or ()) for spec in specs}
    finally:
        await consumer.stop()
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name} has {count}" for name, count in counts.items())
        raise TopicError(
            "topics must have the same partition count so that one key lands on the same "
            f"partition number in each (co-partitioning): {listed}; recreate the odd ones"
        )
