"""Replay recorded events through the correlation core and print the incidents.

The same code path as production minus Kafka: decode each line with the one codec, feed
good events to :class:`streams.core.Correlator` in (merged) event-time order, flush at
the end, print what came out.

Contracts: errors are values (a bad line is ``FILE:LINE: reason (at field)`` on stderr,
the replay goes on, exit 1); stdout is a pure function of the input and settings (no
clock, environment, locale or hash order: byte-identical twice); stdout carries only
incidents, so ``replay -o json > incidents.jsonl`` is clean.
docs/replay.md, design notes: the replay's contracts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, BinaryIO, Final, Literal, TextIO

from connectors.files import FileReader, Record, merge_by_time, read_records
from gputriage import render
from schemas.codec import RecordError, encode
from schemas.incidents import Incident
from schemas.keys import Router
from streams.core import CoreStats, Correlator
from streams.core.config import CoreSettings
from streams.core.timeconv import to_datetime

Output = Literal["table", "wide", "json"]
OUTPUTS: Final[tuple[Output, ...]] = ("table", "wide", "json")

PROGRESS_MIN_BYTES: Final = 4 * 1024 * 1024
"""Inputs smaller than this finish before a progress bar would be worth drawing."""
_PROGRESS_EVERY: Final = 2048
"""Records between progress updates: reading file positions per line would cost more."""


@dataclass(frozen=True)
class ReplayOptions:
    """How to print; every field has the CLI's default."""

    output: Output = "table"
    evidence: bool = True
    """Table/wide: list each incident's evidence chain under its row."""
    revisions: bool = False
    """Table/wide: every revision instead of only the latest of each incident."""
    progress: bool | None = None
    """``None``: a bar when stderr is a terminal and the input is large."""
    stats: bool = False
    """Print the core's counters on stderr at the end."""


@dataclass
class ReplayResult:
    """What a replay produced, for the exit status and for tests."""

    revisions: list[Incident] = field(default_factory=list)
    bad_lines: int = 0
    records: int = 0
    stats: CoreStats = field(default_factory=CoreStats)
    """The correlator's counters at the end of the replay."""
    grace_seconds: float = 0.0
    first_published: dict[str, datetime] = field(default_factory=dict)
    """Incident id -> the stream's clock when its first revision came out (for
    ``gputriage score``'s detection delay): the latest event time ingested so far,
    ticks included, because a live processor publishes as it ingests the event that
    releases the incident, so that event's time stands for the wall clock then. Not the
    watermark: it trails by the grace, a wait the live processor pays too, and the
    delay would hide it. A revision that only the end-of-input flush releases gets the
    last event time plus the grace: the flush stands in for the grace wait a live
    processor, whose ticks keep the clock going, would pay before releasing it."""

    @property
    def exit_code(self) -> int:
        """1 if any line was bad, else 0."""
        return 1 if self.bad_lines else 0


def bad_line_message(record: Record, error: RecordError) -> str:
    """``FILE:LINE: reason (at field)``: one line, clickable in most editors and terminals."""
    reason = render.one_line(error.reason) or "invalid record"
    where = f" (at {error.field})" if error.field else ""
    return f"{record.source}:{record.line}: {reason}{where}"


def correlate(
    sources: Sequence[FileReader],
    config: CoreSettings,
    stderr: TextIO,
    *,
    progress: bool | None = None,
    sink: Callable[[Incident], object] | None = None,
) -> ReplayResult:
    """The replay loop: every good event of ``sources`` through the core, then the flush.

    The one loop that ``gputriage replay`` and ``gputriage score`` share (so a score
    measures what a replay shows): bad lines go to ``stderr`` as ``FILE:LINE: reason``
    and are counted, every revision is kept in ``revisions`` (and handed to ``sink``,
    if given, as it comes out) and :attr:`ReplayResult.first_published` records each
    incident's publication time on the stream's clock. Prints no summary:
    :func:`write_summary` does.
    """
    result = ReplayResult(grace_seconds=config.grace_seconds)
    correlator = Correlator(config)
    router = Router()  # one, as one producer routes each object's records live
    records = merge_by_time([read_records(source) for source in sources])
    clock: datetime | None = None
    with _progress_bar(sources, progress, stderr) as bar:
        for record in bar.track(records):
            result.records += 1
            event = record.event
            if isinstance(event, RecordError):
                result.bad_lines += 1
                bar.message(bad_line_message(record, event))
                continue
            if clock is None or event.time > clock:
                clock = event.time
            for routed_event in router.route(event):  # as the producer routes it, live
                _collect(correlator.ingest(routed_event), result, clock, sink)
        if clock is not None:  # else no event came, and nothing can be buffered
            end = _after(clock, config.grace_seconds)
            _collect(correlator.flush(), result, end, sink)
    result.stats = correlator.stats
    return result


def _after(moment: datetime, seconds: float) -> datetime:
    """``moment`` plus ``seconds``, saturated as the core saturates its own times.

    Trap: datetime arithmetic is done in the moment's own offset, so
    ``9999-12-31T23:59:59.9+14:00`` plus the grace overflows though its UTC is hours
    short of the end of year 9999, the last event time the codec accepts.
    """
    try:
        return moment + timedelta(seconds=seconds)
    except OverflowError:
        return to_datetime(moment.timestamp() + seconds)


def replay(
    sources: Sequence[FileReader],
    config: CoreSettings,
    options: ReplayOptions,
    stdout: BinaryIO,
    stderr: TextIO,
) -> ReplayResult:
    """Replay ``sources`` (already open) and write the report; the caller closes them."""

    def stream(incident: Incident) -> None:
        stdout.write(encode(incident) + b"\n")

    streaming = options.output == "json"
    result = correlate(
        sources, config, stderr, progress=options.progress, sink=stream if streaming else None
    )
    if not streaming:
        _write_table(result.revisions, options, stdout, stderr)
    stdout.flush()
    write_summary(result, stderr, stats=options.stats)
    return result


def run_replay(
    sources: Sequence[FileReader],
    config: CoreSettings,
    options: ReplayOptions,
    stdout: BinaryIO,
    stderr: TextIO,
) -> int:
    """:func:`replay`, then close the sources; the exit status (1: some line did not decode)."""
    try:
        return replay(sources, config, options, stdout, stderr).exit_code
    finally:
        for source in sources:
            source.close()


def _collect(
    incidents: Iterable[Incident],
    result: ReplayResult,
    clock: datetime,
    sink: Callable[[Incident], object] | None,
) -> None:
    for incident in incidents:
        result.revisions.append(incident)
        result.first_published.setdefault(incident.id, clock)
        if sink is not None:
            sink(incident)


def _write_table(
    revisions: list[Incident], options: ReplayOptions, stdout: BinaryIO, stderr: TextIO
) -> None:
    shown = revisions if options.revisions else render.latest_revisions(revisions)
    text = render.table(
        render.display_order(shown), wide=options.output == "wide", evidence=options.evidence
    )
    if text:
        stdout.write(text.encode("utf-8"))
    else:
        print("gputriage: no incidents", file=stderr)


def write_summary(result: ReplayResult, stderr: TextIO, *, stats: bool = False) -> None:
    """The end of a replay on stderr: the core's counters (``stats``), late events, bad lines."""
    if stats:
        counters = result.stats
        incidents = len({incident.id for incident in result.revisions})
        print(
            f"gputriage: {result.records} records, {counters.events} events "
            f"({counters.late} late, {counters.duplicates} duplicates), {counters.timers} timers, "
            f"{incidents} incidents in {counters.revisions} revisions",
            file=stderr,
        )
    if result.stats.late:
        # Late events are applied, not dropped, but then file order can change the
        # incidents: say so, since the replay is otherwise byte-reproducible.
        print(
            f"gputriage: {result.stats.late} events were more than {result.grace_seconds:g} s "
            "older than events before them and were applied late; sort the input by time "
            "or raise core.grace_seconds",
            file=stderr,
        )
    if result.bad_lines:
        plural = "" if result.bad_lines == 1 else "s"
        print(
            f"gputriage: {result.bad_lines} bad line{plural} of {result.records} skipped",
            file=stderr,
        )


class _Progress:
    """A tqdm bar over input bytes on stderr (never stdout), or a no-op when hidden."""

    def __init__(self, sources: Sequence[FileReader], show: bool, stderr: TextIO) -> None:
        self._sources = sources
        self._stderr = stderr
        sizes = [source.size for source in sources]
        total = None if None in sizes else sum(size or 0 for size in sizes)
        self._bar: Any = None
        if show:
            from tqdm import tqdm  # noqa: PLC0415 - ~15 ms, only where a bar is shown

            self._bar = tqdm(
                total=total,
                unit="B",
                unit_scale=True,
                unit_divisor=1024,
                file=stderr,
                leave=False,
                dynamic_ncols=True,
            )
        self._done = 0

    def track(self, records: Iterator[Record]) -> Iterator[Record]:
        """Pass ``records`` through, advancing the bar every few thousand."""
        if self._bar is None:
            yield from records
            return
        for count, record in enumerate(records, start=1):
            if count % _PROGRESS_EVERY == 0:
                self._advance()
            yield record
        self._advance()

    def _advance(self) -> None:
        position = sum(source.position() for source in self._sources)
        self._bar.update(position - self._done)
        self._done = position

    def message(self, text: str) -> None:
        """A line on stderr that does not tear the bar."""
        if self._bar is None:
            print(text, file=self._stderr)
        else:
            self._bar.write(text, file=self._stderr)

    def __enter__(self) -> _Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()


def _progress_bar(sources: Sequence[FileReader], force: bool | None, stderr: TextIO) -> _Progress:
    if force is None:
        known = sum(source.size or 0 for source in sources)
        show = stderr.isatty() and known >= PROGRESS_MIN_BYTES
    else:
        show = force
    return _Progress(sources, show, stderr)
