"""The production overlay's images are pinned by digest by the release step, never by hand.

No image of this version has been pushed (no registry is reachable here), so the committed
overlay names it by tag only, and ``make release-manifests`` refuses to render it. These
tests hold the rest: that the tag is the only thing missing, that pinning puts a digest on
every container of a production render (bridges included), and that the release render
refuses any image without one.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.deploy.rendered import kubectl, kustomize, render
from tests.deploy.test_manifests import _version
from tests.paths import DEPLOY


def _release() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gputriage_release", DEPLOY / "release.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


release = _release()
DIGEST = "sha256:" + hashlib.sha256(b"a test's stand-in for a pushed image").hexdigest()
"""A well-formed digest made here, for the tests only: the release step takes the one the
registry returns."""
IMAGE = "ghcr.io/gputriage/gputriage"


def _pinned_copy(tmp_path: Path, *, bridges: bool) -> list[dict[str, Any]]:
    tree = tmp_path / "deploy"
    shutil.copytree(DEPLOY, tree)
    path = tree / "overlays" / "production" / "kustomization.yaml"
    text = release.pin(path.read_text(encoding="utf-8"), DIGEST)
    if bridges:
        # Into the overlay's one components list: a second ``components:`` key would
        # replace it (YAML keeps the last), dropping the write-back.
        text = text.replace("components:\n", "components:\n  - ../../components/bridges\n", 1)
    path.write_text(text, encoding="utf-8")
    return kustomize(path.parent)


def test_until_a_release_pins_it_only_our_own_image_lacks_a_digest() -> None:
    """Any other image production runs (a sidecar, a third-party tool) must come pinned."""
    version = _version()
    for entry in release.unpinned(render("production+bridges")):
        _where, image = entry.rsplit(" ", 1)
        assert image == f"{IMAGE}:{version}", f"not pinned by digest: {entry}"


@pytest.mark.parametrize("bridges", [False, True], ids=["production", "production+bridges"])
def test_pinning_puts_the_digest_on_every_container(tmp_path: Path, bridges: bool) -> None:
    docs = _pinned_copy(tmp_path, bridges=bridges)
    assert release.unpinned(docs) == []
    ours = [image for _where, image in release.images(docs) if image.startswith(IMAGE)]
    assert len(ours) >= 7
    assert set(ours) == {f"{IMAGE}:{_version()}@{DIGEST}"}


def test_pinning_again_replaces_the_digest_and_keeps_the_rest(tmp_path: Path) -> None:
    text = (DEPLOY / "overlays" / "production" / "kustomization.yaml").read_text(encoding="utf-8")
    other = "sha256:" + "0" * 64
    twice = release.pin(release.pin(text, other), DIGEST)
    assert twice.count("digest:") == 1
    assert f"digest: {DIGEST}" in twice
    assert twice.replace(f"    digest: {DIGEST}\n", "") == text


@pytest.mark.parametrize(
    "digest", ["", "latest", "sha256:abc", "sha256:" + "G" * 64, "sha512:" + "0" * 128]
)
def test_a_malformed_digest_is_refused(digest: str) -> None:
    text = (DEPLOY / "overlays" / "production" / "kustomization.yaml").read_text(encoding="utf-8")
    with pytest.raises(release.ReleaseError):
        release.pin(text, digest)


def test_the_release_render_refuses_an_unpinned_overlay() -> None:
    kubectl()
    overlay = DEPLOY / "overlays" / "production"
    if "digest:" in (overlay / "kustomization.yaml").read_text(encoding="utf-8"):
        pytest.skip("this checkout's production overlay is pinned: nothing to refuse")
    with pytest.raises(release.ReleaseError, match="not pinned by digest"):
        release.render(overlay)
