"""Peak memory of a worker over a backlog where one partition lags.

Every event keyed to partition 0 is moved ``--lag-hours`` earlier, so the other partitions
run ahead in event time and an unbounded worker buffers them until partition 0 catches
up. For each ``--caps`` value (0: no cap) a fresh ``gputriage process`` worker reads the
whole backlog; the report gives its peak RSS (``VmHWM``, read before it stops), the
buffer's peak, the pauses and the time taken.
bench/README.md, design notes: backlog_memory.py.

    .venv/bin/python bench/backlog_memory.py [--events 500000 --partitions 12] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

if __package__ in {None, ""}:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiokafka import AIOKafkaConsumer

from bench.pipeline_bench import Env, WorkerProcess, backlog_events, committed_total, produce
from connectors.kafka.admin import ensure_topics
from gputriage.demo.broker import EmbeddedBroker
from gputriage.demo.player import retime
from schemas.codec import AnyEvent
from schemas.keys import correlation_key
from streams.app.changelog import partition_for

UNBOUNDED = 100_000_000


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def lagging(events: list[AnyEvent], partitions: int, hours: float) -> list[AnyEvent]:
    """Every event keyed to partition 0 moved ``hours`` earlier (each partition stays
    in event-time order)."""
    by = timedelta(hours=hours)
    return [
        retime(e, lambda moment: moment - by)
        if partition_for(correlation_key(e), partitions) == 0
        else e
        for e in events
    ]


def vm_hwm_kib(pid: int) -> int:
    """The process's peak resident set size, in KiB (Linux)."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no VmHWM in /proc/{pid}/status")
    return int(match.group(1))


def scrape(worker: WorkerProcess) -> dict[str, float]:
    """The worker's unlabelled metrics, by name."""
    found = re.findall(r"metrics on http://[^:]+:(\d+)/metrics", worker.log())
    if not found:
        return {}
    with urllib.request.urlopen(f"http://127.0.0.1:{found[-1]}/metrics", timeout=5) as r:
        text = r.read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.split()[:2]
            values[name] = float(value)
    return values


async def drain(env: Env, worker: WorkerProcess, total: int, timeout: float) -> float:
    """Wait until the worker's group committed every raw record; the seconds it took."""
    tps = env.raw_partitions()
    reader = AIOKafkaConsumer(**env.kwargs, group_id=worker.app_id, enable_auto_commit=False)
    await reader.start()
    try:
        started = time.perf_counter()
        while time.perf_counter() - started < timeout:
            if worker.process.poll() is not None:
                raise RuntimeError(f"the worker exited:\n{worker.log()[-3000:]}")
            try:
                if await committed_total(reader, tps) >= total:
                    return time.perf_counter() - started
            except Exception:  # the group may not exist yet
                pass
            await asyncio.sleep(0.2)
    finally:
        await reader.stop()
    raise RuntimeError(f"not all {total} records committed within {timeout:g} s")


def run(args: argparse.Namespace) -> dict[str, Any]:
    caps = [int(c) for c in args.caps.split(",")]
    extra = dict(kv.split("=", 1) for kv in args.worker_env)
    report: dict[str, Any] = {"args": vars(args), "runs": []}
    with (
        tempfile.TemporaryDirectory(prefix="backlog-memory-") as tmp,
        EmbeddedBroker() as broker,
    ):
        env = Env(broker, f"bench{uuid.uuid4().hex[:8]}", args.partitions, Path(tmp))
        asyncio.run(ensure_topics(env.kwargs, env.layout))
        events = lagging(
            backlog_events(args.events, args.nodes, days_ago=3.0), args.partitions, args.lag_hours
        )
        total = asyncio.run(produce(env, events))
        del events
        _log(f"produced {total} events, partition 0 {args.lag_hours:g} h behind")
        for run_no, cap in enumerate(caps):
            app = f"{env.prefix}-{run_no}-cap{cap}"
            worker = WorkerProcess(
                env,
                app,
                {**extra, "GPUTRIAGE_PROCESSOR__MAX_BUFFERED_EVENTS": str(cap or UNBOUNDED)},
            )
            try:
                seconds = asyncio.run(drain(env, worker, total, args.timeout))
                hwm = vm_hwm_kib(worker.process.pid)
                metrics = scrape(worker)
            finally:
                code = worker.stop()
            if code != 0:
                raise RuntimeError(f"worker exited with {code}:\n{worker.log()[-3000:]}")
            row = {
                "cap": cap or None,
                "peak_rss_mb": hwm / 1024,
                "peak_buffered": metrics.get("gputriage_buffered_events_peak"),
                "pauses": metrics.get("gputriage_partition_pauses_total"),
                "seconds": seconds,
                "events_per_s": total / seconds,
            }
            report["runs"].append(row)
            _log(f"cap {cap or 'none'}: {row}")
    return report


def render(report: dict[str, Any]) -> str:
    a = report["args"]
    lines = [
        f"{a['events']:,} events, {a['nodes']:,} nodes, {a['partitions']} partitions, "
        f"partition 0 {a['lag_hours']:g} h behind",
        f"{'cap':>12}  {'peak RSS':>9}  {'peak buffered':>13}  {'pauses':>7}  {'drain':>7}",
    ]
    for r in report["runs"]:
        cap = f"{r['cap']:,}" if r["cap"] else "none"
        lines.append(
            f"{cap:>12}  {r['peak_rss_mb']:>6.0f} MB  {r['peak_buffered'] or 0:>13,.0f}  "
            f"{r['pauses'] or 0:>7,.0f}  {r['seconds']:>6.1f}s"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--nodes", type=int, default=2_000)
    parser.add_argument("--partitions", type=int, default=3)
    parser.add_argument("--lag-hours", type=float, default=2.0)
    parser.add_argument("--caps", default="0,100000,20000", help="comma-separated; 0: no cap")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--worker-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the workers (e.g. a shorter group session)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = run(args)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
