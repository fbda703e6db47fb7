"""``gputriage status``: the fleet at a glance, from the incident topic's latest revisions.

Pure: given every revision read (and, optionally, each pool's GPU totals from
Prometheus), keep the latest revision per id, keep the open ones, and render the FLEET
lines (GPUs out of service per cluster and pool) and the open incidents grouped by pool.
GPUs out of service are those an open page-level hardware incident names
(:func:`streams.app.fleet.out_of_service`), counted once per node and GPU; the total and
the healthy share come only from the processors' ``gputriage_fleet_gpus`` gauge, so
without Prometheus they are "unknown", never guessed. Traps: a node incident's pool is
its ``pool`` attribute, ``(none)`` when the node has no pool label; a cluster incident
has no node, so it goes under its node group (``node_group``, ``node_groups``) or
``(cluster)``. Ages are from ``now`` (a parameter: tests pass one); the JSON carries
``first_seen``, not an age, so its keys and values are stable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

import msgspec

from gputriage import render
from schemas.codec import encode
from schemas.incidents import Incident
from streams.app.fleet import gpu_identity, out_of_service

StatusOutput = Literal["table", "wide", "json"]
OUTPUTS: Final[tuple[StatusOutput, ...]] = ("table", "wide", "json")
NO_POOL: Final = "(none)"
CLUSTER_WIDE: Final = "(cluster)"
UNKNOWN: Final = "unknown"

PoolKey = tuple[str, str]
"""``(cluster, pool)``."""


@dataclass(frozen=True)
class Totals:
    """GPUs per ``(cluster, pool)`` from Prometheus: all of them and the healthy ones."""

    gpus: Mapping[PoolKey, int] = field(default_factory=dict)
    healthy: Mapping[PoolKey, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Filters:
    """``--cluster``, ``--pool``, ``--type``: empty matches everything."""

    cluster: str = ""
    pool: str = ""
    type: str = ""

    def keeps(self, incident: Incident) -> bool:
        return (
            (not self.cluster or incident.cluster == self.cluster)
            and (not self.pool or pool_of(incident) == self.pool)
            and (not self.type or incident.type == self.type)
        )

    def keeps_pool(self, key: PoolKey) -> bool:
        return (not self.cluster or key[0] == self.cluster) and (
            not self.pool or key[1] == self.pool
        )


def pool_of(incident: Incident) -> str:
    """The pool an incident is listed under (see the module docs)."""
    attrs = incident.attributes
    if incident.node:
        return attrs.get("pool") or NO_POOL
    return attrs.get("node_group") or attrs.get("node_groups") or CLUSTER_WIDE


def open_latest(revisions: Iterable[Incident]) -> list[Incident]:
    """The latest revision of each id, those not resolved, in display order."""
    latest = render.latest_revisions(revisions)
    return render.display_order(i for i in latest if i.status != "resolved")


def out_of_service_by_pool(incidents: Iterable[Incident]) -> dict[PoolKey, int]:
    """GPUs named by open page-level hardware incidents, per ``(cluster, pool)``; a GPU
    two incidents name counts once."""
    named: dict[PoolKey, set[tuple[str, str, int | None]]] = {}
    for incident in incidents:
        if incident.node and out_of_service(incident.type, incident.severity):
            gpus = named.setdefault((incident.cluster, pool_of(incident)), set())
            gpus.update((incident.node, *gpu_identity(ref)) for ref in incident.gpus)
    return {key: len(gpus) for key, gpus in named.items()}


class FleetRow(msgspec.Struct, frozen=True, kw_only=True):
    """One FLEET line: ``gpus`` and ``healthy_ratio`` are None when unknown."""

    cluster: str
    pool: str
    out_of_service: int
    gpus: int | None = None
    healthy_ratio: float | None = None


class IncidentRow(msgspec.Struct, frozen=True, kw_only=True):
    """One open incident as ``-o json`` prints it (stable keys)."""

    id: str
    cluster: str
    pool: str
    type: str
    severity: str
    node: str
    first_seen: datetime
    revision: int
    summary: str
    gpus: list[str]
    pods: list[str]


class Status(msgspec.Struct, frozen=True, kw_only=True):
    """What ``gputriage status`` shows (``-o json`` is this, encoded)."""

    fleet: list[FleetRow]
    incidents: list[IncidentRow]


def status(revisions: Iterable[Incident], totals: Totals | None, filters: Filters) -> Status:
    """The fleet rows and the open incidents (filtered), pools sorted by name."""
    opened = open_latest(revisions)
    out = out_of_service_by_pool(opened)
    keys = set(out) | (set(totals.gpus) if totals is not None else set())
    fleet = []
    for key in sorted(k for k in keys if filters.keeps_pool(k)):
        gpus = totals.gpus.get(key) if totals is not None else None
        healthy = totals.healthy.get(key, 0) if totals is not None else 0
        ratio = healthy / gpus if gpus else None
        row = FleetRow(cluster=key[0], pool=key[1], out_of_service=out.get(key, 0))
        fleet.append(msgspec.structs.replace(row, gpus=gpus, healthy_ratio=ratio))
    shown = [i for i in opened if filters.keeps(i)]
    shown.sort(key=lambda i: (i.cluster, pool_of(i)))  # stable: display order within a pool
    return Status(fleet=fleet, incidents=[_incident_row(i) for i in shown])


def _incident_row(incident: Incident) -> IncidentRow:
    return IncidentRow(
        id=incident.id,
        cluster=incident.cluster,
        pool=pool_of(incident),
        type=incident.type,
        severity=incident.severity,
        node=incident.node,
        first_seen=incident.first_seen,
        revision=incident.revision,
        summary=incident.summary,
        gpus=[render.gpu_label(g) for g in incident.gpus],
        pods=[render.pod_label(p) for p in incident.pods],
    )


def age(since: datetime, now: datetime) -> str:
    """kubectl's AGE: the largest whole unit, ``45s``, ``12m``, ``5h``, ``3d``."""
    seconds = max(0, int((now - since).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def fleet_line(row: FleetRow) -> str:
    """``FLEET c1/pool-a: 2 GPUs out of service; total 16, healthy 87.5%``."""
    total = UNKNOWN if row.gpus is None else str(row.gpus)
    ratio = UNKNOWN if row.healthy_ratio is None else f"{row.healthy_ratio:.1%}"
    return (
        f"FLEET {row.cluster}/{row.pool}: {row.out_of_service} GPUs out of service; "
        f"total {total}, healthy {ratio}"
    )


def render_text(shown: Status, now: datetime, *, wide: bool = False) -> str:
    """The table (``wide``: with ID, GPUS, PODS): FLEET lines, a blank line, the incidents."""
    lines = [fleet_line(row) for row in shown.fleet] or ["FLEET: no GPU out of service"]
    headers: Sequence[str] = ("POOL", "TYPE", "SEVERITY", "NODE", "AGE")
    if wide:
        headers = (*headers, "ID", "GPUS", "PODS")
    rows = []
    for row in shown.incidents:
        cells = [row.pool, row.type, row.severity, row.node or render.NONE]
        cells.append(age(row.first_seen, now))
        if wide:
            cells += [row.id, render.listing(row.gpus), render.listing(row.pods)]
        rows.append([*cells, render.one_line(row.summary)])
    table = render.columns([*headers, "SUMMARY"], rows) or "No open incidents.\n"
    return "\n".join(lines) + "\n\n" + table


def render_json(shown: Status) -> bytes:
    """``-o json``: one JSON object, ``fleet`` and ``incidents`` (see :class:`Status`)."""
    return encode(shown) + b"\n"


def totals_from(vectors: Mapping[str, Any]) -> Totals:
    """:class:`Totals` from the two instant vectors of the Prometheus HTTP API
    (``data.result`` of ``sum by (cluster, pool)`` over all GPUs and the healthy ones,
    under the keys ``gpus`` and ``healthy``); a series without a pool is ``(none)``."""

    def by_pool(result: Any) -> dict[PoolKey, int]:
        out: dict[PoolKey, int] = {}
        for sample in result:
            labels = sample.get("metric", {})
            key = (labels.get("cluster", ""), labels.get("pool") or NO_POOL)
            out[key] = round(float(sample["value"][1]))
        return out

    return Totals(gpus=by_pool(vectors["gpus"]), healthy=by_pool(vectors["healthy"]))
