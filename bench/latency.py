"""Latency under load: the last evidence on Kafka -> the incident on Kafka.

For every ``--runs`` x ``--rates``: fresh topics on an embedded broker, one fresh
``gputriage process`` worker (a subprocess), then ``--seconds`` of live events produced at
that rate (event time = wall clock), every incident revision read back. The latency runs
from the produce ack of a revision's newest evidence event to its arrival at a consumer,
split into ``hold`` (the grace, by design), ``worker`` and ``out``; the headline counts
first revisions of types an event opens. The floor is the grace plus one fetch wait.

Trap: a phase starts only once its worker has joined, and never inherits another phase's
backlog or state; timer-opened types wait for their timer by design.
bench/README.md, design notes: latency.py.

    .venv/bin/python -m bench.latency [--rates 2000 --runs 1 --seconds 10] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in {None, ""}:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from bench.pipeline_bench import (
    EVENT_OPENED,
    Env,
    WorkerProcess,
    _quantile,
    _summary,
    incident_reader,
    stream,
)
from connectors.kafka.admin import ensure_topics
from connectors.kafka.producer import EventProducer
from connectors.publish import Publisher, PublishOptions
from connectors.source import Batch
from gputriage.demo.broker import EmbeddedBroker
from schemas.codec import AnyEvent, decode_incident
from schemas.events import XidEvent
from streams.config import default_core_config

BARS_P99_S = {2_000: 1.0, 10_000: 2.0}
"""The issue's bars: p99 at 2k events/s and at 10k events/s, one worker."""
COUNTERS = ("gputriage_pipeline_seconds_total", "gputriage_flush_seconds_total")
"""The worker's counters read around each phase (the Pipeline's time, the flushes')."""
CHUNK_S = 0.005
"""The producer's pacing: what is due is queued every 5 ms at most."""
IDLE_POLL_SECONDS = 0.05
"""How long the bench's source waits for a chunk before it reports idle (caught up)."""


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


async def wait_joined(worker: WorkerProcess, timeout: float = 60.0) -> None:
    """Until the worker logged its first assignment (it has joined and restored)."""
    deadline = time.monotonic() + timeout
    while "partitions [" not in worker.log():
        if worker.process.poll() is not None:
            raise RuntimeError(f"the worker exited:\n{worker.log()[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the worker did not join within {timeout:g} s")
        await asyncio.sleep(0.1)


class DueSource:
    """The events that came due, as a live connector's source gives them to the publish
    loop (:class:`connectors.publish.Publisher`): a batch per chunk, its progress the
    chunk's newest event time, and an idle batch when nothing is due (the loop then
    claims the wall clock and closes with a heartbeat, as a caught-up watch does).
    ``commit`` is called once a batch is acknowledged: that is its events' ack time."""

    name = "latency-bench"
    key: bytes | None = None

    def __init__(self, acked: dict[str, tuple[float, float]]) -> None:
        self.queue: asyncio.Queue[list[AnyEvent] | None] = asyncio.Queue()
        self.acked = acked

    async def next_batch(self) -> Batch | None:
        try:
            chunk = await asyncio.wait_for(self.queue.get(), IDLE_POLL_SECONDS)
        except TimeoutError:
            return Batch()
        ended = chunk is None
        events = [] if chunk is None else list(chunk)
        while not ended and not self.queue.empty():  # all that is due: one batch
            more = self.queue.get_nowait()
            if more is None:
                ended = True
            else:
                events += more
        if not events:
            return None
        if ended:
            self.queue.put_nowait(None)  # said again on the next call
        return Batch(events=events, records=len(events), progress=max(e.time for e in events))

    def commit(self, batch: Batch) -> None:
        done = time.time()
        for event in batch.events:
            self.acked[event.id] = (done, event.time.timestamp())

    async def close(self) -> None:
        return None


class QuietSource:
    """A node agent with nothing to say (a kmsg reader on a healthy node): one
    informational XID first (a source heartbeats only the partitions it has published
    to), then idle polls, so the publish loop heartbeats its progress every
    ``heartbeat_seconds``, as in production."""

    name = "kmsg:latency-bench"

    def __init__(self, cluster: str, node: str, start: datetime) -> None:
        self.key: bytes | None = f"{cluster}/{node}".encode()
        self._first: XidEvent | None = XidEvent(
            id=f"quiet-{node}", cluster=cluster, node=node, time=start, code=92
        )

    async def next_batch(self) -> Batch | None:
        first, self._first = self._first, None
        if first is not None:
            return Batch(events=[first], records=1, progress=first.time)
        await asyncio.sleep(IDLE_POLL_SECONDS)  # the poll interval of a kmsg reader
        return Batch()

    def commit(self, batch: Batch) -> None:
        return None

    async def close(self) -> None:
        return None


async def phase(
    env: Env,
    rate: float,
    seconds: float,
    nodes: int,
    seed: int,
    grace: float,
    *,
    signed: bool = True,
    quiet: int = 0,
    heartbeat: float = PublishOptions.heartbeat_seconds or 5.0,
) -> dict[str, Any]:
    """``rate`` events/s of live events for ``seconds``; each incident matched to its
    completing event; the latency and its parts (see the module)."""
    count = int(rate * seconds)
    start = datetime.now(tz=UTC) + timedelta(seconds=2)
    events = stream(count, nodes, seed=seed, start=start, seconds=seconds)
    when = [e.time.timestamp() for e in events]
    acked: dict[str, tuple[float, float]] = {}
    """event id -> (ack time, event time)."""

    incidents = await incident_reader(env)
    arrivals: list[tuple[float, int, bytes]] = []
    stop = asyncio.Event()

    async def read() -> None:
        while not stop.is_set():
            batches = await incidents.getmany(timeout_ms=50)
            now = time.time()
            arrivals.extend(
                (now, r.timestamp, r.value) for rs in batches.values() for r in rs if r.value
            )

    due: list[AnyEvent] = []
    ready = asyncio.Event()
    produced = asyncio.Event()

    async def send() -> None:
        """One chunk at a time, as a connector's publish loop sends: what came due while
        the last chunk waited for its acks goes out together (aiokafka's ``send_batch``
        misses its timeout when many callers queue batches on one partition at once)."""
        while due or not produced.is_set():
            if not due:
                ready.clear()
                await ready.wait()
                continue
            chunk = due[:]
            del due[:]
            await producer.send_many(chunk)
            done = time.time()
            for event in chunk:
                acked[event.id] = (done, event.time.timestamp())

    reader = asyncio.create_task(read())
    producer = EventProducer(env.kwargs, env.layout)  # the connectors' settings
    await producer.start()
    source = DueSource(acked)
    hush = asyncio.Event()
    quiet_agents = [
        asyncio.create_task(
            Publisher(
                QuietSource(events[0].cluster, f"quiet-{n}", start),
                producer,
                options=PublishOptions(heartbeat_seconds=heartbeat),
            ).run(hush)
        )
        for n in range(quiet)
    ]
    sender: asyncio.Task[Any]
    if signed:
        publisher = Publisher(source, producer, options=PublishOptions())
        sender = asyncio.create_task(publisher.run(asyncio.Event()))
    else:
        sender = asyncio.create_task(send())
    lag: list[float] = []
    try:
        i = 0
        while i < len(events):
            now = time.time()
            if when[i] > now:
                await asyncio.sleep(min(CHUNK_S, when[i] - now))
                continue
            chunk = []
            while i < len(events) and when[i] <= now:
                chunk.append(events[i])
                lag.append(now - when[i])
                i += 1
            if signed:
                source.queue.put_nowait(chunk)
            else:
                due.extend(chunk)
                ready.set()
        produced.set()
        ready.set()
        source.queue.put_nowait(None)  # the source ends: the publish loop drains
        await sender
        # Until the last event's grace has passed and its incidents had time to arrive.
        await asyncio.sleep(grace + 2.0)
    finally:
        stop.set()
        produced.set()
        ready.set()
        hush.set()
        await asyncio.gather(*quiet_agents, return_exceptions=True)
        await reader
        if not sender.done():
            sender.cancel()
        await producer.stop()
        await incidents.stop()
    return _match(rate, seconds, len(events), lag, acked, arrivals, grace)


def _match(
    rate: float,
    seconds: float,
    count: int,
    lag: list[float],
    acked: Mapping[str, tuple[float, float]],
    arrivals: list[tuple[float, int, bytes]],
    grace: float,
) -> dict[str, Any]:
    opened: list[float] = []
    parts: dict[str, list[float]] = {"hold": [], "worker": [], "out": []}
    revisions: list[float] = []
    for arrived, stamp_ms, value in arrivals:
        incident = decode_incident(value)
        ours = [acked[e.event_id] for e in incident.evidence if e.event_id in acked]
        if not ours or incident.status == "resolved":
            continue
        ack, event_time = max(ours)
        total = arrived - ack
        revisions.append(total)
        node_level = incident.type == "host_oom_kill" and not incident.pods
        if incident.revision != 1 or incident.type not in EVENT_OPENED or node_level:
            continue
        opened.append(total)
        created = stamp_ms / 1000
        hold = max(0.0, event_time + grace - ack)
        parts["hold"].append(hold)
        parts["worker"].append(created - ack - hold)
        parts["out"].append(arrived - created)
    return {
        "rate": rate,
        "seconds": seconds,
        "events": count,
        "send_lag_p99_s": _quantile(lag, 0.99),
        "ack_lag_p99_s": _quantile([ack - at for ack, at in acked.values()], 0.99),
        "incident_records": len(arrivals),
        "opened": _summary(opened),
        "parts": {name: _summary(values) for name, values in parts.items()},
        "revisions": _summary(revisions),
    }


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    extra = dict(kv.split("=", 1) for kv in args.worker_env)
    grace = default_core_config().grace_seconds
    results: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="latency-bench-") as tmp,
        EmbeddedBroker() as broker,
    ):
        for n in range(args.runs):
            for rate in args.rates:
                # A fresh layout and worker per phase: a phase must not inherit the last
                # one's backlog (a worker behind at 10k/s would start the next phase behind)
                # nor its keys' grown state (every phase brings new pods to the same nodes).
                env = Env(broker, f"lat{uuid.uuid4().hex[:8]}", args.partitions, Path(tmp))
                asyncio.run(ensure_topics(env.kwargs, env.layout))
                worker = WorkerProcess(env, f"{env.prefix}-app", extra)
                try:
                    asyncio.run(wait_joined(worker))
                    seed = 100 + len(results)
                    before = {name: worker.counter(name) or 0.0 for name in COUNTERS}
                    began = time.perf_counter()
                    result = asyncio.run(
                        phase(
                            env,
                            rate,
                            args.seconds,
                            args.nodes,
                            seed,
                            grace,
                            signed=args.signed,
                            quiet=args.quiet_sources,
                            heartbeat=args.heartbeat_seconds,
                        )
                    )
                    took = time.perf_counter() - began
                    # The worker's loop: its share of the phase in the Pipeline, and the
                    # milliseconds each flush (one a second) held it.
                    spent = {n: (worker.counter(n) or 0.0) - v for n, v in before.items()}
                    result["pipeline_share"] = spent[COUNTERS[0]] / took
                    result["flush_ms"] = 1000 * spent[COUNTERS[1]] / took
                    if worker.process.poll() is not None:
                        raise RuntimeError(f"the worker exited:\n{worker.log()[-3000:]}")
                finally:
                    code = worker.stop()
                    if code != 0:
                        _log(f"worker exited with {code}:\n{worker.log()[-4000:]}")
                result["run"] = n + 1
                results.append(result)
                o = result["opened"]
                _log(
                    f"run {n + 1} at {rate:,.0f}/s: n {o['n']}, p50 {o['p50_s']:.3f} s, "
                    f"p99 {o['p99_s']:.3f} s"
                )
    return results


def render(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        f"latency bench: one worker, {args.partitions} partitions x 6 raw topics, "
        f"{args.nodes:,} nodes, {args.seconds:g} s per phase, {os.cpu_count()} CPUs",
        "headline: first revisions of event-opened incidents; ms from the completing "
        "event's ack to the incident's arrival",
        "",
        f"{'run':>3} {'events/s':>9} {'n':>5} {'p50':>6} {'p90':>6} {'p95':>6} {'p99':>6}"
        f" {'max':>6}"
        f"   {'hold p50/p99':>13} {'worker p50/p99':>15} {'out p50/p99':>12}"
        f" {'core%':>6} {'flush':>6} {'lag99':>6}  bar",
    ]
    for r in results:
        o, p = r["opened"], r["parts"]
        bar = BARS_P99_S.get(int(r["rate"]))
        verdict = "" if bar is None else ("met" if o["p99_s"] <= bar else "NOT met")

        def ms(value: float) -> str:
            return f"{value * 1000:.0f}"

        def pair(s: Mapping[str, Any]) -> str:
            return f"{ms(s['p50_s'])}/{ms(s['p99_s'])}"

        lines.append(
            f"{r['run']:>3} {r['rate']:>9,.0f} {o['n']:>5} {ms(o['p50_s']):>6} {ms(o['p90_s']):>6}"
            f" {ms(o['p95_s']):>6} {ms(o['p99_s']):>6} {ms(o['max_s']):>6}   {pair(p['hold']):>13}"
            f" {pair(p['worker']):>15} {pair(p['out']):>12}"
            f" {100 * r.get('pipeline_share', 0):>5.0f}% {r.get('flush_ms', 0):>4.0f}ms"
            f" {ms(r['ack_lag_p99_s']):>6}  {verdict}"
        )
    lines += [
        "",
        "hold = the grace the core waits by design (less the event's time before its ack);",
        "worker = fetch wait + watermark/tick cadence + processing; out = linger + broker + "
        "our fetch;",
        "core% = the worker's time in the Pipeline (decode, core) per second of the phase; "
        "flush = ms of its loop per flush (snapshots encoded and queued; one a second);",
        "lag99 = p99 ms from an event's time to its ack (the load generator and the publish "
        "loop; the latency counts from the ack, after it).",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--rates",
        type=lambda text: [float(part) for part in text.split(",")],
        default=[2_000.0, 10_000.0],
        help="events/s of each phase, comma-separated (default 2000,10000)",
    )
    parser.add_argument("--seconds", type=float, default=15, help="seconds per phase")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--nodes", type=int, default=2_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument(
        "--worker-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the worker (e.g. GPUTRIAGE_PROCESSOR__TICK_SECONDS=0.05)",
    )
    parser.add_argument(
        "--unsigned",
        dest="signed",
        action="store_false",
        help="produce header-less records (no source progress, no heartbeats) instead of "
        "going through the connectors' publish loop: the processor's fallback rule",
    )
    parser.add_argument(
        "--quiet-sources",
        type=int,
        default=0,
        metavar="N",
        help="also run N node agents with nothing to say (each heartbeats, as a kmsg "
        "reader on a healthy node does): what a fleet's quiet agents cost",
    )
    parser.add_argument(
        "--heartbeat-seconds",
        type=float,
        default=PublishOptions.heartbeat_seconds,
        metavar="S",
        help="the quiet agents' heartbeat interval (default: the connectors', "
        f"{PublishOptions.heartbeat_seconds:g} s)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    results = run(args)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print(render(results, args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
