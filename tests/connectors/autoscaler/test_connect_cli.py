"""``gputriage connect autoscaler``'s command line: settings, env vars, one-line errors."""

from __future__ import annotations

from typing import Any

from connectors.autoscaler.settings import AutoscalerSettings
from gputriage.cli import run as cli_run
from gputriage.settings import load_settings


def test_mistakes_are_one_line_and_exit_2(capsys: Any) -> None:
    args = ["connect", "autoscaler", "--cluster", "c", "--in-cluster", "--context", "x"]
    assert cli_run(args) == 2
    err = capsys.readouterr().err
    assert "'--in-cluster': does not go with --kubeconfig/--context" in err
    assert err.count("\n") == 1
    assert cli_run(["connect", "autoscaler", "--format", "json"]) == 2


def test_no_service_account_outside_a_pod_is_one_line_and_exit_1(
    capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    args = ["connect", "autoscaler", "--cluster", "c", "--in-cluster", "--metrics-port", "0"]
    assert cli_run([*args, "--brokers", "127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert "gputriage: error: cannot load the in-cluster service account" in err
    assert "Traceback" not in err


def test_the_settings_table_and_env_vars() -> None:
    environ = {
        "GPUTRIAGE_CONNECT__AUTOSCALER__SELECTOR": "app.kubernetes.io/name=karpenter",
        "GPUTRIAGE_CONNECT__AUTOSCALER__FORMAT": "karpenter",
        "GPUTRIAGE_CONNECT__AUTOSCALER__POLL_INTERVAL_SECONDS": "2.5",
    }
    table = load_settings(None, environ).connect.autoscaler
    assert table == AutoscalerSettings(
        selector="app.kubernetes.io/name=karpenter", format="karpenter", poll_interval_seconds=2.5
    )
    assert AutoscalerSettings().namespace == "kube-system"


def test_the_karpenter_preset_fills_only_what_was_left_default() -> None:
    preset = AutoscalerSettings(cluster="c", format="karpenter").preset()
    assert preset.selector == "app.kubernetes.io/name=karpenter"
    assert preset.status_configmap == ""
    assert preset.format == "karpenter"
    own = AutoscalerSettings(cluster="c", format="karpenter", selector="app=mine").preset()
    assert own.selector == "app=mine"
    plain = AutoscalerSettings(cluster="c").preset()
    assert (plain.selector, plain.status_configmap) == (
        "app=cluster-autoscaler",
        "cluster-autoscaler-status",
    )
