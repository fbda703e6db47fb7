"""Command-line shim over :mod:`gputriage.simulate` (the one generator), for the benchmarks.

Write the benchmarks' stream (an exact event count) to a file::

    python bench/generate.py --events 1000000 --nodes 5000 --out bench/out/stream.jsonl.gz

The benches import :class:`StreamSpec`, :func:`generate_lines` and friends from here or
from :mod:`gputriage.simulate`; ``gputriage simulate`` is the user's command (by
duration, with ground truth).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from gputriage.simulate import (
    GENERATOR_VERSION,
    StreamSpec,
    generate_events,
    generate_lines,
    open_output,
    read_lines,
    write_lines,
)

__all__ = [
    "GENERATOR_VERSION",
    "StreamSpec",
    "generate_events",
    "generate_lines",
    "main",
    "open_output",
    "read_lines",
    "write_lines",
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    defaults = StreamSpec()
    parser.add_argument("--events", type=int, default=defaults.events)
    parser.add_argument("--nodes", type=int, default=defaults.nodes)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--clusters", type=int, default=defaults.clusters)
    parser.add_argument("--hours", type=float, default=defaults.hours, help="cluster time covered")
    parser.add_argument(
        "--jitter", type=float, default=defaults.jitter, help="event-time jitter, s"
    )
    parser.add_argument("--out", default="-", help="output file (.gz: gzip), - for stdout")
    args = parser.parse_args(argv)
    spec = StreamSpec(
        events=args.events,
        nodes=args.nodes,
        seed=args.seed,
        clusters=args.clusters,
        hours=args.hours,
        jitter=args.jitter,
    )
    counts: Counter[str] = Counter()
    began = time.perf_counter()
    out = open_output(args.out)
    try:
        size = write_lines(generate_lines(spec, counts), out)
    finally:
        if out is not sys.stdout.buffer:
            out.close()
    elapsed = time.perf_counter() - began
    print(
        f"{spec.events} events over {spec.nodes} nodes ({spec.clusters} clusters, "
        f"{spec.hours:g} h) in {elapsed:.1f} s, {size / 1e6:.1f} MB",
        file=sys.stderr,
    )
    for schema, count in sorted(counts.items(), key=lambda kv: -kv[1]):
        print(f"  {schema:16} {count:>10}  {100 * count / spec.events:6.2f} %", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
