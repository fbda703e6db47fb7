"""The real Prometheus: ``promtool`` backfills the scraped series, ``prometheus`` serves them.

Nothing here evaluates PromQL: the server does (``/api/v1/query_range``), and the rules
are read back from it (``/api/v1/rules``), so the rules file is parsed by Prometheus too.

Traps: retention is measured from the newest block, so a stream's span matters, not its
age (:data:`RETENTION` is a century); no stale markers can be backfilled, so the lookback
is just over one scrape interval; the port from binding port 0 may be taken, so the server
is believed only once ``/api/v1/status/flags`` shows our storage path; one ``query_range``
returns at most 11,000 points per series (:data:`MAX_POINTS` chunks); the rule manager
evaluates at wall-clock now over no data, loaded only so Prometheus lists the rules.
bench/README.md, design notes: promql/prometheus.py.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from bench.promql.series import LOOKBACK_SECONDS
from schemas.codec import dumps, loads

RETENTION: Final = "100y"
READY_SECONDS: Final = 30.0
PORT_TRIES: Final = 3
MAX_POINTS: Final = 10_000
RULE_INTERVAL: Final = 60.0
"""The rule group's evaluation interval (``evaluation_interval: 1m``, Prometheus' default)."""
MISSING: Final = (
    "Prometheus is not installed (`prometheus` and `promtool` on PATH): `make tools` installs "
    "Debian's prometheus package where apt is available"
)


class PrometheusError(RuntimeError):
    """promtool or the server failed; one line for the user (the log's tail appended)."""


def binaries() -> tuple[str, str] | None:
    """``(prometheus, promtool)`` on PATH, or None when either is missing."""
    server, tool = shutil.which("prometheus"), shutil.which("promtool")
    return (server, tool) if server and tool else None


def check_rules(promtool: str, rules: Path) -> str:
    """``promtool check rules RULES``; its output. Raises :class:`PrometheusError` if it fails."""
    done = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise PrometheusError(f"promtool check rules {rules}: {done.stderr.strip()}")
    return done.stdout


def backfill(promtool: str, openmetrics: Path, data: Path) -> None:
    """``promtool tsdb create-blocks-from openmetrics FILE DATA``: blocks the server will load."""
    data.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(openmetrics), str(data)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-2000:]
        raise PrometheusError(f"promtool could not backfill {openmetrics}: {tail}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return int(resp.status), bytes(resp.read())


@dataclass(frozen=True)
class Rule:
    """An alerting rule as the server parsed it."""

    name: str
    query: str
    for_seconds: float
    labels: dict[str, str]
    annotations: dict[str, str]


@dataclass
class Server:
    """One ``prometheus`` process on a loopback port; ``url`` is its base."""

    process: subprocess.Popen[bytes]
    url: str
    data: Path
    log_path: Path
    _stopped: bool = field(default=False, repr=False)

    def api(self, path: str, **params: str) -> Any:
        """``GET /api/v1/PATH?params``: its ``data``; :class:`PrometheusError` on an error."""
        query = urllib.parse.urlencode(params)
        try:
            _, body = _get(f"{self.url}/api/v1/{path}?{query}", timeout=60.0)
        except urllib.error.HTTPError as exc:
            body = exc.read()
        except (urllib.error.URLError, OSError) as exc:
            raise PrometheusError(f"Prometheus /api/v1/{path}: {exc}") from None
        reply = loads(body)
        if reply.get("status") != "success":
            raise PrometheusError(f"Prometheus /api/v1/{path}: {reply.get('error', reply)}")
        return reply["data"]

    def rules(self) -> list[Rule]:
        """The alerting rules the server loaded, in file order."""
        found = []
        for group in self.api("rules", type="alert")["groups"]:
            for rule in group["rules"]:
                found.append(
                    Rule(
                        name=rule["name"],
                        query=rule["query"],
                        for_seconds=float(rule.get("duration", 0)),
                        labels=dict(rule.get("labels") or {}),
                        annotations=dict(rule.get("annotations") or {}),
                    )
                )
        return found

    def query_range(
        self, query: str, start: float, end: float, step: float = RULE_INTERVAL
    ) -> dict[tuple[tuple[str, str], ...], list[float]]:
        """The evaluation instants at which ``query`` returned each series (by its labels,
        ``__name__`` dropped as an alert drops it), from ``start`` to ``end`` every ``step``."""
        found: dict[tuple[tuple[str, str], ...], list[float]] = {}
        chunk_start = start
        while chunk_start <= end:
            chunk_end = min(end, chunk_start + (MAX_POINTS - 1) * step)
            data = self.api(
                "query_range",
                query=query,
                start=repr(chunk_start),
                end=repr(chunk_end),
                step=repr(step),
            )
            for series in data["result"]:
                key = tuple(sorted((k, v) for k, v in series["metric"].items() if k != "__name__"))
                found.setdefault(key, []).extend(float(t) for t, _ in series["values"])
            chunk_start = chunk_end + step
        return found

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s."""
        if self._stopped:
            return
        self._stopped = True
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start(
    exe: str, data: Path, rules: Path, workdir: Path, lookback: float = LOOKBACK_SECONDS
) -> Server:
    """Start ``prometheus`` on the blocks in ``data`` with ``rules`` loaded, no scrape targets,
    and wait (at most :data:`READY_SECONDS`) until it is ready and is ours. ``lookback`` is
    ``--query.lookback-delta`` in seconds."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    # JSON is YAML: the one codec writes it.
    config.write_bytes(
        dumps(
            {
                "global": {"evaluation_interval": "1m", "scrape_interval": "30s"},
                "rule_files": [str(rules.resolve())],
                "scrape_configs": [],
            }
        )
    )
    last = ""
    for attempt in range(PORT_TRIES):
        port = _free_port()
        log_path = workdir / f"prometheus-{attempt}.log"
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [
                    exe,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={data.resolve()}",
                    f"--storage.tsdb.retention.time={RETENTION}",
                    f"--query.lookback-delta={int(lookback)}s",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--log.level=warn",
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        server = Server(process, f"http://127.0.0.1:{port}", data.resolve(), log_path)
        if _wait_ready(server):
            return server
        server.stop()
        last = server.log()[-2000:]
        if attempt + 1 < PORT_TRIES and "address already in use" in last:
            continue
        break
    raise PrometheusError(f"Prometheus did not become ready in {READY_SECONDS:g} s: {last}")


def _wait_ready(server: Server) -> bool:
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            return False
        try:
            status, _ = _get(f"{server.url}/-/ready")
            if status == 200:
                flags = server.api("status/flags")
                return Path(flags.get("storage.tsdb.path", "")) == server.data
        except (urllib.error.URLError, ConnectionError, TimeoutError, PrometheusError):
            pass
        time.sleep(0.05)
    return False
