"""The correlation core reads no clock, draws no randomness and does no I/O.

import-linter (``make lint``) forbids the I/O client libraries; this test covers
the standard library, which import-linter cannot see as a dependency: ``time``,
``random``, ``uuid``, ``os``, ``socket``, ``asyncio``, ``datetime.now()`` and
``open()``. A violation here would make replay and live runs disagree.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import ROOT

CORE = ROOT / "streams" / "core"
FORBIDDEN_MODULES = {
    "time",
    "random",
    "uuid",
    "secrets",
    "os",
    "socket",
    "asyncio",
    "io",
    "pathlib",
    "threading",
    "subprocess",
    "logging",
}
FORBIDDEN_METHODS = {
    "now",
    "utcnow",
    "today",
    "time",
    "monotonic",
    "perf_counter",
    "urandom",
    "getenv",
}
FORBIDDEN_BUILTINS = {"open", "input", "print"}


def _core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def test_the_core_has_modules_to_check() -> None:
    assert len(_core_modules()) >= 10


@pytest.mark.parametrize("path", _core_modules(), ids=lambda p: str(p.relative_to(CORE)))
def test_core_module_is_pure(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    problems: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [(node.module or "").split(".")[0]]
        else:
            names = []
        line = getattr(node, "lineno", 0)
        problems += [f"line {line}: imports {n}" for n in names if n in FORBIDDEN_MODULES]
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in FORBIDDEN_METHODS:
                problems.append(f"line {node.lineno}: calls .{func.attr}()")
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_BUILTINS:
                problems.append(f"line {node.lineno}: calls {func.id}()")
    assert problems == []
