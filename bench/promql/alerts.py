"""Alert firings from a rule's expression evaluated at every rule-evaluation instant.

Prometheus evaluates each rule's expression (the server does it here, through
``query_range`` at the group's 1 m interval); what is left is the alert's state machine,
the one part of this bench not run by Prometheus itself, done as ``rules/alerting.go``
(``AlertingRule.Eval``) does it:

* a series the expression returns at instant ``t`` and did not return at the evaluation
  before becomes *pending*, ``activeAt = t``;
* it becomes *firing* at the first evaluation ``t`` with ``t - activeAt >= for`` (``for: 0``:
  at ``activeAt`` itself);
* an evaluation that does not return it ends it (pending: forgotten; firing: resolved at
  that instant). A gap of one evaluation therefore restarts ``for`` from zero.

Why not Prometheus itself: its rule manager evaluates at the wall clock only, and
``promtool tsdb create-blocks-from rules`` evaluates *recording* rules over history ("Alerts
are currently ignored if they are in the recording rule file", prometheus/prometheus
``docs/storage.md``, Backfilling for Recording Rules). ``promtool test rules`` does evaluate
alerting rules over given series, ``for:`` included, but only answers pass/fail for alerts
expected at chosen instants: the tests use it to check this module against Prometheus on a
small stream (``tests/bench/test_promql.py``). Alert labels are the series' labels
(``__name__`` dropped) plus the rule's; ``keep_firing_for`` is not supported (the baseline
rules do not use it).
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
