"""The faust engine against the default engine and plain aiokafka, on one topic, in one run.

One embedded broker and one backlog; then, ``--runs`` times, side by side: a plain
aiokafka consumer, one ``gputriage process`` worker (committed records/s after its first
commit), and the same with ``--engine faust``. Each run's workers get fresh groups and
state topics and read the whole backlog.

Traps: the order of the two workers alternates between runs; read the range over runs,
not one figure (2 shared cores: single figures vary by tens of percent).
bench/README.md, design notes: faust/engine.py.

    .venv/bin/python -m bench.faust.engine [--events 50000 --runs 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

if __package__ in {None, ""}:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.pipeline_bench import (
    Env,
    WorkerProcess,
    backlog_events,
    plain_aiokafka,
    processor_throughput,
    produce,
)
from connectors.kafka.admin import ensure_topics
from gputriage.demo.broker import EmbeddedBroker


def engine_worker(
    env: Env, app_id: str, engine: str, extra_env: Mapping[str, str]
) -> WorkerProcess:
    """:class:`bench.pipeline_bench.WorkerProcess` started with ``--engine``."""
    return WorkerProcess(env, app_id, extra_env, args=("--engine", engine))


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _engine(env: Env, engine: str, total: int, timeout: float) -> dict[str, Any]:
    worker = engine_worker(env, f"{env.prefix}-{engine}-{uuid.uuid4().hex[:6]}", engine, {})
    try:
        result = asyncio.run(processor_throughput(env, worker, total, timeout))
    finally:
        code = worker.stop()
        if code != 0:
            _log(f"{engine} worker exited with {code}:\n{worker.log()[-3000:]}")
    rereads = worker.log().count("faust skipped records")
    result.pop("progress", None)
    return {**result, "exit": code, "rereads": rereads}


def run(args: argparse.Namespace) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="faust-engine-bench-") as tmp,
        EmbeddedBroker() as broker,
    ):
        env = Env(broker, f"bench{uuid.uuid4().hex[:8]}", args.partitions, Path(tmp))
        asyncio.run(ensure_topics(env.kwargs, env.layout))
        events = backlog_events(args.events, args.nodes, 3.0)
        generated = len(events)
        # The records acknowledged: Tansu's end offsets stop at each partition's last
        # batch's base + 1 (streams/app/ranges.py), short by up to a batch per partition.
        total = asyncio.run(produce(env, events))
        del events
        _log(f"produced {generated} events ({total} records) to {env.prefix}.*")
        runs = []
        for n in range(args.runs):
            plain = asyncio.run(plain_aiokafka(env, total))
            _log(f"run {n + 1}: plain aiokafka {plain['events_per_s']:,.0f} events/s")
            order = ("aiokafka", "faust") if n % 2 == 0 else ("faust", "aiokafka")
            engines = {}
            for engine in order:
                engines[engine] = _engine(env, engine, total, args.timeout)
                _log(
                    f"run {n + 1}: --engine {engine} {engines[engine]['events_per_s']:,.0f} "
                    f"events/s (start-up {engines[engine]['startup_s']:.1f} s)"
                )
            default, faust = engines["aiokafka"]["events_per_s"], engines["faust"]["events_per_s"]
            runs.append(
                {
                    "plain_aiokafka": plain,
                    "engines": engines,
                    "faust_vs_default": faust / default,
                    "faust_vs_plain": faust / plain["events_per_s"],
                    "default_vs_plain": default / plain["events_per_s"],
                }
            )
    return {"args": {k: str(v) for k, v in vars(args).items()}, "records": total, "runs": runs}


def render(report: dict[str, Any]) -> str:
    runs = report["runs"]

    def span(values: list[float], fmt: str) -> str:
        low, high = min(values), max(values)
        return format(low, fmt) if low == high else f"{format(low, fmt)}-{format(high, fmt)}"

    def rates(engine: str | None) -> str:
        return span(
            [
                r["plain_aiokafka"]["events_per_s"]
                if engine is None
                else r["engines"][engine]["events_per_s"]
                for r in runs
            ],
            ",.0f",
        )

    lines = [
        f"{report['records']:,} raw records, {len(runs)} run(s), events/s (range over runs):",
        f"  plain aiokafka (read + decode)  {rates(None)}",
        f"  --engine aiokafka (default)     {rates('aiokafka')}",
        f"  --engine faust                  {rates('faust')}",
        "ratios (each run's own figures):",
        f"  faust / default engine          {span([r['faust_vs_default'] for r in runs], '.2f')}",
        f"  faust / plain aiokafka          {span([r['faust_vs_plain'] for r in runs], '.3f')}",
        f"  default engine / plain aiokafka {span([r['default_vs_plain'] for r in runs], '.3f')}",
        f"faust re-reads after skipped records: {[r['engines']['faust']['rereads'] for r in runs]}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300.0, help="per worker, seconds")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    report = run(args)
    print(render(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
