"""``gputriage ingest dcgm``: diff saved dcgm-exporter scrapes offline and print the events.

The offline twin of ``connect dcgm`` (every source reads from a file too): the same parser
and diff, fed from files instead of HTTP, so a user can debug what the
connector would publish from the scrapes of their own exporter.

Exit statuses follow the CLI's rule: 0 fine, 1 ran but found a problem (a bad
scrape file).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from connectors.dcgm.diff import DcgmState, diff
from connectors.dcgm.exposition import parse_exposition
from connectors.files import STDIN, FileReader, read_error
from schemas.codec import RecordError, encode

PROG = "gputriage"


def _read(path: str) -> tuple[bytes, datetime]:
    """A scrape file's bytes (gunzipped when gzip) and its time: the file's mtime, so the
    same file always gives the same event times and ids; stdin: now."""
    with FileReader(path) as source:
        data = source.read()
    if path == STDIN:
        return data, datetime.now(UTC)
    return data, datetime.fromtimestamp(Path(path).stat().st_mtime, UTC)


def ingest_dcgm(
    paths: Sequence[str], *, cluster: str, node: str, out: IO[bytes], err: IO[str]
) -> int:
    """Diff successive scrape files (one file = one scrape, in the order given) and print
    the events as JSON lines. A bad file is reported on stderr and skipped (status 1);
    a sample left out of a good one (a timestamp that is not a time) is reported on
    stderr and the rest of the scrape is used (status 0, as ``connect dcgm`` publishes
    the scrape with a dead letter for the sample)."""
    state: DcgmState | None = None
    bad = baseline = 0
    for path in paths:
        try:
            data, when = _read(path)
        except (OSError, EOFError, zlib.error) as exc:
            print(f"{path}: cannot read: {read_error(exc)}", file=err)
            bad += 1
            continue
        scrape = parse_exposition(data.decode("utf-8", errors="replace"))
        if isinstance(scrape, RecordError):
            print(f"{path}: {scrape}", file=err)
            bad += 1
            continue
        for sample in scrape.bad:  # left out of the scrape, which stands without it
            print(f"{path}: {sample.reason}: {sample.series}", file=err)
        result = diff(state, scrape, cluster=cluster, node=node, time=scrape.time or when)
        state = result.state
        baseline += result.baseline
        for event in result.events:
            out.write(encode(event) + b"\n")
    out.flush()
    if baseline:
        print(
            f"{PROG}: {baseline} non-zero XID value(s) in a GPU's first scrape not reported "
            "(a baseline: the gauge may be hours old)",
            file=err,
        )
    if bad:
        plural = "" if bad == 1 else "s"
        print(f"{PROG}: {bad} bad scrape file{plural} of {len(paths)} skipped", file=err)
    return 1 if bad else 0
