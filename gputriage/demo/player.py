"""A simulated cluster: a recorded scenario played back live, at a chosen speed.

The demo's source: each event is re-timed so the scenario's first event happens "now" and
the rest follow at ``speed`` times real pace, every timestamp in it (``finished_at``
too) through the same mapping.

Traps: at 30x the core's windows must shrink by the same factor
(:func:`scaled_core_settings`) or no 5-minute rule would fire (a real deployment never
re-times events); the player is a source like any connector (:class:`ScenarioSource`):
its records carry progress and it heartbeats, reports idle between events, and stays on
after the last one so the last windows close on the simulated clock.
docs/development.md, design notes: the scenario player.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from connectors.source import Batch
from schemas.codec import AnyEvent
from schemas.events import Tick
from streams.core import CoreSettings

IDLE_POLL_SECONDS = 0.2
"""How long :meth:`ScenarioSource.next_batch` waits for the next event before saying "idle"."""


def retime(value: Any, to: Callable[[datetime], datetime]) -> Any:
    """``value`` with every datetime inside it (structs and tuples, recursively) mapped."""
    if isinstance(value, datetime):
        return to(value)
    if isinstance(value, msgspec.Struct):
        changes = {name: retime(getattr(value, name), to) for name in value.__struct_fields__}
        return msgspec.structs.replace(value, **changes)
    if isinstance(value, tuple):
        return tuple(retime(v, to) for v in value)
    return value


class ScenarioSource:
    """A scenario played at ``speed`` as a :class:`~connectors.source.Source`: one event
    per batch when it is due, re-timed so the first one happens at ``start`` (epoch
    seconds, default now) and the rest follow at ``speed`` times real pace; idle batches
    in between, and, once everything is out (:attr:`finished`), idle batches until it is
    stopped. Ticks are dropped (they have no topic)."""

    name = "demo"
    key: bytes | None = None

    def __init__(
        self, events: Iterable[AnyEvent], speed: float, *, start: float | None = None
    ) -> None:
        ordered = sorted((e for e in events if not isinstance(e, Tick)), key=lambda e: e.time)
        self.finished = asyncio.Event()
        """Set once the last event has been handed to the publish loop."""
        self._queue: list[tuple[float, AnyEvent]] = []
        if ordered:
            origin = ordered[0].time
            begin = time.time() if start is None else start
            begin_dt = datetime.fromtimestamp(begin, tz=UTC)

            def to(moment: datetime) -> datetime:
                return begin_dt + (moment - origin) / speed

            self._queue = [
                (begin + (e.time - origin) / timedelta(seconds=1) / speed, retime(e, to))
                for e in ordered
            ]
        self._queue.reverse()
        if not self._queue:
            self.finished.set()

    async def next_batch(self) -> Batch | None:
        """The next event once due (the pacing sleep is the simulation's clock), else idle."""
        if not self._queue:
            self.finished.set()
            await asyncio.sleep(IDLE_POLL_SECONDS)
            return Batch()
        due, event = self._queue[-1]
        delay = due - time.time()
        if delay > 0:
            await asyncio.sleep(min(delay, IDLE_POLL_SECONDS))
            if delay > IDLE_POLL_SECONDS:
                return Batch()
        self._queue.pop()
        return Batch(events=[event], records=1, progress=event.time)

    def commit(self, batch: Batch) -> None:
        """Nothing to save: a demo plays from the start."""

    async def close(self) -> None:
        """Nothing to close."""


def scaled_core_settings(config: CoreSettings, speed: float) -> dict[str, float]:
    """The core's window settings divided by ``speed`` (all but ``grace_seconds``, which is
    about transport delays, not scenario time), as ``[core]`` values."""
    return {
        name: getattr(config, name) / speed
        for name in config.__struct_fields__
        if name.endswith("_seconds") and name != "grace_seconds"
    }
