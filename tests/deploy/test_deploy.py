"""The manifests in deploy/ agree with the code they run.

Manifests drift silently: a renamed option, a port changed in one place, a
settings key with a typo in the ConfigMap. These tests read every manifest and
check it against the real click command tree and the real settings loader, so
such drift fails here instead of in a crash-looping pod.
"""

from __future__ import annotations

import json
import re
from typing import Any

import click
import pytest
import yaml

from gputriage.cli import cli
from gputriage.cli.connect import connect_defaults
from gputriage.settings import load_settings
from tests.paths import DEPLOY

WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet")


def documents() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    return docs


def config_data() -> dict[str, str]:
    [config] = [d for d in documents() if d["kind"] == "ConfigMap"]
    return dict(config["data"])


def containers() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (doc, container)
        for doc in documents()
        if doc["kind"] in WORKLOADS
        for container in doc["spec"]["template"]["spec"]["containers"]
    ]


def test_every_kustomization_resource_exists() -> None:
    kustomizations = sorted(DEPLOY.rglob("kustomization.yaml"))
    assert kustomizations
    for path in kustomizations:
        for resource in yaml.safe_load(path.read_text(encoding="utf-8"))["resources"]:
            target = (path.parent / resource).resolve()
            assert target.is_file() or (target / "kustomization.yaml").is_file(), (
                f"{path.relative_to(DEPLOY)}: {resource}"
            )


def test_the_config_map_is_valid_settings() -> None:
    settings = load_settings(None, environ=config_data())
    assert settings.kafka_settings().brokers
    assert set(connect_defaults(settings)) == {"k8s", "kmsg", "dcgm"}


def _command(args: list[str]) -> tuple[click.Command, list[str], str]:
    command: click.Command = cli
    path: list[str] = []
    rest = list(args)
    while isinstance(command, click.Group) and rest and not rest[0].startswith("-"):
        name = rest.pop(0)
        assert name in command.commands, f"no command {' '.join([*path, name])}"
        command = command.commands[name]
        path.append(name)
    return command, rest, " ".join(path)


@pytest.mark.parametrize(
    ("doc", "container"),
    containers(),
    ids=lambda v: str(v.get("name") or v.get("metadata", {}).get("name")),
)
def test_every_container_runs_a_real_command_with_real_options(
    doc: dict[str, Any], container: dict[str, Any]
) -> None:
    command, options, name = _command(container["args"])
    assert not isinstance(command, click.Group), f"{name} is a group, not a command"
    known = {opt for p in command.params for opt in (*p.opts, *p.secondary_opts)}
    given: dict[str, str] = {}
    for arg in options:
        flag, _, value = arg.partition("=")
        assert flag in known, f"{name}: no option {flag}"
        given[flag] = value
    # Required options must come from the arguments, the pod's environment, or the
    # ConfigMap's [connect.<source>] defaults.
    env = {e["name"] for e in container.get("env", [])}
    source = name.split()[-1]
    defaults = connect_defaults(load_settings(None, environ=config_data())).get(source, {})
    for param in command.params:
        if not (isinstance(param, click.Option) and param.required):
            continue
        assert (
            any(o in given for o in param.opts) or param.envvar in env or param.name in defaults
        ), f"{name}: {param.opts[0]} is never given"
    ports = {p["containerPort"] for p in container.get("ports", [])}
    if "--metrics-port" in given:
        assert int(given["--metrics-port"]) in ports, f"{name}: metrics port not exposed"
    annotations = doc["spec"]["template"]["metadata"].get("annotations", {})
    if "prometheus.io/port" in annotations:
        all_ports = {
            p["containerPort"]
            for c in doc["spec"]["template"]["spec"]["containers"]
            for p in c.get("ports", [])
        }
        assert int(annotations["prometheus.io/port"]) in all_ports


def _exported_metric_names() -> set[str]:
    """Every sample name the processor and the connectors can export."""
    from connectors.dcgm.scrape import DcgmMetrics  # noqa: PLC0415
    from connectors.k8s.metrics import ConnectorMetrics  # noqa: PLC0415
    from connectors.xid.run import KmsgMetrics  # noqa: PLC0415
    from streams.app.metrics import Metrics  # noqa: PLC0415

    names: set[str] = set()
    for metrics in (Metrics(), ConnectorMetrics(), KmsgMetrics("kmsg"), DcgmMetrics()):
        for family in metrics.registry.collect():
            names.add(family.name)
            kind = family.type
            if kind == "counter":
                names.add(f"{family.name}_total")
            elif kind == "histogram":
                names |= {f"{family.name}_{s}" for s in ("bucket", "sum", "count")}
    return names


def test_the_alerts_and_the_dashboard_use_only_metrics_the_code_exports() -> None:
    [rule] = [d for d in documents() if d["kind"] == "PrometheusRule"]
    exprs = [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]
    dashboard = json.loads((DEPLOY / "monitoring" / "dashboard.json").read_text())
    exprs += [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\bgputriage_[a-z_]+", expr)}
    assert used, "the rules name gputriage metrics"
    missing = used - _exported_metric_names()
    assert not missing, f"alerts on metrics nobody exports: {sorted(missing)}"
