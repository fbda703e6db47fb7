"""``gputriage ingest topo``: a saved ``nvidia-smi topo -m`` / ``-mp`` output as one record.

Event time, as the other offline ingests pick it (``ingest dcgm``): ``--time`` when
given, else the file's modification time (when the output was saved), for a pipe the
time of reading. So the same file always gives the same record, id and time.
"""

from __future__ import annotations

import os
import zlib
from datetime import UTC, datetime
from typing import IO

from connectors.files import STDIN, FileReader, read_error
from connectors.topology.events import topology_event
from connectors.topology.matrix import parse_topology
from schemas.codec import RecordError, encode

SOURCE = "nvidia-smi"


def _read(path: str) -> tuple[str, datetime | None]:
    with FileReader(path) as source:
        data = source.read()
    when = None if path == STDIN else datetime.fromtimestamp(os.stat(path).st_mtime, UTC)
    return data.decode("utf-8", errors="replace"), when


def ingest_topology(
    path: str, *, cluster: str, node: str, time: datetime | None, out: IO[bytes], err: IO[str]
) -> int:
    """Print the file's ``gpu_topology.v1`` record as one JSON line; a file that holds no
    readable matrix is one ``FILE: reason`` line on ``err`` and status 1."""
    name = "<stdin>" if path == STDIN else path
    try:
        text, mtime = _read(path)
    except (OSError, EOFError, zlib.error) as exc:
        print(f"{name}: cannot read: {read_error(exc)}", file=err)
        return 1
    topology = parse_topology(text)
    if isinstance(topology, RecordError):
        print(f"{name}: {topology}", file=err)
        return 1
    when = time or mtime or datetime.now(UTC)
    event = topology_event(topology, cluster=cluster, node=node, time=when, source=SOURCE)
    out.write(encode(event) + b"\n")
    out.flush()
    return 0
