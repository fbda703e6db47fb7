"""``gputriage status``: the fleet at a glance, from the incident topic's latest revisions.

Pure: given every revision read (and, optionally, each pool's GPU totals from
Prometheus), keep the latest revision per id, keep the open ones, and render the FLEET
lines and the open incidents grouped by pool. Out of service, by the gauge's rule
(:func:`streams.app.fleet.gpus_taken`): the GPUs open page-level hardware incidents name,
once per node and GPU, and the nodes whose every GPU is (such an incident naming none, or
``gpu_node_not_ready``), counted as nodes: the topic does not say how many GPUs a node
has. Totals and healthy share come only from the ``gputriage_fleet_gpus`` gauge ("unknown"
without Prometheus). Traps: a NotReady node without ``gpu_node_not_ready`` open is only in
those totals; a node incident's pool is its ``pool`` attribute (``(none)`` without); a
cluster incident goes under ``node_group``, ``node_groups`` or ``(cluster)``. Ages are
from ``now`` (a parameter); the JSON carries ``first_seen``, not an age (stable values).
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
from streams.app.fleet import GpuId, gpus_taken

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


@dataclass(frozen=True)
class OutOfService:
    """One pool's GPUs out of service: ``gpus`` named, and ``nodes`` whose every GPU is."""

    gpus: int = 0
    nodes: int = 0


def out_of_service_by_pool(incidents: Iterable[Incident]) -> dict[PoolKey, OutOfService]:
    """GPUs and whole nodes that open incidents take out of service, per ``(cluster,
    pool)``; a GPU two incidents name counts once, and a GPU of a whole node not again."""
    taken: dict[PoolKey, dict[str, set[GpuId] | None]] = {}
    for incident in incidents:
        gpus = gpus_taken(incident.type, incident.severity, incident.gpus)
        if not incident.node or gpus == frozenset():
            continue
        nodes = taken.setdefault((incident.cluster, pool_of(incident)), {})
        named = nodes.setdefault(incident.node, set())
        if gpus is None or named is None:
            nodes[incident.node] = None
        else:
            named |= gpus
    return {
        key: OutOfService(
            gpus=sum(len(named) for named in nodes.values() if named is not None),
            nodes=sum(named is None for named in nodes.values()),
        )
        for key, nodes in taken.items()
    }


class FleetRow(msgspec.Struct, frozen=True, kw_only=True):
    """One FLEET line: ``gpus`` and ``healthy_ratio`` are None when unknown;
    ``nodes_out_of_service`` counts nodes whose every GPU is out (not in ``out_of_service``)."""

    cluster: str
    pool: str
    out_of_service: int
    nodes_out_of_service: int = 0
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
        taken = out.get(key, OutOfService())
        row = FleetRow(
            cluster=key[0],
            pool=key[1],
            out_of_service=taken.gpus,
            nodes_out_of_service=taken.nodes,
        )
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
    """``FLEET c1/pool-a: 2 GPUs out of service; total 16, healthy 87.5%``, with
    ``2 GPUs and every GPU of 1 node out of service`` when whole nodes are out."""
    total = UNKNOWN if row.gpus is None else str(row.gpus)
    ratio = UNKNOWN if row.healthy_ratio is None else f"{row.healthy_ratio:.1%}"
    out = f"{row.out_of_service} GPUs"
    if row.nodes_out_of_service:
        out += f" and every GPU of {row.nodes_out_of_service} node"
        out += "s" if row.nodes_out_of_service > 1 else ""
    return f"FLEET {row.cluster}/{row.pool}: {out} out of service; total {total}, healthy {ratio}"


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
