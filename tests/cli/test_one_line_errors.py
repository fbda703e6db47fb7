"""Every cause found of a traceback is one line ``gputriage: error: ...``.

Each test runs the real command in a subprocess, as a user's shell would, and
asserts the shape: the exit status (2 for a usage mistake, 1 for a runtime
failure, the CLI's rule in :mod:`gputriage.cli`), exactly one stderr line, no
traceback. Every one of them failed before the fix it names.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli_helpers import gputriage, host_oom_events, one_line, write_jsonl

DEAD_BROKER = "127.0.0.1:1"
"""Nothing listens on port 1: a refused connection, at once."""


@pytest.fixture
def events(tmp_path: Path) -> Path:
    return write_jsonl(tmp_path / "events.jsonl", host_oom_events())


@pytest.fixture
def kernel_log(tmp_path: Path) -> Path:
    path = tmp_path / "dmesg.txt"
    path.write_text("[ 1.0] NVRM: Xid (PCI:0000:9b:00): 79, pid=1, GPU has fallen off the bus.\n")
    return path


# -- the settings file and values ------------------------------------------------------
@pytest.mark.parametrize(
    "args",
    [
        ["replay", "{events}"],
        ["tail", "--brokers", DEAD_BROKER],
        ["process", "--brokers", DEAD_BROKER],
        ["demo"],
        ["ingest", "kmsg", "--node", "n", "--file", "{kernel_log}"],
    ],
    ids=lambda args: args[0],
)
def test_a_config_file_that_is_not_utf8_is_one_line_naming_it(
    tmp_path: Path, events: Path, kernel_log: Path, args: list[str]
) -> None:
    config = tmp_path / "latin1.toml"
    config.write_bytes(b"[core]\ngrace_seconds = 1.0  # caf\xe9\n")
    argv = [a.format(events=events, kernel_log=kernel_log) for a in args]
    line = one_line(gputriage("--config", str(config), *argv), 2)
    assert f"config file {config} is not UTF-8 text" in line


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("[processor]\nbatch_max = 0\n", "processor.batch_max: must be at least 1"),
        ("[core]\ngrace_seconds = -5\n", "core.grace_seconds: must be at least 0"),
        ("[core]\ngrace_seconds = nan\n", "core.grace_seconds: nan is not a finite number"),
        ("[processor]\ntick_seconds = inf\n", "processor.tick_seconds: inf is not a finite"),
        ("[topics]\npartitions = 9223372036854775807\n", "topics.partitions: must be at most"),
        ('[processor]\napp_id = "a b/c"\n', "processor.app_id: 'a b/c' does not make a legal"),
        ('[kafka]\nbrokers = "::::"\n', "kafka.brokers: '::::' is not HOST:PORT"),
        ('[connect.kmsg]\nbrokers = "k:http"\n', "connect.kmsg.brokers: 'k:http': the port"),
    ],
)
def test_a_bad_setting_fails_at_load_with_its_path(
    tmp_path: Path, events: Path, table: str, message: str
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(table, encoding="utf-8")
    line = one_line(gputriage("--config", str(config), "replay", str(events)), 2)
    assert message in line


@pytest.mark.parametrize(
    "args",
    [
        ["ingest", "kmsg", "--node", "n", "--file", "{kernel_log}"],
        ["ingest", "k8s", "--cluster", "c", "--file", "{kernel_log}"],
        ["ingest", "dcgm", "--node", "n", "--file", "{kernel_log}"],
    ],
    ids=lambda args: args[1],
)
def test_ingest_verbs_refuse_an_invalid_config(
    tmp_path: Path, kernel_log: Path, args: list[str]
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[core]\ngrace_seconds = -5\n", encoding="utf-8")
    argv = [a.format(kernel_log=kernel_log) for a in args]
    assert "core.grace_seconds" in one_line(gputriage("--config", str(config), *argv), 2)
    missing = str(tmp_path / "missing.toml")
    assert "missing.toml" in one_line(gputriage("--config", missing, *argv), 2)


# -- command-line values -----------------------------------------------------------------
@pytest.mark.parametrize(
    ("brokers", "message"),
    [
        ("::::", "'::::' is not HOST:PORT"),
        ("localhost:http", "'localhost:http': the port must be a number from 1 to 65535"),
        ("localhost:0", "the port must be a number"),
        ("k:9092,b:99999", "--brokers[1]: 'b:99999'"),
        ("[::1x]:9092", "is not an IPv6 address"),
    ],
)
@pytest.mark.parametrize("verb", ["tail", "process", "demo"])
def test_a_broker_address_that_is_not_host_port_is_a_usage_error(
    verb: str, brokers: str, message: str
) -> None:
    line = one_line(gputriage(verb, "--brokers", brokers), 2)
    assert "'--brokers'" in line
    assert message in line


def test_process_with_an_app_id_that_makes_no_topic_name_is_a_usage_error() -> None:
    for app_id in ("a/b", "has space", "x" * 300):
        line = one_line(gputriage("process", "--brokers", DEAD_BROKER, "--app-id", app_id), 2)
        assert "'--app-id'" in line
        assert "legal state topic name" in line


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as held:
        held.bind(("0.0.0.0", 0))
        held.listen()
        yield held.getsockname()[1]


@pytest.mark.parametrize(
    "args",
    [
        ["process"],
        ["connect", "k8s", "--cluster", "c"],
        ["connect", "kmsg", "--cluster", "c", "--node", "n", "--once", "--no-nvml"],
    ],
    ids=lambda args: " ".join(args[:2]),
)
def test_a_metrics_port_taken_is_one_line(
    tmp_path: Path, kernel_log: Path, taken_port: int, args: list[str]
) -> None:
    # process: OSError traceback; connect k8s: traceback; connect kmsg: "Could not open file '?'".
    extra = (
        ["--log-file", str(kernel_log), "--state-path", str(tmp_path / "s")]
        if "kmsg" in args
        else []
    )
    result = gputriage(*args, *extra, "--brokers", DEAD_BROKER, "--metrics-port", str(taken_port))
    line = one_line(result, 1)
    assert f"cannot serve metrics on 0.0.0.0:{taken_port}: Address already in use" in line


def test_tail_from_before_1970_is_a_usage_error() -> None:
    line = one_line(
        gputriage("tail", "--brokers", DEAD_BROKER, "--from", "0001-01-01T00:00:00Z"), 2
    )
    assert "'--from'" in line
    assert "1970" in line


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "1e9"])
def test_tail_connect_timeout_must_be_a_finite_positive_number(value: str) -> None:
    # nan passed click's FloatRange (every comparison with nan is false) and waited forever.
    result = gputriage("tail", "--brokers", DEAD_BROKER, "--connect-timeout-seconds", value)
    assert "'--connect-timeout-seconds'" in one_line(result, 2)


@pytest.mark.parametrize(
    ("args"),
    [
        ["demo", "--speed", "nan"],
        ["demo", "--linger-seconds", "inf"],
        [
            "connect",
            "dcgm",
            "--node",
            "n",
            "--cluster",
            "c",
            "--url",
            "http://x/",
            "--interval-seconds",
            "nan",
        ],
        ["connect", "k8s", "--cluster", "c", "--silence-timeout-seconds", "inf"],
        ["connect", "k8s", "--cluster", "c", "--buffer-size", "99999999999999999999"],
        ["connect", "kmsg", "--node", "n", "--cluster", "c", "--poll-interval-seconds", "nan"],
    ],
    ids=lambda args: " ".join(args[:2] + args[-2:-1]),
)
def test_every_number_option_has_a_finite_range(args: list[str]) -> None:
    assert f"'{args[-2]}'" in one_line(gputriage(*args), 2)


@pytest.mark.parametrize(
    "boot_time", ["100000000000000000", "0001-01-01T00:00:00Z", "9999-12-31T00:00:00Z"]
)
def test_ingest_kmsg_boot_time_out_of_range_is_a_usage_error(
    kernel_log: Path, boot_time: str
) -> None:
    result = gputriage(
        "ingest", "kmsg", "--node", "n", "--file", str(kernel_log), "--boot-time", boot_time
    )
    line = one_line(result, 2)
    assert "'--boot-time'" in line
    assert "1970 to 2999" in line


def test_demo_with_an_unreachable_broker_is_one_line() -> None:
    line = one_line(gputriage("demo", "--brokers", DEAD_BROKER), 1)
    assert f"cannot reach Kafka at {DEAD_BROKER}" in line
    via_settings = gputriage("demo", env={"GPUTRIAGE_KAFKA__BROKERS": f'"{DEAD_BROKER}"'})
    assert "cannot reach Kafka" in one_line(via_settings, 1)


# -- input ---------------------------------------------------------------------------------
def test_ingest_dcgm_leaves_out_a_sample_whose_timestamp_is_not_a_time(tmp_path: Path) -> None:
    scrape = tmp_path / "scrape.prom"
    scrape.write_text(
        'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-0"} 0 1e999\n'
        'DCGM_FI_DEV_XID_ERRORS{gpu="1",UUID="GPU-1"} 0 1700000000000\n',
        encoding="utf-8",
    )
    result = gputriage("ingest", "dcgm", "--node", "n", "--file", str(scrape))
    stderr = result.stderr.decode()
    assert "Traceback" not in stderr
    assert result.returncode == 0, stderr
    (line,) = stderr.splitlines()
    assert line.startswith(f"{scrape}: sample timestamp inf ms is not a finite number: ")
    assert 'UUID="GPU-0"' in line
    (event,) = result.stdout.splitlines()
    assert b'"gpu_uuid":"GPU-1"' in event
    assert b'"time":"2023-11-14T22:13:20Z"' in event
