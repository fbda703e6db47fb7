"""Alert firings from a rule's expression evaluated at every rule-evaluation instant.

Prometheus evaluates each expression (``query_range`` at the group's 1 m interval); the
alert state machine is done here as ``rules/alerting.go`` does it: a new series is
pending, firing once ``t - activeAt >= for``, ended by an evaluation that does not return
it. Not Prometheus itself because its rule manager evaluates at the wall clock only and
backfilling ignores alerts; ``promtool test rules`` checks this module against Prometheus
(``tests/bench/test_promql.py``).

Traps: a gap of one evaluation restarts ``for`` from zero; alert labels are the series'
(``__name__`` dropped) plus the rule's; ``keep_firing_for`` is not supported.
bench/README.md, design notes: promql/alerts.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Firing:
    """One alert from firing to resolved (``end`` None: still firing at the last evaluation)."""

    alert: str
    labels: Labels
    start: float
    """The evaluation instant it fired at (Unix seconds)."""
    end: float | None
    """The first evaluation that no longer returned it, or None."""
    active_at: float
    """When it went pending (the first evaluation in the run)."""

    def label(self, name: str) -> str:
        return dict(self.labels).get(name, "")


def firings(
    alert: str,
    returned: Mapping[Labels, Sequence[float]],
    *,
    for_seconds: float,
    step: float,
    until: float,
    rule_labels: Mapping[str, str] | None = None,
) -> list[Firing]:
    """The firings of ``alert``, given the instants (a ``step`` grid) at which the expression
    returned each series, sorted by start then labels. ``until`` is the last evaluation
    instant: a run that reaches it is still firing (``end`` None)."""
    extra = dict(rule_labels or {})
    found: list[Firing] = []
    for series, instants in returned.items():
        alert_labels = tuple(sorted({**dict(series), **extra, "alertname": alert}.items()))
        # The first grid instant at or past activeAt + for.
        steps = -(-for_seconds // step) if for_seconds > 0 else 0
        for active_at, last in _runs(sorted(instants), step):
            fired = active_at + steps * step
            if fired <= last + step / 1000:
                end = None if last >= until - step / 1000 else last + step
                found.append(Firing(alert, alert_labels, fired, end, active_at))
    return sorted(found, key=lambda f: (f.start, f.labels))


def _runs(instants: Sequence[float], step: float) -> list[tuple[float, float]]:
    """Maximal runs of consecutive grid instants, as (first, last)."""
    runs: list[tuple[float, float]] = []
    for instant in instants:
        if runs and abs(instant - runs[-1][1] - step) < step / 1000:
            runs[-1] = (runs[-1][0], instant)
        else:
            runs.append((instant, instant))
    return runs
