"""How a score is shown: a kubectl-like table (people) or one JSON object (CI, ``jq``).

The JSON object (``-o json``) is one line with ``types``, ``confusion``, ``misses``,
``false_positives`` and ``excused`` (incidents that matched only an optional truth,
counted neither way); its shape is in docs/replay.md, design notes: the score's output.
:mod:`gputriage.scoring.metrics` defines each figure.

Traps: the lists are complete in JSON, but the table lists at most :data:`MAX_ROWS` of
each (a long simulation can miss thousands); times are RFC 3339 UTC
(:func:`gputriage.render.format_time`), as everywhere in the CLI.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from gputriage import render
from gputriage.scoring.matching import Matching
from gputriage.scoring.metrics import Confusion, TypeScore
from schemas.codec import dumps

MAX_ROWS: Final = 20
"""Misses (and false positives) the table lists before ``... and N more``."""
SCORE_HEADERS: Final = (
    "TYPE",
    "TP",
    "FP",
    "FN",
    "PRECISION",
    "RECALL",
    "DELAY P50",
    "DELAY P95",
)


@dataclass(frozen=True)
class Score:
    """Everything a score reports."""

    types: dict[str, TypeScore]
    confusion: Confusion
    matching: Matching
    pools: dict[str, dict[str, TypeScore]] = field(default_factory=dict)
    """Per pool kind (``dra``, ``device-plugin``), per type (:mod:`gputriage.scoring.pools`);
    empty when the stream has no DRA node, so such a score reads as it always did."""


def to_json(score: Score) -> bytes:
    """The one JSON object of the module docstring, newline-terminated."""
    reported = {pair.truth.id: pair.detected.incident for pair in score.matching.confused}
    truth_of = {pair.detected.incident.id: pair.truth.id for pair in score.matching.confused}
    obj: dict[str, Any] = {
        "types": {kind: _type_json(s) for kind, s in score.types.items()},
        "confusion": score.confusion,
        "misses": [
            {
                "id": truth.id,
                "fault": truth.fault,
                "type": truth.type,
                "cluster": truth.cluster,
                "node": truth.node,
                "start": render.format_time(truth.start),
                "reported_as": reported[truth.id].id if truth.id in reported else None,
                "reported_type": reported[truth.id].type if truth.id in reported else None,
            }
            for truth in score.matching.misses
        ],
        "false_positives": [
            {
                "id": item.incident.id,
                "type": item.incident.type,
                "cluster": item.incident.cluster,
                "node": item.incident.node,
                "first_seen": render.format_time(item.incident.first_seen),
                "truth": truth_of.get(item.incident.id),
            }
            for item in score.matching.false_positives
        ],
        "excused": [
            {
                "id": pair.detected.incident.id,
                "type": pair.detected.incident.type,
                "cluster": pair.detected.incident.cluster,
                "node": pair.detected.incident.node,
                "first_seen": render.format_time(pair.detected.incident.first_seen),
                "truth": pair.truth.id,
            }
            for pair in score.matching.excused
        ],
    }
    if score.pools:
        obj["pools"] = {
            pool: {kind: _type_json(s) for kind, s in types.items()}
            for pool, types in score.pools.items()
        }
    return dumps(obj) + b"\n"


def _type_json(s: TypeScore) -> dict[str, Any]:
    return {
        "precision": s.precision,
        "recall": s.recall,
        "delay_p50_s": s.delay_p50_s,
        "delay_p95_s": s.delay_p95_s,
        "tp": s.tp,
        "fp": s.fp,
        "fn": s.fn,
    }


def table(score: Score) -> str:
    """Per-type scores, the confusion cells, then the misses and false positives (bounded);
    sections separated by a blank line, empty ones left out; "" when nothing to score."""
    sections = [
        render.columns(SCORE_HEADERS, [_score_row(k, s) for k, s in score.types.items()]),
        render.columns(
            ("POOL", *SCORE_HEADERS),
            [
                [pool, *_score_row(k, s)]
                for pool, types in score.pools.items()
                for k, s in types.items()
            ],
        ),
        render.columns(
            ("TRUTH", "REPORTED AS", "COUNT"),
            [
                (truth_type, incident_type, str(count))
                for truth_type, row in score.confusion.items()
                for incident_type, count in row.items()
            ],
        ),
        _misses(score.matching),
        _false_positives(score.matching),
        _excused(score.matching),
    ]
    return "\n".join(section for section in sections if section)


def _excused(matching: Matching) -> str:
    n = len(matching.excused)
    if not n:
        return ""
    return (
        f"{n} incident{'s' if n != 1 else ''} matched only optional truths (due where the "
        "stream ends): not counted"
    )


def _score_row(kind: str, s: TypeScore) -> list[str]:
    return [
        kind,
        str(s.tp),
        str(s.fp),
        str(s.fn),
        _fraction(s.precision),
        _fraction(s.recall),
        _seconds(s.delay_p50_s),
        _seconds(s.delay_p95_s),
    ]


def _misses(matching: Matching) -> str:
    reported = {pair.truth.id: pair.detected.incident for pair in matching.confused}
    rows = [
        [
            truth.id,
            truth.fault,
            truth.type,
            truth.node or render.NONE,
            render.format_time(truth.start),
            f"{reported[truth.id].type} {reported[truth.id].id}"
            if truth.id in reported
            else render.NONE,
        ]
        for truth in matching.misses[:MAX_ROWS]
    ]
    headers = ("MISSED", "FAULT", "TYPE", "NODE", "START", "REPORTED AS")
    return render.columns(headers, rows) + _more(len(matching.misses))


def _false_positives(matching: Matching) -> str:
    truth_of = {pair.detected.incident.id: pair.truth for pair in matching.confused}
    rows = [
        [
            item.incident.id,
            item.incident.type,
            item.incident.node or render.NONE,
            render.format_time(item.incident.first_seen),
            f"{truth_of[item.incident.id].type} {truth_of[item.incident.id].id}"
            if item.incident.id in truth_of
            else render.NONE,
        ]
        for item in matching.false_positives[:MAX_ROWS]
    ]
    headers = ("FALSE POSITIVE", "TYPE", "NODE", "FIRST SEEN", "INSTEAD OF")
    return render.columns(headers, rows) + _more(len(matching.false_positives))


def _more(count: int) -> str:
    return f"... and {count - MAX_ROWS} more\n" if count > MAX_ROWS else ""


def _fraction(value: float | None) -> str:
    return render.NONE if value is None else f"{value:.3f}"


def _seconds(value: float | None) -> str:
    """``36s``, ``0.25s``, ``-2s``: milliseconds at most, no trailing zeros."""
    if value is None:
        return render.NONE
    text = f"{value:.3f}".rstrip("0").rstrip(".")
    return ("0" if text == "-0" else text) + "s"
