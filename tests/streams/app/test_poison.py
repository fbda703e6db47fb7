"""Poison records never stop a partition (issue 11.1, 11.2), on the real broker.

* An undecodable raw record of ~800 KB is accepted by the broker, but its dead letter
  (the value base64-encoded: +33 %) was over the producer's 1 MB limit: the send
  raised, the worker exited, and every restart died on the same record. Now the letter
  is cut to fit (head of the value, its size, its SHA-256) and the partition commits
  past it.
* A valid record dated 9999-12-31 waited for a watermark that never comes, and its
  partition's commit stopped behind it for good. Now it is a dead letter
  (``max_future_seconds``) and the partition commits past it.
"""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from schemas.codec import decode_event, encode
from schemas.keys import correlation_key
from tests.kafka_helpers import KafkaTestEnv, produce, wait_until
from tests.paths import ROOT
from tests.processor_helpers import (
    TopicReader,
    Worker,
    committed,
    ending_days_ago,
    produce_events,
)

SCENARIO = ROOT / "examples" / "scenario.jsonl"
POISON = bytes(range(256)) * 3125
"""800,000 bytes that are not JSON (nor UTF-8)."""


def test_poison_records_are_dead_lettered_and_their_partitions_commit_past_them(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    kafka.create_topics()
    events = ending_days_ago([decode_event(line) for line in SCENARIO.read_bytes().splitlines()])
    pods = kafka.layout.raw["pods"].name
    a_pod = next(e for e in events if e.__struct_config__.tag == "pod.v1")
    far = msgspec.structs.replace(
        a_pod, id="k8s:from-the-future:1", time=datetime(9999, 12, 31, tzinfo=UTC)
    )
    half = len(events) // 2
    sent = produce_events(kafka, events[:half])
    poison: list[tuple[bytes | None, bytes | None]] = [
        (b"c1/gpu-node-01", POISON),
        (correlation_key(far).encode(), encode(far)),
    ]
    asyncio.run(produce(kafka.bootstrap, pods, poison))
    sent += len(poison) + produce_events(kafka, events[half:])

    app = f"{kafka.prefix}-app"
    dead = TopicReader(kafka, kafka.layout.dead_letters.name)
    worker = Worker(kafka, app, tmp_path / "worker.log")
    try:

        def two_letters() -> bool:
            dead.poll()
            return len(dead.dead_letters()) >= 2

        wait_until(two_letters, timeout=60, what="two dead letters")
        by_reason = {("ahead of the present" in d.reason): d for d in dead.dead_letters()}
        big, future = by_reason[False], by_reason[True]
        assert (big.topic, big.value_size) == (pods, len(POISON))
        assert big.value_sha256 == hashlib.sha256(POISON).hexdigest()
        assert big.value is not None
        assert POISON.startswith(big.value)
        assert len(big.value) > 700_000, "as much of the head as fits"
        assert future.field == "$.time"
        assert "max_future_seconds = 600" in future.reason
        # Every record, both poisons included, is committed: nothing is stuck behind them.
        wait_until(lambda: committed(kafka, app) == sent, timeout=60, what="all committed")
        assert worker.process.poll() is None, worker.log()
    finally:
        dead.close()
        assert worker.stop() == 0, worker.log()
