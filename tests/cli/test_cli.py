"""The CLI surface: help everywhere, and one-line errors with exit 2 for user mistakes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.cli_helpers import CONSOLE_SCRIPT, clean_env, gputriage, host_oom_events, write_jsonl


def _one_line_error(result: subprocess.CompletedProcess[bytes]) -> str:
    """Assert the shape every user mistake must have; return the message."""
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert "Traceback" not in stderr
    assert result.stdout == b""
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("gputriage: error: ")
    return lines[0]


def _command_paths() -> list[list[str]]:
    """Every command and group of the click tree, as argument lists."""
    import click  # noqa: PLC0415

    from gputriage.cli import cli  # noqa: PLC0415

    paths: list[list[str]] = [[]]

    def walk(group: click.Group, prefix: list[str]) -> None:
        for name, command in sorted(group.commands.items()):
            paths.append([*prefix, name])
            if isinstance(command, click.Group):
                walk(command, [*prefix, name])

    walk(cli, [])
    return paths


@pytest.mark.parametrize("command", _command_paths(), ids=" ".join)
def test_help_on_every_command(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from gputriage.cli import run  # noqa: PLC0415

    for flag in ("--help", "-h"):
        assert run([*command, flag]) == 0
        out, err = capsys.readouterr()
        assert out.startswith("Usage: gputriage"), out
        assert err == ""


def test_help_by_the_installed_script() -> None:
    result = gputriage("connect", "--help")
    assert result.returncode == 0, result.stderr
    for source in (b"k8s", b"kmsg", b"dcgm", b"nvml"):
        assert source in result.stdout


def test_connector_options_come_from_the_settings_file_and_the_environment(
    tmp_path: Path,
) -> None:
    config = tmp_path / "g.toml"
    config.write_text('[connect.nvml]\ncluster = "prod"\nnode = "n1"\n', encoding="utf-8")
    # Without --cluster/--node on the command line, the file's values count: the
    # command gets past option parsing to NVML itself (absent here: exit 1).
    from_file = gputriage("--config", str(config), "connect", "nvml")
    assert from_file.returncode == 1, from_file.stderr
    assert b"NVML" in from_file.stderr
    assert b"Missing option" not in from_file.stderr
    env = clean_env({"GPUTRIAGE_CONNECT__NVML__CLUSTER": "prod"})
    from_env = gputriage("connect", "nvml", "--node", "n1", env=env)
    assert from_env.returncode == 1, from_env.stderr
    assert b"Missing option" not in from_env.stderr
    assert "--cluster" in _one_line_error(gputriage("connect", "nvml", "--node", "n1"))


@pytest.mark.parametrize(
    ("variable", "message"),
    [
        ("GPUTRIAGE_CONNECT__NVML__CLUSTR", "unknown key connect.nvml.clustr"),
        ("GPUTRIAGE_CONNECT__KMSQ__NODE", "unknown section connect.kmsq"),
    ],
)
def test_a_connector_setting_typo_is_an_error(variable: str, message: str) -> None:
    result = gputriage("connect", "nvml", "--node", "n1", env=clean_env({variable: "x"}))
    assert message in _one_line_error(result)


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("GPUTRIAGE_CONNECT__KMSG__HEARTBEAT_SECONDS", "0", "must be more than 0"),
        ("GPUTRIAGE_CONNECT__NVML__HEARTBEAT_SECONDS", "31", "must be at most 30"),
    ],
)
def test_a_heartbeat_out_of_range_is_one_line(variable: str, value: str, message: str) -> None:
    """Past 30 s a quiet source would come close to the processor's source_idle_seconds."""
    command = "kmsg" if "KMSG" in variable else "nvml"
    result = gputriage(
        "connect", command, "--node", "n1", "--cluster", "c", env=clean_env({variable: value})
    )
    line = _one_line_error(result)
    assert f"connect.{command}.heartbeat_seconds" in line
    assert message in line


def test_no_command_prints_help() -> None:
    result = gputriage()
    assert result.returncode == 0
    assert b"replay" in result.stdout
    assert b"schemas" in result.stdout


def test_the_console_script_runs_and_reports_its_version() -> None:
    result = subprocess.run(
        [str(CONSOLE_SCRIPT), "--version"], capture_output=True, env=clean_env(), check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().startswith("gputriage 0.")


@pytest.mark.parametrize(
    "args",
    [["--bogus"], ["replay", "--bogus", "x.jsonl"], ["schemas", "--bogus"], ["nonsense"]],
)
def test_an_unknown_option_or_command_is_one_line(args: list[str]) -> None:
    message = _one_line_error(gputriage(*args))
    assert "--help" in message


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    message = _one_line_error(gputriage("replay", str(tmp_path / "missing.jsonl")))
    assert "missing.jsonl" in message


def test_a_directory_instead_of_a_file_is_one_line(tmp_path: Path) -> None:
    _one_line_error(gputriage("replay", str(tmp_path)))


def test_no_files_is_one_line() -> None:
    assert "FILE" in _one_line_error(gputriage("replay"))


def test_stdin_twice_is_one_line() -> None:
    assert "stdin" in _one_line_error(gputriage("replay", "-", "-"))


def test_a_bad_output_format_is_one_line(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "e.jsonl", host_oom_events())
    assert "yaml" in _one_line_error(gputriage("replay", "-o", "yaml", str(path)))


def test_a_bad_config_value_is_one_line_naming_the_key(tmp_path: Path) -> None:
    events = write_jsonl(tmp_path / "e.jsonl", host_oom_events())
    config = tmp_path / "bad.toml"
    config.write_text('[core]\ngrace_seconds = "soon"\n', encoding="utf-8")
    message = _one_line_error(gputriage("--config", str(config), "replay", str(events)))
    assert "core.grace_seconds" in message


def test_a_missing_config_file_is_one_line(tmp_path: Path) -> None:
    events = write_jsonl(tmp_path / "e.jsonl", host_oom_events())
    missing = str(tmp_path / "missing.toml")
    message = _one_line_error(gputriage("--config", missing, "replay", str(events)))
    assert "missing.toml" in message
    via_env = gputriage("replay", str(events), env={"GPUTRIAGE_CONFIG": missing})
    assert "missing.toml" in _one_line_error(via_env)


def test_a_bad_environment_value_is_one_line(tmp_path: Path) -> None:
    events = write_jsonl(tmp_path / "e.jsonl", host_oom_events())
    result = gputriage("replay", str(events), env={"GPUTRIAGE_CORE__MAX_EVIDENCE": "lots"})
    assert "core.max_evidence" in _one_line_error(result)


def test_schemas_needs_a_mode() -> None:
    assert "--write" in _one_line_error(gputriage("schemas"))


def test_schemas_check_and_write(tmp_path: Path) -> None:
    assert gputriage("schemas", "--check").returncode == 0

    drifted = gputriage("schemas", "--check", "--dir", str(tmp_path))
    assert drifted.returncode == 1
    assert b"pod.v1.json: out of date" in drifted.stderr
    assert b"Traceback" not in drifted.stderr

    written = gputriage("schemas", "--write", "--dir", str(tmp_path))
    assert written.returncode == 0
    assert b"incident.v1.json" in written.stdout
    assert gputriage("schemas", "--check", "--dir", str(tmp_path)).returncode == 0


def test_process_with_kafka_unreachable_says_so_without_a_traceback() -> None:
    result = gputriage("process", "--brokers", "127.0.0.1:1", "--metrics-port", "0")
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr
    assert "Traceback" not in stderr
    assert stderr.splitlines()[-1] == (
        "gputriage: error: cannot reach Kafka at 127.0.0.1:1: Connection refused"
    ), stderr
    assert "aiokafka" not in stderr, "its ERROR lines are the reason, not lines of their own"


@pytest.mark.parametrize("command", _command_paths(), ids=" ".join)
def test_every_verb_has_examples(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from gputriage.cli import run  # noqa: PLC0415

    assert run([*command, "--help"]) == 0
    out = capsys.readouterr().out
    examples = out.split("Examples:\n", 1)[1]
    first = examples.splitlines()[0]
    # Kept verbatim (click's \b), one command per line, not re-wrapped into a paragraph.
    assert first.strip().startswith(("gputriage", "kubectl", "dmesg", "curl")), out
    assert "gputriage" in examples


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (["connect", "kmsg"], "[default: 9465;"),
        (["connect", "k8s"], "[default: 10000;"),
        (["process"], "[default: 9464;"),
        (["replay"], "[default: table]"),
        (["tail"], "[default: 10.0;"),
    ],
)
def test_help_shows_the_defaults_the_settings_own(
    command: list[str], shown: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # The value is read from the settings struct (the option itself defaults to unset).
    from gputriage.cli import run  # noqa: PLC0415

    assert run([*command, "--help"]) == 0
    assert shown in " ".join(capsys.readouterr().out.split())


def test_the_command_line_wins_over_the_connector_settings(tmp_path: Path) -> None:
    config = tmp_path / "g.toml"
    config.write_text('[connect.dcgm]\nurl = "ftp://nope"\n', encoding="utf-8")
    # The file's URL is used (and refused, naming it) when none is given...
    line = _one_line_error(
        gputriage("--config", str(config), "connect", "dcgm", "--node", "n", "--cluster", "c")
    )
    assert "'ftp://nope' is not an http(s):// URL" in line
    # ...and the command line's wins: past the URL check to Kafka (none configured).
    given = gputriage(
        "--config", str(config), "connect", "dcgm", "--node", "n", "--cluster", "c",
        "--url", "http://n:9400/metrics",
    )  # fmt: skip
    assert "brokers" in _one_line_error(given)


def test_a_required_connector_option_missing_everywhere_is_one_line() -> None:
    line = _one_line_error(gputriage("connect", "dcgm", "--node", "n", "--cluster", "c"))
    assert "Missing option '--url'" in line
    assert "connect.dcgm.url" in line


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        ([], {"GPUTRIAGE_CONNECT__KMSG__BOOT_TIME": '"yesterday"'}, "connect.kmsg.boot_time"),
        (["--boot-time", "2026-01-01T00:00:00"], {}, "has no UTC offset"),
        (["--tz", "Mars/Base"], {}, "unknown time zone 'Mars/Base'"),
    ],
)
def test_a_bad_time_from_the_command_line_or_the_settings_is_one_line(
    args: list[str], env: dict[str, str], message: str
) -> None:
    result = gputriage("connect", "kmsg", "--node", "n", "--cluster", "c", *args, env=env)
    assert message in _one_line_error(result)


def test_a_second_dcgm_poller_of_one_state_file_is_one_line(tmp_path: Path) -> None:
    """Two pollers with one ``--state`` would each diff against the other's
    last scrape and publish every change twice. Refused before anything connects."""
    from connectors.state import StateLock  # noqa: PLC0415

    state = tmp_path / "dcgm.json"
    holder = StateLock(state)
    try:
        result = gputriage(
            "connect", "dcgm", "--node", "n", "--cluster", "c", "--url", "http://n:9400/metrics",
            "--state-path", str(state), "--brokers", "127.0.0.1:1",
        )  # fmt: skip
    finally:
        holder.close()
    stderr = result.stderr.decode()
    assert result.returncode == 1, stderr  # not a usage error: the file is busy
    assert len(stderr.splitlines()) == 1, stderr
    assert stderr.startswith("gputriage: error: state file ")
    assert "is in use by another process" in stderr
