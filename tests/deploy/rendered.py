"""The manifests as a cluster would receive them: every overlay rendered by the real
``kubectl kustomize`` (kustomize built in), once per session.

``kubectl`` comes from the machine (Debian's ``kubectl`` package where the apt source has
it; ``make tools`` tries); without it the tests that need a render skip, saying why.
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Final

import yaml

from tests.paths import DEPLOY
from tests.tools import skip_missing_tool

OVERLAYS: Final = ("production", "dev", "production+bridges")
"""``production+bridges``: production with the opt-in bridges component, as the
component's own comment tells an operator to add it."""
BUILT_IN_SKIPPED: Final = frozenset({"PodMonitor", "PrometheusRule"})
"""Custom resources (Prometheus Operator): no Kubernetes schema validates them."""
WORKLOADS: Final = ("Deployment", "DaemonSet", "StatefulSet")

NO_KUBECTL: Final = (
    "kubectl is not installed: `make tools` installs Debian's kubectl where the apt "
    "source has it; the manifest tests render with its built-in kustomize"
)


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:
        skip_missing_tool(NO_KUBECTL)
    return found


@functools.cache
def _render(overlay: str) -> tuple[dict[str, Any], ...]:
    binary = kubectl()
    with tempfile.TemporaryDirectory(prefix="gputriage-kustomize-") as scratch:
        target = DEPLOY / "overlays" / overlay
        if overlay == "production+bridges":
            tree = Path(scratch) / "deploy"
            shutil.copytree(DEPLOY, tree)
            kustomization = tree / "overlays" / "production" / "kustomization.yaml"
            text = kustomization.read_text(encoding="utf-8")
            kustomization.write_text(
                text.replace("components:\n", "components:\n  - ../../components/bridges\n", 1),
                encoding="utf-8",
            )
            target = tree / "overlays" / "production"
        return tuple(kustomize(target, binary))


def kustomize(target: Path, binary: str | None = None) -> list[dict[str, Any]]:
    """Every object ``kubectl kustomize target`` emits (a copy of an overlay a test
    changed, or one of ours)."""
    done = subprocess.run(
        [binary or kubectl(), "kustomize", str(target)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, f"kubectl kustomize {target}: {done.stderr}"
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def render(overlay: str) -> list[dict[str, Any]]:
    """Every object of ``overlay`` (a name in :data:`OVERLAYS`), as kustomize emits it."""
    return list(_render(overlay))


def pod_specs(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``(workload, pod spec)`` for every workload."""
    return [(d, d["spec"]["template"]["spec"]) for d in docs if d["kind"] in WORKLOADS]


def containers(
    docs: list[dict[str, Any]],
) -> list[tuple[dict[str, Any], dict[str, Any], dict[str, Any]]]:
    """``(workload, pod spec, container)`` for every container, init containers too."""
    return [
        (doc, spec, container)
        for doc, spec in pod_specs(docs)
        for container in [*spec.get("initContainers", []), *spec["containers"]]
    ]


def name_of(doc: dict[str, Any]) -> str:
    meta = doc["metadata"]
    return f"{doc['kind']}/{meta.get('namespace', '')}/{meta['name']}"
