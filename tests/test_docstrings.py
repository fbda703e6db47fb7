"""A docstring documents the object it follows, or it documents nothing.

Python and Sphinx take a bare string as documentation in two places only: first in a
module, class or function body, and right after an assignment (an attribute docstring).
A string anywhere else is a no-op, and in this tree each one was a docstring that lost its
object: stacked under a neighbour's (``self._announced = 0`` followed by three strings, the
second and third describing ``announcements`` and ``heartbeats``), or left behind when
the constant it described moved to another module. The reader then takes it for the
documentation of whatever it follows.

Trap: a rule about what the text names (a docstring naming another module-level name)
flags twenty honest cross-references (``:class:`StreamingTable```...) and misses these; the
position is what is wrong, so the position is what is checked.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from tests.paths import ROOT

PACKAGES: Final = (
    "gputriage",
    "connectors",
    "streams",
    "schemas",
    "bench",
    "deploy",
    "examples",
    "tests",
)
GENERATED: Final = ROOT / "connectors" / "podresources" / "_proto"
"""protoc's stubs (``make proto``), never edited by hand."""
_DEFINITIONS: Final = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _sources() -> list[Path]:
    return sorted(
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if GENERATED not in path.parents
    )


def _stray_strings(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Line and text of each bare string statement that is no docstring of a definition
    nor of an assignment."""
    for node in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            body = getattr(node, field, None)
            if not isinstance(body, list):
                continue
            for index, statement in enumerate(body):
                if not (
                    isinstance(statement, ast.Expr)
                    and isinstance(statement.value, ast.Constant)
                    and isinstance(statement.value.value, str)
                ):
                    continue
                if index == 0 and field == "body" and isinstance(node, _DEFINITIONS):
                    continue  # the module's, class's or function's own docstring
                if index > 0 and isinstance(body[index - 1], ast.Assign | ast.AnnAssign):
                    continue  # an attribute docstring
                yield statement.lineno, statement.value.value


@pytest.mark.parametrize(
    ("source", "strays"),
    [
        ('"""Module."""\nX = 1\n"""X."""\n', 0),
        ("class C:\n    a: int\n    '''a.'''\n    def f(self) -> None:\n        '''f.'''\n", 0),
        ('X = 1\n"""X."""\n"""Y, stacked under X."""\nY = 2\n', 1),
        ('def f() -> None:\n    pass\n\n\n"""Left behind by a moved constant."""\n', 1),
        ("def f() -> None:\n    self.a = 0\n    self.b = 0\n    '''a, under b.'''\n", 0),
        ("if True:\n    X = 1\nelse:\n    '''no object.'''\n", 1),
    ],
)
def test_the_rule_on_small_cases(source: str, strays: int) -> None:
    """What counts as a docstring's place, and what is a stray (a swap of two neighbours'
    docstrings, each right after an assignment, is out of this rule's reach)."""
    assert len(list(_stray_strings(ast.parse(source)))) == strays


def test_every_docstring_sits_under_an_object() -> None:
    """No module of the project holds a string statement that documents nothing."""
    sources = _sources()
    assert len(sources) > 100  # the walk found the tree
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text.splitlines()[0] if text else text!r}"
        for path in sources
        for line, text in _stray_strings(ast.parse(path.read_bytes(), str(path)))
    ]
    assert not found, "strings that document nothing (move each under its object):\n" + "\n".join(
        found
    )


# -- pointers a newcomer cannot open -----------------------------------------------------
_POINTER: Final = re.compile(r"\bDESIGN\b|\b[Ii]ssues? #?\d|(?<!-)\bseeds? \d")
"""The design document by name, an issue by number, a simulator seed by number (the small
cases below spell each); not a ``--seed`` option (a command a reader can run) nor
``owner/repo#151`` (a public issue)."""


def _pointers(source: str) -> Iterator[tuple[int, str]]:
    """Line and text of each comment or string statement (docstrings) naming a pointer."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT and _POINTER.search(token.string):
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            for offset, line in enumerate(node.value.value.splitlines()):
                if _POINTER.search(line):
                    yield node.lineno + offset, line.strip()


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('"""Defaults follow DESIGN §2."""\n', 1),
        ("x = 1  # see DESIGN.md\n", 1),
        ('def f() -> None:\n    """Why (issue 11.1)."""\n', 1),
        ("# Issue 14: the old default\n", 1),
        ('"""Seen on simulator seed 2."""\n', 1),
        ('"""Run ``gputriage simulate --seed 1``; NVIDIA/dcgm-exporter#151."""\n', 0),
        ('"""A public issue report says so."""\n', 0),
        ('DESIGNS = ("a", "b")\nLABEL = "issue 4"\n', 0),
    ],
)
def test_the_pointer_rule_on_small_cases(source: str, found: int) -> None:
    """Comments and docstrings are read; code and other strings are not."""
    assert len(list(_pointers(source))) == found


def test_no_comment_or_docstring_points_where_a_newcomer_cannot_follow() -> None:
    sources = _sources()
    assert len(sources) > 100
    found = [
        f"{path.relative_to(ROOT)}:{line}: {text}"
        for path in sources
        for line, text in _pointers(path.read_text(encoding="utf-8"))
    ]
    assert not found, "say the reason, or name the docs/ page:\n" + "\n".join(found)


# -- length: the reasoning lives in docs/ ------------------------------------------------
LENGTH_PACKAGES: Final = ("connectors", "streams", "gputriage", "schemas", "bench", "examples")
MAX_DOCSTRING_LINES: Final = 15
"""The bound, in source lines from the opening quotes to the closing ones. A docstring says
what the object is for, why, and names its traps; the design reasoning goes to a docs/
page's "Design notes"."""
ALLOWED_LONGER: Final[dict[str, int]] = {
    # a citation list of real log lines
    "examples/build_scenario.py:starved_job": 40,
}
"""``path:qualified name`` -> its length today, for a docstring kept long on purpose: an
entry may not grow, and one that is cut (or gone) must leave this table."""


def _docstring_lengths(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """Qualified name (``<module>``, ``Class.method``) and length in lines of each docstring
    of a module, its classes and functions, nested ones included."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, int]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                yield from own(child, name)
                yield from walk(child, name + ".")
            else:
                yield from walk(child, prefix)

    def own(node: ast.AST, name: str) -> Iterator[tuple[str, int]]:
        body = getattr(node, "body", [])
        if (
            body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            first = body[0]
            yield name, (first.end_lineno or first.lineno) - first.lineno + 1

    yield from own(tree, "<module>")
    yield from walk(tree, "")


@pytest.mark.parametrize(
    ("source", "lengths"),
    [
        ('"""One line."""\n', [("<module>", 1)]),
        ('"""Two\nlines."""\n', [("<module>", 2)]),
        ("class C:\n    '''C.\n\n    More.\n    '''\n", [("C", 4)]),
        ("def f() -> None:\n    def g() -> None:\n        '''g.'''\n", [("f.g", 1)]),
        ("async def f() -> None:\n    '''f.'''\nx = '''not\na docstring'''\n", [("f", 1)]),
        ("def f() -> None:\n    x = 1\n    '''after code: not f's docstring'''\n", []),
    ],
)
def test_the_length_rule_on_small_cases(source: str, lengths: list[tuple[str, int]]) -> None:
    """Which strings are measured (a definition's first statement only) and how."""
    assert list(_docstring_lengths(ast.parse(source))) == lengths


def test_no_docstring_is_longer_than_the_bound() -> None:
    """Every docstring of the project's packages fits the bound, but the allowed ones."""
    sources = sorted(
        path
        for package in LENGTH_PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if GENERATED not in path.parents
    )
    assert len(sources) > 100  # the walk found the tree
    measured = {
        f"{path.relative_to(ROOT)}:{name}": length
        for path in sources
        for name, length in _docstring_lengths(ast.parse(path.read_bytes(), str(path)))
    }
    too_long = [
        f"{where}: {length} lines"
        for where, length in sorted(measured.items())
        if length > max(MAX_DOCSTRING_LINES, ALLOWED_LONGER.get(where, 0))
    ]
    assert not too_long, (
        f"docstrings over {MAX_DOCSTRING_LINES} lines (say why and name the traps; move the "
        "reasoning to a docs/ page's 'Design notes'):\n" + "\n".join(too_long)
    )
    stale = [where for where in ALLOWED_LONGER if measured.get(where, 0) <= MAX_DOCSTRING_LINES]
    assert not stale, "allowed, but no longer over the bound (remove them):\n" + "\n".join(stale)
