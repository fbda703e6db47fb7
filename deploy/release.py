"""The release's manifests: the production overlay's image pinned by digest, then rendered.

``make release-pin IMAGE_DIGEST=sha256:...`` writes the digest the registry returned for the
pushed image (``docker buildx build --push --metadata-file m.json``: its
``containerimage.digest``) into ``deploy/overlays/production/kustomization.yaml``;
``make release-manifests`` renders that overlay with ``kubectl kustomize`` into
``dist/gputriage-<version>.yaml`` and refuses, naming each one, while any container's image
is not pinned by digest. No registry is reachable from here and no image has been pushed,
so nothing computes a digest: it is an input, checked for shape and never invented.

Standard library and PyYAML only (run by the venv's Python), no kustomize binary: the edit
is one line under the ``gputriage`` entry of ``images:``, the rest of the file untouched.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

OVERLAY = Path(__file__).resolve().parent / "overlays" / "production"
IMAGE = "gputriage"
"""The ``name`` of the ``images:`` entry: what every manifest's ``image:`` says."""
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
WORKLOADS = ("Deployment", "DaemonSet", "StatefulSet", "Job", "CronJob")


class ReleaseError(ValueError):
    """A digest of the wrong shape, an overlay without the entry, or unpinned images."""


def pin(kustomization: str, digest: str) -> str:
    """``kustomization`` (the file's text) with ``digest`` on the ``gputriage`` image entry,
    replacing any digest it had."""
    if not DIGEST.match(digest):
        raise ReleaseError(f"{digest!r} is not a digest (sha256: and 64 lowercase hex digits)")
    lines = kustomization.splitlines(keepends=True)
    start = next(
        (i for i, line in enumerate(lines) if re.match(rf"^\s*- name: {IMAGE}\s*$", line)), None
    )
    if start is None:
        raise ReleaseError(f"no `- name: {IMAGE}` entry under images:")
    indent = re.match(r"^(\s*)-", lines[start])
    assert indent is not None
    field = " " * (len(indent.group(1)) + 2)
    end = start + 1
    while end < len(lines) and lines[end].startswith(field) and lines[end].strip():
        end += 1
    entry = [line for line in lines[start + 1 : end] if not line.strip().startswith("digest:")]
    return "".join([*lines[: start + 1], *entry, f"{field}digest: {digest}\n", *lines[end:]])


def images(docs: Iterable[dict[str, Any]]) -> list[tuple[str, str]]:
    """``(workload/container, image)`` for every container of every workload."""
    found = []
    for doc in docs:
        if doc.get("kind") not in WORKLOADS:
            continue
        spec = doc["spec"]
        if doc["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        pod = spec["template"]["spec"]
        for container in [*pod.get("initContainers", []), *pod["containers"]]:
            found.append(
                (f"{doc['kind']}/{doc['metadata']['name']}:{container['name']}", container["image"])
            )
    return found


def unpinned(docs: Iterable[dict[str, Any]]) -> list[str]:
    """Every container whose image is not pinned by digest, as ``workload:container image``."""
    return [
        f"{where} {image}"
        for where, image in images(docs)
        if not re.search(r"@sha256:[0-9a-f]{64}$", image)
    ]


def render(overlay: Path = OVERLAY) -> str:
    """``kubectl kustomize overlay``, refused while an image is not pinned by digest."""
    done = subprocess.run(
        ["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise ReleaseError(f"kubectl kustomize {overlay}: {done.stderr.strip()}")
    missing = unpinned(d for d in yaml.safe_load_all(done.stdout) if d)
    if missing:
        raise ReleaseError(
            "not pinned by digest (make release-pin IMAGE_DIGEST=sha256:...): " + "; ".join(missing)
        )
    return done.stdout


def main(argv: list[str]) -> int:
    try:
        if len(argv) == 2 and argv[0] == "pin":
            path = OVERLAY / "kustomization.yaml"
            path.write_text(pin(path.read_text(encoding="utf-8"), argv[1]), encoding="utf-8")
        elif len(argv) == 2 and argv[0] == "render":
            out = Path(argv[1])
            text = render()
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        else:
            print("usage: release.py pin sha256:<digest> | render OUT.yaml", file=sys.stderr)
            return 2
    except ReleaseError as exc:
        print(f"release: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
