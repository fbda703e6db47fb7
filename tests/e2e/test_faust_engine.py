"""``gputriage process --engine faust``: the default engine's end-to-end tests, under faust.

The same pipeline in a faust agent, its key state in a faust table whose changelog is
the state topic (:mod:`streams.app.faust_engine`), against the real broker: the
incidents of a replay from a known stream with garbage in it (dead-lettered, the
process alive), a SIGKILL and a restart (nothing lost, no id invented), and two
workers sharing the partitions. Expectations come from the pure core
(:func:`tests.processor_helpers.reference`), as for the default engine.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from schemas.codec import decode_event
from tests.demo.test_scenario import ALL_TYPES
from tests.faust_helpers import FaustWorker
from tests.kafka_helpers import KafkaTestEnv, produce, wait_until
from tests.paths import ROOT
from tests.processor_helpers import (
    SLOW_STEPS,
    TopicReader,
    await_settled,
    committed,
    ending_days_ago,
    final,
    generated,
    produce_events,
    reference,
    restored_keys,
)

SCENARIO = ROOT / "examples" / "scenario.jsonl"


def _owned(log: str) -> set[int]:
    """The partitions a worker's log says it owned last ("partitions [0, 2]: ...")."""
    lines = [line for line in log.splitlines() if " partitions [" in line]
    if not lines:
        return set()
    listed = lines[-1].split("partitions [", 1)[1].split("]", 1)[0]
    return {int(p) for p in listed.split(",") if p.strip()}


def test_the_scenario_with_garbage_in_it_gives_the_replays_incidents_and_a_dead_letter(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    events = ending_days_ago([decode_event(line) for line in SCENARIO.read_bytes().splitlines()])
    expected = reference(events)
    assert {i.type for i in expected.values()} == ALL_TYPES  # cluster key included
    kafka.create_topics()
    half = len(events) // 2
    sent = produce_events(kafka, events[:half])
    pods = kafka.layout.raw["pods"].name
    asyncio.run(produce(kafka.bootstrap, pods, [(b"c/n", b"\x00garbage{")]))
    sent += 1 + produce_events(kafka, events[half:])
    incidents = TopicReader(kafka, kafka.layout.incidents.name, fetch_max_wait_ms=50)
    dead = TopicReader(kafka, kafka.layout.dead_letters.name, fetch_max_wait_ms=50)
    app = f"{kafka.prefix}-app"
    worker = FaustWorker(kafka, app, tmp_path / "worker.log")
    try:
        await_settled(incidents, expected, 90)
        assert set(final(incidents.incidents())) == set(expected), "no invented id"
        wait_until(dead.poll, timeout=30, what="a dead letter")
        [letter] = dead.dead_letters()
        assert (letter.topic, letter.value) == (pods, b"\x00garbage{")
        assert letter.reason
        wait_until(lambda: committed(kafka, app) == sent, timeout=30, what="all committed")
        assert worker.process.poll() is None, worker.log()
    finally:
        incidents.close()
        dead.close()
        assert worker.stop() == 0, worker.log()


def test_a_killed_faust_worker_restarted_loses_nothing_and_invents_nothing(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """The first worker commits every few records (slow steps) and is SIGKILLed once
    part of the backlog is committed: its successor restores that part's state from
    the faust table's changelog and re-reads the rest, some of which the first had
    already applied and published."""
    events = generated(10_000, 100)
    expected = reference(events)
    kafka.create_topics()
    total = produce_events(kafka, events)
    incidents = TopicReader(kafka, kafka.layout.incidents.name, fetch_max_wait_ms=50)
    app = f"{kafka.prefix}-app"
    first = FaustWorker(kafka, app, tmp_path / "first.log", SLOW_STEPS)
    try:
        wait_until(lambda: committed(kafka, app), timeout=60, what="a first commit")
    finally:
        first.kill()
    done = committed(kafka, app)
    assert 0 < done < total, f"killed mid-stream: {done} of {total} committed"
    second = FaustWorker(kafka, app, tmp_path / "second.log")
    try:
        await_settled(incidents, expected, 90)
        assert set(final(incidents.incidents())) == set(expected), "no lost, no invented id"
        assert restored_keys(second.log()) > 0, second.log()
        wait_until(lambda: committed(kafka, app) == total, timeout=30, what="all committed")
    finally:
        incidents.close()
        assert second.stop() == 0, second.log()


def test_a_second_faust_worker_joining_mid_stream_shares_the_partitions_and_agrees(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """The second worker's join revokes everything from the first (eager rebalance): the
    first drops its buffered events and rebuilds its pipeline from the table for the
    partitions it keeps, the second restores the rest from the changelog; together they
    give a replay's incidents."""
    events = generated(10_000, 100)
    expected = reference(events)
    kafka.create_topics()
    total = produce_events(kafka, events)
    incidents = TopicReader(kafka, kafka.layout.incidents.name, fetch_max_wait_ms=50)
    app = f"{kafka.prefix}-app"
    workers = [FaustWorker(kafka, app, tmp_path / "first.log", SLOW_STEPS)]
    try:
        wait_until(lambda: committed(kafka, app), timeout=60, what="a first commit")
        assert committed(kafka, app) < total, "still mid-stream"
        workers.append(FaustWorker(kafka, app, tmp_path / "second.log"))
        wait_until(lambda: _owned(workers[1].log()), timeout=60, what="the second's assignment")
        await_settled(incidents, expected, 90)
        assert set(final(incidents.incidents())) == set(expected)
        wait_until(lambda: committed(kafka, app) == total, timeout=60, what="all committed")
        wait_until(
            lambda: _owned(workers[0].log()).isdisjoint(_owned(workers[1].log())),
            timeout=30,
            what="the first's new assignment",
        )
        logs = [w.log() for w in workers]
    finally:
        incidents.close()
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], logs
    owned = [_owned(log) for log in logs]
    assert all(owned), f"each worker owned partitions at the end: {owned}"
    assert owned[0].isdisjoint(owned[1]), owned
    assert owned[0] | owned[1] == set(range(3)), owned
    assert restored_keys(logs[1]) > 0, logs[1]
    assert restored_keys(logs[0]) > 0, "the first rebuilt its pipeline from the table"
