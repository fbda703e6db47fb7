"""``gputriage replay`` speed: events/s and times real time, on the core bench's stream.

The target: replay >= 2,000x real time on the 5,000-node bench stream. What is timed is
the CLI a user runs, as a subprocess, wall clock from start to exit (start-up, imports,
decompression, decoding, routing, the core, encoding), on the very stream ``core_bench.py``
times; speed is the stream's event-time span over the wall time.

Trap: the bench pins itself (and so the replay) to one CPU, as the core bench does;
``--repeat`` runs, the best counts, all listed. bench/README.md, design notes:
replay_bench.py.

    python -m bench.replay_bench [--events 100000 --nodes 500 --repeat 1] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in {None, ""}:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.core_bench import pin_one_core, stream_file
from bench.generate import StreamSpec
from schemas import native

ROOT = Path(__file__).resolve().parents[1]
BAR_X_REAL_TIME = 2_000


def _log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def replay_once(path: Path) -> tuple[float, int]:
    """Wall seconds of one ``gputriage replay`` of ``path``, and the revisions it printed."""
    command = [sys.executable, "-m", "gputriage", "replay", "-o", "json", "--no-progress"]
    began = time.perf_counter()
    done = subprocess.run([*command, str(path)], cwd=ROOT, stdout=subprocess.PIPE, check=False)
    seconds = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"gputriage replay {path} exited {done.returncode}")
    return seconds, done.stdout.count(b"\n")


def main(argv: list[str] | None = None) -> int:
    defaults = StreamSpec()
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--events", type=int, default=defaults.events)
    parser.add_argument("--nodes", type=int, default=defaults.nodes)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--repeat", type=int, default=3, help="runs; the best counts")
    parser.add_argument("--no-pin", action="store_true", help="do not pin to one CPU")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)

    spec = StreamSpec(events=args.events, nodes=args.nodes, seed=args.seed)
    path = stream_file(spec)
    cpu = "not pinned" if args.no_pin else pin_one_core()
    runs: list[float] = []
    revisions = 0
    for n in range(args.repeat):
        seconds, revisions = replay_once(path)
        runs.append(seconds)
        _log(f"replay {n + 1}/{args.repeat}: {seconds:.2f} s")
    best = min(runs)
    span = spec.hours * 3600
    result: dict[str, Any] = {
        "stream": {
            "events": spec.events,
            "nodes": spec.nodes,
            "seed": spec.seed,
            "hours": spec.hours,
            "file": str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path),
            "mb": os.path.getsize(path) / 1e6,
        },
        "machine": {"cpu": cpu, "core": native.active()},
        "runs_s": runs,
        "seconds": best,
        "events_per_s": spec.events / best,
        "x_real_time": span / best,
        "x_real_time_runs": [span / s for s in runs],
        "incident_revisions": revisions,
        "bar_x_real_time": BAR_X_REAL_TIME,
        "met": span / best >= BAR_X_REAL_TIME,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"gputriage replay: {spec.events:,} events over {spec.nodes:,} nodes "
            f"({spec.hours:g} h of event time), {cpu}, core {native.active()}\n"
            f"  runs {', '.join(f'{s:.2f}' for s in runs)} s; best {best:.2f} s = "
            f"{result['events_per_s']:,.0f} events/s = {result['x_real_time']:,.0f}x real time "
            f"({revisions:,} revisions)\n"
            f"  bar >= {BAR_X_REAL_TIME:,}x: {'met' if result['met'] else 'NOT met'}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
