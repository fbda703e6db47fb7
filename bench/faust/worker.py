"""One faust worker for the benchmarks, run as a subprocess by ``throughput.py`` / ``latency.py``.

    python bench/faust/worker.py '<json spec>'

The spec (see ``WorkerSpec``) names the broker, the topic, the variant and the settings.
The worker counts the records its agent has fully processed and writes progress
lines (JSON) to ``spec.out``; when ``spec.n`` records are done it writes the
final line and leaves with ``os._exit(0)`` (the parent holds the deadline and
kills it if it is late). Everything is timed inside the worker with
``time.perf_counter``; ``time.time`` stamps let the parent measure start-up.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypedDict

if __package__ in {None, ""}:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import faust
import orjson
from faust.types import EventT, StreamT

from bench.faust.tuning import NoopMonitor, install_batch_drain, install_fetch_max_wait

T_PROCESS_START = time.time()


class WorkerSpec(TypedDict, total=False):
    bootstrap: str
    topic: str
    out: str
    n: int
    app_id: str
    # naive | events | take | take_events | noack_events
    mode: str
    batch: int
    within: float
    # monkeypatch Consumer._drain_messages: one wait_first per fetched batch
    batch_drain: bool
    table: bool
    # table writes bypass faust's ProducerBuffer: table.data[k] = v, and the changelog
    # records go straight to app.producer.send (gathered, awaited before the ack)
    fast_changelog: bool
    # output records through app.producer.send instead of Topic.send
    direct_send: bool
    # keep faust's terminal spinner (and with it the root logger at DEBUG)
    keep_spinner: bool
    # conf.Monitor = NoopMonitor
    noop_monitor: bool
    # replace faust's hard-coded fetch_max_wait_ms=1500 (0: keep it)
    fetch_max_wait_ms: int
    # send one derived record per `send_every` records (0: none)
    send_every: int
    # latency mode: one derived record per input record (app.producer.send, awaited
    # before the ack); (seq, time.time() of its ack) pairs go to `out` as {"lat": [...]}
    derive_all: bool
    out_topic: str
    loglevel: str
    conf: dict[str, Any]


def decode(value: bytes) -> dict[str, Any]:
    rec: dict[str, Any] = orjson.loads(value)
    return rec


def build_app(spec: WorkerSpec) -> faust.App:
    conf: dict[str, Any] = {
        "broker": f"kafka://{spec['bootstrap']}",
        "store": "memory://",
        "web_enabled": False,
        "topic_partitions": 6,
        "consumer_auto_offset_reset": "earliest",
        "producer_acks": 1,
        # fast group join for a fresh group id, see FINDINGS.md
        "broker_session_timeout": 10.0,
        "broker_heartbeat_interval": 1.0,
        "broker_rebalance_timeout": 10.0,
    }
    conf.update(spec.get("conf", {}))
    if spec.get("noop_monitor"):
        conf["Monitor"] = NoopMonitor
    return faust.App(spec["app_id"], **conf)


def main(spec: WorkerSpec) -> None:
    if spec.get("batch_drain"):
        install_batch_drain()
    if spec.get("fetch_max_wait_ms"):
        install_fetch_max_wait(spec["fetch_max_wait_ms"])
    app = build_app(spec)
    topic = app.topic(spec["topic"], key_type=bytes, value_type=bytes, value_serializer="raw")
    out_topic = None
    if spec.get("send_every") or spec.get("derive_all"):
        out_topic = app.topic(
            spec.get("out_topic", spec["topic"] + "-out"),
            key_type=bytes,
            value_type=bytes,
            value_serializer="raw",
            key_serializer="raw",
        )
    table = None
    if spec.get("table"):
        table = app.Table(
            "state",
            default=int,
            partitions=6,
            key_type=str,
            value_type=int,
            use_partitioner=True,
        )
    n = spec["n"]
    mode = spec.get("mode", "naive")
    if spec.get("fast_changelog") and mode == "take":
        raise SystemExit("fast_changelog needs the events (their partitions): use take_events")
    batch = spec.get("batch", 1000)
    within = spec.get("within", 0.05)
    send_every = spec.get("send_every", 0)
    out_path = Path(spec["out"])
    progress = {"count": 0, "t_first": 0.0, "t_first_wall": 0.0}
    state: dict[str, int] = {}

    def report(final: bool) -> None:
        now = time.perf_counter()
        line = {
            "final": final,
            "count": progress["count"],
            "seconds": now - progress["t_first"] if progress["t_first"] else 0.0,
            "t_process_start": T_PROCESS_START,
            "t_first_wall": progress["t_first_wall"],
            "t_wall": time.time(),
        }
        with out_path.open("a") as fh:
            fh.write(json.dumps(line) + "\n")

    derive_all = bool(spec.get("derive_all"))
    latencies: list[tuple[int, float]] = []

    def flush_latencies() -> None:
        with out_path.open("a") as fh:
            fh.write(json.dumps({"lat": latencies}) + "\n")
        latencies.clear()

    fast_changelog = bool(spec.get("fast_changelog"))
    direct_send = bool(spec.get("direct_send"))

    async def after(values: list[tuple[int, dict[str, Any]]]) -> None:
        """Table writes and output sends for a batch of (partition, decoded record)."""
        futs: list[Awaitable[Any]] = []
        if table is not None:
            # one table write per distinct key per batch (the last partition seen for it)
            latest = {r["key"]: p for p, r in values}
            if fast_changelog:
                changelog = table.changelog_topic.get_topic_name()
                send = app.producer.send
                for key, part in latest.items():
                    val = state[key]
                    table.data[key] = val
                    kb, vb = orjson.dumps(key), orjson.dumps(val)
                    futs.append(await send(changelog, kb, vb, part, None, None))
            else:
                for key in latest:
                    table[key] = state[key]
        if out_topic is not None and send_every:
            for _, r in values:
                if r["seq"] % send_every == 0:
                    kb, vb = r["key"].encode(), orjson.dumps(r)
                    if direct_send:
                        futs.append(
                            await app.producer.send(
                                out_topic.get_topic_name(), kb, vb, None, None, None
                            )
                        )
                    else:
                        futs.append(await out_topic.send(key=kb, value=vb))
        if derive_all:
            assert out_topic is not None
            name = out_topic.get_topic_name()
            for _, r in values:
                vb = orjson.dumps({"seq": r["seq"], "key": r["key"]})
                futs.append(await app.producer.send(name, r["key"].encode(), vb, None, None, None))
        if futs:
            # the broker acks before the records are acked (at-least-once)
            await asyncio.gather(*futs)
        if derive_all:
            now = time.time()
            latencies.extend((r["seq"], now) for _, r in values)
            if len(latencies) >= 500 or not progress["t_first"]:
                flush_latencies()

    def done(k: int) -> None:
        if not progress["t_first"]:
            progress["t_first"] = time.perf_counter()
            progress["t_first_wall"] = time.time()
        before = progress["count"]
        progress["count"] = before + k
        if progress["count"] // 20_000 != before // 20_000:
            report(final=False)
        if progress["count"] >= n:
            report(final=True)
            sys.stdout.flush()
            os._exit(0)

    def work(value: bytes) -> dict[str, Any]:
        rec = decode(value)
        key: str = rec["key"]
        state[key] = state.get(key, 0) + int(rec["xid"])
        return rec

    agent_fn: Callable[[StreamT[bytes]], AsyncIterator[None] | Awaitable[None]]

    if mode == "naive":

        async def agent_fn(stream: StreamT[bytes]) -> None:
            async for value in stream:
                rec = work(value)
                event = stream.current_event
                assert event is not None
                await after([(event.message.partition, rec)])
                done(1)

    elif mode == "events":

        async def agent_fn(stream: StreamT[bytes]) -> None:
            async for event in stream.events():
                rec = work(event.value)
                await after([(event.message.partition, rec)])
                done(1)

    elif mode == "take":

        async def agent_fn(stream: StreamT[bytes]) -> None:
            async for values in stream.take(batch, within=within):
                recs = [(-1, work(v)) for v in values]
                await after(recs)
                done(len(recs))

    elif mode == "take_events":

        async def agent_fn(stream: StreamT[bytes]) -> None:
            async for events in stream.take_events(batch, within=within):  # type: ignore[attr-defined]
                recs = [(e.message.partition, work(e.value)) for e in events]
                await after(recs)
                done(len(recs))

    elif mode == "noack_events":
        # stream.noack().events():  # type: ignore[attr-defined] the agent acks itself, once per `batch` events,
        # after the table writes and sends of that batch are done
        async def agent_fn(stream: StreamT[bytes]) -> None:
            held: list[EventT[bytes]] = []
            recs: list[tuple[int, dict[str, Any]]] = []
            async for event in stream.noack().events():  # type: ignore[attr-defined]
                held.append(event)
                recs.append((event.message.partition, work(event.value)))
                if len(held) >= batch or stream.channel.empty():  # type: ignore[attr-defined]
                    await after(recs)
                    for ev in held:
                        await stream.ack(ev)
                    k = len(held)
                    held.clear()
                    recs.clear()
                    done(k)

    else:
        raise SystemExit(f"unknown mode {mode!r}")

    app.agent(topic, name="bench-agent")(agent_fn)

    worker = faust.Worker(app, loglevel=spec.get("loglevel", "WARNING"), quiet=True)
    if not spec.get("keep_spinner"):
        # faust bug: with loglevel >= WARN the start-up spinner sets the *root* logger
        # to DEBUG for good, so every log.debug() (aiokafka's producer logs each send)
        # builds a LogRecord. Without the spinner the root logger stays at WARNING.
        worker.spinner = None
    worker.execute_from_commandline()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
