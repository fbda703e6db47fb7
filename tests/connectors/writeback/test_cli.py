"""``gputriage writeback``'s mistakes are one line each (status 2), a missing broker status 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputriage.cli import run
from tests.k8s_helpers import kubeconfig


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--in-cluster", "--context", "a"], "does not go with --kubeconfig/--context"),
        (["--leader-election"], "--leader-election needs --lease-namespace outside a pod"),
        (["--max-pool-fraction", "2"], "'--max-pool-fraction'"),
        (["--taint", "NoEvict"], "'--taint'"),
    ],
)
def test_a_mistake_is_one_line(
    args: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1")
    if "--in-cluster" not in args:
        args = [*args, "--kubeconfig", str(config)]
    assert run(["writeback", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("gputriage: error: ")
    assert says in err


def test_no_broker_is_one_line_and_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUTRIAGE_KAFKA__CONNECT_TIMEOUT_SECONDS", "2")
    config = kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1")
    args = ["--brokers", "127.0.0.1:1", "--metrics-port", "0", "--kubeconfig", str(config)]
    assert run(["writeback", *args, "--context", "kmock"]) == 1
    err = capsys.readouterr().err
    assert err == "gputriage: error: cannot reach Kafka at 127.0.0.1:1: Connection refused\n"


def test_marking_nodes_needs_a_cluster_and_takes_the_connectors_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pod and node names repeat across clusters that share an incident topic."""
    config = kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1")
    args = ["--brokers", "127.0.0.1:1", "--metrics-port", "0", "--kubeconfig", str(config)]
    assert run(["writeback", *args, "--mark-nodes"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--mark-nodes needs --cluster" in err
    monkeypatch.setenv("GPUTRIAGE_KAFKA__CONNECT_TIMEOUT_SECONDS", "2")
    monkeypatch.setenv("GPUTRIAGE_CONNECT__K8S__CLUSTER", "c1")
    assert run(["writeback", *args, "--mark-nodes"]) == 1, "past the check: no broker"
    assert "cannot reach Kafka" in capsys.readouterr().err
