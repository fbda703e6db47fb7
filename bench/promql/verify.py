"""Prometheus' own rule manager as the judge of :mod:`bench.promql.alerts` (``--verify``).

``promtool test rules`` runs the real rule manager over given series from time 0, so the
stream is moved to 1970, evaluated as usual, and written as a unit-test file whose
expectation at every evaluation is what this bench says is firing; promtool passes or
fails it.

Traps: promtool's lookback is a fixed 5 m, so the verification server uses it too
(:data:`PROMTOOL_LOOKBACK`) and checks the state machine, not the lookback; in 1970
``time()`` is small, which both sides see alike; the file holds every sample as text:
simulated streams only, not the 1M-event stream.
bench/README.md, design notes: promql/verify.py.
"""

from __future__ import annotations

import math
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Final

import msgspec

from bench.promql import prometheus
from bench.promql.prometheus import RULE_INTERVAL, PrometheusError
from bench.promql.run import RULES, Baseline, evaluate
from bench.promql.series import SCRAPE_SECONDS, TAIL_SECONDS, escape
from schemas.codec import dumps
from schemas.events import Event, PodEvent

PROMTOOL_LOOKBACK: Final = 300.0


@dataclass(frozen=True)
class Verified:
    """promtool agreed: this many firings, checked at this many (evaluation, alert) pairs."""

    firings: int
    checks: int


def to_epoch(events: Iterable[Event]) -> list[Event]:
    """The events moved so that the first one falls in the first minute after 1970-01-01
    (event times and pod creation times; nothing else is read by the series)."""
    ordered = list(events)
    first = min(e.time for e in ordered).timestamp()
    delta = timedelta(seconds=-math.floor(first / RULE_INTERVAL) * RULE_INTERVAL)
    moved: list[Event] = []
    for original in ordered:
        event = original
        if isinstance(event, PodEvent) and event.created_at is not None:
            event = msgspec.structs.replace(event, created_at=event.created_at + delta)
        moved.append(msgspec.structs.replace(event, time=event.time + delta))
    return moved


def unit_test(baseline: Baseline, rules: Path) -> dict[str, Any]:
    """The ``promtool test rules`` document for ``baseline`` (series from time 0)."""
    scraped = baseline.scraped
    if scraped.first < 0:
        raise ValueError("promtool's series start at time 0: move the stream first (to_epoch)")
    steps = round(scraped.last / SCRAPE_SECONDS) + 1
    inputs = []
    for family, by_labels in scraped.series.items():
        for labels, points in by_labels.items():
            values = ["_"] * steps
            for instant, value in points:
                values[round(instant / SCRAPE_SECONDS)] = repr(value)
            body = ",".join(f'{k}="{escape(v)}"' for k, v in labels)
            inputs.append({"series": f"{family.sample_name}{{{body}}}", "values": " ".join(values)})
    tests = []
    instant = baseline.evaluated_from
    while instant <= baseline.evaluated_to:
        for rule in baseline.rules:
            firing = [
                f
                for f in baseline.firings
                if f.alert == rule.name
                and f.start <= instant
                and (f.end is None or instant < f.end)
            ]
            expected = [
                {
                    "exp_labels": {k: v for k, v in f.labels if k != "alertname"},
                    "exp_annotations": rule.annotations,
                }
                for f in firing
            ]
            tests.append(
                {"eval_time": f"{int(instant)}s", "alertname": rule.name, "exp_alerts": expected}
            )
        instant += RULE_INTERVAL
    return {
        "rule_files": [str(rules.resolve())],
        "evaluation_interval": f"{int(RULE_INTERVAL)}s",
        "tests": [
            {
                "interval": f"{int(SCRAPE_SECONDS)}s",
                "input_series": inputs,
                "alert_rule_test": tests,
            }
        ],
    }


def verify(
    events: Iterable[Event],
    workdir: Path,
    *,
    rules: Path = RULES,
    cluster: str = "",
    tail: float = TAIL_SECONDS,
) -> Verified:
    """Evaluate ``events`` moved to 1970 and have ``promtool test rules`` confirm every firing
    (and every absence) at every evaluation; :class:`PrometheusError` with promtool's
    report when they disagree."""
    found = prometheus.binaries()
    if found is None:
        raise PrometheusError(prometheus.MISSING)
    chosen = [e for e in events if not cluster or e.cluster == cluster]
    baseline = evaluate(
        to_epoch(chosen), rules=rules, tail=tail, workdir=workdir, lookback=PROMTOOL_LOOKBACK
    )
    document = unit_test(baseline, rules)
    path = workdir / "promtool-test.json"  # JSON is YAML
    path.write_bytes(dumps(document))
    done = subprocess.run(
        [found[1], "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        (workdir / "promtool-report.txt").write_text(done.stdout + done.stderr, encoding="utf-8")
        first = " ".join((done.stdout + done.stderr).split())[:400]
        raise PrometheusError(
            f"promtool test rules disagrees with the bench's firings ({workdir}/"
            f"promtool-report.txt): {first}"
        )
    checks = sum(len(t["alert_rule_test"]) for t in document["tests"])
    return Verified(len(baseline.firings), checks)
