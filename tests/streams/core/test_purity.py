"""The correlation core reads no clock, draws no randomness and does no I/O.

Imports are import-linter's job: its "The correlation core is pure" contract
(``make lint``) forbids ``time``, ``random``, ``uuid``, ``os``, ``asyncio``,
``logging`` and the other standard-library and I/O modules, which it sees with
``include_external_packages``. What it cannot see is a *call* through a module
the core may import: ``datetime.now()``, ``date.today()``, or a builtin such as
``open()``. That is this test. A violation would make replay and live runs disagree.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import ROOT

CORE = ROOT / "streams" / "core"
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
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr in FORBIDDEN_METHODS:
                problems.append(f"line {node.lineno}: calls .{func.attr}()")
            if isinstance(func, ast.Name) and func.id in FORBIDDEN_BUILTINS:
                problems.append(f"line {node.lineno}: calls {func.id}()")
    assert problems == []
