"""Human output for incidents: kubectl-like aligned columns, plus evidence chains.

Plain text only: UPPERCASE headers, columns separated by three spaces, no box
drawing and no colour, so the output greps, diffs and pastes into a ticket.
``<none>`` marks an empty cell as kubectl does, so columns never collapse.

Determinism traps: times are rendered in UTC whatever offset the source used
(never the local zone of the machine running the replay), and incidents are
ordered by ``(first_seen, type, id)``, never by hash or set order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Final

from schemas.incidents import GpuRef, Incident, PodInfo

NONE: Final = "<none>"
GAP: Final = "   "
EVIDENCE_INDENT: Final = "    "
MAX_LISTED: Final = 2
"""GPUs/pods listed in a cell before ``+N``: the table stays one line per incident."""


def format_time(value: datetime | None) -> str:
    """RFC 3339 in UTC with a ``Z``; fractional seconds only when present."""
    if value is None:
        return NONE
    utc = value.astimezone(UTC)
    timespec = "microseconds" if utc.microsecond else "seconds"
    return utc.replace(tzinfo=None).isoformat(timespec=timespec) + "Z"


def one_line(text: str) -> str:
    """Collapse newlines, tabs and runs of spaces: a cell or evidence line must stay one line."""
    return " ".join(text.split())


def gpu_label(gpu: GpuRef) -> str:
    """The most useful identifier we have: bus id, else UUID, else index."""
    if gpu.pci_bus_id:
        return gpu.pci_bus_id
    if gpu.uuid:
        return gpu.uuid
    return f"#{gpu.index}" if gpu.index is not None else "?"


def pod_label(pod: PodInfo) -> str:
    """``namespace/name``."""
    return f"{pod.namespace}/{pod.name}"


def listing(labels: Sequence[str]) -> str:
    """A short comma list: at most :data:`MAX_LISTED` items, then ``+N``."""
    if not labels:
        return NONE
    shown = ",".join(labels[:MAX_LISTED])
    rest = len(labels) - MAX_LISTED
    return f"{shown},+{rest}" if rest > 0 else shown


HEADERS: Final = ("ID", "TYPE", "STATUS", "REV", "SEVERITY", "NODE", "GPUS", "PODS", "FIRST SEEN")
WIDE_HEADERS: Final = ("LAST SEEN", "RESOLVED", "CLUSTER", "EVIDENCE", "ACTION")


def row(incident: Incident, *, wide: bool = False) -> list[str]:
    """The cells of one incident revision, SUMMARY last (it may be long)."""
    cells = [
        incident.id,
        incident.type,
        incident.status,
        str(incident.revision),
        incident.severity,
        incident.node or NONE,
        listing([gpu_label(gpu) for gpu in incident.gpus]),
        listing([pod_label(pod) for pod in incident.pods]),
        format_time(incident.first_seen),
    ]
    if wide:
        evidence = len(incident.evidence) + incident.evidence_omitted
        cells += [
            format_time(incident.last_seen),
            format_time(incident.resolved_at),
            incident.cluster or NONE,
            str(evidence),
            one_line(incident.action) or NONE,
        ]
    cells.append(one_line(incident.summary))
    return cells


def evidence_lines(incident: Incident) -> list[str]:
    """The evidence chain, one ``time  schema  text`` line each, indented under its row."""
    lines = [
        f"{EVIDENCE_INDENT}{format_time(item.time)}  {item.schema}  {one_line(item.text)}"
        for item in incident.evidence
    ]
    if incident.evidence_omitted:
        lines.append(f"{EVIDENCE_INDENT}... and {incident.evidence_omitted} more evidence events")
    return lines


def table(incidents: Iterable[Incident], *, wide: bool = False, evidence: bool = True) -> str:
    """Aligned columns for ``incidents`` in the order given; empty string when none."""
    shown = list(incidents)
    if not shown:
        return ""
    headers = [*HEADERS, *(WIDE_HEADERS if wide else ()), "SUMMARY"]
    rows = [row(incident, wide=wide) for incident in shown]
    widths = [max(len(cells[i]) for cells in [headers, *rows]) for i in range(len(headers) - 1)]
    out = [_line(headers, widths)]
    for incident, cells in zip(shown, rows, strict=True):
        out.append(_line(cells, widths))
        if evidence:
            out.extend(evidence_lines(incident))
    return "\n".join(out) + "\n"


def columns(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Any rows as aligned columns under ``headers`` (the last column unpadded, as in
    :func:`table`); empty string when there are no rows. For reports that are not
    incidents (``gputriage score``), so every table of the CLI looks the same."""
    body = [list(cells) for cells in rows]
    if not body:
        return ""
    widths = [max(len(cells[i]) for cells in [headers, *body]) for i in range(len(headers) - 1)]
    return "\n".join(_line(cells, widths) for cells in [headers, *body]) + "\n"


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    padded = [cell.ljust(width) for cell, width in zip(cells, widths, strict=False)]
    return GAP.join([*padded, cells[-1]]).rstrip()


def display_order(incidents: Iterable[Incident]) -> list[Incident]:
    """Sort for display: when it started, then type, then id (all deterministic)."""
    return sorted(incidents, key=lambda i: (i.first_seen, i.type, i.id, i.revision))


def latest_revisions(revisions: Iterable[Incident]) -> list[Incident]:
    """The highest revision of each incident id."""
    latest: dict[str, Incident] = {}
    for incident in revisions:
        current = latest.get(incident.id)
        if current is None or incident.revision >= current.revision:
            latest[incident.id] = incident
    return list(latest.values())


_STREAM_WIDTHS: Final = {
    "ID": 24,
    "TYPE": 28,  # multi_gpu_pod_without_nvlink, the longest type name
    "STATUS": 8,
    "REV": 3,
    "SEVERITY": 8,
    "NODE": 12,
    "GPUS": 12,
    "PODS": 24,
    "FIRST SEEN": 20,
    "LAST SEEN": 20,
    "RESOLVED": 20,
    "CLUSTER": 8,
    "EVIDENCE": 8,
    "ACTION": 12,
}
"""Starting widths for :class:`StreamingTable`: typical values fit without shifting."""


class StreamingTable:
    """A table printed one row at a time, as incidents arrive (``gputriage tail``).

    :func:`table` sizes columns from every row, which a stream does not have.
    Here columns start at typical widths (ids, type names and timestamps have
    known lengths) and only ever widen, so rows stay aligned with the header
    in the common case and never lose text in the rare one.
    """

    def __init__(self, *, wide: bool = False, evidence: bool = False) -> None:
        self.wide = wide
        self.evidence = evidence
        self.headers = [*HEADERS, *(WIDE_HEADERS if wide else ()), "SUMMARY"]
        self.widths = [max(len(h), _STREAM_WIDTHS.get(h, 0)) for h in self.headers[:-1]]
        self._header_done = False

    def lines(self, incident: Incident) -> list[str]:
        """The lines to print for one revision: the header first time, the row, its evidence."""
        cells = row(incident, wide=self.wide)
        self.widths = [max(w, len(c)) for w, c in zip(self.widths, cells, strict=False)]
        out = []
        if not self._header_done:
            out.append(_line(self.headers, self.widths))
            self._header_done = True
        out.append(_line(cells, self.widths))
        if self.evidence:
            out.extend(evidence_lines(incident))
        return out
