"""The resume position of a followed log: kubelet timestamps and the lines at them."""

from __future__ import annotations

from connectors.autoscaler.cursor import LogCursor, Position, since_time, split_stamp


def test_position_skips_exactly_what_was_handed_out() -> None:
    position = Position(LogCursor(pod="ns/p", uid="u", container="c", restart_count=0))
    lines = [b"2026-12-01T10:00:01.5Z a", b"2026-12-01T10:00:01.5Z a", b"2026-12-01T10:00:02Z b"]
    assert [position.admit(line) for line in lines] == [True, True, True]
    position.reconnected()
    replay = [*lines, b"2026-12-01T10:00:02Z b", b"2026-12-01T10:00:02.000000001Z c"]
    assert [position.admit(line) for line in replay] == [False, False, False, True, True]


def test_split_stamp_reads_nanoseconds_and_offsets() -> None:
    assert split_stamp(b"2026-12-01T10:00:01.000000001Z x") == (1796119201000000001, b"x")
    assert split_stamp(b"2026-12-01T11:00:01.5+01:00 x") == (1796119201500000000, b"x")
    assert split_stamp(b"I1201 10:00:00 no stamp") is None


def test_since_time_is_the_second_floored() -> None:
    assert since_time(1796119201999999999) == "2026-12-01T10:00:01Z"
