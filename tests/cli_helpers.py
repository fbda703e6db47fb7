"""Run the real ``gputriage`` CLI in a subprocess, and write small scenario files.

The subprocess runs ``python -m gputriage`` with this interpreter, so the tests
exercise the installed package exactly as a user's shell would, with no
``GPUTRIAGE_*`` variables leaking in from the developer's environment.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from gputriage.settings import ENV_PREFIX, Settings, load_settings
from schemas.codec import dumps, encode
from schemas.events import ContainerStatus, PodEvent, Termination, Tick
from schemas.incidents import Incident

CONSOLE_SCRIPT = Path(sys.executable).with_name("gputriage")


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The current environment without settings variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUTRIAGE_")}
    env.update(extra or {})
    return env


def settings_env(tables: Mapping[str, Any], prefix: str = ENV_PREFIX) -> dict[str, str]:
    """Plain tables (``{"kafka": {"brokers": ["k:1"]}}``) as ``GPUTRIAGE_<A>__<B>`` variables.

    Each leaf is written as JSON, which for these values (strings, numbers, booleans,
    lists) is also the TOML value :func:`gputriage.settings.load_settings` parses.
    """
    env: dict[str, str] = {}
    for key, value in tables.items():
        name = f"{prefix}{key.upper()}"
        if isinstance(value, Mapping):
            env.update(settings_env(value, f"{name}__"))
        else:
            env[name] = json.dumps(value)
    return env


def load_tables(tables: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> Settings:
    """Plain tables (and ``environ``) through :func:`~gputriage.settings.load_settings`."""
    return load_settings(None, environ={**settings_env(tables), **(environ or {})})


def gputriage(
    *args: str,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``python -m gputriage ARGS`` and capture stdout/stderr as bytes."""
    return subprocess.run(
        [sys.executable, "-m", "gputriage", *args],
        input=stdin if stdin is not None else b"",
        capture_output=True,
        env=clean_env(env),
        cwd=cwd,
        timeout=120,
        check=False,
    )


@dataclass(frozen=True)
class Measured:
    """A finished ``gputriage`` run with what it cost: wall time and peak memory."""

    returncode: int
    stdout: bytes
    stderr: bytes
    seconds: float
    peak_rss_mib: float

    @property
    def lines(self) -> list[str]:
        """stderr's lines."""
        return self.stderr.decode(errors="replace").splitlines()


def measured(
    *args: str,
    stdin: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
) -> Measured:
    """Run ``python -m gputriage ARGS`` with stdin from the file ``stdin`` (default: empty),
    and measure it: ``os.wait4`` gives this one child's peak RSS (``RUSAGE_CHILDREN``
    would be the peak of every child the test process ever had)."""
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        open(stdin or os.devnull, "rb") as given,
    ):
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-m", "gputriage", *args],
            stdin=given,
            stdout=out,
            stderr=err,
            env=clean_env(env),
        )
        try:
            status, usage = _wait4(process.pid, started + timeout)
        finally:
            if process.returncode is None and process.poll() is None:
                process.kill()
                process.wait()
        seconds = time.monotonic() - started
        out.seek(0)
        err.seek(0)
        return Measured(
            returncode=os.waitstatus_to_exitcode(status),
            stdout=out.read(),
            stderr=err.read(),
            seconds=seconds,
            peak_rss_mib=usage.ru_maxrss / 1024,  # KiB on Linux
        )


def _wait4(pid: int, deadline: float) -> tuple[int, resource.struct_rusage]:
    """``os.wait4`` of ``pid`` polled until ``deadline``; ``AssertionError`` past it."""
    while True:
        waited, status, usage = os.wait4(pid, os.WNOHANG)
        if waited == pid:
            return status, usage
        if time.monotonic() > deadline:
            raise AssertionError(f"gputriage (pid {pid}) still running at its deadline")
        time.sleep(0.02)


def one_line(result: subprocess.CompletedProcess[bytes] | Measured, status: int) -> str:
    """Assert exit ``status``, one stderr line ``gputriage: error: ...``, no traceback."""
    stderr = result.stderr.decode(errors="replace")
    assert "Traceback" not in stderr, stderr
    assert result.returncode == status, stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("gputriage: error: "), stderr
    return lines[0]


def host_oom_events(node: str = "gpu-node-1", pod: str = "trainer-0") -> list[msgspec.Struct]:
    """A GPU pod whose container was OOMKilled, then a tick an hour later."""
    t0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
    return [
        PodEvent(
            id=f"uid-{pod}/100",
            cluster="c1",
            time=t0,
            node=node,
            namespace="ml",
            name=pod,
            uid=f"uid-{pod}",
            phase="Running",
            gpu_requests={"nvidia.com/gpu": 1},
            owner_kind="Job",
            owner_name="trainer",
            containers=(
                ContainerStatus(
                    name="main",
                    restart_count=1,
                    state="running",
                    last_terminated=Termination(
                        reason="OOMKilled", exit_code=137, finished_at=t0 - timedelta(seconds=2)
                    ),
                ),
            ),
        ),
        Tick(id="tick/1", cluster="c1", time=t0 + timedelta(hours=1)),
    ]


def jsonl(events: Sequence[msgspec.Struct]) -> bytes:
    """Events as JSON lines, the recorded-file format."""
    return b"".join(encode(event) + b"\n" for event in events)


def write_jsonl(path: Path, events: Sequence[msgspec.Struct]) -> Path:
    """Write ``events`` to ``path`` and return it."""
    path.write_bytes(jsonl(events))
    return path


def incidents_of(stdout: bytes) -> list[Incident]:
    """Decode ``-o json`` output."""
    return [msgspec.json.decode(line, type=Incident) for line in stdout.splitlines()]


def bad_xid_line() -> bytes:
    """An xid.v1 record whose ``code`` is not an integer."""
    return dumps(
        {
            "schema": "xid.v1",
            "id": "x",
            "cluster": "c1",
            "time": "2024-05-01T12:00:01Z",
            "node": "n",
            "code": "seventy-nine",
        }
    )
