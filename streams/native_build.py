"""Build the compiled core and router (:mod:`schemas.native` says why and guards their use).

    python -m streams.native_build build     # compile COMPILED in place, write the stamp
    python -m streams.native_build status    # which core this interpreter would import
    python -m streams.native_build clean     # remove the extension modules and the stamp
    python -m streams.native_build inputs    # the files a build depends on (for make)

mypy (with mypyc) and setuptools are build-time dependencies (the ``test`` extra has
them; ``deploy/Dockerfile`` builds the core in its first stage, and its runtime stage
has no mypy); nothing imports this module at run time.

``GPUTRIAGE_REQUIRE_NATIVE=1`` (set by ``.ci/run``) makes a failed build an error for
``make``; without it the Makefile says so and the sources run.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from schemas.native import (
    COMPILED,
    GROUP,
    ROOT,
    STAMP,
    built,
    ext_tail,
    extension_modules,
    inputs,
    source_digest,
    source_of,
    stale_reason,
)

_OLD_HOMES = (ROOT / "streams" / "core",)
"""Where earlier builds put the group's library and stamp (before ``schemas.keys`` joined
the group): cleaned too, so no unguarded leftover lingers in a checkout."""


def _group_files() -> list[Path]:
    home = source_of(GROUP).parent
    return [
        path
        for folder in (home, *_OLD_HOMES)
        for path in folder.glob(f"{GROUP.rsplit('.', 1)[-1]}__mypyc.*{ext_tail()}")
    ]


def clean() -> None:
    """Remove every extension module beside a source (also one an earlier build compiled
    and this one does not), the group's library and the stamp."""
    for paths in extension_modules().values():
        for path in paths:
            path.unlink()
    for path in _group_files():
        path.unlink()
    STAMP.unlink(missing_ok=True)
    for folder in _OLD_HOMES:
        (folder / STAMP.name).unlink(missing_ok=True)


def build() -> None:
    """Compile :data:`COMPILED` with mypyc and put the extensions beside their sources.

    setuptools runs in a scratch directory: in the checkout it would read
    ``pyproject.toml`` (and an older setuptools refuses its licence field), and its
    ``build/`` would litter the tree. The stamp is written last, so an interrupted
    build leaves extensions that :func:`guard` refuses.
    """
    from mypyc.build import mypycify  # noqa: PLC0415 - a build-time dependency only
    from setuptools import setup  # type: ignore[import-untyped]  # noqa: PLC0415

    clean()
    digest = source_digest()
    sources = [str(source_of(m)) for m in COMPILED]
    with tempfile.TemporaryDirectory(prefix="gputriage-native-") as scratch:
        here = Path.cwd()
        for module in COMPILED:  # build_ext --inplace writes into the package folders
            Path(scratch, *module.split(".")[:-1]).mkdir(parents=True, exist_ok=True)
        os.chdir(scratch)
        try:
            extensions = mypycify(
                ["--config-file", str(ROOT / "pyproject.toml"), *sources],
                group_name=GROUP,
                opt_level="3",
            )
            setup(
                name="gputriage-native",
                ext_modules=extensions,
                script_args=["-q", "build_ext", "--inplace"],
            )
        finally:
            os.chdir(here)
        out = Path(scratch)
        # Only the packages' own folders: setuptools also leaves copies under build/.
        packages = sorted({module.split(".")[0] for module in COMPILED})
        found = [f for package in packages for f in (out / package).rglob(f"*{ext_tail()}")]
        for built_file in found:
            target = ROOT / built_file.relative_to(out)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(built_file, target)
    STAMP.write_text(digest + "\n")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    command = args[0] if args else "status"
    if command == "build":
        build()
        print(f"compiled {len(COMPILED)} modules (the core and the router) with mypyc")
    elif command == "clean":
        clean()
    elif command == "inputs":
        print(" ".join(str(path.relative_to(ROOT)) for path in inputs()))
    elif command == "status":
        if not built():
            print("Python (no compiled core built: `make native`)")
        else:
            reason = stale_reason()
            print(f"Python: compiled core not used: {reason}" if reason else "compiled (mypyc)")
    else:
        print(f"usage: python -m streams.native_build [build|status|clean|inputs], not {command!r}")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
