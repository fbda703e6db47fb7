"""The benchmarks the report runs, at which sizes, and how one is run and recorded.

Each step is one bench module run as ``python -m MODULE ARGS --json`` in a subprocess of
its own (benches pin CPUs, freeze their input, start brokers, and RSS only grows: none of
that may leak); its JSON is the result, never re-measured. ``default`` sizes keep the
whole run under 15 minutes on a quiet 2-core machine (the estimates are a fresh clone's
measured times); ``quick`` is a few seconds per step and its figures mean nothing.

Steps run one at a time, except the untimed ones (:attr:`Step.timed`), which run together
(:func:`batches`). Trap: a step that exits non-zero without JSON, or runs past
``LIMIT_FACTOR`` x its estimate + ``LIMIT_SLACK_S``, is recorded as failed with the tail of
its log (``<raw dir>/<step>.log``), and the report goes on.
bench/README.md, design notes: report/steps.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.report.provenance import ROOT, python_command

LIMIT_FACTOR = 4.0
LIMIT_SLACK_S = 120.0
FAST_GROUP = (
    "--worker-env",
    "GPUTRIAGE_PROCESSOR__SESSION_TIMEOUT_SECONDS=2",
    "--worker-env",
    "GPUTRIAGE_PROCESSOR__REBALANCE_TIMEOUT_SECONDS=2",
)
"""Quick mode's workers join in ~1 s instead of ~3 (Tansu completes a join after half the
session timeout; tests/processor_helpers.py: FAST_GROUP). The default sizes keep the
benches' own settings, under which their published figures were measured."""
LATENCY_RATES = (500, 1_000, 2_000, 5_000, 10_000, 20_000)
"""Offered loads of the latency curve, events/s."""


@dataclass(frozen=True)
class Step:
    name: str
    """The step's id: its raw result is ``<raw dir>/<name>.json``."""
    module: str
    default: tuple[str, ...]
    quick: tuple[str, ...]
    estimate_s: float
    """Wall seconds at the default sizes on a quiet 2-core machine (the progress bar's
    scale and the time limit's base), stream generation into the cache included."""
    quick_estimate_s: float
    timed: bool = True
    """Whether any figure of the step depends on wall time. An untimed step (memory:
    bytes and RSS of its own process; quality: counts and event-time delays) may run
    beside another untimed one on the second core (:func:`batches`); a timed one always
    runs alone."""

    def args(self, mode: str) -> list[str]:
        return [*(self.quick if mode == "quick" else self.default), "--json"]

    def command(self, mode: str) -> str:
        return python_command(self.module, self.args(mode))

    def estimate(self, mode: str) -> float:
        return self.quick_estimate_s if mode == "quick" else self.estimate_s


STEPS: tuple[Step, ...] = (
    Step(
        "core",
        "bench.core_bench",
        # The tracemalloc pass is the memory step's (its 5,000-node row is this stream).
        ("--repeat", "1", "--no-memory"),
        ("--events", "4000", "--nodes", "50", "--repeat", "1", "--no-memory"),
        70,
        3,
    ),
    Step(
        "replay",
        "bench.replay_bench",
        ("--repeat", "1"),
        ("--events", "4000", "--nodes", "50", "--repeat", "1"),
        50,
        3,
    ),
    Step(
        "pipeline",
        "bench.pipeline_bench",
        ("--events", "200000", "--nodes", "1000", "--seconds", "0", "--workers", "2"),
        # Enough records for several commits (every 0.05 s here): at 3k events the first
        # commit covers the whole backlog and there is no rate to time.
        (
            "--events",
            "12000",
            "--nodes",
            "50",
            "--seconds",
            "0",
            "--workers",
            "2",
            *FAST_GROUP,
            "--worker-env",
            "GPUTRIAGE_PROCESSOR__SNAPSHOT_SECONDS=0.05",
        ),
        75,
        10,
    ),
    Step(
        "latency",
        "bench.latency",
        ("--rates", ",".join(map(str, LATENCY_RATES)), "--runs", "1", "--seconds", "10"),
        ("--rates", "500,2000", "--runs", "1", "--seconds", "1", "--nodes", "50", *FAST_GROUP),
        130,
        15,
    ),
    Step(
        "slim",
        "bench.slim_bench",
        (),
        ("--pods", "300", "--model-pods", "30", "--repeat", "1"),
        45,
        3,
    ),
    Step("kmsg", "bench.kmsg_bench", (), ("--lines", "5000", "--repeat", "1"), 20, 1),
    Step(
        "autoscaler",
        "bench.autoscaler_bench",
        # 400k lines, best of 3: the same lines/s as 1M (the bench's default; 68 s here).
        ("--lines", "400000"),
        ("--lines", "5000", "--repeat", "1"),
        35,
        1,
    ),
    Step(
        "memory",
        "bench.memory_scale",
        # 100 records per node: the bytes per tracked pod are the same as at 200 (the
        # 2026-12-02 run: 1,551-1,668 B at 200 per node), in half the time.
        ("--events-per-node", "100"),
        ("--nodes", "30,60", "--events-per-node", "40"),
        200,
        3,
        timed=False,
    ),
    Step(
        "quality",
        "bench.quality",
        # A 1,000-node day (~1.2M events), a noise-only quarter day, and a 100-node 6 h
        # stream side by side with the PromQL baseline on a real Prometheus.
        (),
        (
            "--nodes",
            "20",
            "--hours",
            "1",
            "--noise-hours",
            "1",
            "--promql-nodes",
            "10",
            "--promql-hours",
            "1",
            "--out-dir",
            "bench/out/quick/quality-run",
        ),
        225,
        15,
        timed=False,
    ),
    Step(
        "backlog",
        "bench.backlog_memory",
        (),
        ("--events", "3000", "--nodes", "50", "--caps", "500", *FAST_GROUP),
        105,
        8,
    ),
)
BY_NAME = {step.name: step for step in STEPS}
SIDE_BY_SIDE_FACTOR = 1.15
"""A batch of untimed steps' estimate over its longest step's: they share memory
bandwidth and, for the moments a step's subprocess uses two threads (promtool), a core."""


SIDE_BY_SIDE_MAX = 2
"""Untimed steps per batch: one per core of the 2-core machine the sizes are for (a
third would make each wait for a core; the report says "on the other core")."""


def batches(steps: list[Step]) -> list[list[Step]]:
    """The steps in their order, as the runner runs them: each timed step alone, and the
    untimed ones together (:data:`SIDE_BY_SIDE_MAX` at a time), where the first of them
    stands. Trap: two untimed steps on a 2-core machine leave no core for a third
    process, so a timed step never joins them (its figures would measure the others)."""
    out: list[list[Step]] = []
    untimed: list[Step] | None = None
    for step in steps:
        if step.timed:
            out.append([step])
        elif untimed is None or len(untimed) >= SIDE_BY_SIDE_MAX:
            untimed = [step]
            out.append(untimed)
        else:
            untimed.append(step)
    return out


def batch_estimate(batch: list[Step], mode: str) -> float:
    longest = max(step.estimate(mode) for step in batch)
    return longest * (SIDE_BY_SIDE_FACTOR if len(batch) > 1 else 1.0)


@dataclass
class Outcome:
    """What a step left: its JSON result, or why there is none."""

    name: str
    command: str
    status: str
    """``ok``, ``failed`` or ``not run``."""
    seconds: float = 0.0
    rc: int | None = None
    result: Any = None
    error: str = ""
    log: str = ""
    """The step's stderr, as a path relative to the repository root."""
    beside: list[str] = field(default_factory=list)
    """The steps that ran at the same time as this one (untimed steps only)."""

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Outcome:
        return cls(**data)


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def run_step(
    step: Step, mode: str, raw_dir: Path, on_line: Callable[[str], None] = lambda _line: None
) -> Outcome:
    """Run one bench; its stderr to ``raw_dir/<name>.log`` (each line, ``\\r`` updates
    too, also to ``on_line``), its stdout parsed as JSON. Waits at most the step's limit."""
    args = step.args(mode)
    log_path = raw_dir / f"{step.name}.log"
    limit = LIMIT_FACTOR * step.estimate(mode) + LIMIT_SLACK_S
    began = time.perf_counter()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", step.module, *args],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert process.stdout is not None
        assert process.stderr is not None
        stdout: list[bytes] = []
        reader = threading.Thread(target=_read_all, args=(process.stdout, stdout))
        relay = threading.Thread(target=_relay, args=(process.stderr, log, on_line))
        reader.start()
        relay.start()
        try:
            rc = process.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            process.kill()
            rc = process.wait()
            timed_out = True
        else:
            timed_out = False
        reader.join()
        relay.join()
    seconds = time.perf_counter() - began
    outcome = Outcome(step.name, step.command(mode), "failed", seconds, rc, log=_relative(log_path))
    text = b"".join(stdout).decode(errors="replace")
    if timed_out:
        outcome.error = f"killed after {limit:.0f} s (its limit)"
    else:
        try:
            outcome.result = json.loads(text)
        except ValueError:
            outcome.error = f"exit {rc}, no JSON on stdout"
        else:
            # slim_bench exits 1 below its bar but still prints its figures: a result.
            outcome.status = "ok"
    if outcome.status != "ok":
        tail = log_path.read_text(errors="replace").splitlines()[-15:]
        outcome.error += "\n" + "\n".join(tail)
    return outcome


def _read_all(stream: Any, into: list[bytes]) -> None:
    into.append(stream.read())


def _relay(stream: Any, log: Any, on_line: Callable[[str], None]) -> None:
    """Copy ``stream`` to ``log``, and hand each line (split at ``\\n`` and at ``\\r``, so
    tqdm's in-place updates count) to ``on_line``."""
    pending = b""
    while chunk := os.read(stream.fileno(), 65536):
        log.write(chunk)
        log.flush()
        *lines, pending = re.split(rb"[\r\n]", pending + chunk)
        for line in lines:
            if line.strip():
                on_line(line.decode(errors="replace").strip())
    if pending.strip():
        on_line(pending.decode(errors="replace").strip())


def save(outcome: Outcome, raw_dir: Path) -> None:
    (raw_dir / f"{outcome.name}.json").write_text(json.dumps(outcome.to_json(), indent=2))


def load(name: str, raw_dir: Path, mode: str) -> Outcome:
    """A step's saved outcome, or ``not run`` if this run did not make one."""
    path = raw_dir / f"{name}.json"
    if not path.exists():
        return Outcome(name, BY_NAME[name].command(mode), "not run")
    return Outcome.from_json(json.loads(path.read_text()))
