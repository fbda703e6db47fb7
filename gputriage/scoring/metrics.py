"""Per-type precision, recall and detection delay, and the confusion table, of a matching.

``tp``, ``fn`` and ``fp`` per type (a confusion is an ``fn`` of its type and an ``fp`` of
the other); delays from the truth's ``start`` to the first publication, p50/p95 by nearest
rank (:func:`percentile`: a delay that was measured, not an interpolation); the confusion
table ``{truth type or "none": {incident type or "none": count}}`` without zero cells.
Types that neither file names are left out; every table is ordered by type name.

Trap: precision with no incident, or recall with no truth, is ``null``, not 1.0: "nothing
to be right about" is not a perfect score, and a reader (or ``jq``) must tell them apart.
docs/replay.md, design notes: the scoring metrics.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from gputriage.scoring.matching import Matching

NONE: Final = "none"
"""The confusion table's "nothing": no incident for a truth, or no truth for an incident."""


@dataclass(frozen=True)
class TypeScore:
    """The score of one incident type."""

    tp: int
    fp: int
    fn: int
    precision: float | None
    recall: float | None
    delay_p50_s: float | None
    delay_p95_s: float | None


Confusion = dict[str, dict[str, int]]
"""``{truth type or "none": {incident type or "none": count}}``, zero cells left out."""


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q``-th percentile (0 < q <= 100) of ``values``; None if empty.

    The smallest value with at least ``q`` % of the values at or below it: with 20
    delays, p95 is the 19th smallest, and with one, every percentile is that one.
    """
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def type_scores(matching: Matching) -> dict[str, TypeScore]:
    """:class:`TypeScore` per type named by a truth or an incident, by type name."""
    tp = Counter(pair.truth.type for pair in matching.matched)
    fn = Counter(truth.type for truth in matching.misses)
    fp = Counter(item.incident.type for item in matching.false_positives)
    delays: dict[str, list[float]] = defaultdict(list)
    for pair in matching.matched:
        delays[pair.truth.type].append(pair.delay_seconds)
    scores: dict[str, TypeScore] = {}
    for kind in sorted(tp.keys() | fn.keys() | fp.keys()):
        hits, wrong, missed = tp[kind], fp[kind], fn[kind]
        scores[kind] = TypeScore(
            tp=hits,
            fp=wrong,
            fn=missed,
            precision=_ratio(hits, hits + wrong),
            recall=_ratio(hits, hits + missed),
            delay_p50_s=percentile(delays[kind], 50),
            delay_p95_s=percentile(delays[kind], 95),
        )
    return scores


def confusion(matching: Matching) -> Confusion:
    """The confusion table of the module docstring."""
    cells: Counter[tuple[str, str]] = Counter()
    for pair in matching.matched:
        cells[pair.truth.type, pair.truth.type] += 1
    confused_truths = {pair.truth.id for pair in matching.confused}
    confused_incidents = {pair.detected.incident.id for pair in matching.confused}
    for pair in matching.confused:
        cells[pair.truth.type, pair.detected.incident.type] += 1
    for truth in matching.misses:
        if truth.id not in confused_truths:
            cells[truth.type, NONE] += 1
    for item in matching.false_positives:
        if item.incident.id not in confused_incidents:
            cells[NONE, item.incident.type] += 1
    table: Confusion = {}
    for (truth_type, incident_type), count in sorted(cells.items(), key=_cell_order):
        table.setdefault(truth_type, {})[incident_type] = count
    return table


def _cell_order(item: tuple[tuple[str, str], int]) -> tuple[bool, str, bool, str]:
    """By type name, "none" last on both axes."""
    (truth_type, incident_type), _ = item
    return (truth_type == NONE, truth_type, incident_type == NONE, incident_type)


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def shortfalls(
    scores: dict[str, TypeScore], *, min_precision: float | None, min_recall: float | None
) -> list[str]:
    """``"recall of T 0.500 < 0.9"`` for each figure below its bar, by type then figure.

    A ``null`` figure is never below a bar: it has nothing to measure, and the other
    figure of the type catches the failure (truths and no incidents: recall 0;
    incidents and no truths: precision 0).
    """
    found: list[str] = []
    for kind, score in scores.items():
        for name, value, bar in (
            ("precision", score.precision, min_precision),
            ("recall", score.recall, min_recall),
        ):
            if bar is not None and value is not None and value < bar:
                found.append(f"{name} of {kind} {value:.3f} < {bar:g}")
    return found
