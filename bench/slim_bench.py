"""Benchmark: slimming raw pod JSON vs decoding it into kubernetes-asyncio models.

The bar: >= 10k pods/s on one core for orjson parse + slim of realistic ~10 KB pod objects,
``managedFields`` included. One real object (``tests/data/k8s/pod_crashloop_oom.json``)
serialised N times with a fresh name, uid and resourceVersion each, so no pass profits
from an interned string or a cached parse; passes: parse, parse + slim (+ encode), bytes ->
views + slim, and parse + kubernetes-asyncio models, best of ``--repeat``.

Trap: ``ApiClient()`` needs a running event loop, so the model pass runs inside
``asyncio.run``; the work it times is synchronous. bench/README.md, design notes: slim_bench.py.

    python -m bench.slim_bench [--pods 5000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from kubernetes_asyncio.client import ApiClient

from connectors.k8s.slim import slim_watch_event, slim_watch_line
from schemas.codec import RecordError, encode
from schemas.events import PodEvent

FIXTURE = (
    Path(__file__).resolve().parent.parent / "tests" / "data" / "k8s" / "pod_crashloop_oom.json"
)
BAR_PODS_PER_S = 10_000


def make_pods(count: int, size: int = 10_240) -> list[bytes]:
    """``count`` watch-event lines of distinct but equally realistic pods."""
    base = orjson.loads(FIXTURE.read_bytes())
    # `kubectl apply` stores the whole applied object in an annotation: the usual
    # reason real pods reach ~10 KB, and text slimming must skip, never parse twice.
    applied = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "finetune"}}
    applied["spec"] = base["spec"]
    base["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = (
        orjson.dumps(applied).decode()
    )
    # Then more managedFields (one entry per field manager: kubelet, scheduler,
    # controllers, admission webhooks...) until the object is about `size` bytes.
    managed = base["metadata"]["managedFields"]
    while len(orjson.dumps(base)) < size:
        entry = dict(managed[len(managed) % 4])
        entry["manager"] = f"manager-{len(managed)}"
        managed.append(entry)
    lines = []
    for index in range(count):
        base["metadata"]["name"] = f"finetune-{index}"
        base["metadata"]["uid"] = f"5f1c0a8e-{index:04x}-4b7e-9d1a-{index:012d}"
        base["metadata"]["resourceVersion"] = str(100_000 + index)
        lines.append(orjson.dumps({"type": "MODIFIED", "object": base}))
    return lines


def _best(run: Callable[[], None], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def _parse(lines: list[bytes]) -> None:
    for line in lines:
        orjson.loads(line)


def _slim(lines: list[bytes]) -> None:
    for line in lines:
        event = slim_watch_event(orjson.loads(line), cluster="bench")
        if not isinstance(event, PodEvent):
            raise SystemExit(f"slimming failed: {event!r}")


def _slim_encode(lines: list[bytes]) -> None:
    for line in lines:
        event = slim_watch_event(orjson.loads(line), cluster="bench")
        if event is None or isinstance(event, RecordError):
            raise SystemExit(f"slimming failed: {event!r}")
        encode(event)


def _views(lines: list[bytes]) -> None:
    for line in lines:
        event = slim_watch_line(line, cluster="bench")
        if not isinstance(event, PodEvent):
            raise SystemExit(f"slimming failed: {event!r}")


def _views_encode(lines: list[bytes]) -> None:
    for line in lines:
        event = slim_watch_line(line, cluster="bench")
        if event is None or isinstance(event, RecordError):
            raise SystemExit(f"slimming failed: {event!r}")
        encode(event)


async def _models(lines: list[bytes], repeat: int) -> float:
    async with ApiClient() as client:
        deserialize: Callable[[Any, str], Any] = client._ApiClient__deserialize

        def run() -> None:
            for line in lines:
                deserialize(orjson.loads(line)["object"], "V1Pod")

        return _best(run, repeat)


def main(argv: list[str] | None = None) -> int:
    """Run the passes and print a table (or JSON); exit 1 below the bar."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=20_000, help="distinct pod objects")
    parser.add_argument("--model-pods", type=int, default=2_000, help="pods for the model pass")
    parser.add_argument("--size", type=int, default=10_240, help="bytes per pod object")
    parser.add_argument("--repeat", type=int, default=3, help="runs per pass; the best counts")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args(argv)
    lines = make_pods(args.pods, args.size)
    size = sum(len(line) for line in lines) / len(lines)
    slim_size = len(encode(_first(lines)))
    rows = [
        ("parse (orjson)", args.pods, _best(lambda: _parse(lines), args.repeat)),
        ("parse + slim", args.pods, _best(lambda: _slim(lines), args.repeat)),
        ("parse + slim + encode", args.pods, _best(lambda: _slim_encode(lines), args.repeat)),
        ("bytes -> views + slim", args.pods, _best(lambda: _views(lines), args.repeat)),
        (
            "bytes -> views + slim + encode",
            args.pods,
            _best(lambda: _views_encode(lines), args.repeat),
        ),
    ]
    model_lines = lines[: args.model_pods]
    rows.append(
        (
            "parse + kubernetes-asyncio V1Pod",
            len(model_lines),
            asyncio.run(_models(model_lines, args.repeat)),
        )
    )
    rates = {name: count / seconds for name, count, seconds in rows}
    slim_rate = rates["parse + slim"]
    if args.json:
        print(json.dumps({"pod_bytes": size, "slim_bytes": slim_size, "pods_per_s": rates}))
    else:
        print(f"pod object: {size / 1024:.1f} KiB of JSON -> {slim_size} B slimmed; one core")
        print(f"{'pass':<34} {'pods':>7} {'pods/s':>10} {'us/pod':>8}")
        for name, count, seconds in rows:
            print(f"{name:<34} {count:>7} {count / seconds:>10,.0f} {seconds / count * 1e6:>8.1f}")
        model_rate = rates["parse + kubernetes-asyncio V1Pod"]
        print(
            f"slim is {slim_rate / model_rate:.0f}x the model decode; bar {BAR_PODS_PER_S:,}/s: "
            f"{'PASS' if slim_rate >= BAR_PODS_PER_S else 'FAIL'}"
        )
    return 0 if slim_rate >= BAR_PODS_PER_S else 1


def _first(lines: list[bytes]) -> PodEvent:
    event = slim_watch_event(orjson.loads(lines[0]), cluster="bench")
    assert isinstance(event, PodEvent)
    return event


if __name__ == "__main__":
    sys.exit(main())
