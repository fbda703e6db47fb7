"""Endless or hostile input: every file the CLI reads is read within a bound.

``/dev/zero`` never ends and never breaks a line: a reader that waits for the end of
a line or of the file grows until the machine gives out (4 GB in 2-4 s). Each command
here must end on its own within 20 s, with a non-zero status, no traceback, a reason
naming the cap, and its peak memory far below what it read
(:mod:`connectors.bounded`). An over-long line in the middle of good ones is a dead
line: counted, reported, and the lines after it are still read.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from connectors.bounded import MAX_LINE_BYTES
from tests.cli_helpers import gputriage, host_oom_events, jsonl, measured, one_line

pytestmark = pytest.mark.timeout(60)

DEADLINE_S = 20.0
PEAK_MIB = 400
"""Far below the gigabyte each command reads from /dev/zero before it gives up (the
interpreter and its imports take ~70 MiB; one capped line 16 more)."""
NO_LINE_BREAK = "no line break within 1 GiB: not text of lines; rest of input skipped"


@pytest.fixture
def truth(tmp_path: Path) -> Path:
    path = tmp_path / "truth.jsonl"
    path.write_bytes(b"")
    return path


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["replay", "/dev/zero"], f"/dev/zero:1: {NO_LINE_BREAK}"),
        (["replay", "-"], f"<stdin>:1: {NO_LINE_BREAK}"),
        (["score", "/dev/zero", "{truth}"], f"/dev/zero:1: {NO_LINE_BREAK}"),
        (["ingest", "k8s", "--cluster", "c", "--file", "/dev/zero"], NO_LINE_BREAK),
        (["ingest", "kmsg", "--node", "n", "--file", "/dev/zero"], NO_LINE_BREAK),
        (["ingest", "autoscaler", "--cluster", "c", "--file", "/dev/zero"], NO_LINE_BREAK),
        (["ingest", "dcgm", "--node", "n", "--file", "/dev/zero"], "larger than 16 MiB"),
        (["ingest", "topo", "--node", "n", "--file", "/dev/zero"], "larger than 16 MiB"),
        (["demo", "--scenario", "/dev/zero"], f"demo: /dev/zero:1: {NO_LINE_BREAK}"),
    ],
    ids=lambda value: " ".join(value[:2]) if isinstance(value, list) else None,
)
def test_a_command_reading_dev_zero_ends_within_a_bound(
    truth: Path, args: list[str], said: str
) -> None:
    argv = [arg.format(truth=truth) for arg in args]
    run = measured(*argv, stdin="/dev/zero", timeout=DEADLINE_S * 2)
    assert "Traceback" not in run.stderr.decode(), run.stderr
    assert run.returncode == 1, run.lines
    assert any(said in line for line in run.lines), run.lines
    assert run.seconds < DEADLINE_S, f"{run.seconds:.1f} s"
    assert run.peak_rss_mib < PEAK_MIB, f"{run.peak_rss_mib:.0f} MiB"


def test_the_truth_file_of_score_is_bounded_too(tmp_path: Path) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(jsonl(host_oom_events()))
    run = measured("score", str(events), "/dev/zero", timeout=DEADLINE_S * 2)
    line = one_line(run, 2)  # a truth file that cannot be scored against: as any bad one
    assert f"/dev/zero:1: {NO_LINE_BREAK}" in line
    assert run.seconds < DEADLINE_S
    assert run.peak_rss_mib < PEAK_MIB


@pytest.mark.parametrize("how", ["--config", "GPUTRIAGE_CONFIG"])
def test_a_settings_file_that_is_dev_zero_is_one_line(tmp_path: Path, how: str) -> None:
    events = tmp_path / "events.jsonl"
    events.write_bytes(jsonl(host_oom_events()))
    given = ["--config", "/dev/zero"] if how == "--config" else []
    env = {"GPUTRIAGE_CONFIG": "/dev/zero"} if how != "--config" else None
    run = measured(*given, "replay", str(events), env=env)
    line = one_line(run, 2)
    assert line == "gputriage: error: cannot read config file /dev/zero: larger than 16 MiB"
    assert run.seconds < DEADLINE_S
    assert run.peak_rss_mib < PEAK_MIB


def test_a_state_file_that_is_dev_zero_is_one_line(tmp_path: Path) -> None:
    # Through a link: the connector must never get as far as replacing /dev/zero itself.
    state = tmp_path / "state.json"
    state.symlink_to("/dev/zero")
    log = tmp_path / "kern.log"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:9b:00): 79, pid=1, GPU has fallen off the bus.\n")
    run = measured(
        *("connect", "kmsg", "--cluster", "c", "--node", "n", "--once", "--no-nvml"),
        *("--log-file", str(log), "--state-path", str(state), "--metrics-port", "0"),
        *("--brokers", "127.0.0.1:1"),
    )
    line = one_line(run, 1)
    assert line == f"gputriage: error: cannot read state file {state}: larger than 16 MiB"
    assert run.seconds < DEADLINE_S
    assert run.peak_rss_mib < PEAK_MIB


@pytest.mark.parametrize("compress", [False, True], ids=["plain", "gzip"])
def test_an_over_long_line_is_a_dead_line_and_reading_goes_on(
    tmp_path: Path, compress: bool
) -> None:
    good = jsonl(host_oom_events())
    data = b'{"pad": "' + b"x" * MAX_LINE_BYTES + b'"}\n' + good
    path = tmp_path / "events.jsonl"
    path.write_bytes(gzip.compress(data, compresslevel=1) if compress else data)
    result = gputriage("replay", "-o", "json", str(path))
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        f"{path}:1: line of {MAX_LINE_BYTES + 11} bytes is longer than 16 MiB: skipped",
        "gputriage: 1 bad line of 3 skipped",
    ]
    assert b'"type":"host_oom_kill"' in result.stdout, "the lines after it were read"


@pytest.mark.parametrize("where", ["file", "environment"])
def test_a_setting_nested_5000_deep_is_one_line(tmp_path: Path, where: str) -> None:
    # tomllib parses nesting by recursion: 5,000 levels were a RecursionError traceback.
    events = tmp_path / "events.jsonl"
    events.write_bytes(jsonl(host_oom_events()))
    nested = "[" * 5000 + "]" * 5000
    if where == "file":
        config = tmp_path / "deep.toml"
        config.write_text(f"[core]\ngrace_seconds = {nested}\n", encoding="utf-8")
        line = one_line(gputriage("--config", str(config), "replay", str(events)), 2)
        assert line.endswith(f"config file {config} is not valid TOML: values nested too deeply")
    else:
        result = gputriage("replay", str(events), env={"GPUTRIAGE_CORE__GRACE_SECONDS": nested})
        line = one_line(result, 2)
        assert line.endswith("GPUTRIAGE_CORE__GRACE_SECONDS: values nested too deeply")


def test_a_demo_scenario_line_that_is_no_event_is_one_line_before_anything_starts(
    tmp_path: Path,
) -> None:
    scenario = tmp_path / "scenario.jsonl"
    scenario.write_bytes(jsonl(host_oom_events()) + b"not json\n")
    line = one_line(gputriage("demo", "--scenario", str(scenario)), 1)
    assert (
        line
        == f"gputriage: error: demo: {scenario}:3: JSON is malformed: invalid character (byte 4)"
    )
