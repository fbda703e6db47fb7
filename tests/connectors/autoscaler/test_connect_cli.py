"""``gputriage connect autoscaler``'s command line: settings, env vars, one-line errors."""

from __future__ import annotations

from typing import Any

from gputriage.cli import run as cli_run
from gputriage.settings import AutoscalerConnectSettings, load_settings


def test_mistakes_are_one_line_and_exit_2(capsys: Any) -> None:
    args = ["connect", "autoscaler", "--cluster", "c", "--in-cluster", "--context", "x"]
    assert cli_run(args) == 2
    err = capsys.readouterr().err
    assert "--in-cluster does not go with" in err
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
        "GPUTRIAGE_CONNECT__AUTOSCALER__POLL_INTERVAL": "2.5",
    }
    table = load_settings(None, environ).connect.autoscaler
    assert table == AutoscalerConnectSettings(
        selector="app.kubernetes.io/name=karpenter", format="karpenter", poll_interval=2.5
    )
    assert AutoscalerConnectSettings().namespace == "kube-system"


def test_the_karpenter_preset_fills_only_what_was_left_default() -> None:
    from gputriage.cli.connect import autoscaler_options  # noqa: PLC0415

    preset = autoscaler_options(AutoscalerConnectSettings(cluster="c", format="karpenter"))
    assert preset.follow.selector == "app.kubernetes.io/name=karpenter"
    assert preset.status_configmap == ""
    assert preset.follow.fmt == "karpenter"
    own = autoscaler_options(
        AutoscalerConnectSettings(cluster="c", format="karpenter", selector="app=mine")
    )
    assert own.follow.selector == "app=mine"
    plain = autoscaler_options(AutoscalerConnectSettings(cluster="c"))
    assert (plain.follow.selector, plain.status_configmap) == (
        "app=cluster-autoscaler",
        "cluster-autoscaler-status",
    )


def test_the_heartbeat_setting_reaches_the_connectors_options() -> None:
    from gputriage.cli.connect import autoscaler_options  # noqa: PLC0415

    assert autoscaler_options(AutoscalerConnectSettings(cluster="c")).heartbeat_seconds == 0.5
    tuned = autoscaler_options(AutoscalerConnectSettings(cluster="c", heartbeat_seconds=2.0))
    assert tuned.heartbeat_seconds == 2.0
