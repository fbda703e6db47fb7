"""Shared fixtures: one real Kafka-protocol broker per test session, unique topics per test.

The broker is the embedded Tansu (:class:`gputriage.demo.broker.EmbeddedBroker`),
started lazily by the first test that asks for it (~50 ms) and stopped at the
end of the session. Tests share it, so each one gets its own topic prefix from
:func:`kafka`: no test sees another's records, and none has to clean up.
"""

from __future__ import annotations

import asyncio
import uuid
import warnings
from collections.abc import Iterator

import pytest

from gputriage.demo.broker import EmbeddedBroker
from tests.kafka_helpers import KafkaTestEnv


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> object:
    """Keep looptime's plugin from leaking an event loop in every sync test.

    looptime 0.9 asks ``policy.get_event_loop()`` before each test, sync ones too, to
    find the test's loop; on Python 3.11, in the main thread with no loop set, that
    *creates* one, sets it current and never closes it. The next ``asyncio.run``
    unsets it and the garbage collector reports "unclosed event loop" (and its two
    self-pipe sockets) during whatever test runs then. Marking "no loop" explicitly
    makes that call raise RuntimeError instead, which looptime takes as "not mine".
    """
    if pyfuncitem.get_closest_marker("asyncio") is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the policy API, 3.12+
            policy = asyncio.get_event_loop_policy()
        if getattr(getattr(policy, "_local", None), "_loop", None) is None:
            policy.set_event_loop(None)
    return (yield)


@pytest.fixture(scope="session")
def broker() -> Iterator[EmbeddedBroker]:
    """One embedded broker for the whole session (memory storage, loopback port)."""
    with EmbeddedBroker() as running:
        yield running


@pytest.fixture
def kafka(broker: EmbeddedBroker) -> KafkaTestEnv:
    """The session broker with a topic prefix of this test's own (topics not created yet)."""
    return KafkaTestEnv(broker=broker, prefix=f"t{uuid.uuid4().hex[:10]}")
