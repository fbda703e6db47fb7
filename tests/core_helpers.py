"""Running scenarios through the core in tests."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from schemas.codec import AnyEvent
from schemas.incidents import Incident
from schemas.keys import Router
from streams.core import CoreSettings, Correlator
from tests.cli_helpers import load_tables


def config(**core: Any) -> CoreSettings:
    return load_tables({"core": core}).core_config()


def run(events: Iterable[AnyEvent], cfg: CoreSettings | None = None) -> list[Incident]:
    """Every revision, in the order the core published them (input ends with ``flush``)."""
    correlator = Correlator(cfg or config())
    router = Router()
    out: list[Incident] = []
    for event in events:
        for copy in router.route(event):  # as the producer and the replay route it
            out.extend(correlator.ingest(copy))
    out.extend(correlator.flush())
    return out


def route_all(events: Iterable[AnyEvent]) -> list[AnyEvent]:
    """``events`` as one producer publishes them: each, and the copies its router makes."""
    router = Router()
    return [copy for event in events for copy in router.route(event)]


_ROUTERS: dict[int, tuple[Correlator, Router]] = {}
"""The router of each correlator :func:`feed` was given (the last few: a test feeds one
or two; the entry holds the correlator, so its id cannot be reused meanwhile)."""


def router_of(correlator: Correlator) -> Router:
    """The one router that routes every event :func:`feed` gives ``correlator``, as one
    producer routes all of its records."""
    entry = _ROUTERS.get(id(correlator))
    if entry is None:
        while len(_ROUTERS) >= 8:
            del _ROUTERS[next(iter(_ROUTERS))]
        entry = _ROUTERS[id(correlator)] = (correlator, Router())
    return entry[1]


def feed(correlator: Correlator, event: AnyEvent) -> list[Incident]:
    """Ingest ``event`` as the producer would publish it: with its copy for the cluster
    key, if it has one (:class:`schemas.keys.Router`, one per correlator)."""
    out: list[Incident] = []
    for copy in router_of(correlator).route(event):
        out.extend(correlator.ingest(copy))
    return out


def final(revisions: list[Incident]) -> dict[str, Incident]:
    """The last revision of each incident, by id."""
    last: dict[str, Incident] = {}
    for inc in revisions:
        last[inc.id] = inc
    return last


def of_type(revisions: list[Incident], kind: str) -> list[Incident]:
    """Final revisions of one incident type."""
    return [inc for inc in final(revisions).values() if inc.type == kind]


def within_grace(events: list[AnyEvent], rnd: random.Random, grace: float) -> list[AnyEvent]:
    """The events reordered so that none arrives more than ``grace`` seconds behind
    another: an arrival order a live processor must treat as the event-time order."""
    keyed = [
        (e.time.timestamp() + rnd.uniform(0, grace * 0.99), i, e) for i, e in enumerate(events)
    ]
    return [e for _, _, e in sorted(keyed, key=lambda k: (k[0], k[1]))]
