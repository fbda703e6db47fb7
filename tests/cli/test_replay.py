"""``gputriage replay`` end to end through the real CLI and the real core."""

from __future__ import annotations

import fcntl
import gzip
import os
import pty
import struct
import subprocess
import sys
import termios
from pathlib import Path

from gputriage.replay import PROGRESS_MIN_BYTES
from tests.cli_helpers import (
    bad_xid_line,
    clean_env,
    gputriage,
    host_oom_events,
    incidents_of,
    jsonl,
    write_jsonl,
)


def test_a_host_oom_kill_is_one_row_with_its_evidence(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "oom.jsonl", host_oom_events())
    result = gputriage("replay", str(path))
    assert result.returncode == 0, result.stderr
    assert result.stderr == b""
    lines = result.stdout.decode().splitlines()
    assert lines[0].split()[:5] == ["ID", "TYPE", "STATUS", "REV", "SEVERITY"]
    rows = [line for line in lines[1:] if not line.startswith(" ")]
    assert len(rows) == 1
    assert "host_oom_kill" in rows[0]
    assert "ml/trainer-0" in rows[0]
    evidence = [line for line in lines if line.startswith("    ")]
    assert evidence
    assert all(line.split()[1] == "pod.v1" for line in evidence)
    assert "OOMKilled" in evidence[0]


def test_json_output_is_every_revision_as_incident_records(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "oom.jsonl", host_oom_events())
    result = gputriage("replay", "-o", "json", str(path))
    assert result.returncode == 0, result.stderr
    revisions = incidents_of(result.stdout)
    assert [r.type for r in revisions] == ["host_oom_kill"] * len(revisions)
    assert len({r.id for r in revisions}) == 1
    assert [r.revision for r in revisions] == list(range(1, len(revisions) + 1))
    assert revisions[0].status == "open"


def test_table_shows_the_latest_revision_and_revisions_shows_all(tmp_path: Path) -> None:
    path = str(write_jsonl(tmp_path / "oom.jsonl", host_oom_events()))
    revisions = incidents_of(gputriage("replay", "-o", "json", path).stdout)
    latest = revisions[-1]

    table = gputriage("replay", "--no-evidence", path).stdout.decode().splitlines()
    assert len(table) == 2
    assert table[1].split()[2:4] == [latest.status, str(latest.revision)]

    every = gputriage("replay", "--no-evidence", "--revisions", path).stdout.decode()
    assert len(every.splitlines()) == 1 + len(revisions)


def test_wide_output_adds_columns(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "oom.jsonl", host_oom_events())
    header = gputriage("replay", "-o", "wide", str(path)).stdout.splitlines()[0].decode()
    assert "LAST SEEN" in header
    assert "ACTION" in header
    assert header.endswith("SUMMARY")


def test_bad_lines_are_reported_with_file_and_line_and_exit_1(tmp_path: Path) -> None:
    good = jsonl(host_oom_events())
    first, rest = good.split(b"\n", 1)
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(first + b"\n\n" + bad_xid_line() + b"\n" + b'{"truncated' + b"\n" + rest)
    result = gputriage("replay", str(path))
    assert result.returncode == 1
    stderr = result.stderr.decode().splitlines()
    assert stderr[0] == f"{path}:3: Expected `int`, got `str` (at $.code)"
    assert stderr[1].startswith(f"{path}:4: ")
    assert stderr[-1] == "gputriage: 2 bad lines of 4 skipped"
    assert "Traceback" not in result.stderr.decode()
    assert b"host_oom_kill" in result.stdout


def test_two_runs_give_byte_identical_output(tmp_path: Path) -> None:
    path = str(write_jsonl(tmp_path / "oom.jsonl", host_oom_events()))
    for output in ("table", "wide", "json"):
        first = gputriage("replay", "-o", output, "--revisions", path)
        second = gputriage("replay", "-o", output, "--revisions", path)
        assert first.returncode == second.returncode == 0
        assert first.stdout
        assert first.stdout == second.stdout


def test_gzip_input_and_stdin_give_the_same_output(tmp_path: Path) -> None:
    data = jsonl(host_oom_events())
    plain = tmp_path / "oom.jsonl"
    plain.write_bytes(data)
    packed = tmp_path / "oom.data"  # no .gz: detected by content
    packed.write_bytes(gzip.compress(data))
    expected = gputriage("replay", "-o", "json", str(plain)).stdout
    assert expected
    assert gputriage("replay", "-o", "json", str(packed)).stdout == expected
    from_stdin = gputriage("replay", "-o", "json", "-", stdin=gzip.compress(data))
    assert from_stdin.returncode == 0, from_stdin.stderr
    assert from_stdin.stdout == expected


def test_several_files_are_merged_in_event_time_order(tmp_path: Path) -> None:
    pod_a, tick = host_oom_events("node-a", "pod-a")
    pod_b, _ = host_oom_events("node-b", "pod-b")
    a = write_jsonl(tmp_path / "a.jsonl", [pod_a, tick])
    b = write_jsonl(tmp_path / "b.jsonl", [pod_b])
    merged = gputriage("replay", "-o", "json", str(a), str(b))
    assert merged.returncode == 0, merged.stderr
    one_file = write_jsonl(tmp_path / "all.jsonl", [pod_a, pod_b, tick])
    assert merged.stdout == gputriage("replay", "-o", "json", str(one_file)).stdout
    assert {r.node for r in incidents_of(merged.stdout)} == {"node-a", "node-b"}


def test_settings_reach_the_core(tmp_path: Path) -> None:
    path = str(write_jsonl(tmp_path / "oom.jsonl", host_oom_events()))
    default = incidents_of(gputriage("replay", "-o", "json", path).stdout)[-1]
    config = tmp_path / "gputriage.toml"
    config.write_text("[core]\noom_quiet_seconds = 60\n", encoding="utf-8")
    by_file = incidents_of(gputriage("--config", str(config), "replay", "-o", "json", path).stdout)
    env = {"GPUTRIAGE_CORE__OOM_QUIET_SECONDS": "60"}
    by_env = incidents_of(gputriage("replay", "-o", "json", path, env=env).stdout)
    assert default.resolved_at is not None
    assert by_file[-1].resolved_at is not None
    assert by_file[-1].resolved_at < default.resolved_at
    assert by_env == by_file


def test_progress_goes_to_stderr_only(tmp_path: Path) -> None:
    path = str(write_jsonl(tmp_path / "oom.jsonl", host_oom_events()))
    quiet = gputriage("replay", "--no-progress", path)
    shown = gputriage("replay", "--progress", path)
    assert shown.returncode == 0
    assert shown.stdout == quiet.stdout
    assert shown.stderr != b""
    assert quiet.stderr == b""


def test_stats_go_to_stderr(tmp_path: Path) -> None:
    path = str(write_jsonl(tmp_path / "oom.jsonl", host_oom_events()))
    result = gputriage("replay", "--stats", "-o", "json", path)
    assert result.stdout == gputriage("replay", "-o", "json", path).stdout
    # Two records; the GPU pod on a node is also routed to the cluster key: 3 events.
    assert b"2 records, 3 events" in result.stderr


def test_no_incidents_means_empty_stdout(tmp_path: Path) -> None:
    _, tick = host_oom_events()
    path = write_jsonl(tmp_path / "quiet.jsonl", [tick])
    result = gputriage("replay", str(path))
    assert result.returncode == 0
    assert result.stdout == b""
    assert result.stderr == b"gputriage: no incidents\n"


def _stderr_on_a_terminal(*args: str) -> tuple[int, bytes]:
    """Run the CLI with stderr on a pseudo-terminal (sized: tqdm draws nothing at 0 columns)."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    command = [sys.executable, "-m", "gputriage", *args]
    with subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=child, env=clean_env()
    ) as process:
        os.close(child)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        code = process.wait(timeout=120)
    os.close(main)
    return code, b"".join(chunks)


def test_progress_is_automatic_only_for_large_input_on_a_terminal(tmp_path: Path) -> None:
    _, tick = host_oom_events()
    line = jsonl([tick])
    big = tmp_path / "big.jsonl"
    big.write_bytes(line * (PROGRESS_MIN_BYTES // len(line) + 1))
    small = write_jsonl(tmp_path / "small.jsonl", [tick])

    code, terminal = _stderr_on_a_terminal("replay", "-o", "json", str(big))
    assert code == 0
    assert b"%|" in terminal
    code, terminal = _stderr_on_a_terminal("replay", "-o", "json", str(small))
    assert code == 0
    assert terminal == b""
    assert gputriage("replay", "-o", "json", str(big)).stderr == b""


def test_events_later_than_grace_are_applied_and_reported(tmp_path: Path) -> None:
    events = host_oom_events()
    late_first = [*events[1:], events[0]]  # the pod's first sighting comes last
    path = write_jsonl(tmp_path / "late.jsonl", late_first)
    result = gputriage("replay", "--stats", str(path))
    assert result.returncode == 0
    assert b"applied late" in result.stderr
    in_order = gputriage("replay", str(write_jsonl(tmp_path / "ok.jsonl", events)))
    assert b"applied late" not in in_order.stderr
