"""End-to-end latency through a faust agent at a steady produce rate (default 2k events/s).

    .venv/bin/python bench/faust/latency.py [--rate 2000 --seconds 30 --variant best-take]

Per record: from the input's produce ack to the agent's ack for the record it derived
(both ``time.time()`` on one machine); the agent does the throughput benchmark's best
variant's work. Trap: warm-up records go out every 50 ms until the agent has processed
one; only the steady phase after is reported.
bench/README.md, design notes: faust/latency.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in {None, ""}:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import orjson
from aiokafka import AIOKafkaProducer

from bench.faust.common import OUT_DIR, Broker, create_topic, make_keys, tansu

WORKER = Path(__file__).with_name("worker.py")
_LEAN: dict[str, Any] = {"batch_drain": True, "noop_monitor": True}
VARIANTS: dict[str, dict[str, Any]] = {
    # manual acks: a batch ends at 1000 events or when the channel is empty,
    # so nothing waits for a timer
    "best": {
        "mode": "noack_events",
        "batch": 1000,
        "table": True,
        "fast_changelog": True,
        "fetch_max_wait_ms": 100,
        **_LEAN,
    },
    "best-wait1500": {
        "mode": "noack_events",
        "batch": 1000,
        "table": True,
        "fast_changelog": True,
        **_LEAN,
    },
    # take_events: a batch also ends after `within` seconds
    "best-take": {
        "mode": "take_events",
        "batch": 1000,
        "within": 0.05,
        "table": True,
        "fast_changelog": True,
        "fetch_max_wait_ms": 100,
        **_LEAN,
    },
    "naive": {"mode": "naive"},
}


def percentile(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    idx = min(len(sorted_vals) - 1, max(0, round(q * (len(sorted_vals) - 1))))
    return sorted_vals[idx]


async def produce_steady(
    broker: Broker, topic: str, rate: int, seconds: float, progress: Path
) -> tuple[dict[int, float], int]:
    """Warm up until the agent has seen a record, then produce at `rate`/s; return seq -> ack."""
    producer = AIOKafkaProducer(
        bootstrap_servers=broker.bootstrap, acks=1, linger_ms=0, enable_idempotence=False
    )
    await producer.start()
    acked: dict[int, float] = {}
    keys = make_keys(5_000)
    futs: list[asyncio.Future[Any]] = []

    def on_ack(seq: int) -> Any:
        def cb(fut: asyncio.Future[Any]) -> None:
            if not fut.cancelled() and fut.exception() is None:
                acked[seq] = time.time()

        return cb

    async def send(seq: int) -> None:
        key = keys[seq % len(keys)]
        value = orjson.dumps(
            {"v": 2, "kind": "xid", "seq": seq, "key": key.decode(), "xid": 79, "pad": "x" * 150}
        )
        fut = await producer.send(topic, value=value, key=key)
        fut.add_done_callback(on_ack(seq))
        futs.append(fut)

    try:
        seq = -1
        deadline = time.monotonic() + 90
        while not (progress.exists() and progress.stat().st_size > 0):
            if time.monotonic() > deadline:
                raise RuntimeError("the faust worker processed nothing within 90 s")
            await send(seq)
            seq -= 1
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        tick = 0.01
        per_tick = rate * tick
        start = time.monotonic()
        sent = 0
        while (elapsed := time.monotonic() - start) < seconds:
            due = int(elapsed * rate + per_tick)
            while sent < due:
                await send(sent)
                sent += 1
            await asyncio.sleep(tick)
        await asyncio.gather(*futs, return_exceptions=True)
        return {s: t for s, t in acked.items() if s >= 0}, sent
    finally:
        await producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=2_000)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--variant", default="best", choices=sorted(VARIANTS))
    args = parser.parse_args()
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"latency-{args.variant}-{uuid.uuid4().hex[:8]}.jsonl"
    with tansu(OUT_DIR / "tansu-latency.log") as broker:
        topic = "raw-latency"
        asyncio.run(create_topic(broker.bootstrap, topic, 6))
        asyncio.run(create_topic(broker.bootstrap, f"{topic}-out", 6))
        spec = {
            "bootstrap": broker.bootstrap,
            "topic": topic,
            "out_topic": f"{topic}-out",
            "out": str(out),
            "n": 10**9,
            "app_id": f"bench-latency-{uuid.uuid4().hex[:8]}",
            "derive_all": True,
            **VARIANTS[args.variant],
        }
        proc = subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(spec)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            acked, sent = asyncio.run(
                asyncio.wait_for(
                    produce_steady(broker, topic, args.rate, args.seconds, out),
                    args.seconds + 120,
                )
            )
            # let the tail drain (the worker flushes its stamps every 500 records)
            time.sleep(3.0)
        finally:
            proc.kill()
            proc.wait(10)
    done: dict[int, float] = {}
    for line in out.read_text().splitlines():
        for seq, t in json.loads(line).get("lat", []):
            if seq >= 0:
                done.setdefault(seq, t)
    out.unlink(missing_ok=True)
    lat = sorted(done[s] - acked[s] for s in done if s in acked)
    report = {
        "variant": args.variant,
        "spec": VARIANTS[args.variant],
        "rate": args.rate,
        "seconds": args.seconds,
        "sent": sent,
        "measured": len(lat),
        "note": "from the input's produce ack to the agent holding the derived record's ack",
        "p50_ms": round(percentile(lat, 0.50) * 1000, 2),
        "p90_ms": round(percentile(lat, 0.90) * 1000, 2),
        "p99_ms": round(percentile(lat, 0.99) * 1000, 2),
        "max_ms": round(lat[-1] * 1000, 2) if lat else None,
    }
    (OUT_DIR / f"latency-{args.variant}.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
