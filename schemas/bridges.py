"""The bridge ledger's records: what each bridge delivered, per route and incident.

One :class:`BridgeDelivery` per ``(route, incident id)`` on a compacted topic, keyed
``route NUL incident id``, read back to the end before consuming; JSON like every public
record, so ``kcat`` shows what a bridge believes it sent. :class:`BridgeGroup` is a storm
group's state, on the same topic under ``route NUL "group" NUL group key``.

Kill safety (why there is a ``state``): before calling the vendor the runner writes an
intent (``state = "sending"``) and awaits its ack; a restart that finds an intent sends
that revision again ("maybe delivered": vendors dedupe). Trap: versioned by tag and every
field has a default, so an older bridge's ledger still decodes: only ever add a field.
docs/bridges.md, design notes: the ledger records.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

from schemas.incidents import Incident, PodInfo

DeliveryState = Literal["delivered", "sending"]

KEY_SEPARATOR: Final = "\x00"
"""Between the route name and the incident id in a ledger key (neither can hold it)."""


class BridgeDelivery(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    tag_field="schema",
    tag="bridge_delivery.v1",
):
    """The last revision of one incident a bridge handled on one route, and what it knows."""

    route: str
    incident_id: str
    revision: int = 0
    """The incident's revision last delivered (accepted, skipped or dead-lettered);
    0: none yet (only an intent was written)."""
    status: str = ""
    """That revision's status (``open``/``updated``/``resolved``); empty when none."""
    memo: dict[str, str] = {}
    """The endpoint's own facts for later revisions (Slack's channel id and ts); never a
    secret."""
    state: DeliveryState = "delivered"
    """``sending``: revision ``sending_revision`` was about to go out when this was
    written, and its acceptance was never recorded (maybe delivered)."""
    sending_revision: int = 0
    """The revision of the intent (``state == "sending"``)."""
    endpoint_revision: int = 0
    """The revision number the endpoint last saw for this incident on this route. Equal
    to ``revision`` unless storm updates were folded in: a merged view is handed over
    with a revision above every one before it, so vendors that key on it (CloudEvents
    ids) see a new revision (:mod:`streams.bridges.storms`). 0: as ``revision``."""
    outcome: str = ""
    """How ``revision`` ended: ``accepted``, ``skipped`` or ``rejected``."""
    group: str = ""
    """The storm group the incident belongs to on this route (empty: none)."""
    folded_into: str = ""
    """The id of the incident whose page this one was folded into (a storm's lead);
    empty when it was delivered as itself."""
    updated_at: float = 0.0
    """Wall-clock seconds since the epoch of this entry (the min-interval clock)."""


class BridgeGroup(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    omit_defaults=True,
    tag_field="schema",
    tag="bridge_group.v1",
):
    """One storm group on one route: its recent pages, its lead and what was folded in."""

    route: str
    group: str
    lead: str = ""
    """The incident id of the group's latest page: further incidents fold into it."""
    pages: tuple[float, ...] = ()
    """Wall-clock times of the new pages in the rate-limit window (oldest first)."""
    folded: dict[str, int] = {}
    """Incident id -> its latest revision folded into the lead's page."""
    pods: tuple[PodInfo, ...] = ()
    """Every pod of the folded incidents (latest revision of each), for the merged view."""
    resolved: tuple[str, ...] = ()
    """Folded incidents that have resolved."""
    lead_view: Incident | None = None
    """The lead's latest revision as delivered (without the folded pods): what a fold
    delivers again, merged, after a restart too."""
