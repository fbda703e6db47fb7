"""Recorded-file source: gzip by magic bytes, blank lines, physical line numbers, merging."""

from __future__ import annotations

import gzip
import io
import os
import sys
from pathlib import Path

import pytest

from connectors.bounded import InputTooLarge, read_small
from connectors.files import (
    FileReader,
    Record,
    merge_by_time,
    parse_lines,
    read_lines,
    read_records,
)
from schemas.codec import RecordError, try_decode_event

LINES = [b'{"a": 1}', b"", b"   ", b'{"b": 2}', b'{"c": 3}']
"""Lines 2 and 3 are blank; physical numbers of the others are 1, 4, 5."""
EXPECTED = [(1, b'{"a": 1}'), (4, b'{"b": 2}'), (5, b'{"c": 3}')]


def _write(path: Path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def _event(time: str, ident: str, node: str = "n1") -> bytes:
    return (
        f'{{"schema":"tick.v1","id":"{ident}","cluster":"c1","time":"{time}","node":"{node}"}}'
    ).encode()


def test_plain_lines_with_blank_lines_keep_physical_numbers(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", b"\n".join(LINES) + b"\n")
    assert list(read_lines(path)) == EXPECTED


def test_crlf_and_missing_final_newline(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", b"\r\n".join(LINES))
    assert list(read_lines(path)) == EXPECTED


def test_gzip_is_detected_by_magic_bytes_not_by_name(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl", gzip.compress(b"\n".join(LINES)))
    with FileReader(path) as source:
        assert source.compressed
        assert list(source.lines()) == EXPECTED


def test_a_plain_file_named_gz_is_read_as_plain(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl.gz", b"\n".join(LINES))
    with FileReader(path) as source:
        assert not source.compressed
        assert list(source.lines()) == EXPECTED


def test_concatenated_gzip_members_read_as_one_stream(tmp_path: Path) -> None:
    data = gzip.compress(b"\n".join(LINES[:3]) + b"\n") + gzip.compress(b"\n".join(LINES[3:]))
    assert list(read_lines(_write(tmp_path / "rotated.log", data))) == EXPECTED


def test_empty_and_tiny_files(tmp_path: Path) -> None:
    assert list(read_lines(_write(tmp_path / "empty", b""))) == []
    assert list(read_lines(_write(tmp_path / "one-byte", b"\x1f"))) == [(1, b"\x1f")]


def test_stdin_pipe_with_gzip_is_sniffed_without_losing_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "wb") as writer:
        writer.write(gzip.compress(b"\n".join(LINES)))
    with os.fdopen(read_end, "rb") as reader:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(reader))
        with FileReader("-") as source:
            assert source.name == "<stdin>"
            assert source.size is None
            assert source.compressed
            assert list(source.lines()) == EXPECTED


def test_stdin_pipe_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    read_end, write_end = os.pipe()
    with os.fdopen(write_end, "wb") as writer:
        writer.write(b"\n".join(LINES))
    with os.fdopen(read_end, "rb") as reader:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(reader))
        assert list(read_lines("-")) == EXPECTED


def test_size_and_position_track_bytes_on_disk(tmp_path: Path) -> None:
    data = gzip.compress(b"\n".join(LINES) * 50)
    with FileReader(_write(tmp_path / "e", data)) as source:
        assert source.size == len(data)
        assert source.position() == 0
        for _ in source.lines():
            pass
        assert source.position() == len(data)


def test_a_missing_file_fails_when_opened() -> None:
    with pytest.raises(FileNotFoundError):
        FileReader("/nonexistent/events.jsonl")


def test_records_decode_each_line_and_keep_errors_as_values(tmp_path: Path) -> None:
    data = _event("2024-05-01T12:00:00Z", "t1") + b"\n\nnot json\n"
    with FileReader(_write(tmp_path / "e.jsonl", data)) as source:
        first, second = list(read_records(source))
    assert first.line == 1
    assert not isinstance(first.event, RecordError)
    assert first.event.id == "t1"
    assert second.source == str(tmp_path / "e.jsonl")
    assert second.line == 3
    assert isinstance(second.event, RecordError)


def test_a_truncated_gzip_ends_the_file_with_one_error_record(tmp_path: Path) -> None:
    whole = gzip.compress(
        b"\n".join(_event(f"2024-05-01T12:00:{s:02}Z", f"t{s}") for s in range(60))
    )
    with FileReader(_write(tmp_path / "cut.gz", whole[: len(whole) // 2])) as source:
        records = list(read_records(source))
    *good, last = records
    assert all(not isinstance(r.event, RecordError) for r in good)
    assert isinstance(last.event, RecordError)
    assert "truncated gzip" in last.event.reason


def _records(name: str, *times: str) -> list[Record]:
    return [
        Record(name, number, try_decode_event(_event(time, f"{name}{number}")))
        for number, time in enumerate(times, start=1)
    ]


def test_merge_interleaves_sources_by_event_time() -> None:
    a = _records("a", "2024-05-01T12:00:00Z", "2024-05-01T12:00:02Z", "2024-05-01T12:00:04Z")
    b = _records("b", "2024-05-01T12:00:01Z", "2024-05-01T14:00:03+02:00")
    merged = [(r.source, r.line) for r in merge_by_time([a, b])]
    assert merged == [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)]


def test_merge_breaks_ties_by_source_order_and_keeps_local_disorder() -> None:
    a = _records("a", "2024-05-01T12:00:05Z", "2024-05-01T12:00:03Z")
    b = _records("b", "2024-05-01T12:00:05Z")
    merged = [(r.source, r.line) for r in merge_by_time([a, b])]
    assert merged == [("a", 1), ("a", 2), ("b", 1)]


def test_merge_keeps_an_error_record_next_to_its_neighbours() -> None:
    a = _records("a", "2024-05-01T12:00:00Z", "2024-05-01T12:00:10Z")
    bad = Record("a", 2, RecordError("broken"))
    a = [a[0], bad, a[1]._replace(line=3)]
    b = _records("b", "2024-05-01T12:00:05Z")
    merged = list(merge_by_time([a, b]))
    assert merged.index(bad) == 1
    assert [r.source for r in merged] == ["a", "a", "b", "a"]


# -- bounds (connectors.bounded): the caps made small, so a test reads kilobytes ------------
@pytest.fixture
def small_caps(monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """A 64-byte line cap, and the end of a line looked for up to 4 KiB."""
    monkeypatch.setattr("connectors.files.MAX_LINE_BYTES", 64)
    monkeypatch.setattr("connectors.files.MAX_INPUT_BYTES", 4096)
    monkeypatch.setattr("connectors.files._SKIP_CHUNK", 100)
    return 64, 4096


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_a_line_over_the_cap_is_a_dead_line_in_its_place(
    tmp_path: Path, small_caps: tuple[int, int], compress: bool
) -> None:
    cap, _ = small_caps
    data = b"a\n" + b"x" * (cap * 3) + b"\n" + b"y" * cap + b"\nz"
    path = _write(tmp_path / "e", gzip.compress(data) if compress else data)
    first, (number, dead), *rest = list(read_lines(path))
    assert first == (1, b"a")
    assert number == 2
    assert isinstance(dead, RecordError)
    assert dead.reason == f"line of {cap * 3} bytes is longer than 64 bytes: skipped"
    assert rest == [(3, b"y" * cap), (4, b"z")], "a line of exactly the cap is a line"


def test_a_line_that_runs_past_the_end_of_the_file_is_dead_too(
    tmp_path: Path, small_caps: tuple[int, int]
) -> None:
    cap, _ = small_caps
    ((number, dead),) = list(read_lines(_write(tmp_path / "e", b"x" * (cap + 1))))
    assert (number, isinstance(dead, RecordError)) == (1, True)


def test_no_line_break_within_the_bound_ends_the_input(
    tmp_path: Path, small_caps: tuple[int, int]
) -> None:
    cap, bound = small_caps
    data = b"x" * (bound * 3) + b"\nnever read\n"
    with FileReader(_write(tmp_path / "e", data)) as source:
        ((number, dead),) = list(source.lines())
        assert source.position() <= bound + cap + 200, "it stopped at the bound"
    assert number == 1
    assert isinstance(dead, RecordError)
    assert dead.reason == "no line break within 4 KiB: not text of lines; rest of input skipped"


def test_parse_lines_never_parses_a_dead_line(tmp_path: Path, small_caps: tuple[int, int]) -> None:
    cap, _ = small_caps
    path = _write(tmp_path / "e", b"x" * (cap + 1) + b"\nok\n")
    with FileReader(path) as source:
        parsed = list(parse_lines(source, lambda raw: raw.decode()))
    assert [number for number, _ in parsed] == [1, 2]
    assert isinstance(parsed[0][1], RecordError)
    assert parsed[1][1] == "ok"


def test_a_whole_file_read_over_its_cap_is_input_too_large(tmp_path: Path) -> None:
    path = _write(tmp_path / "scrape", b"x" * 11)
    with FileReader(path) as source, pytest.raises(InputTooLarge) as refused:
        source.read(limit=10)
    assert (refused.value.strerror, refused.value.filename) == ("larger than 10 bytes", path)
    with FileReader(path) as source:
        assert source.read(limit=11) == b"x" * 11
    assert read_small(path, limit=11) == b"x" * 11
    with pytest.raises(InputTooLarge, match="larger than 10 bytes"):
        read_small(path, limit=10)
    with pytest.raises(InputTooLarge, match="larger than 16 MiB"):
        read_small("/dev/zero")
