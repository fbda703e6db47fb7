"""Output that cannot be written: one line, or nothing for a closed pipe, and status 1.

``> /dev/full`` fails every write with ENOSPC, as a full disk does; a reader that went
away (``| head -1``) is EPIPE, which Unix tools end on quietly. Neither may be a
traceback, and neither is a usage error (2): the command ran, its output was lost.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli_helpers import clean_env, host_oom_events, one_line, write_jsonl


@pytest.fixture
def events(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "events.jsonl", host_oom_events())


def _to(stdout: str, *args: str) -> subprocess.CompletedProcess[bytes]:
    with open(stdout, "wb") as out:
        return subprocess.run(
            [sys.executable, "-m", "gputriage", *args],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.PIPE,
            env=clean_env(),
            timeout=60,
            check=False,
        )


@pytest.mark.parametrize(
    "args",
    [
        ["replay", "{events}"],
        ["replay", "-o", "json", "{events}"],
        ["ingest", "k8s", "--cluster", "c", "--file", "{pod}"],
        ["--help"],
    ],
    ids=lambda args: " ".join(args[:3]),
)
def test_a_full_disk_is_one_line(events: Path, args: list[str]) -> None:
    pod = Path(__file__).parents[1] / "data" / "k8s" / "pod_evicted.json"
    argv = [arg.format(events=events, pod=pod) for arg in args]
    line = one_line(_to("/dev/full", *argv), 1)
    assert line == "gputriage: error: write error: No space left on device"


def test_a_closed_pipe_ends_quietly_with_status_1(events: Path) -> None:
    reader = subprocess.Popen(
        [sys.executable, "-m", "gputriage", "replay", "-o", "json", str(events)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    assert reader.stdout is not None
    reader.stdout.close()  # `| head -0`: the reader is gone before anything was written
    _, stderr = reader.communicate(timeout=60)
    assert reader.returncode == 1
    assert stderr == b""


@pytest.mark.parametrize(
    ("directory", "reason"),
    [
        ("/proc", "/proc/pod.v1.json: No such file or directory"),
        ("{file}/sub", "Not a directory"),
    ],
)
def test_schemas_written_where_they_cannot_be_is_one_line(
    tmp_path: Path, directory: str, reason: str
) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    where = directory.format(file=file)
    result = subprocess.run(
        [sys.executable, "-m", "gputriage", "schemas", "--write", "--dir", where],
        capture_output=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    line = one_line(result, 1)
    assert line == f"gputriage: error: cannot write the documents to {where}: {reason}"
