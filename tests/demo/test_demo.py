"""``gputriage demo`` end to end: embedded broker, worker, simulated cluster, clean exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from schemas.codec import decode_incident
from tests.cli_helpers import clean_env
from tests.kafka_helpers import wait_until


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by an init that does not reap) counts as gone.
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


def _pids(stderr: str) -> list[int]:
    """The broker's and the worker's pids, from the demo's ``(pid N)``/``pid N (log...)`` lines."""
    return [
        int(line.split("pid ", 1)[1].split()[0].rstrip(")"))
        for line in stderr.splitlines()
        if "pid " in line
    ]


def test_demo_shows_incident_types_and_stops_by_itself() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gputriage",
            "demo",
            "--speed",
            "300",  # the scenario's 45 minutes in 9 s; all 7 types appear at 400x here
            "--linger",
            "3",
            "-o",
            "json",
        ],
        capture_output=True,
        env=clean_env(),
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    revisions = [decode_incident(line) for line in result.stdout.splitlines()]
    types = {r.type for r in revisions}
    assert len(types) >= 5, types
    stderr = result.stderr.decode()
    pids = _pids(stderr)
    assert len(pids) == 2, stderr
    assert not any(_alive(pid) for pid in pids), "broker and worker are gone"


def test_ctrl_c_stops_everything_cleanly() -> None:
    demo = subprocess.Popen(
        [sys.executable, "-m", "gputriage", "demo", "--follow", "--speed", "300"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=clean_env(),
    )
    assert demo.stdout is not None
    try:
        first = demo.stdout.readline()  # blocks until the first incident line
        assert first, "an incident before Ctrl-C"
        demo.send_signal(signal.SIGINT)
        _, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert demo.returncode == 0, err.decode()
    pids = _pids(err.decode())
    assert len(pids) == 2
    wait_until(lambda: not any(_alive(p) for p in pids), timeout=10, what="no orphans")
