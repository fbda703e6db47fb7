"""The whole path: events -> scraped series -> promtool backfill -> Prometheus -> firings."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from bench.promql import prometheus
from bench.promql.alerts import Firing, firings
from bench.promql.prometheus import RULE_INTERVAL, PrometheusError, Rule
from bench.promql.series import (
    LOOKBACK_SECONDS,
    SCRAPE_SECONDS,
    TAIL_SECONDS,
    Scraped,
    scrape,
    write_openmetrics,
)
from schemas.events import Event

RULES: Final = Path(__file__).with_name("baseline-rules.yaml")
"""The reference document's alerts (the file says how each was written)."""


@dataclass(frozen=True)
class Baseline:
    """What the incumbent stack made of one stream."""

    scraped: Scraped
    rules: list[Rule]
    firings: list[Firing]
    evaluated_from: float
    """First rule evaluation (Unix seconds, on the minute)."""
    evaluated_to: float
    """Last rule evaluation."""


def evaluate(
    events: Iterable[Event],
    *,
    rules: Path = RULES,
    cluster: str = "",
    tail: float = TAIL_SECONDS,
    workdir: Path | None = None,
    lookback: float = LOOKBACK_SECONDS,
    all_series: bool = False,
) -> Baseline:
    """Scrape, backfill, serve and evaluate every alerting rule in ``rules`` over the stream.

    ``workdir`` keeps the OpenMetrics file, the blocks and the server's log (a temporary
    directory, removed after, when None). The server is always stopped before returning.
    ``lookback`` is the server's ``--query.lookback-delta`` (``series`` says why it is short).
    Only the series some rule's selector matches are backfilled (:mod:`bench.promql.selection`
    says why that changes no firing); ``all_series`` backfills every series the exporters
    expose instead (slower: for checking exactly that).
    Raises :class:`~bench.promql.prometheus.PrometheusError` when Prometheus is missing or
    fails, ``ValueError`` for a stream with no events.
    """
    if workdir is not None and (workdir / "data").exists() and any((workdir / "data").iterdir()):
        # Backfilling beside an earlier run's blocks would mix two streams in one TSDB.
        raise PrometheusError(
            f"{workdir / 'data'} is not empty: keep each run in a directory of its own"
        )
    found = prometheus.binaries()
    if found is None:
        raise PrometheusError(prometheus.MISSING)
    server_exe, promtool = found
    keep = None
    if not all_series:
        # Here, not at the top: promql-parser is the bench extra's, and --all-series
        # (and the tests that use it) must not need it.
        from bench.promql.selection import of_rules_file  # noqa: PLC0415

        keep = of_rules_file(rules).wants
    scraped = scrape(events, cluster=cluster, interval=SCRAPE_SECONDS, tail=tail, keep=keep)
    if workdir is None:
        with tempfile.TemporaryDirectory(prefix="promql-") as tmp:
            return _run(scraped, server_exe, promtool, rules, Path(tmp), lookback)
    return _run(scraped, server_exe, promtool, rules, workdir, lookback)


def _run(
    scraped: Scraped, server_exe: str, promtool: str, rules: Path, work: Path, lookback: float
) -> Baseline:
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data"
    series = work / "series.om"
    with series.open("w", encoding="utf-8") as out:
        write_openmetrics(scraped, out)
    prometheus.backfill(promtool, series, data)
    start = math.ceil(scraped.first / RULE_INTERVAL) * RULE_INTERVAL
    end = math.floor(scraped.last / RULE_INTERVAL) * RULE_INTERVAL
    with prometheus.start(server_exe, data, rules, work, lookback) as server:
        loaded = server.rules()
        fired: list[Firing] = []
        for rule in loaded:
            returned = server.query_range(rule.query, start, end, RULE_INTERVAL)
            fired.extend(
                firings(
                    rule.name,
                    returned,
                    for_seconds=rule.for_seconds,
                    step=RULE_INTERVAL,
                    until=end,
                    rule_labels=rule.labels,
                )
            )
    fired.sort(key=lambda f: (f.start, f.alert, f.labels))
    return Baseline(scraped, loaded, fired, start, end)
