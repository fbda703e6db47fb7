"""Kafka that is not there: every verb says so in one line, naming the brokers, in bounded time.

A broker that accepts TCP and never answers (a listening socket nobody accepts from:
the kernel completes the handshake) held ``process``, ``connect`` and ``bridge`` for
aiokafka's 40 s request timeout; now every verb gives up at
``kafka.connect_timeout_seconds``. An unreachable broker printed aiokafka's ERROR
lines and the repr of its address tuples before the one line; now it is the one line.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_helpers import gputriage, one_line
from tests.paths import ROOT

pytestmark = pytest.mark.timeout(90)

DEAD_BROKER = "127.0.0.1:1"
QUIET = {"GPUTRIAGE_LOG__LEVEL": "warning"}
"""The verbs' INFO lines (metrics on..., reading...) are not what these tests count."""
BRIDGE = {
    "GPUTRIAGE_BRIDGE__MODULES": '{jsonpost = "tests.bridge_helpers"}',
    "GPUTRIAGE_BRIDGE__JSONPOST__ROUTES": (
        '[{name = "r", target = {url = "http://127.0.0.1:9/", token_env = "TOKEN"}}]'
    ),
    "TOKEN": "t",
}


@pytest.fixture
def silent() -> Iterator[str]:
    """``host:port`` where connections are taken (by the kernel) and never answered."""
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(64)
        yield f"127.0.0.1:{listening.getsockname()[1]}"


@pytest.fixture
def kernel_log(tmp_path: Path) -> Path:
    path = tmp_path / "kern.log"
    path.write_text("[ 1.0] NVRM: Xid (PCI:0000:9b:00): 79, pid=1, GPU has fallen off the bus.\n")
    return path


VERBS = {
    "process": ["process", "--metrics-port", "0"],
    "connect kmsg": [
        *("connect", "kmsg", "--cluster", "c", "--node", "n", "--once", "--no-nvml"),
        *("--log-file", "{log}", "--state-path", "{tmp}/state", "--metrics-port", "0"),
    ],
    "connect dcgm": [
        *("connect", "dcgm", "--cluster", "c", "--node", "n", "--url", "http://127.0.0.1:9/"),
        *("--metrics-port", "0"),
    ],
    "bridge": ["bridge", "jsonpost", "--metrics-port", "0"],
    "demo": ["demo"],
}


def _argv(verb: str, brokers: str, log: Path, tmp: Path) -> list[str]:
    args = [arg.format(log=log, tmp=tmp) for arg in VERBS[verb]]
    return [*args, "--brokers", brokers]


@pytest.mark.parametrize("verb", [*VERBS, "tail"])
def test_a_silent_broker_is_one_line_at_the_connect_timeout(
    silent: str, kernel_log: Path, tmp_path: Path, verb: str
) -> None:
    env = {**QUIET, **BRIDGE, "GPUTRIAGE_KAFKA__CONNECT_TIMEOUT_SECONDS": "2"}
    argv = (
        ["tail", "--brokers", silent]
        if verb == "tail"
        else _argv(verb, silent, kernel_log, tmp_path)
    )
    started = time.monotonic()
    line = one_line(gputriage(*argv, env=env, cwd=ROOT), 1)
    took = time.monotonic() - started
    prefix = "demo: " if verb == "demo" else ""
    if verb == "tail":  # tail retries within the timeout, and says so
        assert line == f"gputriage: error: cannot reach Kafka at {silent} within 2 s: no answer"
    else:
        assert line == (
            f"gputriage: error: {prefix}cannot reach Kafka at {silent}: "
            "no answer within 2 s (kafka.connect_timeout_seconds)"
        )
    assert 2 <= took < 15, f"{took:.1f} s"


def test_the_default_connect_timeout_ends_a_start_within_20_s(silent: str) -> None:
    started = time.monotonic()
    line = one_line(gputriage("process", "--metrics-port", "0", "--brokers", silent, env=QUIET), 1)
    took = time.monotonic() - started
    assert line.endswith("no answer within 10 s (kafka.connect_timeout_seconds)")
    assert 10 <= took < 20, f"{took:.1f} s"


@pytest.mark.parametrize("verb", list(VERBS))
def test_an_unreachable_broker_is_one_line_naming_it(
    kernel_log: Path, tmp_path: Path, verb: str
) -> None:
    env = {**QUIET, **BRIDGE}
    line = one_line(
        gputriage(*_argv(verb, DEAD_BROKER, kernel_log, tmp_path), env=env, cwd=ROOT), 1
    )
    prefix = "demo: " if verb == "demo" else ""
    assert (
        line == f"gputriage: error: {prefix}cannot reach Kafka at {DEAD_BROKER}: Connection refused"
    )


def test_the_connect_timeout_is_a_checked_setting(tmp_path: Path) -> None:
    for value in ("0", "-1", "nan", "3601"):
        env = {"GPUTRIAGE_KAFKA__CONNECT_TIMEOUT_SECONDS": value}
        line = one_line(gputriage("tail", "--brokers", DEAD_BROKER, env=env), 2)
        assert "kafka.connect_timeout_seconds" in line
