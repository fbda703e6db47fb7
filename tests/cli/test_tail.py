"""``gputriage tail`` against the real broker: start positions, output, bad records, Ctrl-C."""

from __future__ import annotations

import asyncio
import functools
import io
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from aiokafka import AIOKafkaConsumer

from gputriage import render
from gputriage.cli import run
from gputriage.tail import StartAt, _assign_and_seek, parse_start
from schemas.codec import decode_incident, encode
from schemas.incidents import Incident
from tests.cli_helpers import clean_env
from tests.kafka_helpers import KafkaTestEnv, eventually, produce, with_consumer
from tests.sample_records import INCIDENT


def _revision(incident_id: str, revision: int, **changes: Any) -> Incident:
    status = "open" if revision == 1 else "updated"
    return msgspec.structs.replace(
        INCIDENT, id=incident_id, revision=revision, status=status, **changes
    )


def _records(incidents: list[Incident]) -> list[tuple[bytes | None, bytes | None]]:
    return [(incident.id.encode(), encode(incident)) for incident in incidents]


class _Lines:
    """Lines of a subprocess pipe, read on the test's loop, for waiting with a deadline."""

    def __init__(self, pipe: asyncio.StreamReader | None) -> None:
        assert pipe is not None
        self.lines: list[bytes] = []
        self._pipe = pipe

    async def at_least(self, count: int, timeout: float = 15.0) -> list[bytes]:
        try:
            async with asyncio.timeout(timeout):
                while len(self.lines) < count:
                    line = await self._pipe.readline()
                    if not line:
                        raise AssertionError(f"EOF after {len(self.lines)} of {count} lines")
                    self.lines.append(line)
        except TimeoutError:
            raise AssertionError(
                f"got {len(self.lines)} of {count} lines: {self.lines!r}"
            ) from None
        return self.lines

    async def rest(self) -> list[bytes]:
        """Every line, once the process has ended (its pipe read to the end)."""
        self.lines += (await asyncio.wait_for(self._pipe.read(), 10)).splitlines(keepends=True)
        return self.lines


async def _tail(kafka: KafkaTestEnv, *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gputriage",
        "tail",
        *args,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=clean_env(kafka.env),
    )


async def _interrupt(process: asyncio.subprocess.Process, sig: int = signal.SIGINT) -> int:
    """Send ``sig`` and wait for the exit status (a process still running then is killed)."""
    if process.returncode is None:
        process.send_signal(sig)
    try:
        return await asyncio.wait_for(process.wait(), 15)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.asyncio
async def test_tail_json_from_the_beginning_follows_and_stops_on_sigint(
    kafka: KafkaTestEnv,
) -> None:
    await kafka.acreate_topics()
    topic = kafka.layout.incidents.name
    before = [_revision("inc-a", 1), _revision("inc-b", 1), _revision("inc-a", 2)]
    await produce(kafka.bootstrap, topic, [*_records(before), (b"inc-x", b"not json")])
    process = await _tail(kafka, "-o", "json", "--from", "beginning")
    stdout, stderr = _Lines(process.stdout), _Lines(process.stderr)
    try:
        first = [decode_incident(line) for line in await stdout.at_least(3)]
        # Per incident id (one partition each), revisions arrive in order.
        assert sorted((i.id, i.revision) for i in first) == [
            ("inc-a", 1),
            ("inc-a", 2),
            ("inc-b", 1),
        ]
        assert [i.revision for i in first if i.id == "inc-a"] == [1, 2]
        bad = (await stderr.at_least(1))[0].decode()
        assert f"{topic} partition " in bad
        assert " offset 0: " in bad
        assert "malformed" in bad

        # It keeps following: a revision produced now shows up.
        later = _revision("inc-b", 2, summary="later")
        await produce(kafka.bootstrap, topic, _records([later]))
        lines = await stdout.at_least(4)
        assert decode_incident(lines[3]) == later
        assert lines[3] == encode(later) + b"\n", "the codec's exact bytes, one per line"
    finally:
        code = await _interrupt(process)
    assert code == 1, "interrupted normally, but a record did not decode"
    assert len(await stdout.rest()) == 4
    assert len(await stderr.rest()) == 1, stderr.lines


@pytest.mark.asyncio
async def test_tail_table_output_and_a_clean_exit_on_sigterm(kafka: KafkaTestEnv) -> None:
    await kafka.acreate_topics()
    topic = kafka.layout.incidents.name
    await produce(kafka.bootstrap, topic, _records([_revision("inc-t", 1)]))
    # A tombstone (null value) is how an incident leaves a compacted topic: skipped.
    await produce(kafka.bootstrap, topic, [(b"inc-gone", None)])
    process = await _tail(kafka, "--from", "0", "--brokers", kafka.bootstrap)
    stdout, stderr = _Lines(process.stdout), _Lines(process.stderr)
    try:
        lines = await stdout.at_least(2)
    finally:
        code = await _interrupt(process, signal.SIGTERM)
    assert code == 0, "SIGTERM ends a tail like Ctrl-C does"
    header, row = (line.decode() for line in lines[:2])
    assert header.split()[:3] == ["ID", "TYPE", "STATUS"]
    assert row.split()[:5] == ["inc-t", "device_unhealthy_eviction", "open", "1", "page"]
    assert row.index("device_unhealthy_eviction") == header.index("TYPE")
    await stdout.rest()
    assert await stderr.rest() == []


async def _positions(kafka: KafkaTestEnv, starts: list[StartAt]) -> list[dict[int, int]]:
    """Where each start position puts every partition (a fresh consumer each)."""
    topic = kafka.layout.incidents.name

    async def seek(consumer: AIOKafkaConsumer, start: StartAt) -> dict[int, int]:
        await _assign_and_seek(consumer, topic, start)
        return {tp.partition: await consumer.position(tp) for tp in consumer.assignment()}

    return [
        await with_consumer(kafka.bootstrap, functools.partial(seek, start=start))
        for start in starts
    ]


@pytest.mark.asyncio
async def test_start_positions_now_beginning_offset_and_time(kafka: KafkaTestEnv) -> None:
    await kafka.acreate_topics()
    topic = kafka.layout.incidents.name
    # All on one key, so on one partition, with a clock tick between the batches.
    early = [_revision("inc-p", n) for n in (1, 2, 3)]
    metadata = await produce(kafka.bootstrap, topic, _records(early))
    partition = metadata[0].partition
    # Every early record was received before this millisecond ends; the late one
    # is produced once the clock has passed it, so the boundary falls between.
    boundary_ms = _now_ms() + 1
    await eventually(lambda: _now_ms() > boundary_ms, what="the clock to pass the boundary")
    await produce(kafka.bootstrap, topic, _records([_revision("inc-p", 4)]))
    boundary = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=boundary_ms)
    others = {p: 0 for p in range(kafka.settings.partitions) if p != partition}

    future = datetime.now(UTC) + timedelta(days=1)
    starts: list[StartAt] = ["beginning", "now", 2, 99, boundary, future]
    assert await _positions(kafka, starts) == [
        {partition: 0, **others},
        {partition: 4, **others},
        {partition: 2, **others},
        {partition: 4, **others},  # an offset past the end is clamped to it
        {partition: 3, **others},  # the first record at or after the boundary
        {partition: 4, **others},  # nothing that late: the end, not offset 0
    ]


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def test_an_unreachable_broker_is_one_line_and_status_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.startswith("GPUTRIAGE_")]:
        monkeypatch.delenv(name)
    started = time.monotonic()
    code = run(["tail", "--brokers", "127.0.0.1:1", "--connect-timeout-seconds", "0.5"])
    assert code == 1
    assert time.monotonic() - started < 5
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.splitlines() == [
        "gputriage: error: cannot reach Kafka at 127.0.0.1:1 within 0.5 s: Connection refused"
    ]


def test_ctrl_c_while_connecting_ends_promptly_with_status_0() -> None:
    # A "broker" that accepts connections and never answers: once it has
    # accepted tail's connection, tail is certainly waiting inside aiokafka,
    # where a plain task cancellation used to be swallowed.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent.settimeout(30)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        command = [sys.executable, "-m", "gputriage", "tail", "--brokers", address]
        # As a context manager, Popen closes its pipes and waits, however the test ends.
        with subprocess.Popen(
            [*command, "--connect-timeout-seconds", "60"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=clean_env(),
        ) as process:
            try:
                connection, _ = silent.accept()
                connection.close()
                started = time.monotonic()
                process.send_signal(signal.SIGINT)
                out, err = process.communicate(timeout=20)
            finally:
                if process.poll() is None:
                    process.kill()
    assert process.returncode == 0, err
    assert time.monotonic() - started < 10
    assert out == b""


def test_a_missing_topic_is_one_line_and_status_1(
    kafka: KafkaTestEnv, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in kafka.env.items():
        monkeypatch.setenv(name, value)
    assert run(["tail"]) == 1
    err = capsys.readouterr().err
    assert err == f"gputriage: error: topic {kafka.layout.incidents.name} does not exist " + (
        "(is the processor running?)\n"
    )


def test_no_brokers_configured_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUTRIAGE_KAFKA__BROKERS", raising=False)
    monkeypatch.delenv("GPUTRIAGE_CONFIG", raising=False)
    assert run(["tail"]) == 2
    assert "--brokers" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", "now"),
        ("beginning", "beginning"),
        ("0", 0),
        ("1234", 1234),
        ("2026-11-30T10:00:00Z", datetime(2026, 11, 30, 10, tzinfo=UTC)),
        ("2026-11-30T12:00:00+02:00", datetime(2026, 11, 30, 10, tzinfo=UTC)),
    ],
)
def test_parse_start(text: str, expected: StartAt) -> None:
    assert parse_start(text) == expected


@pytest.mark.parametrize("text", ["yesterday", "-5", "2026-11-30T10:00:00", ""])
def test_parse_start_rejects(text: str) -> None:
    with pytest.raises(ValueError, match=repr(text)):
        parse_start(text)


def test_a_bad_from_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["tail", "--brokers", "x:1", "--from", "2026-11-30T10:00:00"]) == 2
    assert "no UTC offset" in capsys.readouterr().err


def test_streaming_table_widens_columns_and_prints_the_header_once() -> None:
    table = render.StreamingTable(evidence=True)
    first = table.lines(INCIDENT)
    assert first[0].startswith("ID ")
    assert first[1].startswith(INCIDENT.id)
    assert first[2:] == render.evidence_lines(INCIDENT)
    long_node = msgspec.structs.replace(INCIDENT, node="n" * 40)
    second = table.lines(long_node)
    assert not second[0].startswith("ID ")
    assert "n" * 40 + render.GAP in second[0]
    out = io.StringIO()
    out.write("\n".join(table.lines(INCIDENT)))
    assert out.getvalue().split()[:2] == [INCIDENT.id, INCIDENT.type]


def test_tail_help() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "gputriage", "tail", "--help"],
        capture_output=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0
    assert b"--from" in result.stdout
    assert b"now|beginning|TIME|OFFSET" in result.stdout
