"""The live processor end to end: real broker, real ``gputriage process`` workers.

Each test produces events to the raw topics, runs one or more workers as
subprocesses, and reads the incident topic. The expected incidents come from the
pure core run over the same events (:func:`tests.processor_helpers.reference`),
so these tests say "live equals replay", crash or no crash.
"""

from __future__ import annotations

import asyncio
import signal
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from pathlib import Path

import pytest

from gputriage.demo.player import retime
from schemas.codec import AnyEvent, decode_event
from schemas.events import PodEvent
from schemas.keys import correlation_key
from streams.app.changelog import partition_for
from tests.core_helpers import route_all
from tests.demo.test_scenario import ALL_TYPES
from tests.http_helpers import http_get
from tests.kafka_helpers import PARTITIONS, KafkaTestEnv, produce, wait_until
from tests.paths import ROOT
from tests.processor_helpers import (
    SLOW_STEPS,
    TopicReader,
    Worker,
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


@pytest.fixture
def incidents(kafka: KafkaTestEnv) -> Iterator[TopicReader]:
    kafka.create_topics()
    reader = TopicReader(kafka, kafka.layout.incidents.name)
    yield reader
    reader.close()


def test_raw_events_become_the_expected_incidents(
    kafka: KafkaTestEnv, incidents: TopicReader, tmp_path: Path
) -> None:
    events = ending_days_ago([decode_event(line) for line in SCENARIO.read_bytes().splitlines()])
    expected = reference(events)
    assert {i.type for i in expected.values()} == ALL_TYPES  # cluster key included
    produce_events(kafka, events)
    worker = Worker(kafka, f"{kafka.prefix}-app", tmp_path / "worker.log")
    try:
        await_settled(incidents, expected, 120)
        assert set(final(incidents.incidents())) == set(expected)
        metrics = wait_until(lambda: _scrape(worker), timeout=10, what="metrics")
        for name in (
            "gputriage_events_in_total",
            "gputriage_incidents_out_total",
            "gputriage_open_incidents",
            "gputriage_dead_letters_total",
            "gputriage_consumer_lag",
            "gputriage_watermark_delay_seconds",
            "gputriage_processing_latency_seconds_bucket",
            "gputriage_sources_alive",
            "gputriage_sources_idle",
            "gputriage_malformed_progress_headers_total",
            "gputriage_late_applied_events_total",
        ):
            assert name in metrics, name
        # Each resolved incident's time to resolve, observed once by the worker that sent it.
        resolved = sum(1 for i in expected.values() if i.status == "resolved")
        observed = [
            float(line.split()[-1])
            for line in metrics.splitlines()
            if line.startswith("gputriage_incident_resolution_seconds_count{")
        ]
        assert resolved > 0
        assert sum(observed) == resolved
        assert "gputriage_fleet_gpus{" in metrics
        pods_in = [
            line
            for line in metrics.splitlines()
            if line.startswith('gputriage_events_in_total{source="pods"}')
        ]
        assert pods_in
        # Every pod record counts, the copies routed to the cluster key too.
        pods = [copy for copy in route_all(events) if isinstance(copy, PodEvent)]
        assert float(pods_in[0].split()[-1]) == len(pods)
        # The kubelet's probes, on the same port (connectors.health).
        base = _port(worker)
        status, ready = http_get(f"http://127.0.0.1:{base}/readyz")
        assert status == 200, ready
        assert f"[+]kafka ok: {PARTITIONS * len(kafka.layout.raw_topics)} partitions assigned" in (
            ready.splitlines()
        ), ready
        assert http_get(f"http://127.0.0.1:{base}/healthz")[0] == 200
    finally:
        assert worker.stop() == 0, worker.log()


def _port(worker: Worker) -> int | None:
    """The metrics port the worker's log names (None before it does)."""
    lines = [line for line in worker.log().splitlines() if "metrics on http://" in line]
    return int(lines[-1].rsplit(":", 1)[1].split("/", 1)[0]) if lines else None


def _scrape(worker: Worker, need: str = "gputriage_consumer_lag{") -> str:
    """The worker's /metrics page, once its log names the port and the page has ``need``
    (by default a lag sample: a worker that has read nothing on its partitions, such as
    one that joined when they were all committed, never has one)."""
    port = _port(worker)
    if port is None:
        return ""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text: str = response.read().decode()
    return text if need in text else ""


def test_garbage_goes_to_the_dead_letter_topic_and_processing_continues(
    kafka: KafkaTestEnv, incidents: TopicReader, tmp_path: Path
) -> None:
    events = ending_days_ago([decode_event(line) for line in SCENARIO.read_bytes().splitlines()])
    half = len(events) // 2
    produce_events(kafka, events[:half])
    pods = kafka.layout.raw["pods"].name
    asyncio.run(produce(kafka.bootstrap, pods, [(b"c/n", b"\x00garbage{")]))
    produce_events(kafka, events[half:])
    dead = TopicReader(kafka, kafka.layout.dead_letters.name)
    worker = Worker(kafka, f"{kafka.prefix}-app", tmp_path / "worker.log")
    try:
        expected = reference(events)
        await_settled(incidents, expected, 120)
        wait_until(dead.poll, timeout=20, what="a dead letter")
        [letter] = dead.dead_letters()
        assert (letter.topic, letter.value) == (pods, b"\x00garbage{")
        assert letter.reason
    finally:
        dead.close()
        assert worker.stop() == 0, worker.log()


def test_a_killed_worker_restarted_loses_nothing_and_invents_nothing(
    kafka: KafkaTestEnv, incidents: TopicReader, tmp_path: Path
) -> None:
    events = generated(30_000, 300)
    expected = reference(events)
    total = produce_events(kafka, events)
    app = f"{kafka.prefix}-app"
    # A worker committing after every few records, killed once part of the backlog
    # is committed: its successor must restore that part's state from the state
    # topic and re-read the rest, some of which the first worker had already
    # applied and published.
    first = Worker(kafka, app, tmp_path / "first.log", SLOW_STEPS)
    done = wait_until(lambda: committed(kafka, app), timeout=60, what="a first commit")
    first.kill()
    done = committed(kafka, app)
    assert 0 < done < total, f"killed mid-stream: {done} of {total} committed"
    second = Worker(kafka, app, tmp_path / "second.log")
    try:
        await_settled(incidents, expected, 120)
        got = final(incidents.incidents())
        assert set(got) == set(expected), "no lost incident, no invented id"
        assert restored_keys(second.log()) > 0, second.log()
    finally:
        assert second.stop() == 0, second.log()


@pytest.mark.timeout(330)
def test_a_worker_joining_mid_stream_takes_over_state_and_the_result_is_the_same(
    kafka: KafkaTestEnv, incidents: TopicReader, tmp_path: Path
) -> None:
    """The slow first worker (a commit every 20 records) keeps its share of the backlog
    after the join, and stays slow: on a loaded CI machine its half of 20,000 events
    took past the suite's 120 s, and pytest-timeout cut the wait short of its own
    message (what is missing). 10,000 events still leave the join mid-stream (14 s here
    alone, one commit in hundreds), and the waits' deadlines (60 + 60 + 150 + 30 s) fit
    inside this test's own limit, so a slow run says what it is still missing."""
    events = generated(10_000, 200)
    expected = reference(events)
    total = produce_events(kafka, events)
    app = f"{kafka.prefix}-app"
    first = Worker(kafka, app, tmp_path / "first.log", SLOW_STEPS)
    workers = [first]
    try:
        wait_until(lambda: committed(kafka, app), timeout=60, what="a first commit")
        # The second worker's join revokes everything from the first, which keeps
        # some partitions (and must carry on where it was) and hands over the rest
        # (whose state the second restores from the state topic).
        second = Worker(kafka, app, tmp_path / "second.log")
        workers.append(second)
        wait_until(lambda: _last_owned(second.log()), timeout=60, what="the second's assignment")
        await_settled(incidents, expected, 150)
        assert set(final(incidents.incidents())) == set(expected)
        wait_until(lambda: committed(kafka, app) == total, timeout=30, what="all committed")
        logs = [w.log() for w in workers]
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], logs
    owned = [_last_owned(log) for log in logs]
    assert owned[0], owned
    assert owned[1], owned
    assert owned[0].isdisjoint(owned[1]), owned
    assert restored_keys(logs[1]) > 0, logs[1]
    last = [line for line in logs[0].splitlines() if ": restored " in line][-1]
    assert int(last.split(" kept ", 1)[1].split(",", 1)[0]) == len(owned[0]), last


def test_two_workers_split_the_partitions_and_agree_with_one(
    kafka: KafkaTestEnv, incidents: TopicReader, tmp_path: Path
) -> None:
    events = generated(20_000, 200)
    expected = reference(events)
    produce_events(kafka, events)
    app = f"{kafka.prefix}-app"
    workers = [Worker(kafka, app, tmp_path / f"w{i}.log") for i in range(2)]
    try:
        await_settled(incidents, expected, 120)
        assert set(final(incidents.incidents())) == set(expected)
        wait_until(lambda: all(_last_owned(w.log()) for w in workers), timeout=30, what="both own")
        logs = [w.log() for w in workers]
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0]
    owned = [_last_owned(log) for log in logs]
    assert all(owned), f"each worker owned partitions at the end: {owned}"
    assert owned[0].isdisjoint(owned[1])
    assert owned[0] | owned[1] == set(range(3))


def lagging(events: list[AnyEvent], partition: int, by: timedelta) -> list[AnyEvent]:
    """The same stream, routed (the copies for the cluster key made here, so produce it
    and compute its reference with ``route=False``), with every record keyed to
    ``partition`` ``by`` earlier: a backlog whose other partitions are all ahead of that
    one in event time (each partition stays in order; the stream as a whole no longer
    is). Routed first, so a copy lags with its partition, not with its original's."""
    return [
        retime(e, lambda moment: moment - by)
        if partition_for(correlation_key(e), PARTITIONS) == partition
        else e
        for e in route_all(events)
    ]


def _value(metrics: str, name: str) -> float:
    [line] = [line for line in metrics.splitlines() if line.split(" ", 1)[0] == name]
    return float(line.split()[-1])


def test_buffered_events_stay_under_the_cap_while_one_partition_lags(
    kafka: KafkaTestEnv, incidents: TopicReader, tmp_path: Path
) -> None:
    """Partition 0's events are two hours older than the others', so every
    event read from partitions 1 and 2 waits for partition 0 to catch up. Unbounded, the
    worker would buffer about two thirds of the stream; with the cap it pauses the
    partitions ahead, reads the one holding the watermark, and gets the same incidents.

    The slack over the cap is one batch, ingested before the check, and one more shared
    by all the partitions read while it is full (a partition not read yet holds the
    watermark until its first batch is in; the slowest ones, read in turn, each overshoot
    the next): the worker reads ``batch_max`` split between its raw partitions then.
    Without pausing the peak is about 12,500."""
    events = lagging(generated(20_000, 200), partition=0, by=timedelta(hours=2))
    expected = reference(sorted(events, key=lambda e: e.time), route=False)
    total = produce_events(kafka, events, route=False)
    cap, batch = 2000, 100
    app = f"{kafka.prefix}-app"
    worker = Worker(
        kafka,
        app,
        tmp_path / "worker.log",
        {
            "GPUTRIAGE_PROCESSOR__MAX_BUFFERED_EVENTS": str(cap),
            "GPUTRIAGE_PROCESSOR__BATCH_MAX": str(batch),
        },
    )
    try:
        await_settled(incidents, expected, 120)
        assert set(final(incidents.incidents())) == set(expected)
        wait_until(lambda: committed(kafka, app) == total, timeout=30, what="all committed")
        metrics = wait_until(lambda: _scrape(worker), timeout=10, what="metrics")
    finally:
        assert worker.stop() == 0, worker.log()
    assert _value(metrics, "gputriage_buffered_events_cap") == cap
    peak = _value(metrics, "gputriage_buffered_events_peak")
    assert cap <= peak <= cap + 2 * batch, peak
    assert _value(metrics, "gputriage_partition_pauses_total") > 0
    assert _value(metrics, "gputriage_paused_partitions") == 0, "all resumed once caught up"
    assert _value(metrics, "gputriage_buffered_events") == 0


def test_a_rebalance_while_partitions_are_paused_changes_nothing(
    kafka: KafkaTestEnv, incidents: TopicReader, tmp_path: Path
) -> None:
    """A worker throttled by a small cap (slow steps, so it still is) is joined by a
    second: the new assignment starts with nothing paused, each worker pauses again as
    its buffer fills, and the two together give the incidents of a replay."""
    events = lagging(generated(20_000, 200), partition=0, by=timedelta(hours=2))
    expected = reference(sorted(events, key=lambda e: e.time), route=False)
    total = produce_events(kafka, events, route=False)
    app = f"{kafka.prefix}-app"
    capped = {"GPUTRIAGE_PROCESSOR__MAX_BUFFERED_EVENTS": "1000"}
    first = Worker(kafka, app, tmp_path / "first.log", {**SLOW_STEPS, **capped})
    workers = [first]
    try:
        wait_until(lambda: _pauses(first) > 0, timeout=60, what="the first worker to pause")
        wait_until(lambda: committed(kafka, app), timeout=60, what="a first commit")
        assert committed(kafka, app) < total, "still mid-stream"
        second = Worker(kafka, app, tmp_path / "second.log", capped)
        workers.append(second)
        wait_until(lambda: _last_owned(second.log()), timeout=60, what="the second's assignment")
        await_settled(incidents, expected, 150)
        assert set(final(incidents.incidents())) == set(expected)
        wait_until(lambda: committed(kafka, app) == total, timeout=60, what="all committed")
        buffered = partial(_scrape, need="gputriage_buffered_events ")
        pages = [wait_until(partial(buffered, w), timeout=10, what="metrics") for w in workers]
        logs = [w.log() for w in workers]
    finally:
        codes = [w.stop() for w in workers]
    assert codes == [0, 0], logs
    assert all(_last_owned(log) for log in logs), logs
    for page in pages:
        assert _value(page, "gputriage_paused_partitions") == 0
        assert _value(page, "gputriage_buffered_events") == 0


def _pauses(worker: Worker) -> float:
    page = _scrape(worker)
    return _value(page, "gputriage_partition_pauses_total") if page else 0.0


def _last_owned(log: str) -> set[int]:
    """The partitions a worker's log says it owned last ("partitions [0, 2]: ...")."""
    lines = [
        line for line in log.splitlines() if "] partitions [" in line or " partitions [" in line
    ]
    if not lines:
        return set()
    listed = lines[-1].split("partitions [", 1)[1].split("]", 1)[0]
    return {int(p) for p in listed.split(",") if p.strip()}


def test_a_stop_forwarded_while_the_worker_exits_is_no_unclean_stop(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """A terminal's Ctrl-C reaches the worker and its parent (``gputriage demo``) at once;
    the parent then forwards the stop as SIGTERM. Arriving once the worker has stopped,
    while the interpreter exits (asyncio.run has put the default handlers back), it
    killed a worker that had stopped cleanly: exit -15, "unclean stop" (seen in CI)."""
    kafka.create_topics()
    worker = Worker(kafka, f"{kafka.prefix}-app", tmp_path / "worker.log")
    try:
        wait_until(lambda: "restored" in worker.log(), timeout=30, what="partitions assigned")
        worker.process.send_signal(signal.SIGINT)
        wait_until(
            lambda: "worker stopped" in worker.log() or worker.process.poll() is not None,
            timeout=30,
            what="the clean stop",
        )
        if worker.process.poll() is None:
            worker.process.send_signal(signal.SIGTERM)  # the parent's forward, late
        assert worker.process.wait(30) == 0, worker.log()[-2000:]
    finally:
        worker.stop()
