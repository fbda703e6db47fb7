"""The runner's waits pass on the event loop's clock, so looptime fast-forwards them.

No broker here: the retry loop of one delivery (:meth:`BridgeRunner._call`) against the
tests' receiver on a loopback socket. Only the wait between the two requests is long;
the requests themselves are answered at once (the receiver runs in this loop), so the
fake clock does not jump while one is on its way.
"""

from __future__ import annotations

import time

import aiohttp
import pytest

from connectors.bridges.base import Accepted
from connectors.bridges.scrub import Scrubber
from streams.bridges.metrics import BridgeMetrics
from streams.bridges.runner import BridgeRunner
from tests.bridge_helpers import FAST, KIND, Settings, build, incident, receiving, route


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_a_retry_after_of_30_s_is_waited_on_the_loops_clock_not_the_wall() -> None:
    async with receiving() as receiver, aiohttp.ClientSession() as http:
        receiver.answer((429, {"Retry-After": "30"}, "slow down"))
        target = route("r", receiver)
        metrics = BridgeMetrics()
        runner = BridgeRunner(
            kind=KIND,
            endpoint=build(Settings(), http, {"TEST_BRIDGE_TOKEN": receiver.token}),
            routes=[target],
            settings=FAST,
            client_kwargs={"bootstrap_servers": "127.0.0.1:9"},  # never connected
            incident_topic="incidents",
            dead_letter_topic="dead-letters",
            ledger_topic="ledger",
            group_id="g",
            metrics=metrics,
            scrub=Scrubber(),
        )
        wall = time.monotonic()
        try:
            outcome = await runner._call(target, incident("inc-a", 1), None)
        finally:
            await runner.consumer.stop()  # built with the runner, never started
        wall = time.monotonic() - wall
    assert isinstance(outcome, Accepted)
    first, second = receiver.got
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at == pytest.approx(30.0, abs=0.5), "Retry-After: 30 on the loop"
    assert wall < 10, f"the 30 s passed on the wall clock ({wall:.1f} s)"
    retries = metrics.registry.get_sample_value(
        "gputriage_bridge_retries_total", {"bridge": KIND, "route": "r"}
    )
    assert retries == 1
