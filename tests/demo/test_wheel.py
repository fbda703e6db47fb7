"""The built wheel runs ``gputriage demo`` outside the checkout.

The scenario the demo plays is package data (``gputriage/demo/scenario.jsonl``);
before it was, the demo read ``examples/`` beside the source tree, and an
installed wheel (the container image) could not run it. So this test builds the
wheel, unpacks it into a directory of its own (``pip install --target``, no
dependencies: the test's virtualenv has those), runs the demo from an empty
working directory with only that copy of gputriage importable ahead of the
checkout, and waits for the first incident.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from schemas.codec import decode_incident
from tests.cli_helpers import clean_env
from tests.paths import ROOT

PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    # pip builds a local directory in place: setuptools leaves build/ in the checkout.
    leftover = not (ROOT / "build").exists()
    try:
        subprocess.run([*PIP, "wheel", "--no-deps", "-w", str(out), str(ROOT)], check=True, env=env)
    finally:
        if leftover:
            shutil.rmtree(ROOT / "build", ignore_errors=True)
    [built] = out.glob("gputriage-*.whl")
    return built


def test_the_wheel_carries_the_scenario(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "gputriage/demo/scenario.jsonl" in names
    assert "schemas/xid_catalog.toml" in names


def test_the_installed_wheel_runs_the_demo_from_any_directory(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    subprocess.run([*PIP, "install", "--no-deps", "--target", str(site), str(wheel)], check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**clean_env(), "PYTHONPATH": str(site)}
    where = subprocess.run(
        [sys.executable, "-c", "import gputriage.demo.settings as d; print(d.DEFAULT_SCENARIO)"],
        capture_output=True,
        text=True,
        cwd=elsewhere,
        env=env,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(site), where
    demo = subprocess.Popen(
        [sys.executable, "-m", "gputriage", "demo", "--speed", "1000", "--follow", "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=elsewhere,
        env=env,
    )
    assert demo.stdout is not None
    try:
        first = demo.stdout.readline()  # blocks until the first incident revision
        demo.send_signal(signal.SIGINT)
        _, err = demo.communicate(timeout=60)
    finally:
        if demo.poll() is None:
            demo.kill()
    assert first, err.decode()
    assert decode_incident(first).type
    assert demo.returncode == 0, err.decode()
