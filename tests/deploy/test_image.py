"""deploy/Dockerfile builds what the manifests run, checked without a Docker engine.

CI has no engine (only the client), so the image is checked where it can go wrong: the
entrypoint is a console script the package installs, every package the CLI imports is
copied in, no extra is needed by any command a manifest runs, the tools a manifest's
options call are installed (journalctl for ``connect kmsg --journal``), the compiled core
is built and verified in the image, and the wheel carries the data the CLI reads
(the demo scenario, the JSON schemas).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path
from typing import Any

from tests.deploy.rendered import containers, render
from tests.paths import DEPLOY, ROOT

DOCKERFILE = DEPLOY / "Dockerfile"


def _pyproject() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)


def _instructions() -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with continuation lines joined, comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text(encoding="utf-8"))
    found = []
    for raw in text.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            found.append((word.upper(), rest.strip()))
    return found


def _final_stage() -> list[tuple[str, str]]:
    steps = _instructions()
    last = max(i for i, (word, _) in enumerate(steps) if word == "FROM")
    return steps[last:]


def test_the_entrypoint_is_the_console_script_the_package_installs() -> None:
    [entrypoint] = [rest for word, rest in _final_stage() if word == "ENTRYPOINT"]
    command = json.loads(entrypoint)
    assert command == ["gputriage"]
    assert command[0] in _pyproject()["project"]["scripts"]


def test_every_package_is_copied_and_the_core_built_and_verified() -> None:
    copied = {rest.split()[0] for word, rest in _instructions() if word == "COPY"}
    packages = {
        p.rstrip("*") for p in _pyproject()["tool"]["setuptools"]["packages"]["find"]["include"]
    }
    assert packages <= copied, f"not copied into the image: {sorted(packages - copied)}"
    runs = " ".join(rest for word, rest in _instructions() if word == "RUN")
    assert "streams.native_build build" in runs
    assert '= "compiled (mypyc)"' in runs, "the build must fail if the core would not be used"
    # Same path in both stages: the editable install and the core's stamp point at /app.
    assert "COPY --from=build /app /app" in " ".join(f"{w} {r}" for w, r in _final_stage())


def test_the_image_installs_no_extra_and_no_manifest_needs_one() -> None:
    runs = " ".join(rest for word, rest in _instructions() if word == "RUN")
    installs = re.findall(r"pip install[^&]*", runs)
    assert installs
    assert not any("[" in step for step in installs), f"an extra in the image: {installs}"
    extras_only = {"faust"}  # the commands an extra enables, as a manifest would spell them
    for doc, _spec, container in containers(render("production+bridges")):
        if not container["image"].startswith("ghcr.io/gputriage/"):
            continue
        args = container["args"]
        assert "demo" not in args, f"{doc['metadata']['name']} runs the demo (the demo extra)"
        assert not any(a.startswith("--engine") and a.endswith(tuple(extras_only)) for a in args)


def test_what_the_manifests_call_is_installed() -> None:
    args = [
        arg
        for _doc, _spec, container in containers(render("production"))
        for arg in container["args"]
    ]
    final = " ".join(rest for word, rest in _final_stage() if word == "RUN")
    if "--journal" in args:
        # journalctl is Debian's systemd package.
        assert re.search(r"apt-get install[^&]*\bsystemd\b", final), "no journalctl in the image"
    [user] = [rest for word, rest in _final_stage() if word == "USER"]
    uid = user.split(":")[0]
    assert uid.isdigit(), "runAsNonRoot needs a numeric uid to check"
    assert int(uid) != 0


def test_the_wheel_carries_the_demo_scenario_and_the_schemas(tmp_path: Path) -> None:
    """What `pip install .` (the image's editable install reads the tree; a wheel is what
    any other install gets) ships: the data files the CLI opens at run time."""
    # From a copy of what the image copies: setuptools writes build/ into the tree it
    # builds, and the checkout must stay clean.
    tree = tmp_path / "src"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    skip = shutil.ignore_patterns("__pycache__", "*.so", ".native-digest")
    for package in ("gputriage", "streams", "schemas", "connectors"):
        shutil.copytree(ROOT / package, tree / package, ignore=skip)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(tree),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    [wheel] = tmp_path.glob("gputriage-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "gputriage/demo/scenario.jsonl" in names
    assert any(n.startswith("schemas/jsonschema/") and n.endswith(".json") for n in names)
    assert not any(n.startswith("tests/") for n in names)
