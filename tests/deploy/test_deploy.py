"""The manifests in deploy/ agree with the code they run.

Manifests drift silently: a renamed option, a port changed in one place, a
settings key with a typo in the ConfigMap. These tests read every manifest and
check it against the real click command tree and the real settings loader, so
such drift fails here instead of in a crash-looping pod.
"""

from __future__ import annotations

from typing import Any

import click
import pytest
import yaml

from gputriage.cli import cli
from gputriage.settings import Settings, explicit, load_settings
from tests.deploy.rendered import WORKLOADS, render
from tests.paths import DEPLOY


def connect_defaults(settings: Settings) -> dict[str, dict[str, Any]]:
    """What ``[connect.<source>]`` sets, per source (defaults left out; typos failed at load)."""
    tables = {
        source: explicit(getattr(settings.connect, source))
        for source in settings.connect.__struct_fields__
    }
    return {source: table for source, table in tables.items() if table}


def documents() -> list[dict[str, Any]]:
    """The production overlay with the bridges: every workload the manifests can run."""
    return render("production+bridges")


def config_data() -> dict[str, str]:
    configs = [
        d
        for d in documents()
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("gputriage-config")
    ]
    assert len(configs) == 2  # one per namespace, generated from one file
    assert configs[0]["data"] == configs[1]["data"]
    return dict(configs[0]["data"])


def environ(container: dict[str, Any]) -> dict[str, str]:
    """What the container's process sees of the settings: the ConfigMap, then the literal
    ``env`` entries (the production overlay names each component's Kafka user there), which
    Kubernetes lets win over ``envFrom``."""
    literal = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    return {**config_data(), **literal}


def containers() -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [
        (doc, container)
        for doc in documents()
        if doc["kind"] in WORKLOADS
        for container in doc["spec"]["template"]["spec"]["containers"]
        if container["image"].startswith("ghcr.io/gputriage/")
    ]


def test_every_kustomization_resource_exists() -> None:
    kustomizations = sorted(DEPLOY.rglob("kustomization.yaml"))
    assert kustomizations
    for path in kustomizations:
        for resource in yaml.safe_load(path.read_text(encoding="utf-8")).get("resources", []):
            target = (path.parent / resource).resolve()
            assert target.is_file() or (target / "kustomization.yaml").is_file(), (
                f"{path.relative_to(DEPLOY)}: {resource}"
            )


def test_the_config_map_is_valid_settings_in_every_container() -> None:
    found = containers()
    assert found
    for doc, container in found:
        settings = load_settings(None, environ=environ(container))
        assert settings.kafka.brokers, doc["metadata"]["name"]
        assert set(connect_defaults(settings)) == {
            "k8s",
            "kmsg",
            "dcgm",
            "autoscaler",
            "podresources",
            "topo",
        }


def _command(args: list[str]) -> tuple[click.Command, list[str], str]:
    """The command ``args`` run, its options, and its path (``connect k8s``). Options of
    a group (``--config=FILE`` before the command) must be that group's; a command's
    positional arguments (``bridge pagerduty``) join its path."""
    command: click.Command = cli
    path: list[str] = []
    rest = list(args)
    while isinstance(command, click.Group) and rest:
        if rest[0].startswith("-"):
            flag = rest.pop(0).partition("=")[0]
            known = {o for p in command.params for o in p.opts}
            assert flag in known, f"{' '.join(path) or 'gputriage'}: no option {flag}"
            continue
        name = rest.pop(0)
        assert name in command.commands, f"no command {' '.join([*path, name])}"
        command = command.commands[name]
        path.append(name)
    positional = [p for p in command.params if isinstance(p, click.Argument)]
    for param in positional:
        assert rest, f"{' '.join(path)}: no {param.name}"
        assert not rest[0].startswith("-"), f"{' '.join(path)}: no {param.name}"
        value = rest.pop(0)
        if isinstance(param.type, click.Choice):
            assert value in param.type.choices, f"{' '.join(path)}: {value}"
        path.append(value)
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
    source = name.split()[1] if name.startswith("connect ") else ""

    defaults = connect_defaults(load_settings(None, environ=environ(container))).get(source, {})
    for param in command.params:
        if not (isinstance(param, click.Option) and param.required):
            continue
        assert (
            any(o in given for o in param.opts) or param.envvar in env or param.name in defaults
        ), f"{name}: {param.opts[0]} is never given"
    ports = {p["containerPort"] for p in container.get("ports", [])}
    if "--metrics-port" in given:
        assert int(given["--metrics-port"]) in ports, f"{name}: metrics port not exposed"
