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
from tests.receivers import pagerduty

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
            # The kill follows the check with no await between: the held request is
            # still unanswered when the process dies (the receiver runs in this loop).
            await eventually(
                lambda: len(receiver.got) >= 12 and receiver.held > 0,
                timeout=60,
                what="a dozen deliveries and one in flight",
            )
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


async def test_a_pagerduty_bridge_killed_mid_batch_pages_once_per_incident(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """The same kill through the real PagerDuty endpoint and a receiver that keeps alerts
    as PagerDuty does (one per routing key and ``dedup_key``): a revision re-sent after
    the kill (its intent unconfirmed) is a re-trigger of the alert it already opened, so
    the on-call gets exactly one page per incident, none lost. A POST cannot be taken
    back, so "no duplicate" is the vendor's: the dedup key is what makes it hold."""
    await kafka.acreate_topics()
    revisions = [incident(f"pd-{n:02d}", 1) for n in range(INCIDENTS)]
    await publish(kafka, revisions)
    out = tmp_path / "bridge"
    key = "k" * 32
    async with pagerduty.serving() as receiver:
        receiver.delay = 0.05
        env = {
            **bridge_env(kafka, receiver, max_in_flight=4),
            "GPUTRIAGE_BRIDGE__PAGERDUTY__URL": f'"{receiver.url}"',
            "GPUTRIAGE_BRIDGE__PAGERDUTY__CALLS_PER_MINUTE": "1000",
            "GPUTRIAGE_BRIDGE__PAGERDUTY__ROUTES": (
                '[{name = "oncall", target = {routing_key_env = "PD_KEY"}}]'
            ),
            "PD_KEY": key,
        }
        del env["GPUTRIAGE_BRIDGE__JSONPOST__ROUTES"]
        first = await start_bridge(env, out, kind="pagerduty")
        try:
            await eventually(
                lambda: len(receiver.alerts) >= 12 and receiver.held > 0,
                timeout=60,
                what="a dozen pages and one in flight",
            )
        finally:
            first.kill()
            await first.wait()
        at_kill = len(receiver.alerts)
        ledger = await read_ledger(kafka, "gputriage-bridge-pagerduty")
        intents = {e.incident_id for e in ledger.entries() if e.state == "sending"}
        assert at_kill < INCIDENTS, "the kill came too late to be mid-batch"
        assert intents, "nothing was in flight at the kill (the test proves nothing)"

        second = await start_bridge(env, out, kind="pagerduty")
        try:
            await eventually(
                lambda: len(receiver.alerts) == INCIDENTS, timeout=60, what="every incident paged"
            )
        finally:
            second.terminate()
            assert await asyncio.wait_for(second.wait(), 30) == 0

    assert receiver.violations == []
    assert set(receiver.alerts) == {(key, i.id) for i in revisions}, "one alert per incident"
    assert all(a.status == "triggered" for a in receiver.alerts.values())
    sent = Counter(e["dedup_key"] for e in receiver.accepted())
    again = {dedup for dedup, n in sent.items() if n > 1}
    assert again <= intents, "a revision the ledger had confirmed was sent again"
    assert max(sent.values()) <= 2
    stderr = out.with_suffix(".stderr").read_text()
    assert key not in stderr
    assert key not in out.with_suffix(".stdout").read_text()
