"""Shared fixtures: one real Kafka-protocol broker per test session, unique topics per test.

The broker is the embedded Tansu (:class:`gputriage.demo.broker.EmbeddedBroker`),
started lazily by the first test that asks for it (~50 ms) and stopped at the
end of the session. Tests share it, so each one gets its own topic prefix from
:func:`kafka`: no test sees another's records, and none has to clean up.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from gputriage.demo.broker import EmbeddedBroker
from tests.kafka_helpers import KafkaTestEnv


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """One embedded broker for the whole session (memory storage, loopback port)."""
    with EmbeddedBroker() as running:
        yield running


@pytest.fixture
def kafka(broker: EmbeddedBroker) -> KafkaTestEnv:
    """The session broker with a topic prefix of this test's own (topics not created yet)."""
    return KafkaTestEnv(broker=broker, prefix=f"t{uuid.uuid4().hex[:10]}")
