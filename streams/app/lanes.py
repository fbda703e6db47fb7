"""One correlator per raw partition number: a worker's state, watermark and timers, by lane.

Every record of a key lands on the same partition number of every raw topic, and the
rules read one key's state only, so a lane (that partition number) has its own buffer,
watermark and timers, fed only by its own partitions' records and progress. Why not one
watermark per worker: a worker that gains a partition had moved its watermark on, so the
gained backlog was applied late in arrival order and thousands were skipped as stale. A
gained lane starts with no watermark and moves only as its own sources vouch.

Traps: a lane exists once given a state, an event or a heartbeat; a key's state is written
to and restored from its lane's state-topic partition, not one hashed from the key;
``stats`` counts since the start, dropped lanes included (Prometheus counters never go
down); ``pending`` is what is held now. docs/operations.md, design notes: lanes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Iterator, Mapping

import msgspec

from schemas.incidents import Incident
from streams.core import CoreSettings, CoreStats, Correlator
from streams.core.state import KeyState

log = logging.getLogger("gputriage.processor")


class Lanes:
    """The correlators of a worker's partition numbers, created on first use."""

    def __init__(self, config: CoreSettings) -> None:
        self.config = config
        self._lanes: dict[int, Correlator] = {}
        self._retired = CoreStats()
        """The counters of the lanes dropped so far."""
        self._clock_limits: dict[int, float] = {}
        """Lane -> its last advance's limit when the clock made it, else ``-inf``."""

    def lane(self, number: int) -> Correlator:
        """The correlator of partition number ``number`` (a new, empty one the first time)."""
        correlator = self._lanes.get(number)
        if correlator is None:
            correlator = self._lanes[number] = Correlator(self.config, track_dirty=True)
        return correlator

    def __iter__(self) -> Iterator[tuple[int, Correlator]]:
        return iter(list(self._lanes.items()))

    def __contains__(self, number: int) -> bool:
        return number in self._lanes

    def restore(self, states: Iterable[KeyState], number: int) -> None:
        """Adopt key states read back from the state topic's partition ``number``."""
        correlator = self.lane(number)
        for state in states:
            correlator.restore(state)

    def keep(self, numbers: Iterable[int]) -> int:
        """Drop every lane not in ``numbers`` (its partitions went to another worker);
        returns the buffered events dropped with them: never released, so never
        committed, and their new owner reads them again."""
        wanted = set(numbers)
        dropped = 0
        for number in [n for n in self._lanes if n not in wanted]:
            correlator = self._lanes.pop(number)
            dropped += correlator.pending()
            _add(self._retired, correlator.stats)
            self._clock_limits.pop(number, None)
        return dropped

    def advance(self, watermarks: Mapping[int, tuple[float, bool]]) -> list[Incident]:
        """Move each lane to its ``(watermark, from the clock)`` (every lane must have one):
        a clock-made one is a limit (``tight``), not a promise. A lane that fails is
        logged and left where it was; the others still move."""
        out: list[Incident] = []
        for number, correlator in self._lanes.items():
            limit, from_clock = watermarks[number]
            self._clock_limits[number] = limit if from_clock else -math.inf
            try:
                out += correlator.advance_watermark(limit, tight=from_clock)
            except Exception:  # keep the worker alive; the log says what broke
                log.exception("advancing lane %d's watermark to %s failed", number, limit)
        return out

    def clock_limit(self) -> float:
        """The least over the lanes of the last advance's limit when the clock made it,
        ``-inf`` if a lane's was not the clock's (or there is no lane): a watermark may stay
        behind it with nothing held."""
        limits = self._clock_limits
        return min((limits.get(n, -math.inf) for n in self._lanes), default=-math.inf)

    def take_released(self) -> list[object]:
        """The tokens every lane released since the last call."""
        released: list[object] = []
        for correlator in self._lanes.values():
            released += correlator.take_released()
        return released

    def take_dirty(self) -> list[tuple[str, KeyState, int]]:
        """``(correlation key, state, lane)`` of every key changed since the last call."""
        return [
            (key, state, number)
            for number, correlator in self._lanes.items()
            for key, state in correlator.take_dirty()
        ]

    def pending(self) -> int:
        """Events waiting for their lane's watermark."""
        return sum(c.pending() for c in self._lanes.values())

    @property
    def watermark(self) -> float:
        """The least watermark of the lanes (``-inf`` before any): how far every lane is."""
        return min((c.watermark for c in self._lanes.values()), default=-math.inf)

    def reached(self) -> float:
        """How far event time is decided everywhere: the least over the lanes of their
        watermark or, where greater, the clock-made limit they fired up to (nothing waits
        behind that); lanes that have decided nothing yet are left out."""
        reached = math.inf
        for number, correlator in self._lanes.items():
            at = max(correlator.watermark, self._clock_limits.get(number, -math.inf))
            if -math.inf < at < reached:
                reached = at
        return reached if reached < math.inf else -math.inf

    @property
    def stats(self) -> CoreStats:
        """The engines' counters since the start, summed over the lanes (a snapshot)."""
        total = msgspec.structs.replace(self._retired)
        for correlator in self._lanes.values():
            _add(total, correlator.stats)
        return total

    @property
    def keys(self) -> dict[str, KeyState]:
        """Every key's state by correlation key (for inspection and tests)."""
        out: dict[str, KeyState] = {}
        for correlator in self._lanes.values():
            out.update(correlator.keys)
        return out


def _add(total: CoreStats, stats: CoreStats) -> None:
    """Add ``stats`` into ``total``, field by field."""
    for name in CoreStats.__struct_fields__:
        setattr(total, name, getattr(total, name) + getattr(stats, name))
