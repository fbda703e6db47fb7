"""Benchmark of the correlation core alone: events/s on one core, decode included.

The bar: on a generated stream of >= 1M events over >= 5,000 nodes, ``decode_event`` +
``Correlator.ingest`` sustain >= 100k events/s on one core, with <= 1 KB of state per
tracked pod. Passes over one in-memory list of lines: decode only, decode + core, and
memory (tracemalloc, timed apart since it slows the run several times). The stream comes
from :mod:`gputriage.simulate`, cached under ``bench/out/``.

Trap: retained bytes divided by tracked pods is an upper bound (node, GPU, incident and
timer state are counted too). bench/README.md, design notes: core_bench.py.

    python -m bench.core_bench [--events 200000 --nodes 1000] [--json]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import platform
import pstats
import sys
import time
import tracemalloc
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

if __package__ in {None, ""}:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import msgspec

from gputriage.simulate import StreamSpec, generate_lines, read_lines, write_lines
from schemas import native
from schemas.codec import decode_event
from schemas.incidents import Incident
from schemas.keys import Router
from streams.config import default_core_config
from streams.core import CoreSettings, Correlator
from streams.core.state import NodeState

OUT = Path(__file__).resolve().parent / "out"
BAR_EVENTS_PER_S = 100_000
BAR_BYTES_PER_POD = 1024


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- input


def load_stream(spec: StreamSpec, *, cache: bool) -> tuple[list[bytes], dict[str, Any]]:
    """The stream as a list of lines, from the cache under ``bench/out/`` or generated."""
    path = OUT / spec.cache_name()
    began = time.perf_counter()
    if cache and path.exists():
        lines = read_lines(path)
        info = {"source": str(path), "generated": False, "load_s": time.perf_counter() - began}
        if len(lines) == spec.events:
            return lines, info
        _log(f"{path}: {len(lines)} lines, expected {spec.events}: regenerating")
    _log(f"generating {spec.events:,} events over {spec.nodes:,} nodes (seed {spec.seed})...")
    lines = list(generate_lines(spec))
    info = {"source": "generated", "generated": True, "load_s": time.perf_counter() - began}
    if cache:
        _write_cache(path, iter(lines))
        info["source"] = str(path)
    return lines, info


def stream_file(spec: StreamSpec) -> Path:
    """The cached stream's file under ``bench/out/``, generated first if absent (streamed
    to disk: the lines are never all in memory). What ``load_stream`` reads, so the
    replay bench and this one time the same bytes."""
    path = OUT / spec.cache_name()
    if not path.exists():
        _log(f"generating {spec.events:,} events over {spec.nodes:,} nodes (seed {spec.seed})...")
        _write_cache(path, generate_lines(spec))
    return path


def _write_cache(path: Path, lines: Iterator[bytes]) -> None:
    """Write through a ``.partial`` file, renamed when complete: an interrupted run never
    leaves a short file that a later one would take for the stream."""
    OUT.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    with partial.open("wb") as f:
        write_lines(lines, f)
    partial.replace(path)


def schema_mix(lines: list[bytes]) -> dict[str, int]:
    """Events by schema, read off each line's leading ``{"schema":"..."`` tag."""
    counts: Counter[bytes] = Counter()
    prefix = len(b'{"schema":"')
    for line in lines:
        counts[line[prefix : line.index(b'"', prefix)]] += 1
    return {k.decode(): v for k, v in counts.most_common()}


# --------------------------------------------------------------------------- passes


def pin_one_core() -> str:
    """Run on one CPU, so "events/s on one core" means what it says."""
    if not hasattr(os, "sched_setaffinity"):
        return "not pinned (no sched_setaffinity)"
    cpu = max(os.sched_getaffinity(0))  # CPU 0 tends to take the interrupts
    os.sched_setaffinity(0, {cpu})
    return f"pinned to CPU {cpu}"


def time_decode(lines: list[bytes]) -> float:
    decode = decode_event
    began = time.perf_counter()
    for line in lines:
        decode(line)
    return time.perf_counter() - began


class GcTimer:
    """Time spent in the cyclic garbage collector, via ``gc.callbacks``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = 0
        self._began = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began
            self.collections += 1

    def __enter__(self) -> GcTimer:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


class CoreRun(msgspec.Struct, kw_only=True):
    seconds: float
    cpu_seconds: float
    gc_seconds: float
    gc_collections: int
    revisions: dict[str, int]
    incidents: dict[str, int]
    by_status: dict[str, int]
    tracked_pods: int
    keys: int
    node_keys: int
    stats: dict[str, Any]


def run_core(lines: list[bytes], config: CoreSettings) -> CoreRun:
    """``decode_event`` + ``Correlator.ingest`` on every line (and on the copy the producer
    routes to the cluster key: :class:`schemas.keys.Router`), then ``flush()``, timed."""
    decode = decode_event
    produced: list[Incident] = []
    correlator = Correlator(config)
    ingest = correlator.ingest
    route = Router().route
    with GcTimer() as collector:
        began, began_cpu = time.perf_counter(), time.process_time()
        for line in lines:
            for event in route(decode(line)):  # as the replay and the producer route it
                out = ingest(event)
                if out:
                    produced.extend(out)
        produced.extend(correlator.flush())
        seconds, cpu_seconds = time.perf_counter() - began, time.process_time() - began_cpu
    revisions: Counter[str] = Counter(i.type for i in produced)
    by_status: Counter[str] = Counter(i.status for i in produced)
    distinct: Counter[str] = Counter(t for t, _ in {(i.type, i.id) for i in produced})
    node_keys = sum(1 for k in correlator.keys if "/" in k)
    return CoreRun(
        seconds=seconds,
        cpu_seconds=cpu_seconds,
        gc_seconds=collector.seconds,
        gc_collections=collector.collections,
        revisions=dict(sorted(revisions.items())),
        incidents=dict(sorted(distinct.items())),
        by_status=dict(sorted(by_status.items())),
        tracked_pods=correlator.tracked_pods(),
        keys=len(correlator.keys),
        node_keys=node_keys,
        stats=msgspec.to_builtins(correlator.stats),
    )


def fill(correlator: Correlator, lines: list[bytes]) -> Correlator:
    """Every line decoded and ingested (with the copies routed to the cluster key, as in
    :func:`run_core`), then ``flush()``: the correlator holding the whole stream's state.
    Nothing produced is kept, so what is still allocated afterwards is the state."""
    decode = decode_event
    ingest = correlator.ingest
    route = Router().route
    for line in lines:
        for event in route(decode(line)):
            ingest(event)
    correlator.flush()
    return correlator


def tracked_gpus(correlator: Correlator) -> int:
    """GPUs the node keys track (``NodeState.gpus``): the other denominator of the state."""
    return sum(len(s.gpus) for s in correlator.keys.values() if isinstance(s, NodeState))


class MemoryRun(msgspec.Struct, kw_only=True):
    retained_bytes: int
    tracked_pods: int
    bytes_per_pod: float | None
    tracked_gpus: int
    bytes_per_gpu: float | None
    peak_bytes: int
    top: list[dict[str, Any]]
    by_field: dict[str, int]
    """``sys.getsizeof`` summed over the object graph under each field of the key
    states (``NodeState.pods``...), each object counted once."""


_SKIP: tuple[type[Any], ...] = (bool, type, type(None), type(len), type(sys))


def _deep_size(root: object, seen: set[int]) -> int:
    """Bytes of the objects reachable from ``root`` through containers, structs and
    instance attributes, skipping objects already in ``seen`` (which it extends)."""
    total = 0
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, _SKIP):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, str | bytes | int | float):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
        elif isinstance(obj, msgspec.Struct):
            stack.extend(getattr(obj, name) for name in obj.__struct_fields__)
        elif hasattr(obj, "__dict__"):
            stack.extend(vars(obj).values())
    return total


def state_by_field(keys: Mapping[str, object], exclude: object) -> dict[str, int]:
    """Deep sizes of the per-key state, by ``StateType.field`` (largest first)."""
    seen = {id(exclude)}
    sizes: Counter[str] = Counter()
    sizes["(keys dict and key strings)"] += sys.getsizeof(keys) + sum(
        _deep_size(k, seen) for k in keys
    )
    for state in keys.values():
        kind = type(state).__name__
        if id(state) in seen:
            continue
        seen.add(id(state))
        sizes[f"{kind} (the struct itself)"] += sys.getsizeof(state)
        fields = getattr(state, "__struct_fields__", None)
        if fields is None:
            sizes[f"{kind} (attributes)"] += _deep_size(vars(state), seen)
            continue
        for name in fields:
            sizes[f"{kind}.{name}"] += _deep_size(getattr(state, name), seen)
    return dict(sizes.most_common())


def measure_memory(lines: list[bytes], config: CoreSettings, top: int) -> MemoryRun:
    """What the Correlator retains after the run, per tracemalloc."""
    gc.collect()
    tracemalloc.start(1)
    try:
        base = tracemalloc.get_traced_memory()[0]
        correlator = fill(Correlator(config), lines)
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - base
        peak = tracemalloc.get_traced_memory()[1] - base
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    tracked = correlator.tracked_pods()
    gpus = tracked_gpus(correlator)
    sites = [
        {
            "site": f"{Path(s.traceback[0].filename).name}:{s.traceback[0].lineno}",
            "path": s.traceback[0].filename,
            "bytes": s.size,
            "blocks": s.count,
        }
        for s in snapshot.statistics("lineno")[:top]
    ]
    del snapshot
    by_field = state_by_field(correlator.keys, config)
    del correlator
    return MemoryRun(
        retained_bytes=retained,
        tracked_pods=tracked,
        bytes_per_pod=retained / tracked if tracked else None,
        tracked_gpus=gpus,
        bytes_per_gpu=retained / gpus if gpus else None,
        peak_bytes=peak,
        top=sites,
        by_field=by_field,
    )


def profile_core(lines: list[bytes], config: CoreSettings, top: int) -> str:
    """cProfile of the decode + core pass: the functions with the most own time."""
    profiler = cProfile.Profile()
    profiler.enable()
    fill(Correlator(config), lines)
    profiler.disable()
    OUT.mkdir(parents=True, exist_ok=True)
    profiler.dump_stats(OUT / "core.prof")
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("tottime").print_stats(top)
    return text.getvalue()


# --------------------------------------------------------------------------- report


def _rate(events: int, seconds: float) -> float:
    return events / seconds if seconds > 0 else float("inf")


def report_table(result: dict[str, Any]) -> str:
    s = result["stream"]
    t = result["timing"]
    m = result.get("memory")
    core = result["core"]
    n = s["events"]
    lines = [
        "gputriage core benchmark (streams.core.Correlator alone)",
        "",
        f"stream    {n:,} events, {s['nodes']:,} nodes, {s['clusters']} clusters, "
        f"seed {s['seed']}, {s['hours']:g} h of event time, {s['mb']:.0f} MB of JSON",
        f"          {s['source']} ({'generated' if s['generated'] else 'loaded'} "
        f"in {s['load_s']:.1f} s)",
        "          mix: "
        + ", ".join(f"{k} {v:,} ({100 * v / n:.1f}%)" for k, v in s["mix"].items()),
        f"machine   {result['machine']['cpu']}; Python {result['machine']['python']}, "
        f"msgspec {result['machine']['msgspec']}; core {result['machine']['core']}; "
        f"best of {t['repeat']}",
        "",
        f"{'pass':34}{'seconds':>9}{'events/s':>12}{'us/event':>10}{'x decode':>10}",
    ]
    decode_s = t["decode_s"]
    for label, seconds in (
        ("decode only (decode_event)", decode_s),
        ("decode + Correlator.ingest + flush", t["core_s"]),
        ("core alone (difference)", t["core_s"] - decode_s),
    ):
        lines.append(
            f"{label:34}{seconds:9.2f}{_rate(n, seconds):12,.0f}"
            f"{1e6 * seconds / n:10.2f}{seconds / decode_s:10.2f}"
        )
    lines.append(
        f"{'':34}(process time {t['core_cpu_s']:.2f} s; cyclic GC {core['gc_seconds']:.2f} s "
        f"in {core['gc_collections']:,} collections)"
    )
    runs = ", ".join(f"{x:.2f}" for x in t["core_runs_s"])
    lines.append(f"{'':34}(decode + core runs: {runs} s; the best counts)")
    lines += ["", f"{'incidents':30}{'distinct':>10}{'revisions':>11}"]
    for kind, revisions in core["revisions"].items():
        lines.append(f"  {kind:28}{core['incidents'].get(kind, 0):10,}{revisions:11,}")
    if not core["revisions"]:
        lines.append("  (none)")
    lines.append("  by status: " + ", ".join(f"{k} {v:,}" for k, v in core["by_status"].items()))
    lines.append("  core stats: " + ", ".join(f"{k} {v:,}" for k, v in core["stats"].items()))
    lines += [
        "",
        f"state     {core['tracked_pods']:,} tracked pods, {core['keys']:,} keys "
        f"({core['node_keys']:,} node, {core['keys'] - core['node_keys']:,} cluster)",
    ]
    if m is not None:
        per_pod = m["bytes_per_pod"]
        lines += [
            f"          {m['retained_bytes'] / 1e6:.1f} MB retained by the Correlator after the "
            f"run (peak {m['peak_bytes'] / 1e6:.1f} MB; tracemalloc, inputs and decoded events "
            "released)",
            f"          {per_pod:,.0f} bytes per tracked pod"
            if per_pod is not None
            else "          no tracked pods",
            f"          ({m['tracked_gpus']:,} tracked GPUs: "
            + (
                f"{m['bytes_per_gpu']:,.0f} bytes per GPU, the same total)"
                if m["bytes_per_gpu"] is not None
                else "no GPUs)"
            ),
            "          (an upper bound: it also counts node, GPU, incident, timer and",
            "          buffered-event state, all divided by the number of pods)",
        ]
        pods = max(core["tracked_pods"], 1)
        walked = sum(m["by_field"].values())
        lines.append(
            f"          state by field (deep getsizeof, {walked / 1e6:.1f} MB walked), "
            "bytes per tracked pod:"
        )
        for name, size in m["by_field"].items():
            if size < walked / 100:
                break
            lines.append(f"            {size / pods:8,.0f}  {name}")
        lines.append("          largest allocation sites still held (tracemalloc):")
        for site in m["top"]:
            lines.append(
                f"            {site['bytes'] / 1e6:8.2f} MB {site['blocks']:>9,} blocks  "
                f"{site['site']}"
            )
    a = result["acceptance"]
    lines += [
        "",
        f"bar       events/s (decode + core) >= {BAR_EVENTS_PER_S:,}: "
        f"{'PASS' if a['events_per_s_ok'] else 'FAIL'} ({a['events_per_s']:,.0f})",
    ]
    if a["bytes_per_pod"] is not None:
        lines.append(
            f"          bytes per tracked pod <= {BAR_BYTES_PER_POD:,}: "
            f"{'PASS' if a['bytes_per_pod_ok'] else 'FAIL'} ({a['bytes_per_pod']:,.0f})"
        )
    if not a["stream_ok"]:
        lines.append("          (stream smaller than the acceptance's 1M events / 5,000 nodes)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    defaults = StreamSpec()
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n", 1)[0])
    parser.add_argument("--events", type=int, default=defaults.events)
    parser.add_argument("--nodes", type=int, default=defaults.nodes)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--clusters", type=int, default=defaults.clusters)
    parser.add_argument("--repeat", type=int, default=3, help="timed passes; the best counts")
    parser.add_argument("--no-pin", action="store_true", help="do not pin the process to one CPU")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc pass")
    parser.add_argument("--top", type=int, default=8, help="allocation sites to list")
    parser.add_argument(
        "--profile", type=int, default=0, metavar="N", help="also print a cProfile top N"
    )
    parser.add_argument("--no-cache", action="store_true", help="neither read nor write bench/out/")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)

    spec = StreamSpec(events=args.events, nodes=args.nodes, seed=args.seed, clusters=args.clusters)
    lines, source = load_stream(spec, cache=not args.no_cache)
    config = default_core_config()
    cpu = "not pinned" if args.no_pin else pin_one_core()
    gc.collect()
    gc.freeze()  # the million input lines are no business of the collector's

    decode_runs: list[float] = []
    runs: list[CoreRun] = []
    for i in range(args.repeat):  # interleaved, so that noise hits both alike
        _log(f"timing decode only ({i + 1}/{args.repeat})...")
        decode_runs.append(time_decode(lines))
        _log(f"timing decode + core ({i + 1}/{args.repeat})...")
        runs.append(run_core(lines, config))
    decode_s = min(decode_runs)
    core = min(runs, key=lambda r: r.seconds)
    memory = None
    if not args.no_memory:
        _log("measuring retained memory (tracemalloc)...")
        memory = measure_memory(lines, config, args.top)
    profile = ""
    if args.profile:
        _log("profiling (cProfile)...")
        profile = profile_core(lines, config, args.profile)

    events_per_s = _rate(len(lines), core.seconds)
    per_pod = memory.bytes_per_pod if memory is not None else None
    result: dict[str, Any] = {
        "stream": {
            "events": len(lines),
            "nodes": spec.nodes,
            "clusters": spec.clusters,
            "seed": spec.seed,
            "hours": spec.hours,
            "mb": sum(map(len, lines)) / 1e6,
            "mix": schema_mix(lines),
            **source,
        },
        "machine": {
            "cpu": cpu,
            "python": platform.python_version(),
            "msgspec": msgspec.__version__,
            "core": native.active(),
        },
        "timing": {
            "repeat": args.repeat,
            "decode_runs_s": decode_runs,
            "core_runs_s": [r.seconds for r in runs],
            "decode_s": decode_s,
            "decode_events_per_s": _rate(len(lines), decode_s),
            "core_s": core.seconds,
            "core_cpu_s": core.cpu_seconds,
            "events_per_s": events_per_s,
            "core_only_s": core.seconds - decode_s,
            "core_only_events_per_s": _rate(len(lines), core.seconds - decode_s),
            "ratio_to_decode": core.seconds / decode_s,
        },
        "core": msgspec.to_builtins(core),
        "memory": msgspec.to_builtins(memory) if memory is not None else None,
        "acceptance": {
            "stream_ok": len(lines) >= 1_000_000 and spec.nodes >= 5_000,
            "events_per_s": events_per_s,
            "events_per_s_ok": events_per_s >= BAR_EVENTS_PER_S,
            "bytes_per_pod": per_pod,
            "bytes_per_pod_ok": per_pod is not None and per_pod <= BAR_BYTES_PER_POD,
        },
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(report_table(result))
        if profile:
            print("\ncProfile of decode + core, by own time:\n" + profile)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
