"""The router is compiled with the core, and guarded wherever it is imported first.

A producer (a connector) imports :mod:`schemas.keys` and never ``streams``, so the check
that a compiled module was built from the sources beside it must run on the import of
``schemas`` (:mod:`schemas.native`). Each case runs in a subprocess on a copy of the
checkout's compiled tree, so a stale build can be made without touching the checkout.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from schemas import native
from tests.paths import ROOT

# What a producer does: import the router, route, and say what ran (and whether the
# processor's package came along).
_PRODUCER = """
import sys, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    from schemas import keys
from schemas import native
print(native.active("schemas.keys"), "streams" in sys.modules)
print("warned" if any(native.STALE_WARNING in str(w.message) for w in caught) else "quiet")
from streams.core import engine
print(native.active())
"""


def _needs_a_build() -> None:
    if native.built() and not native.stale_reason():
        return
    why = native.stale_reason() or "no compiled core built"
    if os.environ.get("GPUTRIAGE_REQUIRE_NATIVE") == "1":
        pytest.fail(f"GPUTRIAGE_REQUIRE_NATIVE=1 but there is no usable build: {why}")
    pytest.skip(f"needs `make native`: {why}")


def _tree(tmp_path: Path) -> Path:
    """A copy of what the digest covers, with the extension modules and the stamp."""
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy2(ROOT / "pyproject.toml", tree / "pyproject.toml")
    skip = shutil.ignore_patterns("__pycache__")
    for package in ("schemas", "streams"):
        shutil.copytree(ROOT / package, tree / package, ignore=skip)
    return tree


def _run(tree: Path, *args: str, pure: bool = False) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    env["PYTHONPATH"] = str(tree)
    if pure:
        env[native.PURE_ENV] = "1"
    done = subprocess.run(
        [sys.executable, *args],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.splitlines()


def test_the_router_is_compiled_in_the_cores_group_homed_in_schemas() -> None:
    assert "schemas.keys" in native.COMPILED
    assert set(native.ROOT_MODULES) <= set(native.COMPILED)
    # The group's library lives in the bottom layer: loading it imports no ``streams``.
    assert native.GROUP.split(".")[0] == "schemas"
    assert native.STAMP.parent == ROOT / "schemas"
    # The build's inputs (``make native`` asks for the same list) hold every compiled source.
    assert {native.source_of(m) for m in native.COMPILED} <= set(native.inputs())


def test_a_producer_runs_the_compiled_router_without_the_processor(tmp_path: Path) -> None:
    _needs_a_build()
    tree = _tree(tmp_path)
    assert _run(tree, "-c", _PRODUCER) == [
        "compiled (mypyc) False",
        "quiet",
        "compiled (mypyc)",
    ]
    assert _run(tree, "-m", "streams.native_build", "status") == ["compiled (mypyc)"]


def test_a_stale_router_is_refused_when_a_producer_imports_it_first(tmp_path: Path) -> None:
    """An edit to keys.py after the build: the producer's import of the router (no
    ``streams`` imported) runs the source, and so does the whole group after it."""
    _needs_a_build()
    tree = _tree(tmp_path)
    keys = tree / "schemas" / "keys.py"
    keys.write_text(keys.read_text() + "\n# edited after the build\n")
    assert _run(tree, "-c", _PRODUCER) == ["Python False", "warned", "Python"]
    [status] = _run(tree, "-m", "streams.native_build", "status")
    assert status.startswith("Python: compiled core not used: the sources changed"), status


def test_a_build_without_the_router_is_refused_whole(tmp_path: Path) -> None:
    """An earlier build compiled the core alone: its stamp may match, but a group is used
    all or nothing, so a missing module's extension refuses the others too."""
    _needs_a_build()
    tree = _tree(tmp_path)
    for path in native.extensions("schemas.keys"):
        (tree / path.relative_to(ROOT)).unlink()
    assert _run(tree, "-c", _PRODUCER) == ["Python False", "warned", "Python"]
    [status] = _run(tree, "-m", "streams.native_build", "status")
    assert status == (
        "Python: compiled core not used: no extension module for schemas.keys (run `make native`)"
    )


def test_pure_python_forces_the_routers_source(tmp_path: Path) -> None:
    _needs_a_build()
    tree = _tree(tmp_path)
    assert _run(tree, "-c", _PRODUCER, pure=True) == ["Python False", "quiet", "Python"]


def test_an_extension_left_by_an_earlier_build_is_refused(tmp_path: Path) -> None:
    """A module the build no longer compiles (``streams.core.timeconv`` moved to the
    schemas) keeps an older extension beside its source, which Python would import first:
    the guard finds it on disk, refuses the group and imports that module's source."""
    _needs_a_build()
    tree = _tree(tmp_path)
    [keys_ext] = native.extensions("schemas.keys")
    leftover = tree / "schemas" / f"codec.{keys_ext.name.split('.', 1)[1]}"
    shutil.copy2(keys_ext, leftover)
    probe = _PRODUCER + "from schemas import codec; print(codec.__file__.endswith('.py'))\n"
    assert _run(tree, "-c", probe) == ["Python False", "warned", "Python", "True"]
    [status] = _run(tree, "-m", "streams.native_build", "status")
    assert "an extension module for schemas.codec, no longer compiled" in status, status
    _run(tree, "-m", "streams.native_build", "clean")
    assert not leftover.exists()
    assert not (tree / native.STAMP.relative_to(ROOT)).exists()
