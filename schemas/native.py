"""The compiled hot path (mypyc), and the guard that keeps it honest.

The correlation core and the router are fully typed Python, so mypyc compiles the same
sources to C extensions (~1.6x the events per second); the sources stay the reference and
run wherever no C compiler is. ``make native`` builds :data:`COMPILED` as one group.

Traps: the guard lives in ``schemas``, the bottom layer, so a producer that never imports
``streams`` is covered; the modules of one build call each other natively, so they are used
all together or not at all; a stale extension shadows its source, so the build stamps a
digest of its inputs and :func:`guard` imports every compiled module from source on any
difference (or a leftover extension); ``GPUTRIAGE_PURE_PYTHON=1`` forces the sources;
compiled callers ignore monkeypatching; mypyc checks declared types at run time; classes
with msgspec's metaclass are not compiled. docs/development.md, the compiled core.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import importlib.util
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
"""The directory holding the ``schemas`` and ``streams`` packages."""

ROOT_MODULES = (
    "streams.core.engine",
    "streams.core.node",
    "streams.core.cluster",
    "streams.core.lifecycle",
    "streams.core.evidence",
)
"""The engine's modules mypyc compiles (``state``, ``config``, ``snapshot`` hold msgspec
Structs and stay Python; ``shortcuts`` is a switch the tests flip)."""

SCHEMA_MODULES = ("schemas.keys", "schemas.timeconv")
"""The schemas mypyc compiles: the router, run for every record by the producers, the
replay and the worker, and the event-time conversion it shares with the core (the others
hold msgspec Structs). ``streams.core.timeconv`` only re-exports the latter and stays
Python: the compiled core calls the original natively."""


def rule_modules(root: Path = ROOT) -> tuple[str, ...]:
    """Every module of ``streams/core/rules/``, found by name: a new rule module is
    compiled without editing a list (and :mod:`streams.core.rules.registry` is where it
    is registered). So a rule module must hold no msgspec Struct (mypyc cannot compile
    one): its state slice goes in ``streams.core.state``."""
    folder = root / "streams" / "core" / "rules"
    names = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    return tuple(f"streams.core.rules.{name}" for name in names)


COMPILED = SCHEMA_MODULES + ROOT_MODULES + rule_modules()
"""The modules mypyc compiles, as one group: the router, the engine and the rules."""

GROUP = "schemas._native"
"""mypyc's shared library for the group (``schemas/_native__mypyc*.so``): inside the
bottom package, so it imports wherever that does (an editable install, a wheel) and a
connector loading the compiled router never imports ``streams``."""

STAMP = ROOT / "schemas" / ".native-digest"
"""The digest of the sources the build was made from (:func:`source_digest`)."""
PURE_ENV = "GPUTRIAGE_PURE_PYTHON"


def source_of(module: str) -> Path:
    return ROOT.joinpath(*module.split(".")).with_suffix(".py")


def inputs() -> list[Path]:
    """Every file a build depends on, in a fixed order.

    Not only the compiled modules: mypyc bakes in the declared types of everything they
    were checked against (a field of ``schemas/events.py`` or ``streams/core/state.py``
    that becomes optional makes the compiled code raise ``TypeError`` on the ``None``
    the sources would accept), and the checker's configuration. So the whole core
    package, the whole schemas package (this module too), ``streams/__init__.py`` and
    ``pyproject.toml`` count. The Makefile's ``NATIVE_INPUTS`` names the same files by
    wildcard (plus the build's own modules), so a change to any of them rebuilds.
    """
    found = [*ROOT.glob("streams/core/**/*.py"), *ROOT.glob("schemas/**/*.py")]
    found += [ROOT / "streams" / "__init__.py", ROOT / "pyproject.toml"]
    return sorted({p for p in found if p.is_file()})


def source_digest() -> str:
    """SHA-256 over the build's inputs (names and bytes) and the mypy that compiles them.

    mypy's version is read from its metadata, not imported (importing mypy at every start
    of the program would cost ~100 ms); without mypy installed it is "none", which no
    build ever wrote, so extensions are then used only if built without it (never).
    """
    digest = hashlib.sha256()
    try:
        mypy = importlib.metadata.version("mypy")
    except importlib.metadata.PackageNotFoundError:
        mypy = "none"
    digest.update(f"mypy {mypy}\0".encode())
    for path in inputs():
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


def extensions(module: str) -> list[Path]:
    source = source_of(module)
    return sorted(source.parent.glob(f"{source.stem}.*{ext_tail()}"))


def ext_tail() -> str:
    return ".so" if os.name != "nt" else ".pyd"


PACKAGES = ("schemas", "streams")
"""The packages whose modules may have been compiled, by this build or an earlier one."""


def extension_modules() -> dict[str, list[Path]]:
    """Every module of :data:`PACKAGES` with an extension module beside its source (the
    group's own library aside), found on disk: also one an earlier build compiled and
    this one no longer does, whose extension would shadow its source all the same."""
    found: dict[str, list[Path]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob(f"*{ext_tail()}")):
            stem = path.name.split(".", 1)[0]
            source = path.with_name(stem + ".py")
            if stem.endswith("__mypyc") or not source.is_file():
                continue
            name = ".".join(source.relative_to(ROOT).with_suffix("").parts)
            found.setdefault(name, []).append(path)
    return found


def built() -> bool:
    """Are there extension modules for any module next to its source?"""
    return bool(extension_modules())


def stale_reason(found: dict[str, list[Path]] | None = None) -> str:
    """Why the extension modules must not be used ("" if they may): all or nothing, so
    also when one compiled module has none (an earlier build that compiled fewer).
    ``found``: :func:`extension_modules`, when the caller already walked the packages."""
    if not STAMP.exists():
        return f"no {STAMP.name} stamp next to them"
    if found is None:
        found = extension_modules()
    missing = [module for module in COMPILED if module not in found]
    if missing:
        return f"no extension module for {', '.join(missing)} (run `make native`)"
    extra = sorted(set(found) - set(COMPILED))
    if extra:
        return f"an extension module for {', '.join(extra)}, no longer compiled (run `make native`)"
    try:
        if STAMP.read_text().strip() != source_digest():
            return "the sources changed since they were built (run `make native`)"
    except OSError as exc:
        return f"cannot read the sources: {exc}"
    return ""


class _SourceFirst(importlib.abc.MetaPathFinder):
    """Import the compiled modules (and any other with an extension beside it) from their
    ``.py`` files, whatever is beside them."""

    def __init__(self, modules: frozenset[str]) -> None:
        self.modules = modules

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        return importlib.util.spec_from_file_location(fullname, source_of(fullname))


_FORCED: list[str] = []
_CHECKED: list[bool] = []


STALE_WARNING = "compiled core not used"
"""The start of the warning a stale build gives (pytest's ``filterwarnings`` names it:
the project turns warnings into errors, and this one must stay a warning)."""


def pure_requested() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def guard() -> None:
    """Use the compiled modules only if they were built from exactly these sources.

    Checked once per process (``schemas/__init__.py`` runs it, before anything of
    ``schemas`` or ``streams`` is imported). The source-first finder goes in *before*
    the warning: a warning turned into an error (``-W error``) must not leave the stale
    extensions importable.
    """
    if _CHECKED:
        return
    found = extension_modules()  # one walk of the packages per process, at start-up
    if not found:
        return
    _CHECKED.append(True)
    reason = f"{PURE_ENV} is set" if pure_requested() else stale_reason(found)
    if not reason:
        return
    _FORCED.append(reason)
    sys.meta_path.insert(0, _SourceFirst(frozenset(COMPILED) | set(found)))
    if not pure_requested():
        warnings.warn(
            f"{STALE_WARNING}: {reason}; running the Python sources of gputriage's core",
            RuntimeWarning,
            stacklevel=2,
        )


def forced() -> str:
    """Why the sources run although extensions are built ("" if they do not)."""
    return _FORCED[0] if _FORCED else ""


def active(module: str = "") -> str:
    """``"compiled (mypyc)"`` or ``"Python"``: what the imported core is (or ``module``,
    e.g. ``schemas.keys`` in a producer, which imports no core)."""
    loaded = sys.modules.get(module or "streams.core.engine")
    if loaded is None:
        return "not imported"
    return "compiled (mypyc)" if str(loaded.__file__).endswith(ext_tail()) else "Python"
