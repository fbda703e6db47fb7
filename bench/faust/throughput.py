"""faust agent vs plain aiokafka on the same topic, in the same run, on the embedded broker.

    .venv/bin/python bench/faust/throughput.py [-n 100000] [-v naive,best] [--profile naive]

N ~250-byte records keyed over 5,000 keys on a 6-partition topic, read once per variant
with a fresh group: plain ``getmany`` (first and last) and each faust variant in a worker
subprocess. Every variant does the same work per record; records/s runs from the first
record to the N-th, so start-up is reported apart.

Trap: each faust worker has a ``--deadline``; a late one is killed and reported with what
it had done. Results go to stdout and ``bench/out/faust/throughput.json``.
bench/README.md, design notes: faust/throughput.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

if __package__ in {None, ""}:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.faust.common import (
    OUT_DIR,
    Broker,
    aiokafka_getmany,
    create_topic,
    produce_all,
    records,
    tansu,
)

WORKER = Path(__file__).with_name("worker.py")

_LEAN: dict[str, Any] = {"batch_drain": True, "noop_monitor": True}

#: name -> (description, worker spec fragment)
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "naive-defaults": (
        "async for value in stream, faust defaults (web on, 60 s session timeout)",
        {
            "mode": "naive",
            "keep_spinner": True,
            "conf": {
                "web_enabled": True,
                "broker_session_timeout": 60.0,
                "broker_heartbeat_interval": 3.0,
                "broker_rebalance_timeout": 60.0,
            },
        },
    ),
    "naive": (
        "async for value in stream, web off, 10 s session timeout, spinner on",
        {"mode": "naive", "keep_spinner": True},
    ),
    "naive+nospin": ("naive, without the spinner (root logger at WARNING)", {"mode": "naive"}),
    "take": ("stream.take(1000, within=0.05)", {"mode": "take", "batch": 1000, "within": 0.05}),
    "naive+drain": ("naive + batch drain patch", {"mode": "naive", "batch_drain": True}),
    "naive+lean": ("naive + batch drain + NoopMonitor", {"mode": "naive", **_LEAN}),
    "take+lean": (
        "take(1000, 0.05) + batch drain + NoopMonitor",
        {"mode": "take", "batch": 1000, "within": 0.05, **_LEAN},
    ),
    "events+lean": ("stream.events() + batch drain + NoopMonitor", {"mode": "events", **_LEAN}),
    "noack+lean": (
        "stream.noack().events(), manual ack per 1000 + batch drain + NoopMonitor",
        {"mode": "noack_events", "batch": 1000, **_LEAN},
    ),
    "take+lean+table": (
        "take_events(1000, 0.05) + lean + table[key] = v per distinct key per batch",
        {"mode": "take_events", "batch": 1000, "within": 0.05, "table": True, **_LEAN},
    ),
    "take+lean+fastlog": (
        "take_events(1000, 0.05) + lean + table.data[k] = v, changelog via app.producer.send",
        {
            "mode": "take_events",
            "batch": 1000,
            "within": 0.05,
            "table": True,
            "fast_changelog": True,
            **_LEAN,
        },
    ),
    "noack+lean+fastlog": (
        "noack events, ack per 1000 + lean + changelog via app.producer.send",
        {"mode": "noack_events", "batch": 1000, "table": True, "fast_changelog": True, **_LEAN},
    ),
    "take+lean+table+send": (
        "take+lean+table + Topic.send() per 100 records, awaited before the ack",
        {
            "mode": "take_events",
            "batch": 1000,
            "within": 0.05,
            "table": True,
            "send_every": 100,
            **_LEAN,
        },
    ),
    "best": (
        "noack events, ack per 1000 + lean + fast changelog + app.producer.send per 100",
        {
            "mode": "noack_events",
            "batch": 1000,
            "table": True,
            "fast_changelog": True,
            "send_every": 100,
            "direct_send": True,
            "fetch_max_wait_ms": 100,
            **_LEAN,
        },
    ),
    "best+take": (
        "take_events(1000, 0.05) + lean + fast changelog + app.producer.send per 100",
        {
            "mode": "take_events",
            "batch": 1000,
            "within": 0.05,
            "table": True,
            "fast_changelog": True,
            "send_every": 100,
            "direct_send": True,
            **_LEAN,
        },
    ),
}


def run_worker(
    broker: Broker,
    topic: str,
    n: int,
    name: str,
    spec: dict[str, Any],
    deadline_s: float,
    profile: Path | None = None,
) -> dict[str, Any]:
    """Run one faust variant as a subprocess; return its final (or last) progress line."""
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    out = OUT_DIR / f"worker-{name}-{uuid.uuid4().hex[:8]}.jsonl"
    full = {
        "bootstrap": broker.bootstrap,
        "topic": topic,
        "out": str(out),
        "n": n,
        "app_id": f"bench-{name.replace('+', '-')}-{uuid.uuid4().hex[:8]}",
        "out_topic": f"{topic}-out",
        **spec,
    }
    t0 = time.time()
    proc = subprocess.Popen(
        [sys.executable, str(WORKER), json.dumps(full)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    spy: subprocess.Popen[bytes] | None = None
    timed_out = False
    try:
        end = time.monotonic() + deadline_s
        while proc.poll() is None:
            if time.monotonic() > end:
                timed_out = True
                break
            if profile is not None and spy is None and out.exists():
                # first progress line: past start-up and group join, profile the steady state
                spy = start_pyspy(proc.pid, profile)
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
        _, err = proc.communicate(timeout=10)
        if spy is not None:
            try:
                spy.wait(30)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait()
    lines = out.read_text().splitlines() if out.exists() else []
    out.unlink(missing_ok=True)
    last: dict[str, Any] = json.loads(lines[-1]) if lines else {"count": 0, "seconds": 0.0}
    rate = last["count"] / last["seconds"] if last.get("seconds") else 0.0
    result = {
        "variant": name,
        "records": last["count"],
        "seconds": round(last.get("seconds", 0.0), 3),
        "records_per_s": round(rate),
        "startup_s": round(last["t_first_wall"] - t0, 2) if last.get("t_first_wall") else None,
        "complete": bool(last.get("final")) and not timed_out,
        "returncode": proc.returncode,
    }
    if not result["complete"]:
        result["stderr_tail"] = err.decode(errors="replace")[-2000:]
    return result


def start_pyspy(pid: int, path: Path) -> subprocess.Popen[bytes]:
    spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [
            str(spy),
            "record",
            "--pid",
            str(pid),
            "--format",
            "raw",
            "--rate",
            "250",
            "--threads",
            "--idle",
            "--output",
            str(path),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--records", type=int, default=200_000)
    parser.add_argument("--keys", type=int, default=5_000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument(
        "-v",
        "--variants",
        default=",".join(VARIANTS),
        help="comma-separated, of: " + ", ".join(VARIANTS),
    )
    parser.add_argument("--deadline", type=float, default=150.0, help="seconds per faust worker")
    parser.add_argument("--profile", default="", help="variants to py-spy (comma-separated)")
    args = parser.parse_args()
    names = [v for v in args.variants.split(",") if v]
    unknown = [v for v in names if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variants {unknown}")
    profiled = set(filter(None, args.profile.split(",")))
    topic = "raw-events"
    results: list[dict[str, Any]] = []
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    with tansu(OUT_DIR / "tansu.log") as broker:
        asyncio.run(create_topic(broker.bootstrap, topic, args.partitions))
        asyncio.run(create_topic(broker.bootstrap, f"{topic}-out", args.partitions))
        recs = records(args.records, args.keys)
        produced = asyncio.run(produce_all(broker.bootstrap, topic, recs))
        del recs
        print(f"produced {args.records} records at {produced:,.0f}/s", flush=True)
        plain = asyncio.run(aiokafka_getmany(broker.bootstrap, topic, args.records, 60.0))
        results.append({"variant": "aiokafka", **_rounded(plain), "complete": True})
        print(_row(results[-1], plain["records_per_s"]), flush=True)
        for name in names:
            desc, spec = VARIANTS[name]
            prof = OUT_DIR / f"pyspy-{name}.txt" if name in profiled else None
            res = run_worker(broker, topic, args.records, name, spec, args.deadline, prof)
            res["description"] = desc
            if prof is not None:
                res["profile"] = str(prof)
            results.append(res)
            print(_row(res, plain["records_per_s"]), flush=True)
        plain2 = asyncio.run(aiokafka_getmany(broker.bootstrap, topic, args.records, 60.0))
        results.append({"variant": "aiokafka (again)", **_rounded(plain2), "complete": True})
        print(_row(results[-1], plain["records_per_s"]), flush=True)
    base = max(plain["records_per_s"], plain2["records_per_s"])
    for r in results:
        r["ratio_vs_aiokafka"] = round(r["records_per_s"] / base, 4) if base else None
    report = {
        "records": args.records,
        "keys": args.keys,
        "partitions": args.partitions,
        "produce_per_s": round(produced),
        "cpus": os.cpu_count(),
        "results": results,
    }
    (OUT_DIR / "throughput.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nratios against the better aiokafka run ({base:,.0f}/s):")
    for r in results:
        flag = "" if r["complete"] else "  INCOMPLETE"
        print(f"  {r['variant']:<24} {r['records_per_s']:>9,}/s  x{r['ratio_vs_aiokafka']}{flag}")


def _rounded(d: dict[str, float]) -> dict[str, Any]:
    return {
        "records": int(d["records"]),
        "seconds": round(d["seconds"], 3),
        "records_per_s": round(d["records_per_s"]),
        "startup_s": round(d["startup_s"], 2),
    }


def _row(r: dict[str, Any], base: float) -> str:
    ratio = r["records_per_s"] / base if base else 0.0
    extra = "" if r.get("complete", True) else f"  INCOMPLETE rc={r.get('returncode')}"
    return (
        f"{r['variant']:<24} {r['records']:>8} rec {r['seconds']:>8.2f} s "
        f"{r['records_per_s']:>9,}/s  x{ratio:.3f}  start-up {r.get('startup_s')} s{extra}"
    )


if __name__ == "__main__":
    main()
