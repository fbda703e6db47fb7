"""Poison records never stop a partition, on the real broker.

* An undecodable raw record of ~800 KB is accepted by the broker, but its dead letter
  (the value base64-encoded: +33 %) was over the producer's 1 MB limit: the send
  raised, the worker exited, and every restart died on the same record. Now the letter
  is cut to fit (head of the value, its size, its SHA-256) and the partition commits
  past it.
* A valid record dated 9999-12-31 waited for a watermark that never comes, and its
  partition's commit stopped behind it for good. Now it is a dead letter
  (``max_future_seconds``) and the partition commits past it.
* A record nested 10,000 deep raised ``RecursionError`` out of the codec and the worker
  exited at every restart, as did a node whose capacity said 10**23 (at the snapshot of
  its state); a time whose UTC is in year 0 raised inside the core and the next event
  of its key was lost; absurd XID codes, megabyte ids and bindings of more pods than a
  node runs went into the state. Now each is a dead letter with its reason, and the
  next event of the key makes its incident.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from schemas.codec import AnyEvent, decode_event, encode
from schemas.dead_letters import DeadLetter
from schemas.events import PodEvent
from schemas.keys import correlation_key
from tests.cli_helpers import host_oom_events
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


NESTED = "[" * 10_000 + "]" * 10_000


def _poison(key: str, time: str) -> dict[str, list[tuple[bytes, str, str]]]:
    """Per raw topic, records that crashed every worker or fed the state absurd values:
    ``(value, a phrase of the reason, the field)``, all on the correlation key ``key``."""
    cluster, node_name = key.split("/")
    xid = {"schema": "xid.v1", "cluster": cluster, "time": time, "node": node_name, "code": 79}

    def record(**fields: object) -> bytes:
        return json.dumps({**xid, **fields}).encode()  # json: orjson cannot write 10**23

    deep = record(id="x-deep")[:-1] + f', "not_in_the_schema": {NESTED}}}'.encode()
    pod = {**xid, "schema": "pod.v1", "id": "p-deep", "namespace": "ml", "name": "p"}
    pods = [{"namespace": "ml", "name": f"p-{i}"} for i in range(20_000)]  # < 1 MB a record
    binding = {**xid, "schema": "gpu_binding.v1", "id": "b", "gpu_uuid": "GPU-1", "pods": pods}
    node = {**xid, "schema": "node.v1", "id": "n", "capacity": {"nvidia.com/gpu": 10**23}}
    del pod["code"], binding["code"], node["code"]
    return {
        "xids": [
            (deep, "nested too deep to decode", ""),
            (record(id="x-0", time="0001-01-01T00:00:00+14:00"), "before the Unix epoch", "$.time"),
            (record(id="x-1", time="0001-01-01Z"), "Invalid RFC3339", "$.time"),
            (record(id="x-neg", code=-79), ">= 0", "$.code"),
            (record(id="x-big", code=10**23), "<= 65535", "$.code"),
            (record(id="i" * 1_000_000), "length <= 8192", "$.id"),
            (record(id="x-s", node="\ud800"), "surrogate", ""),  # json writes it escaped
        ],
        "pods": [
            (
                json.dumps(pod)[:-1].encode()
                + f', "containers": [{{"name": "c", "later": {NESTED}}}]}}'.encode(),
                "nested too deep to decode",
                "",
            ),
        ],
        "gpu-bindings": [(json.dumps(binding).encode(), "length <= 1024", "$.pods")],
        # msgspec took it, the state's MessagePack did not: the worker died at its snapshot.
        "nodes": [(json.dumps(node).encode(), "<= 2147483647", "$.capacity[...]")],
    }


def test_records_that_crashed_every_worker_are_dead_letters_and_the_key_goes_on(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    kafka.create_topics()
    oomkilled: list[AnyEvent] = [e for e in host_oom_events() if isinstance(e, PodEvent)]
    valid = ending_days_ago(oomkilled)  # an OOMKilled GPU pod: a host_oom_kill incident
    oom = valid[0]
    assert isinstance(oom, PodEvent)
    key = correlation_key(oom)
    poison = _poison(key, oom.time.isoformat())
    sent = 0
    for source, records in poison.items():
        topic = kafka.layout.raw[source].name
        asyncio.run(produce(kafka.bootstrap, topic, [(key.encode(), v) for v, _, _ in records]))
        sent += len(records)
    sent += produce_events(kafka, valid)  # after the poison, on the same key

    app = f"{kafka.prefix}-app"
    dead = TopicReader(kafka, kafka.layout.dead_letters.name)
    incidents = TopicReader(kafka, kafka.layout.incidents.name)
    worker = Worker(kafka, app, tmp_path / "worker.log")
    expected = [(source, *r) for source, records in poison.items() for r in records]
    try:

        def all_letters() -> bool:
            dead.poll()
            return len(dead.dead_letters()) >= len(expected)

        wait_until(all_letters, timeout=60, what=f"{len(expected)} dead letters")
        letters = dead.dead_letters()
        assert len(letters) == len(expected), [d.reason for d in letters]
        for source, value, phrase, field in expected:
            topic = kafka.layout.raw[source].name
            (letter,) = [
                d
                for d in letters
                if d.topic == topic and hashlib.sha256(value).hexdigest() in _digests(d)
            ]
            assert phrase in letter.reason, (phrase, letter.reason)
            assert letter.field == field
            assert letter.key == key.encode()

        def the_incident() -> bool:
            incidents.poll()
            return any(i.type == "host_oom_kill" for i in incidents.incidents())

        wait_until(the_incident, timeout=60, what="the incident of the key after the poison")
        wait_until(lambda: committed(kafka, app) == sent, timeout=60, what="all committed")
        assert worker.process.poll() is None, worker.log()
    finally:
        dead.close()
        incidents.close()
        assert worker.stop() == 0, worker.log()
    assert "Traceback" not in worker.log()


def _digests(letter: DeadLetter) -> set[str]:
    """The SHA-256 of the record a letter stands for: the one it names when it was cut to
    fit, else that of the value it carries whole."""
    whole = hashlib.sha256(letter.value or b"").hexdigest()
    return {letter.value_sha256} if letter.value_sha256 else {whole}
