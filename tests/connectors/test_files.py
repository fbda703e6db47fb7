"""Recorded-file source: gzip by magic bytes, blank lines, physical line numbers, merging."""

from __future__ import annotations

import gzip
import io
import os
import sys
from pathlib import Path

import pytest

from connectors.files import FileSource, Record, merge_by_time, read_lines, read_records
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
    with FileSource(path) as source:
        assert source.compressed
        assert list(source.lines()) == EXPECTED


def test_a_plain_file_named_gz_is_read_as_plain(tmp_path: Path) -> None:
    path = _write(tmp_path / "events.jsonl.gz", b"\n".join(LINES))
    with FileSource(path) as source:
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
        with FileSource("-") as source:
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
    with FileSource(_write(tmp_path / "e", data)) as source:
        assert source.size == len(data)
        assert source.position() == 0
        for _ in source.lines():
            pass
        assert source.position() == len(data)


def test_a_missing_file_fails_when_opened() -> None:
    with pytest.raises(FileNotFoundError):
        FileSource("/nonexistent/events.jsonl")


def test_records_decode_each_line_and_keep_errors_as_values(tmp_path: Path) -> None:
    data = _event("2024-05-01T12:00:00Z", "t1") + b"\n\nnot json\n"
    with FileSource(_write(tmp_path / "e.jsonl", data)) as source:
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
    with FileSource(_write(tmp_path / "cut.gz", whole[: len(whole) // 2])) as source:
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
