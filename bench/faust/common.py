"""Shared pieces of the faust benchmarks: the broker, topics, records, plain aiokafka.

Everything here is plain asyncio + aiokafka; faust is only imported by ``worker.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from gputriage.demo.broker import EmbeddedBroker

OUT_DIR = Path(__file__).resolve().parents[1] / "out" / "faust"


Broker = EmbeddedBroker
"""The project's embedded Tansu broker (:mod:`gputriage.demo.broker`): free port,
readiness check, clean stop, dies with its parent."""


@contextlib.contextmanager
def tansu(log_path: Path | None = None) -> Iterator[EmbeddedBroker]:
    """Start the embedded broker (its log at ``log_path``), always stop it."""
    with EmbeddedBroker(log_path=log_path) as broker:
        yield broker


async def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(name, partitions, 1)])
    finally:
        await admin.close()


def make_keys(n_keys: int) -> list[bytes]:
    """Correlation keys in the shape of ``cluster/node``."""
    return [f"cluster-{i % 2}/gpu-node-{i:05d}".encode() for i in range(n_keys)]


def make_value(rng: random.Random, key: bytes, seq: int) -> bytes:
    """A ~250-byte JSON record, roughly what a slimmed XID / pod event looks like."""
    node = key.decode()
    value = {
        "v": 2,
        "kind": "xid",
        "seq": seq,
        "key": node,
        "ts": 1740988800.0 + seq / 1000,
        "gpu": f"GPU-{rng.getrandbits(64):016x}",
        "pci": f"0000:{rng.randrange(256):02x}:00.0",
        "xid": rng.choice((13, 31, 43, 48, 63, 79, 94, 119)),
        "pid": rng.randrange(1, 65536),
        "msg": "NVRM: Xid event on GPU, see evidence for the original kernel line",
    }
    return orjson.dumps(value)


def records(n: int, n_keys: int, seed: int = 1) -> list[tuple[bytes, bytes]]:
    rng = random.Random(seed)
    keys = make_keys(n_keys)
    out = []
    for i in range(n):
        key = keys[rng.randrange(n_keys)]
        out.append((key, make_value(rng, key, i)))
    return out


def new_producer(bootstrap: str) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        linger_ms=5,
        max_batch_size=256 * 1024,
        enable_idempotence=False,
    )


async def produce_all(bootstrap: str, topic: str, recs: list[tuple[bytes, bytes]]) -> float:
    """Produce every record (chunks of futures awaited together); return records/s."""
    producer = new_producer(bootstrap)
    await producer.start()
    try:
        t0 = time.perf_counter()
        chunk = 5_000
        for i in range(0, len(recs), chunk):
            futs = [await producer.send(topic, value=v, key=k) for k, v in recs[i : i + chunk]]
            await asyncio.gather(*futs)
        return len(recs) / (time.perf_counter() - t0)
    finally:
        await producer.stop()


def work(key: bytes | None, value: bytes, state: dict[bytes | None, int]) -> None:
    """The per-record work every variant does: decode the JSON, keep a per-key count."""
    record = orjson.loads(value)
    state[key] = state.get(key, 0) + int(record["xid"])


async def aiokafka_getmany(
    bootstrap: str, topic: str, n: int, deadline_s: float
) -> dict[str, float]:
    """Plain aiokafka consumer (a fresh group, from the earliest offset), getmany + work()."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"plain-{os.getpid()}-{time.monotonic_ns()}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    t_start = time.perf_counter()
    await consumer.start()
    state: dict[bytes | None, int] = {}
    seen = 0
    t_first = 0.0
    try:
        end = time.monotonic() + deadline_s
        while seen < n and time.monotonic() < end:
            batches = await consumer.getmany(timeout_ms=500, max_records=10_000)
            for recs in batches.values():
                if recs and not t_first:
                    t_first = time.perf_counter()
                for rec in recs:
                    work(rec.key, rec.value, state)
                seen += len(recs)
        t_last = time.perf_counter()
        await consumer.commit()
    finally:
        await consumer.stop()
    elapsed = t_last - t_first
    return {
        "records": seen,
        "seconds": elapsed,
        "records_per_s": seen / elapsed if elapsed > 0 else 0.0,
        "startup_s": t_first - t_start,
    }


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        offs = await consumer.end_offsets(tps)
        return {tp.partition: off for tp, off in offs.items()}
    finally:
        await consumer.stop()
