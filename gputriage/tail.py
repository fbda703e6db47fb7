"""``gputriage tail``: follow the incident topic and print each revision as it arrives.

A plain aiokafka consumer with **no consumer group**: it assigns itself every partition and seeks,
so it commits nothing, rebalances no one, and any number of people can tail at once. It starts at
``now`` (the end as it is at start), ``beginning``, an RFC 3339 time (by record timestamp) or an
offset; prints JSON lines (the processor's bytes) or a table row per revision, flushed after every
batch. Ctrl-C or SIGTERM stops it with status 0 (1 if a record failed to decode); a second Ctrl-C is
the usual 130.

Traps: aiokafka's ``stop()`` swallows a cancellation, so the signal sets an event every loop checks;
the end offsets for ``now`` are read at once (``seek_to_end`` is lazy); Tansu answers "no record
after this time" as offset 0 and timestamp -1, which means "the end"; offsets are looked up before
``assign()``; a refused connection is retried until ``--connect-timeout-seconds`` (one waits for a
cluster that may be starting), its reason kept for the one line. docs/operations.md, design notes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, BinaryIO, Final, Literal, TextIO

from connectors.kafka.config import (
    KafkaUnreachable,
    brokers_text,
    connect_timeout,
    heard,
    start_client,
)
from connectors.signals import stop_on_signals
from connectors.times import parse_time
from gputriage import render
from gputriage.errors import error
from gputriage.replay import Output
from schemas.codec import RecordError, decode_incident, encode

if TYPE_CHECKING:
    from aiokafka import AIOKafkaConsumer, ConsumerRecord

# aiokafka is imported inside the functions: it costs ~0.2 s, more than the
# whole of `gputriage replay`, which should not pay for it.

StartAt = Literal["now", "beginning"] | datetime | int
"""Where tail starts reading: see the module docs."""

_POLL_MS: Final = 500
_RETRY_SECONDS: Final = 0.25
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def parse_start(text: str) -> StartAt:
    """``now``, ``beginning``, an offset (digits) or an RFC 3339 time with an offset or ``Z``."""
    value = text.strip()
    if value in ("now", "beginning"):
        return value  # type: ignore[return-value]  # narrowed by the membership test
    if value.isdigit():
        return int(value)
    if not value or value[0] not in "0123456789":
        raise ValueError(f"{text!r} is not now, beginning, an offset or an RFC 3339 time")
    return parse_time(text)


@dataclass(frozen=True)
class TailOptions:
    """How to read and print; every field has the CLI's default."""

    start: StartAt = "now"
    output: Output = "table"
    evidence: bool = False
    """Table/wide: list each revision's evidence chain under its row."""
    connect_timeout_seconds: float | None = None
    """``None``: the client arguments' own (``kafka.connect_timeout_seconds``)."""


@dataclass
class TailResult:
    """What a tail printed, for the exit status and for tests."""

    revisions: int = 0
    bad_records: int = 0

    @property
    def exit_code(self) -> int:
        """1 if any record failed to decode, else 0 (interruption is the normal end)."""
        return 1 if self.bad_records else 0


def run_tail(
    client_kwargs: Mapping[str, Any],
    topic: str,
    options: TailOptions,
    stdout: BinaryIO,
    stderr: TextIO,
) -> int:
    """Follow ``topic`` until interrupted (SIGINT/SIGTERM); the exit status.

    0 after an interruption, 1 if a record failed to decode, and 1 with one
    line on ``stderr`` when the brokers cannot be reached within
    ``options.connect_timeout_seconds`` or the topic does not exist
    (:class:`~connectors.kafka.config.KafkaUnreachable`).
    """
    try:
        return asyncio.run(tail(client_kwargs, topic, options, stdout, stderr)).exit_code
    except KafkaUnreachable as exc:
        error(str(exc), stderr)
        return 1


async def tail(
    client_kwargs: Mapping[str, Any],
    topic: str,
    options: TailOptions,
    stdout: BinaryIO,
    stderr: TextIO,
) -> TailResult:
    """The coroutine behind :func:`run_tail`; cancelling it is how it stops."""
    from aiokafka.errors import KafkaError  # noqa: PLC0415 - see the imports

    result = TailResult()
    stop = asyncio.Event()
    restore = stop_on_signals(stop)
    watcher = asyncio.create_task(_cancel_on(stop, restore, asyncio.current_task()))
    consumer: AIOKafkaConsumer | None = None
    try:
        timeout_seconds = options.connect_timeout_seconds or connect_timeout(client_kwargs)
        consumer = await _connect(client_kwargs, timeout_seconds, stop)
        if consumer is None:
            return result
        await _assign_and_seek(consumer, topic, options.start)
        table = render.StreamingTable(wide=options.output == "wide", evidence=options.evidence)
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=_POLL_MS)
            records = [record for batch in batches.values() for record in batch]
            records.sort(key=lambda r: (r.timestamp, r.partition, r.offset))
            for record in records:
                _print(record, options, table, result, stdout, stderr)
            if records:
                stdout.flush()
    except asyncio.CancelledError:
        if not stop.is_set():
            raise  # cancelled by someone else, not by a signal: pass it on
    finally:
        watcher.cancel()
        restore()
        if consumer is not None:
            with heard("aiokafka"), contextlib.suppress(KafkaError, OSError):
                await consumer.stop()
        stdout.flush()
    return result


async def _cancel_on(
    stop: asyncio.Event, restore: Callable[[], None], task: asyncio.Task[Any] | None
) -> None:
    """Once ``stop`` is set (a signal): default handlers back, then cancel ``task``."""
    await stop.wait()
    restore()
    if task is not None:
        task.cancel()


def _print(
    record: ConsumerRecord[bytes, bytes],
    options: TailOptions,
    table: render.StreamingTable,
    result: TailResult,
    stdout: BinaryIO,
    stderr: TextIO,
) -> None:
    if record.value is None:
        return  # a tombstone: an incident deleted from the compacted topic
    try:
        incident = decode_incident(record.value)
    except RecordError as bad:
        result.bad_records += 1
        where = f" (at {bad.field})" if bad.field else ""
        reason = render.one_line(bad.reason) or "invalid record"
        print(
            f"{record.topic} partition {record.partition} offset {record.offset}: {reason}{where}",
            file=stderr,
            flush=True,
        )
        return
    result.revisions += 1
    if options.output == "json":
        stdout.write(encode(incident) + b"\n")
    else:
        text = "\n".join(table.lines(incident)) + "\n"
        stdout.write(text.encode("utf-8"))


async def _connect(
    client_kwargs: Mapping[str, Any], timeout_seconds: float, stop: asyncio.Event
) -> AIOKafkaConsumer | None:
    """A started consumer, retrying failed connections until ``timeout_seconds`` has passed.

    ``None`` when ``stop`` was set meanwhile (interrupted while connecting).
    """
    from aiokafka import AIOKafkaConsumer  # noqa: PLC0415 - see the imports

    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_seconds
    while not stop.is_set():
        consumer = AIOKafkaConsumer(
            **client_kwargs,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        remaining = max(deadline - loop.time(), 0.001)
        try:
            await start_client(consumer, client_kwargs, timeout_seconds=remaining)
        except KafkaUnreachable as exc:
            if stop.is_set():
                break
            if loop.time() + _RETRY_SECONDS >= deadline:
                raise KafkaUnreachable(
                    f"cannot reach Kafka at {brokers_text(client_kwargs)} within "
                    f"{timeout_seconds:g} s: {exc.reason}",
                    exc.reason,
                ) from None
            await asyncio.sleep(_RETRY_SECONDS)
            continue
        return consumer
    return None


async def _assign_and_seek(consumer: AIOKafkaConsumer, topic: str, start: StartAt) -> None:
    from aiokafka import TopicPartition  # noqa: PLC0415 - see the imports

    # topics() fetches metadata for all topics; asking for one topic by name
    # could make a broker with auto-creation create it.
    if topic not in await consumer.topics():
        raise KafkaUnreachable(f"topic {topic} does not exist (is the processor running?)")
    partitions = consumer.partitions_for_topic(topic) or set()
    tps = [TopicPartition(topic, p) for p in sorted(partitions)]
    # Offsets are looked up *before* assign(): once assigned, the fetcher's
    # long-poll (fetch_max_wait_ms) occupies the connection and each lookup
    # would queue behind it (the protocol answers one connection in order).
    ends = await consumer.end_offsets(tps)
    if start == "now":
        targets = dict(ends)
    elif start == "beginning":
        targets = dict(await consumer.beginning_offsets(tps))
    elif isinstance(start, datetime):
        # Integer arithmetic: float timestamps * 1000 can land a hair below the
        # millisecond (…305.9999) and truncate to the one before.
        ms = (start - _EPOCH) // timedelta(milliseconds=1)
        found = await consumer.offsets_for_times(dict.fromkeys(tps, ms))
        targets = {
            tp: hit.offset if hit is not None and hit.timestamp >= 0 else ends[tp]
            for tp, hit in found.items()
        }
    else:
        firsts = await consumer.beginning_offsets(tps)
        targets = {tp: min(max(start, firsts[tp]), ends[tp]) for tp in tps}
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, targets[tp])
