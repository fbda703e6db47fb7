"""The simulator's API: typed events, encoded lines, files.

The benchmarks (``bench/``) and ``gputriage simulate`` both come through here, so
there is one generator: :func:`generate_lines` for an exact event count
(``StreamSpec(events=1_000_000, nodes=5_000)``, cached under ``bench/out/`` by
:meth:`~gputriage.simulate.spec.StreamSpec.cache_name`), :class:`Simulation` when the
ground truth is wanted too.
"""

from __future__ import annotations

import gzip
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

from connectors.files import FileReader
from gputriage.simulate.dra import DraPool
from gputriage.simulate.faults import Simulator
from gputriage.simulate.spec import StreamSpec
from schemas.codec import AnyEvent, encode
from schemas.jsonschema import wire_tag
from schemas.truth import ExpectedIncident


class Simulation:
    """One run: iterate :meth:`lines` (or :meth:`events`), then read :attr:`truth`."""

    def __init__(self, spec: StreamSpec) -> None:
        self.spec = spec
        self._sim = Simulator(spec)
        self.counts: Counter[str] = self._sim.counts
        """Events emitted so far, by schema tag."""
        self.dra: DraPool | None = (
            DraPool(spec, self._sim.clusters[0], self._sim.truth) if spec.dra_nodes > 0 else None
        )
        """The DRA node pool (``spec.dra_nodes``), whose records join the stream by time."""

    def events(self) -> Iterator[AnyEvent]:
        if self.dra is None:
            return self._sim.events()
        return self._merged(self.dra.events)

    def _merged(self, pool: list[AnyEvent]) -> Iterator[AnyEvent]:
        """The fleet's stream with the pool's records, each before the first fleet record
        later than it (the fleet's own order is kept, jitter and all)."""
        k = 0
        counts = self.counts
        for event in self._sim.events():
            while k < len(pool) and pool[k].time <= event.time:
                counts[wire_tag(type(pool[k]))] += 1
                yield pool[k]
                k += 1
            yield event
        for rest in pool[k:]:
            counts[wire_tag(type(rest))] += 1
            yield rest

    def lines(self) -> Iterator[bytes]:
        """The stream as encoded JSON lines (no trailing newline)."""
        for event in self.events():
            yield encode(event)

    @property
    def truth(self) -> list[ExpectedIncident]:
        """The expected incidents, by start; complete once the stream is exhausted."""
        return self._sim.truth.expected


def generate_events(spec: StreamSpec) -> Iterator[AnyEvent]:
    """The typed events of the stream ``spec`` describes."""
    return Simulation(spec).events()


def generate_lines(spec: StreamSpec, counts: Counter[str] | None = None) -> Iterator[bytes]:
    """The stream as encoded JSON lines (no trailing newline); tallies schemas into ``counts``."""
    sim = Simulation(spec)
    yield from sim.lines()
    if counts is not None:
        counts.update(sim.counts)


def write_lines(lines: Iterator[bytes], out: IO[bytes], batch: int = 10_000) -> int:
    """Write lines newline-terminated; return the number of bytes written."""
    written = 0
    buffer: list[bytes] = []
    for line in lines:
        buffer.append(line)
        if len(buffer) >= batch:
            chunk = b"\n".join(buffer) + b"\n"
            written += out.write(chunk)
            buffer.clear()
    if buffer:
        written += out.write(b"\n".join(buffer) + b"\n")
    return written


def open_output(path: str) -> IO[bytes]:
    """``-`` for stdout; gzip when the name ends in ``.gz``.

    Trap: gzip's header holds the file name and a time stamp unless told otherwise;
    ``mtime=0`` keeps a ``.gz`` output byte-identical from run to run."""
    if path == "-":
        return sys.stdout.buffer
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    if path.endswith(".gz"):
        raw = open(path, "wb")  # noqa: SIM115 - closed with the gzip file below
        zipped = gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=5, mtime=0)
        return cast(IO[bytes], _Closing(zipped, raw))
    return open(path, "wb")


class _Closing:
    """A gzip writer that also closes the file under it."""

    def __init__(self, zipped: gzip.GzipFile, raw: IO[bytes]) -> None:
        self._zipped = zipped
        self._raw = raw

    def write(self, data: bytes) -> int:
        return self._zipped.write(data)

    def flush(self) -> None:
        self._zipped.flush()

    def close(self) -> None:
        self._zipped.close()
        self._raw.close()


def read_lines(path: str | Path) -> list[bytes]:
    """Load a generated file (plain or gzip, by its magic bytes) as a list of lines.

    Uncapped (``read(limit=None)``): the benches' own generated streams run to gigabytes;
    never point this at input a user gives.
    """
    with FileReader(str(path)) as source:
        return source.read(limit=None).splitlines()
