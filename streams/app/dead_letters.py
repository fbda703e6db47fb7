"""What both engines do with a batch's dead letters: count, log, deliver.

One policy, so the default worker and the faust engine cannot drift apart on it: a dead
letter always fits (:func:`~schemas.codec.fitted_dead_letter` keeps the head of the
value, its size and a SHA-256); if the broker still refuses it (a dead-letter topic with
a smaller ``max.message.bytes``, an error past the producer's retries) it is tried once
more cut to :data:`FALLBACK_LETTER_BYTES`; if that fails too, it is logged at error level
with the record's coordinates and reason, counted in
``gputriage_dead_letter_failures_total``, and the record is committed past: a poison
record must never stop its partition (before, an 800 KB one became a 1.07 MB letter, the
send raised, the worker exited, and every restart died on the same record).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from schemas.codec import fitted_dead_letter
from schemas.dead_letters import DeadLetter
from streams.app.metrics import Metrics

log = logging.getLogger("gputriage.processor")

FALLBACK_LETTER_BYTES = 64 << 10
"""A dead letter the broker refused at full size is tried once more cut to this."""

Send = Callable[[DeadLetter], Awaitable[BaseException | None]]
"""Send and await one letter; the error instead of raising it (each engine's producer)."""


def note(dead: DeadLetter, metrics: Metrics) -> None:
    """Count a dead letter by its source topic and say why, once, at warning level."""
    metrics.dead_letters.labels(dead.topic).inc()
    log.warning(
        "dead letter: %s[%d]@%d: %s%s",
        dead.topic,
        dead.partition,
        dead.offset,
        dead.reason,
        f" (at {dead.field})" if dead.field else "",
    )


def queue(
    letters: Iterable[DeadLetter], send: Send, metrics: Metrics, pending: list[asyncio.Future[Any]]
) -> None:
    """Note each letter and deliver it in a task of its own, put on ``pending`` (the flush
    awaits every send before it commits; :func:`deliver` never raises)."""
    for dead in letters:
        pending.append(asyncio.ensure_future(deliver(dead, send, metrics)))
        note(dead, metrics)


async def deliver(dead: DeadLetter, send: Send, metrics: Metrics) -> None:
    """Deliver one dead letter by the policy above; never raises."""
    letter = fitted_dead_letter(dead)
    error = await send(letter)
    if error is not None:
        smaller = fitted_dead_letter(letter, FALLBACK_LETTER_BYTES)
        if smaller is not letter:
            error = await send(smaller)
    if error is None:
        return
    metrics.dead_letter_failures.inc()
    log.error(
        "dead letter for %s[%d]@%d (%s) could not be written (%r): committed past it",
        dead.topic,
        dead.partition,
        dead.offset,
        dead.reason,
        error,
    )
