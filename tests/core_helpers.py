"""Running scenarios through the core in tests."""

from __future__ import annotations

import random
from collections.abc import Iterable
from typing import Any

from schemas.codec import AnyEvent
from schemas.incidents import Incident
from schemas.keys import routed
from streams.core import CoreConfig, Correlator
from tests.cli_helpers import load_tables


def config(**core: Any) -> CoreConfig:
    return load_tables({"core": core}).core_config()


def run(events: Iterable[AnyEvent], cfg: CoreConfig | None = None) -> list[Incident]:
    """Every revision, in the order the core published them (input ends with ``flush``)."""
    correlator = Correlator(cfg or config())
    out: list[Incident] = []
    for event in events:
        for copy in routed(event):  # as the producer and the replay route it
            out.extend(correlator.ingest(copy))
    out.extend(correlator.flush())
    return out


def feed(correlator: Correlator, event: AnyEvent) -> list[Incident]:
    """Ingest ``event`` as the producer would publish it: with its copy for the cluster
    key, if it has one (:func:`schemas.keys.routed`)."""
    out: list[Incident] = []
    for copy in routed(event):
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
