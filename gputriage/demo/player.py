"""A simulated cluster: a recorded scenario played back live, at a chosen speed.

This is the demo's source. Each event is re-timed so the scenario's first event
happens "now" and the rest follow at ``speed`` times real pace; *every*
timestamp in the event (a termination's ``finished_at`` too) goes through the
same mapping, so intervals inside the scenario keep their proportions.

Trap: at 30x, five minutes of scenario time are ten seconds of event time, so
the core's windows must shrink by the same factor (:func:`scaled_core_settings`)
or no ``gpu_degraded`` (5 min) would ever fire. The demo does that; a real
deployment never re-times events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from schemas.codec import AnyEvent
from schemas.events import Tick
from streams.core import CoreConfig


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


async def play(
    events: Iterable[AnyEvent], speed: float, *, start: float | None = None
) -> AsyncIterator[AnyEvent]:
    """Yield ``events`` (sorted by time, ticks dropped) re-timed to wall-clock time.

    Pacing sleeps until each event is due: that is the simulation's clock, not
    synchronisation. ``start`` (epoch seconds) defaults to now.
    """
    ordered = sorted((e for e in events if not isinstance(e, Tick)), key=lambda e: e.time)
    if not ordered:
        return
    origin = ordered[0].time
    begin = time.time() if start is None else start
    begin_dt = datetime.fromtimestamp(begin, tz=UTC)

    def to(moment: datetime) -> datetime:
        return begin_dt + (moment - origin) / speed

    for event in ordered:
        due = begin + (event.time - origin) / timedelta(seconds=1) / speed
        delay = due - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        yield retime(event, to)


def scaled_core_settings(config: CoreConfig, speed: float) -> dict[str, float]:
    """The core's window settings divided by ``speed`` (all but ``grace_seconds``, which is
    about transport delays, not scenario time), as ``[core]`` values."""
    return {
        name: getattr(config, name) / speed
        for name in config.__struct_fields__
        if name.endswith("_seconds") and name != "grace_seconds"
    }
