"""Benchmark: autoscaler log parsing throughput, lines/s on one core.

The bar: >= 100k lines/s. Input: the corpus's log lines (tests/data/autoscaler: the six
log files, 167 lines, every one traced to a public source in SOURCES.md) mixed with
the corpus's own *noise* lines (the klog lines that state no fact: loop starts,
"Upcoming 0 nodes", node-group discovery, expander chatter...) so that about
``--noise`` (default 90%) of the lines are noise, as in a real cluster-autoscaler
log, repeated to ``--lines`` (default 1,000,000). Each copy of a line gets a distinct
position, so ids differ; the parser keeps no cache. What is timed is
:func:`connectors.autoscaler.lines.parse_line` over ``bytes`` lines (what ``ingest
autoscaler`` does per line, minus reading and printing), best of ``--repeat``.

    python -m bench.autoscaler_bench                  # 1,000,000 lines, best of 3
    python -m bench.autoscaler_bench --lines 200000 --json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import time
from datetime import UTC, datetime
from pathlib import Path

from connectors.autoscaler.lines import LineContext, parse_line

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "autoscaler"
LOGS = (
    "ca_klog.log",
    "ca_klog_from_format.log",
    "ca_wrapped.log",
    "karpenter.jsonl",
    "karpenter_console.log",
    "karpenter_wrapped.log",
)


def corpus(ctx: LineContext) -> tuple[list[bytes], list[bytes]]:
    """(lines with a fact, lines without) of the corpus."""
    facts: list[bytes] = []
    noise: list[bytes] = []
    for name in LOGS:
        for raw in (DATA / name).read_bytes().splitlines(keepends=True):
            result = parse_line(raw, ctx, 0)
            (facts if result else noise).append(raw)
    return facts, noise


def build(lines: int, noise_share: float, seed: int = 12) -> list[bytes]:
    ctx = LineContext(cluster="bench", reference=datetime(2026, 7, 1, tzinfo=UTC))
    facts, noise = corpus(ctx)
    rng = random.Random(seed)
    return [
        rng.choice(noise) if rng.random() < noise_share else rng.choice(facts) for _ in range(lines)
    ]


def run_once(lines: list[bytes], ctx: LineContext) -> tuple[float, int]:
    records = 0
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        for number, raw in enumerate(lines, 1):
            result = parse_line(raw, ctx, number)
            if type(result) is tuple:
                records += len(result)
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    return elapsed, records


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=1_000_000)
    parser.add_argument("--noise", type=float, default=0.9)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    lines = build(args.lines, args.noise)
    ctx = LineContext(cluster="bench", reference=datetime(2026, 7, 1, tzinfo=UTC), source="b")
    runs = [run_once(lines, ctx) for _ in range(args.repeat)]
    rates = [len(lines) / elapsed for elapsed, _ in runs]
    result = {
        "lines": len(lines),
        "noise_share": args.noise,
        "records": runs[0][1],
        "lines_per_s": [round(rate) for rate in rates],
        "best_lines_per_s": round(max(rates)),
        "bar_lines_per_s": 100_000,
    }
    if args.json:
        print(json.dumps(result))
    else:
        for index, rate in enumerate(rates, 1):
            print(f"run {index}: {rate:,.0f} lines/s")
        print(
            f"best {max(rates):,.0f} lines/s over {len(lines):,} lines "
            f"({result['records']:,} records); bar 100,000"
        )


if __name__ == "__main__":
    main()
