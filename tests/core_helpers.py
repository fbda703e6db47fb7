"""Running scenarios through the core in tests."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from schemas.codec import AnyEvent
from schemas.incidents import Incident
from streams.core import CoreConfig, Correlator
from tests.cli_helpers import load_tables


def config(**core: Any) -> CoreConfig:
    return load_tables({"core": core}).core_config()


def run(events: Iterable[AnyEvent], cfg: CoreConfig | None = None) -> list[Incident]:
    """Every revision, in the order the core published them (input ends with ``flush``)."""
    correlator = Correlator(cfg or config())
    out: list[Incident] = []
    for event in events:
        out.extend(correlator.ingest(event))
    out.extend(correlator.flush())
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
