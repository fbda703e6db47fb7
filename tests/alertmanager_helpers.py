"""A real Alertmanager for tests: Debian's ``prometheus-alertmanager`` on a loopback port.

:class:`RunningAlertmanager` starts the binary with a minimal configuration (one
receiver that notifies nobody), its own storage directory and clustering off
(``--cluster.listen-address=``: no gossip port, no 15 s settle wait), waits for
``/-/ready`` with a deadline, and stops it (SIGTERM, then SIGKILL).

Traps:

* Port race: the port is found by binding port 0 and closing the socket, so
  something else may take it first. Alertmanager then exits at once ("address already
  in use"); :func:`start` tries another port. Worse, another server on that port
  would answer ``/-/ready``: readiness is only believed once ``/api/v2/status``
  shows *our* configuration (its receiver name is unique per start).
* ``GET /api/v2/alerts`` lists active alerts only: a resolved alert (``endsAt`` in
  the past) is not returned at all, so "resolved" reads as "gone".
"""

from __future__ import annotations

import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gputriage.demo.broker import free_port
from schemas.codec import loads

BINARIES = ("alertmanager", "prometheus-alertmanager")
"""Upstream's name, then Debian's (``/usr/bin/prometheus-alertmanager``)."""
MISSING = (
    "Alertmanager is not installed (neither `alertmanager` nor `prometheus-alertmanager` "
    "on PATH): `make tools` installs Debian's prometheus-alertmanager where apt is available"
)
READY_SECONDS = 20.0
PORT_TRIES = 3


def binary() -> str | None:
    """The Alertmanager executable on PATH, or None."""
    for name in BINARIES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _get(url: str, timeout: float = 1.0) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return int(resp.status), bytes(resp.read())


@dataclass
class RunningAlertmanager:
    """One Alertmanager process; ``url`` is its base (``http://127.0.0.1:PORT``)."""

    process: subprocess.Popen[bytes]
    url: str
    log_path: Path
    receiver: str
    _stopped: bool = field(default=False, repr=False)

    def alerts(self, **query: str) -> list[dict[str, Any]]:
        """``GET /api/v2/alerts`` (active alerts only, see the module's traps)."""
        suffix = "?" + "&".join(f"{k}={v}" for k, v in query.items()) if query else ""
        status, body = _get(f"{self.url}/api/v2/alerts{suffix}", timeout=5.0)
        assert status == 200, status
        alerts = loads(body)
        assert isinstance(alerts, list)
        return alerts

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def start(workdir: Path, exe: str) -> RunningAlertmanager:
    """Start an Alertmanager under ``workdir`` and wait until it serves its API."""
    last = ""
    for attempt in range(PORT_TRIES):
        receiver = f"null-{uuid.uuid4().hex[:8]}"
        home = workdir / f"am-{receiver}"
        home.mkdir(parents=True)
        config = home / "alertmanager.yml"
        config.write_text(
            f'route:\n  receiver: "{receiver}"\nreceivers:\n  - name: "{receiver}"\n',
            encoding="utf-8",
        )
        port = free_port()
        log_path = home / "alertmanager.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [
                    exe,
                    f"--config.file={config}",
                    f"--storage.path={home / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--cluster.listen-address=",
                    "--log.level=warn",
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        running = RunningAlertmanager(process, f"http://127.0.0.1:{port}", log_path, receiver)
        if _wait_ready(running):
            return running
        running.stop()
        last = running.log()[-2000:]
        if attempt + 1 < PORT_TRIES and "address already in use" in last:
            continue
        break
    raise AssertionError(f"Alertmanager did not become ready in {READY_SECONDS:g} s:\n{last}")


def _wait_ready(running: RunningAlertmanager) -> bool:
    """Poll ``/-/ready`` then ``/api/v2/status`` (our receiver) until the deadline."""
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if running.process.poll() is not None:
            return False
        try:
            ready, _ = _get(f"{running.url}/-/ready")
            if ready == 200:
                _, body = _get(f"{running.url}/api/v2/status")
                status = loads(body)
                # Not our receiver: someone else's server on our port.
                return running.receiver in str(status.get("config", {}).get("original", ""))
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        time.sleep(0.05)
    return False
