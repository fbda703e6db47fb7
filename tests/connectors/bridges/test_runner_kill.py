"""A bridge SIGKILLed mid-batch and restarted: nothing lost, duplicates only where the
ledger held an unconfirmed intent (``state = "sending"``) at the kill.

The real CLI in a subprocess (``gputriage bridge jsonpost``, the tests' endpoint served
through ``[bridge] modules``), a slow receiver so that the kill lands while deliveries
are in flight, the real broker.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import pytest

from tests.bridge_helpers import bridge_env, incident, publish, read_ledger, receiving, start_bridge
from tests.kafka_helpers import KafkaTestEnv, eventually

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(180)]

INCIDENTS = 40


async def test_a_bridge_killed_mid_batch_loses_nothing_and_resends_only_unconfirmed_intents(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    await kafka.acreate_topics()
    revisions = [incident(f"inc-{n:02d}", 1) for n in range(INCIDENTS)]
    await publish(kafka, revisions)
    out = tmp_path / "bridge"
    async with receiving() as receiver:
        receiver.delay = 0.05
        env = {**bridge_env(kafka, receiver, max_in_flight=4), "TEST_BRIDGE_TOKEN": "test-token"}
        first = await start_bridge(env, out)
        try:
            await eventually(lambda: len(receiver.got) >= 12, timeout=60, what="a dozen deliveries")
        finally:
            first.kill()
            await first.wait()
        at_kill = len(receiver.got)
        ledger = await read_ledger(kafka, "gputriage-bridge-jsonpost")
        intents = {
            (e.incident_id, e.sending_revision) for e in ledger.entries() if e.state == "sending"
        }
        delivered_before = {(e.incident_id, e.revision) for e in ledger.entries() if e.revision}
        assert at_kill < INCIDENTS, "the kill came too late to be mid-batch"
        assert intents, "nothing was in flight at the kill (the test proves nothing)"

        second = await start_bridge(env, out)
        try:
            await eventually(
                lambda: {r.key for r in receiver.got} >= {(i.id, 1) for i in revisions},
                timeout=60,
                what="every incident delivered",
            )
        finally:
            second.terminate()
            assert await asyncio.wait_for(second.wait(), 30) == 0

    counts = Counter(r.key for r in receiver.got)
    duplicates = {key for key, n in counts.items() if n > 1}
    assert set(counts) == {(i.id, 1) for i in revisions}, "an incident was lost"
    assert duplicates <= intents, "a duplicate for a revision the ledger had confirmed"
    assert not duplicates & delivered_before
    assert max(counts.values()) <= 2
    stderr = out.with_suffix(".stderr").read_text()
    resent = stderr.count("again (its delivery was not confirmed")
    assert resent == len(intents), stderr[-2000:]
    assert "Traceback" not in stderr
    final = await read_ledger(kafka, "gputriage-bridge-jsonpost")
    assert all(e.state == "delivered" and e.revision == 1 for e in final.entries())
    assert len(list(final.entries())) == INCIDENTS
