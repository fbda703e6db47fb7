"""Ground truth for ``allocation_mismatch``: counted from how long each blind node disagreed.

Why counted, not one truth per outage: the incident is one ticket per cluster, open
while the GPUs Kubernetes counts and the GPUs dcgm-exporter binds disagree by more
than 5 on nodes that have disagreed for 5 min, and resolved once that sum has stayed
at or below 5 for 5 min (docs/detection.md, cluster-scoped types). An outage is the usual cause,
but what the sum is depends on the pods: a blind node whose only pod ends agrees
again (0 requested, 0 bound) while its exporter is still broken, and its successor's
disagreement is a new one that needs its own 5 min. So each outage reports, as it
goes, how many GPUs running pods hold on its node (:meth:`Blind.held`), and
:meth:`MismatchTruth.expected` applies the rule to those counts.

The numbers are the documented defaults (docs/detection.md), not imported from
``streams/core/config.py`` (see :mod:`gputriage.simulate.truth`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from schemas.truth import ExpectedIncident

THRESHOLD = 5
"""More than this many GPUs of disagreement, summed over nodes."""
AFTER = timedelta(minutes=5)
"""A node counts once it has disagreed this long; the incident resolves once the sum has
been at or below the threshold this long."""


@dataclass
class Blind:
    """One outage: a node whose dcgm-exporter binds no pod from ``start`` to its end."""

    cluster: str
    node: str
    fault: str
    samples: list[tuple[datetime, int]] = field(default_factory=list)
    """(time, GPUs held by running pods on the node); 0 from the time it is back."""

    def held(self, at: datetime, gpus: int) -> None:
        if not self.samples or self.samples[-1][1] != gpus:
            self.samples.append((at, gpus))

    def back(self, at: datetime) -> None:
        self.held(at, 0)


@dataclass
class _Piece:
    """A stretch of one node's disagreement (held > 0, without a break)."""

    since: datetime
    fault: str
    changes: list[tuple[datetime, int]]


class MismatchTruth:
    """Collects the outages; :meth:`expected` applies the rule per cluster."""

    def __init__(self, slack: timedelta) -> None:
        self._slack = slack
        self._blind: list[Blind] = []

    def blind(self, *, cluster: str, node: str, fault: str) -> Blind:
        track = Blind(cluster, node, fault)
        self._blind.append(track)
        return track

    def expected(self, end: datetime) -> list[ExpectedIncident]:
        """The incidents that open by ``end`` (a later one no replay sees)."""
        by_cluster: dict[str, list[_Piece]] = defaultdict(list)
        for track in self._blind:
            by_cluster[track.cluster].extend(_pieces(track))
        found = []
        for cluster, pieces in sorted(by_cluster.items()):
            found.extend(self._sweep(cluster, pieces, end))
        return found

    def _sweep(self, cluster: str, pieces: list[_Piece], end: datetime) -> list[ExpectedIncident]:
        times = sorted(
            {t for p in pieces for t, _ in p.changes} | {p.since + AFTER for p in pieces}
        )
        found: list[ExpectedIncident] = []
        opened = False
        below: datetime | None = None
        for k, now in enumerate(times):
            if now > end:
                break
            settled = [
                (p, value)
                for p in pieces
                if p.since + AFTER <= now and (value := _value(p, now)) > 0
            ]
            total = sum(value for _, value in settled)
            if total > THRESHOLD:
                below = None
                if not opened:
                    opened = True
                    first = min(settled, key=lambda x: (x[0].since, x[0].fault))[0]
                    found.append(self._truth(cluster, first))
            elif opened:
                below = below or now
            # Nothing changes before the next time: a quiet period may run out in between.
            following = times[k + 1] if k + 1 < len(times) else None
            if opened and below is not None and (following is None or following >= below + AFTER):
                opened, below = False, None
        return found

    def _truth(self, cluster: str, first: _Piece) -> ExpectedIncident:
        return ExpectedIncident(
            id=f"{first.fault}/allocation_mismatch",
            fault=first.fault.rsplit("-", 1)[0],
            type="allocation_mismatch",
            cluster=cluster,
            start=first.since,
            not_before=first.since - self._slack,
            not_after=first.since + self._slack,
            severity="ticket",
        )


def _pieces(track: Blind) -> list[_Piece]:
    pieces: list[_Piece] = []
    current: _Piece | None = None
    for at, gpus in track.samples:
        if gpus > 0 and current is None:
            current = _Piece(at, track.fault, [(at, gpus)])
            pieces.append(current)
        elif current is not None:
            current.changes.append((at, gpus))
            if gpus == 0:
                current = None
    return pieces


def _value(piece: _Piece, at: datetime) -> int:
    """The piece's disagreement at ``at`` (0 once it has ended)."""
    value = 0
    for t, gpus in piece.changes:
        if t > at:
            break
        value = gpus
    return value
