"""The bridge runner end to end: the real broker, the real runner, a local HTTP receiver.

Each test publishes incident revisions on its own incident topic, runs the runner with
the tests' JSON-POST endpoint (:mod:`tests.bridge_helpers`) and reads what the receiver
got, the ledger and the dead-letter topic back.
"""

from __future__ import annotations

import asyncio
from functools import partial

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from connectors.bridges.base import Delivered, Outcome, Route
from schemas.codec import decode_dead_letter, decode_incident, encode
from tests.bridge_helpers import (
    FAST,
    Receiver,
    bridging,
    incident,
    publish,
    read_ledger,
    receiving,
    route,
)
from tests.kafka_helpers import KafkaTestEnv, consume_all, eventually, produce

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(90)]


async def test_open_update_resolve_arrive_in_order_once_each(kafka: KafkaTestEnv) -> None:
    async with receiving() as receiver, bridging(kafka, [route("r", receiver)]) as bridge:
        # One at a time: revisions queued together coalesce (tested below).
        for n, revision in enumerate(
            [incident("inc-a", 1), incident("inc-a", 2), incident("inc-a", 3, "resolved")]
        ):
            await publish(kafka, [revision])
            await eventually(partial(_more_than, receiver, n), timeout=20, what=f"delivery {n}")
        # The same revisions again (a processor that re-published them): never sent twice.
        await publish(kafka, [incident("inc-a", 2), incident("inc-a", 3, "resolved")])
        await eventually(lambda: bridge.count("duplicate_skipped") >= 2, timeout=20, what="dups")
    assert receiver.accepted_keys() == [("inc-a", 1), ("inc-a", 2), ("inc-a", 3)]
    assert [r.body["status"] for r in receiver.got] == ["open", "updated", "resolved"]
    assert [r.body["previous"] for r in receiver.got] == [0, 1, 2]
    assert receiver.violations == []
    assert bridge.count("accepted") == 3
    ledger = await read_ledger(kafka)
    entry = ledger.get("r", "inc-a")
    assert entry is not None
    assert (entry.revision, entry.status, entry.state, entry.outcome) == (
        3,
        "resolved",
        "delivered",
        "accepted",
    )
    assert entry.memo == {"seen": "3"}
    assert bridge.sample("gputriage_bridge_delivery_latency_seconds_count") == 3


async def test_429_with_retry_after_is_honoured(kafka: KafkaTestEnv) -> None:
    async with receiving() as receiver, bridging(kafka, [route("r", receiver)]) as bridge:
        receiver.answer((429, {"Retry-After": "2"}, "slow down"))
        await publish(kafka, [incident("inc-a", 1)])
        endpoint = bridge.metrics.endpoint("r")
        # /readyz while the vendor pushes back: the endpoint fails, the bridge stays live.
        await eventually(lambda: not endpoint.state.ok, timeout=20, what="an unready endpoint")
        assert endpoint.state.detail.startswith("HTTP 429")
        assert bridge.metrics.health.live().ok
        await eventually(receiver.accepted, timeout=20, what="the retried delivery")
        await eventually(lambda: endpoint.state.ok, what="the endpoint ready again")
        await eventually(lambda: bridge.metrics.kafka.state.ok, what="partitions assigned")
    first, second = receiver.got
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 2.0, "Retry-After: 2 was not waited for"
    assert bridge.sample("gputriage_bridge_retries_total", route="r") == 1


async def test_a_5xx_storm_is_retried_with_backoff_and_nothing_is_lost(kafka: KafkaTestEnv) -> None:
    async with receiving() as receiver, bridging(kafka, [route("r", receiver)]) as bridge:
        receiver.answer(*[(503, {}, "unavailable")] * 6)
        revisions = [incident(f"inc-{n}", 1) for n in range(4)]
        await publish(kafka, revisions)
        await eventually(lambda: len(receiver.accepted()) >= 4, timeout=30, what="all four")
    assert sorted(receiver.accepted_keys()) == [(f"inc-{n}", 1) for n in range(4)]
    assert sum(r.status == 503 for r in receiver.got) == 6
    assert bridge.sample("gputriage_bridge_retries_total", route="r") == 6
    assert bridge.count("accepted") == 4
    # Backoff: consecutive failures of one lane are spaced (full jitter below a doubling
    # cap means some gap, never a tight loop of 6 requests in a millisecond).
    span = receiver.got[-1].at - receiver.got[0].at
    assert span > 0.01


async def test_a_400_goes_to_the_dead_letter_topic_and_the_bridge_continues(
    kafka: KafkaTestEnv,
) -> None:
    async with receiving() as receiver, bridging(kafka, [route("r", receiver)]) as bridge:
        receiver.answer((400, {}, '{"errors": ["summary is missing"]}'))
        await publish(kafka, [incident("inc-bad", 1)])
        await eventually(lambda: receiver.got, timeout=20, what="the bad one")
        await publish(kafka, [incident("inc-good", 1)])
        await eventually(lambda: len(receiver.got) >= 2, timeout=20, what="the good one")
        letters = await consume_all(
            kafka.bootstrap, [kafka.layout.dead_letters.name], 1, timeout=20
        )
        await eventually(lambda: bridge.count("rejected") == 1, timeout=10, what="counted")
    assert [r.body["id"] for r in receiver.got] == ["inc-bad", "inc-good"], "no retry of a 400"
    [letter] = [decode_dead_letter(r.value) for r in letters]
    assert "rejected: HTTP 400" in letter.reason
    assert "summary is missing" in letter.reason
    assert letter.topic == kafka.layout.incidents.name
    assert letter.key == b"inc-bad"
    assert letter.value is not None
    assert decode_incident(letter.value).id == "inc-bad"
    assert bridge.sample("gputriage_bridge_dead_letters_total") == 1
    ledger = await read_ledger(kafka)
    bad = ledger.get("r", "inc-bad")
    assert bad is not None
    assert (bad.revision, bad.outcome) == (1, "rejected")


async def test_an_undecodable_record_is_dead_lettered_and_skipped(kafka: KafkaTestEnv) -> None:
    async with receiving() as receiver, bridging(kafka, [route("r", receiver)]):
        await kafka.acreate_topics()
        await produce(
            kafka.bootstrap, kafka.layout.incidents.name, [(b"inc-x", b'{"schema": "nope"}')]
        )
        await publish(kafka, [incident("inc-x", 1)])
        letters = await consume_all(
            kafka.bootstrap, [kafka.layout.dead_letters.name], 1, timeout=20
        )
        await eventually(receiver.accepted, timeout=20, what="the good one")
    [letter] = [decode_dead_letter(r.value) for r in letters]
    assert letter.reason.startswith("undecodable incident")
    assert letter.value == b'{"schema": "nope"}'


async def test_routes_filter_by_severity_type_namespace_cluster_and_status(
    kafka: KafkaTestEnv,
) -> None:
    async with receiving() as pages, receiving() as ml, receiving() as resolved:
        routes = [
            route("pages", pages, severities={"page"}, clusters={"c1"}),
            route("ml", ml, namespaces={"ml"}, types={"host_oom_kill"}),
            route("resolved", resolved, statuses={"resolved"}),
        ]
        async with bridging(kafka, routes) as bridge:
            await publish(
                kafka,
                [
                    incident("a", 1),  # page, c1, ns: pages only
                    incident("b", 1, severity="ticket", type="host_oom_kill", pods=[("ml", "x")]),
                    incident("c", 1, cluster="c2"),  # page on c2: nobody
                    incident(
                        "b",
                        2,
                        "resolved",
                        severity="ticket",
                        type="host_oom_kill",
                        pods=[("ml", "x")],
                    ),
                ],
            )
            await eventually(
                lambda: len(pages.got) >= 1 and len(ml.got) >= 2 and len(resolved.got) >= 1,
                timeout=20,
                what="every route's deliveries",
            )
            await eventually(lambda: bridge.runner._queued == 0, timeout=10, what="idle")
    assert pages.accepted_keys() == [("a", 1)]
    assert ml.accepted_keys() == [("b", 1), ("b", 2)]
    assert resolved.accepted_keys() == [("b", 2)], "the resolved route starts at the resolve"
    assert resolved.got[0].body["previous"] == 0


async def test_a_backlog_coalesces_but_keeps_the_first_open_and_every_resolve(
    kafka: KafkaTestEnv,
) -> None:
    backlog = [incident("a", 1), *(incident("a", n) for n in range(2, 11))]
    backlog += [
        incident("b", 1),
        *(incident("b", n) for n in range(2, 6)),
        incident("b", 6, "resolved"),
    ]
    await kafka.acreate_topics()
    await publish(kafka, backlog)
    settings = msgspec.structs.replace(FAST, min_update_seconds=1.0)
    async with receiving() as receiver, bridging(kafka, [route("r", receiver)], settings) as bridge:
        await eventually(lambda: len(receiver.got) >= 4, timeout=20, what="four deliveries")
        await eventually(lambda: bridge.runner._queued == 0, timeout=10, what="idle")
    by_id: dict[str, list[int]] = {}
    for key in receiver.accepted_keys():
        by_id.setdefault(key[0], []).append(key[1])
    assert by_id == {"a": [1, 10], "b": [1, 6]}
    assert bridge.count("coalesced") == 8 + 4


async def test_updates_wait_for_the_min_interval_and_the_newest_goes(kafka: KafkaTestEnv) -> None:
    settings = msgspec.structs.replace(FAST, min_update_seconds=1.5)
    async with receiving() as receiver, bridging(kafka, [route("r", receiver)], settings):
        await publish(kafka, [incident("a", 1)])
        await eventually(lambda: receiver.got, timeout=20, what="the open")
        for n in range(2, 6):
            await publish(kafka, [incident("a", n)])
        await eventually(lambda: len(receiver.got) >= 2, timeout=20, what="the update")
        await publish(kafka, [incident("a", 6, "resolved")])
        await eventually(lambda: len(receiver.got) >= 3, timeout=20, what="the resolve")
    assert receiver.accepted_keys() == [("a", 1), ("a", 5), ("a", 6)]
    first, update, _ = receiver.got
    assert update.at - first.at >= 1.4


def _more_than(receiver: Receiver, n: int) -> bool:
    return len(receiver.got) > n


class Raising:
    """An endpoint with a bug: the first call raises; the runner logs it and retries."""

    kind = "jsonpost"

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.calls = 0

    def check_route(self, route: Route) -> str | None:
        return None

    async def deliver(self, incident: object, previous: Delivered | None, route: Route) -> Outcome:
        self.calls += 1
        if self.calls == 1:
            raise KeyError("a bug")
        outcome: Outcome = await self.inner.deliver(incident, previous, route)  # type: ignore[attr-defined]
        return outcome

    async def close(self) -> None:
        return None


async def test_an_exception_from_the_endpoint_is_logged_and_retried(
    kafka: KafkaTestEnv, caplog: pytest.LogCaptureFixture
) -> None:
    async with receiving() as receiver, bridging(kafka, [route("r", receiver)]) as bridge:
        bridge.runner.endpoint = Raising(bridge.runner.endpoint)
        await publish(kafka, [incident("a", 1)])
        await eventually(receiver.accepted, timeout=20, what="the delivery")
    assert receiver.accepted_keys() == [("a", 1)]
    assert bridge.sample("gputriage_bridge_endpoint_errors_total") == 1
    assert "the endpoint raised" in caplog.text


async def test_an_incident_retrying_holds_back_only_its_own_commit(kafka: KafkaTestEnv) -> None:
    """One incident's vendor answers 503 on and on: the others (on the same partition too)
    are delivered meanwhile, and the partition is not committed past the stuck record
    until it is delivered."""
    async with receiving() as receiver, bridging(kafka, [route("r", receiver)]) as bridge:
        receiver.failing.add("stuck")
        sent = await produce(
            kafka.bootstrap,
            kafka.layout.incidents.name,
            [(b"stuck", encode(incident("stuck", 1)))],
        )
        stuck = sent[0]
        others = [incident(f"other-{n}", 1) for n in range(6)]
        await publish(kafka, others)
        await eventually(lambda: len(receiver.accepted()) == 6, timeout=20, what="the others")
        await eventually(
            lambda: bridge.sample("gputriage_bridge_retries_total", route="r") >= 3,
            timeout=20,
            what="retries of the stuck one",
        )
        await bridge.runner._commit()
        committed = await _committed(kafka, stuck.partition)
        assert committed is None or committed <= stuck.offset, "committed past an undelivered one"
        receiver.failing.clear()
        await eventually(lambda: ("stuck", 1) in receiver.accepted_keys(), timeout=20, what="it")
        tracker = bridge.runner._partitions[TopicPartition(stuck.topic, stuck.partition)]
        await eventually(
            lambda: (tracker.committable() or 0) > stuck.offset, timeout=10, what="done"
        )
        await bridge.runner._commit()
        assert (await _committed(kafka, stuck.partition) or 0) > stuck.offset


async def _committed(kafka: KafkaTestEnv, partition: int) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id="bridge-test")
    await consumer.start()
    try:
        value = await consumer.committed(TopicPartition(kafka.layout.incidents.name, partition))
        return int(value) if value is not None else None
    finally:
        await consumer.stop()


async def test_two_bridges_in_one_group_share_the_work_and_hand_it_over(
    kafka: KafkaTestEnv,
) -> None:
    """A second process joins (a rebalance), then the first leaves (another): every
    revision is delivered, and the only duplicates are re-sends of intents cut by a
    revocation, each counted."""
    async with receiving() as receiver:
        r = route("r", receiver)
        async with bridging(kafka, [r]) as first:
            await publish(kafka, [incident(f"a-{n}", 1) for n in range(6)])
            await eventually(lambda: len(receiver.accepted()) >= 6, timeout=30, what="six")
            async with bridging(kafka, [r]) as second:
                await eventually(
                    lambda: second.runner._partitions and first.runner._partitions,
                    timeout=30,
                    what="both assigned",
                )
                assert not set(first.runner._partitions) & set(second.runner._partitions)
                await publish(kafka, [incident(f"b-{n}", 1) for n in range(6)])
                await publish(kafka, [incident(f"a-{n}", 2) for n in range(6)])
                await eventually(lambda: len(receiver.accepted()) >= 18, timeout=30, what="18")
                first.stop.set()
                await asyncio.wait_for(first.task, 30)
                await eventually(
                    lambda: len(second.runner._partitions) == kafka.layout.incidents.partitions,
                    timeout=30,
                    what="the second takes every partition",
                )
                await publish(kafka, [incident(f"a-{n}", 3, "resolved") for n in range(6)])
                await eventually(lambda: len(receiver.accepted()) >= 24, timeout=30, what="24")
                resends = first.runner.resends + second.runner.resends
    keys = receiver.accepted_keys()
    expected = {(f"a-{n}", rev) for n in range(6) for rev in (1, 2, 3)} | {
        (f"b-{n}", 1) for n in range(6)
    }
    assert set(keys) == expected
    assert len(keys) - len(expected) == resends


async def test_a_backlog_past_max_queued_pauses_fetching_and_still_delivers_all(
    kafka: KafkaTestEnv,
) -> None:
    settings = msgspec.structs.replace(FAST, max_queued=5, max_in_flight=2)
    paused: list[bool] = []
    async with receiving() as receiver, bridging(kafka, [route("r", receiver)], settings) as bridge:
        receiver.delay = 0.05
        await publish(kafka, [incident(f"inc-{n:02d}", 1) for n in range(30)])

        def all_in() -> bool:
            paused.append(bridge.runner._paused)
            return len(receiver.accepted()) >= 30

        await eventually(all_in, timeout=60, what="all thirty")
        await eventually(lambda: not bridge.runner._paused, timeout=10, what="resumed")
    assert any(paused), "fetching never paused"
    assert sorted(receiver.accepted_keys()) == [(f"inc-{n:02d}", 1) for n in range(30)]
