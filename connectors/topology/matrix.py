"""``nvidia-smi topo -m`` / ``-mp`` text: the GPU pair links and each GPU's CPU and NUMA affinity.

Why text when NVML has the same facts: it is what users paste into bug reports and what a
node whose driver container ships only ``nvidia-smi`` can still give; ``gputriage ingest
topo`` reads it offline and the node agent falls back to ``nvidia-smi topo -mp``. A parse
failure is a value (:class:`schemas.codec.RecordError`), never an exception.

Traps, each seen in a real output (``tests/connectors/topology/samples``): NIC columns are
counted but their rows ignored; some drivers glue the header (``GPU0GPU1...``); the CPU
Affinity cell may be empty under Slurm, so trailing values are placed from the right;
``NUMA Affinity`` is ``N/A`` on one-node boxes; ``SOC`` is the older ``SYS``; each pair is
read once, from the lower-index GPU's row; ``-mp`` never prints ``NV<n>``. Details:
docs/connectors.md, design notes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from schemas.codec import RecordError
from schemas.events import GpuNumaAffinity, GpuPairLink

AFFINITY_LABELS: Final = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
"""The columns after the device columns, by the names drivers print."""

_ANSI: Final = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_DEVICE: Final = re.compile(r"GPU\d+|NIC\d+|[a-z][a-z0-9]*_\d+|[a-z][a-z]+\d+")
"""A matrix device name: ``GPU3``, ``NIC0``, ``mlx5_0``, ``mlx4_1``, ``hfi1_0``, ``ib0``."""
_GLUED: Final = re.compile(r"(?:" + _DEVICE.pattern + r")+")
_GPU: Final = re.compile(r"GPU(\d+)")
_CELL: Final = re.compile(r"X|NV\d+|[A-Z]{2,5}|N/A")
"""A matrix cell: self, ``NV<n>``, a PCIe code (``PIX`` ``PXB`` ``PHB`` ``NODE`` ``SYS``
``SOC``) or ``N/A``; kept as printed."""
_NVLINK: Final = re.compile(r"NV(\d+)")
_NOT_AVAILABLE: Final = "N/A"
_TAB: Final = 8


@dataclass(frozen=True)
class Topology:
    """What one matrix says: GPUs by index, each unordered pair once (``src_gpu < dst_gpu``)."""

    gpus: tuple[GpuNumaAffinity, ...]
    links: tuple[GpuPairLink, ...]
    nics: tuple[str, ...] = ()
    """The non-GPU device columns, as named in the header."""


@dataclass(frozen=True)
class _Header:
    line: int
    devices: tuple[str, ...]
    labels: tuple[str, ...]
    """The affinity columns present, in order."""


def nvlinks_of(code: str) -> int:
    """The ``18`` of ``NV18``; 0 for every PCIe code."""
    match = _NVLINK.fullmatch(code)
    return int(match[1]) if match else 0


def _split_devices(text: str) -> list[str] | None:
    """The device names of a header's left part, glued ones split; None if any is not one."""
    names: list[str] = []
    for token in text.split():
        if _DEVICE.fullmatch(token):
            names.append(token)
        elif _GLUED.fullmatch(token):
            names.extend(_DEVICE.findall(token))
        else:
            return None
    return names


def _header(lineno: int, raw: str) -> _Header | None:
    """The matrix header, if ``raw`` is one: device names, then the affinity labels."""
    expanded = raw.expandtabs(_TAB)
    found = sorted((expanded.find(label), label) for label in AFFINITY_LABELS if label in expanded)
    left_end = found[0][0] if found else len(expanded)
    devices = _split_devices(expanded[:left_end])
    if not devices or not any(_GPU.fullmatch(d) for d in devices):
        return None
    rest = expanded[left_end:]
    for _, label in found:
        rest = rest.replace(label, " ", 1)
    if rest.strip():
        return None  # something other than the known labels: not a header
    return _Header(
        line=lineno,
        devices=tuple(devices),
        labels=tuple(label for _, label in found),
    )


def _place(values: list[str], labels: tuple[str, ...]) -> dict[str, str] | None:
    """The trailing values of a GPU row by affinity column, None when there are too many.

    Fewer values than columns means an empty cell, and only the CPU list is ever empty
    (NUMA Affinity and GPU NUMA ID print ``N/A`` when unknown): values are placed from
    the right. Positions cannot be trusted: with an empty CPU cell nvidia-smi emits one
    tab fewer, so the NUMA value sits *between* the two labels (the A100 PCIe sample).
    """
    if len(values) > len(labels):
        return None
    offset = len(labels) - len(values)
    return {labels[offset + i]: text for i, text in enumerate(values)}


def _numa(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def parse_topology(text: str) -> Topology | RecordError:
    """The GPU pairs and affinities of one ``nvidia-smi topo -m`` (or ``-mp``) output.

    Lines before the header (a shell prompt, comments) and from ``Legend:`` on are
    skipped. Errors, as values: no header, a GPU named in the header without a row, a
    GPU row with too few cells or a cell that is not a link code, a row whose own
    column is not ``X``. Never raises.
    """
    lines = _ANSI.sub("", text.replace("\r", "")).split("\n")
    header: _Header | None = None
    rows: dict[str, tuple[int, str]] = {}
    for lineno, raw in enumerate(lines, start=1):
        if header is None:
            header = _header(lineno, raw)
            continue
        stripped = raw.strip()
        if stripped.startswith(("Legend", "NIC Legend")):
            break
        first = stripped.split(maxsplit=1)[0] if stripped else ""
        if first in header.devices and first not in rows:
            rows[first] = (lineno, raw)
    if header is None:
        return RecordError("no topology matrix header (GPU0 GPU1 ... CPU Affinity)")
    return _read_rows(header, rows)


def _read_rows(header: _Header, rows: dict[str, tuple[int, str]]) -> Topology | RecordError:
    devices = header.devices
    gpu_columns = [(i, int(m[1])) for i, d in enumerate(devices) if (m := _GPU.fullmatch(d))]
    cells: dict[int, list[str]] = {}
    gpus: list[GpuNumaAffinity] = []
    for column, index in gpu_columns:
        name = devices[column]
        if name not in rows:
            return RecordError(
                f"the header names {name} but no row of it follows (a truncated output?)",
                f"line {header.line}",
            )
        lineno, raw = rows[name]
        where = f"line {lineno}"
        tokens = raw.split()
        row = tokens[1 : 1 + len(devices)]
        if len(row) < len(devices) or not all(_CELL.fullmatch(c) for c in row):
            return RecordError(
                f"{name}: expected {len(devices)} link codes (one per header device), "
                f"got {' '.join(row) or 'none'}",
                where,
            )
        if row[column] != "X":
            return RecordError(f"{name}: its own column reads {row[column]!r}, not X", where)
        placed = _place(tokens[1 + len(devices) :], header.labels)
        if placed is None:
            return RecordError(f"{name}: more values than affinity columns", where)
        cpus = placed.get("CPU Affinity", "")
        gpus.append(
            GpuNumaAffinity(
                gpu=index,
                numa_node=_numa(placed.get("NUMA Affinity", "")),
                cpu_affinity="" if cpus == _NOT_AVAILABLE else cpus,
            )
        )
        cells[index] = row
    links: list[GpuPairLink] = []
    for a, (_, src) in enumerate(gpu_columns):
        for column, dst in gpu_columns[a + 1 :]:
            code = cells[src][column]
            low, high = min(src, dst), max(src, dst)
            links.append(
                GpuPairLink(src_gpu=low, dst_gpu=high, link_type=code, nvlinks=nvlinks_of(code))
            )
    nics = tuple(d for d in devices if not _GPU.fullmatch(d))
    return Topology(
        gpus=tuple(sorted(gpus, key=lambda g: g.gpu)),
        links=tuple(sorted(links, key=lambda link: (link.src_gpu, link.dst_gpu))),
        nics=nics,
    )
