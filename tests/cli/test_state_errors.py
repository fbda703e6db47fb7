"""A state directory that cannot be used: one line naming the file and the OS's reason.

At start (a parent that is a file, a directory that takes no files, a full disk) and
mid-run (the disk fills): both end ``connect kmsg`` with status 1, a runtime failure,
never 2 (a usage mistake: a supervisor would not restart it) and never ``Could not
open file '?'``. A full disk is a real one, a tmpfs of one page, where this test may
mount one (root); everywhere, the child's ``os.fsync`` says ENOSPC as a full disk does.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_helpers import clean_env, gputriage, one_line
from tests.kafka_helpers import KafkaTestEnv

pytestmark = pytest.mark.timeout(90)

DEAD_BROKER = "127.0.0.1:1"
XID = "[ 1.0] NVRM: Xid (PCI:0000:9b:00): 79, pid=1, GPU has fallen off the bus.\n"
FULL_DISK = """
import errno, os, sys

def full(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

os.fsync = full
from gputriage.cli import main
main(sys.argv[1:])
"""
"""``python -m gputriage`` whose every ``fsync`` fails as on a full disk (the state file's
save is the only caller)."""


@pytest.fixture
def kernel_log(tmp_path: Path) -> Path:
    path = tmp_path / "kern.log"
    path.write_text(XID)
    return path


@pytest.fixture
def one_page(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 4 KiB: the lock file's pid takes its only page, so the first save of
    the state file fails with ENOSPC. Skips where mounting is not allowed (not root)."""
    mountpoint = tmp_path / "tiny"
    mountpoint.mkdir()
    mount = shutil.which("mount")
    if mount is None:
        pytest.skip("no mount(8)")
    done = subprocess.run(
        [mount, "-t", "tmpfs", "-o", "size=4k", "tmpfs", str(mountpoint)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", str(mountpoint)], check=False)


def _connect(state: Path, log: Path, brokers: str) -> list[str]:
    return [
        *("connect", "kmsg", "--cluster", "c", "--node", "n", "--once", "--no-nvml"),
        *("--log-file", str(log), "--state-path", str(state), "--metrics-port", "0"),
        *("--brokers", brokers),
    ]


def test_a_parent_that_is_a_file_is_one_line(tmp_path: Path, kernel_log: Path) -> None:
    (tmp_path / "a-file").write_text("")
    state = tmp_path / "a-file" / "state.json"
    line = one_line(gputriage(*_connect(state, kernel_log, DEAD_BROKER)), 1)
    assert line == (
        f"gputriage: error: cannot use state file {state}: {tmp_path}/a-file is not a directory"
    )


def test_a_directory_that_takes_no_files_is_one_line(kernel_log: Path) -> None:
    state = Path("/proc/gputriage-state.json")
    line = one_line(gputriage(*_connect(state, kernel_log, DEAD_BROKER)), 1)
    assert line == (
        f"gputriage: error: cannot use state file {state}: {state}.lock: No such file or directory"
    )


def test_a_full_disk_at_start_is_one_line(one_page: Path, kernel_log: Path) -> None:
    (one_page / "fill").write_bytes(b"x" * 4096)
    state = one_page / "state.json"
    line = one_line(gputriage(*_connect(state, kernel_log, DEAD_BROKER)), 1)
    assert line == (
        f"gputriage: error: cannot use state file {state}: {state}.lock: No space left on device"
    )


def test_a_full_disk_mid_run_is_one_line_and_status_1(
    kafka: KafkaTestEnv, tmp_path: Path, kernel_log: Path
) -> None:
    state = tmp_path / "state.json"
    result = subprocess.run(
        [sys.executable, "-c", FULL_DISK, *_connect(state, kernel_log, kafka.bootstrap)],
        capture_output=True,
        env=clean_env(kafka.env),
        timeout=60,
        check=False,
    )
    _said_once_that_the_save_failed(result, state)


def test_a_real_full_disk_mid_run_is_one_line_and_status_1(
    kafka: KafkaTestEnv, one_page: Path, kernel_log: Path
) -> None:
    state = one_page / "state.json"
    result = gputriage(*_connect(state, kernel_log, kafka.bootstrap), env=kafka.env)
    _said_once_that_the_save_failed(result, state)


def _said_once_that_the_save_failed(
    result: subprocess.CompletedProcess[bytes], state: Path
) -> None:
    """Status 1, one error line (the connector's INFO log lines before it are fine)."""
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr, stderr
    assert result.returncode == 1, stderr
    errors = [line for line in stderr.splitlines() if " INFO " not in line]
    assert errors == [f"gputriage: error: cannot save state file {state}: No space left on device"]
