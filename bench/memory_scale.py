"""The correlation core's memory as the fleet grows: RSS and bytes per tracked pod and GPU.

For each ``--nodes`` value, ``--events-per-node`` x nodes generated events go through one
:class:`~streams.core.Correlator`: RSS growth (``VmRSS`` after less before, input
preloaded and frozen) and retained bytes (tracemalloc on a fresh correlator), divided by
the tracked pods and GPUs (upper bounds: both divide the same total).

Trap: RSS never goes down in a process, so each size runs in a subprocess of its own
(``--one N``), and the tracemalloc pass comes after the RSS readings (its bookkeeping is
resident too). One run per size: the same stream is the same allocation sequence.
bench/README.md, design notes: memory_scale.py.

    python -m bench.memory_scale [--nodes 100,500 --events-per-node 50] [--json]
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in {None, ""}:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tqdm import tqdm

from bench.core_bench import fill, load_stream, measure_memory, stream_file, tracked_gpus
from bench.generate import StreamSpec
from schemas import native
from streams.config import default_core_config
from streams.core import Correlator

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_NODES = (100, 500, 1_000, 2_000, 5_000)
EVENTS_PER_NODE = 200
"""The acceptance stream's density: 1,000,000 events over 5,000 nodes."""


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def rss_kib(field: str = "VmRSS") -> int:
    """This process's resident set (``VmRSS``) or its peak (``VmHWM``), KiB (Linux)."""
    status = Path("/proc/self/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
    if match is None:
        raise RuntimeError(f"no {field} in /proc/self/status")
    return int(match.group(1))


def spec_for(nodes: int, events_per_node: int) -> StreamSpec:
    return StreamSpec(events=nodes * events_per_node, nodes=nodes)


def one_size(nodes: int, events_per_node: int) -> dict[str, Any]:
    """Both measurements for one fleet size, in this process (run it in a fresh one, with
    the stream already cached: see :func:`run`)."""
    lines, source = load_stream(spec_for(nodes, events_per_node), cache=True)
    config = default_core_config()
    gc.collect()
    gc.freeze()
    before = rss_kib()
    began = time.perf_counter()
    correlator = fill(Correlator(config), lines)
    seconds = time.perf_counter() - began
    gc.collect()
    after = rss_kib()
    pods, gpus = correlator.tracked_pods(), tracked_gpus(correlator)
    del correlator
    gc.collect()
    memory = measure_memory(lines, config, top=0)
    growth = (after - before) * 1024
    return {
        "nodes": nodes,
        "events": len(lines),
        "input_mb": sum(map(len, lines)) / 1e6,
        "generated": source["generated"],
        "core": native.active(),
        "ingest_s": seconds,
        "rss_before_mb": before / 1024,
        "rss_after_mb": after / 1024,
        "rss_growth_mb": growth / 2**20,
        "rss_peak_mb": rss_kib("VmHWM") / 1024,
        "tracked_pods": pods,
        "tracked_gpus": gpus,
        "rss_bytes_per_pod": growth / pods if pods else None,
        "rss_bytes_per_gpu": growth / gpus if gpus else None,
        "retained_mb": memory.retained_bytes / 2**20,
        "bytes_per_pod": memory.bytes_per_pod,
        "bytes_per_gpu": memory.bytes_per_gpu,
        "by_field": memory.by_field,
    }


def run(sizes: list[int], events_per_node: int) -> list[dict[str, Any]]:
    """Each size in a subprocess of its own (see the module: RSS only grows), its stream
    generated into the cache here first: a child that generated it would start from a
    heap the generator's freed objects left resident, and its state would grow into
    that memory unseen by RSS."""
    rows = []
    for nodes in tqdm(sizes, desc="memory", unit="size", file=sys.stderr, disable=None):
        stream_file(spec_for(nodes, events_per_node))
        command = [
            sys.executable,
            "-m",
            "bench.memory_scale",
            "--one",
            str(nodes),
            "--events-per-node",
            str(events_per_node),
        ]
        done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{nodes} nodes: {' '.join(command)} exited {done.returncode}")
        row = json.loads(done.stdout)
        rows.append(row)
        _log(
            f"{nodes:,} nodes: RSS +{row['rss_growth_mb']:.0f} MB, "
            f"{row['bytes_per_pod'] or 0:,.0f} B per pod, "
            f"{row['bytes_per_gpu'] or 0:,.0f} B per GPU"
        )
    return rows


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        f"{'nodes':>6} {'events':>10} {'pods':>8} {'GPUs':>8} {'RSS +MB':>8} "
        f"{'held MB':>8} {'B/pod':>7} {'B/GPU':>7} {'RSS B/pod':>10}"
    ]
    for r in rows:
        lines.append(
            f"{r['nodes']:>6,} {r['events']:>10,} {r['tracked_pods']:>8,} {r['tracked_gpus']:>8,} "
            f"{r['rss_growth_mb']:>8.1f} {r['retained_mb']:>8.1f} {r['bytes_per_pod'] or 0:>7,.0f} "
            f"{r['bytes_per_gpu'] or 0:>7,.0f} {r['rss_bytes_per_pod'] or 0:>10,.0f}"
        )
    lines.append(
        "held = tracemalloc's bytes still allocated after the run (B/pod, B/GPU divide it); "
        "RSS + = resident growth over the loaded input"
    )
    return "\n".join(lines)


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument(
        "--nodes",
        type=_sizes,
        default=list(DEFAULT_NODES),
        help="fleet sizes, comma-separated (default 100,500,1000,2000,5000)",
    )
    parser.add_argument("--events-per-node", type=int, default=EVENTS_PER_NODE)
    parser.add_argument("--one", type=int, metavar="N", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if args.one is not None:  # the child: one size, JSON on stdout
        print(json.dumps(one_size(args.one, args.events_per_node)))
        return 0
    rows = run(args.nodes, args.events_per_node)
    print(json.dumps({"rows": rows}, indent=2) if args.json else render(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
