"""One codec: only ``schemas/codec.py`` uses ``msgspec.json`` (or orjson).

import-linter's "One codec" contract forbids ``import orjson`` everywhere else,
but it sees external packages only by their top-level module, so ``msgspec.json``
is just ``msgspec`` to it (and msgspec itself is fine: Structs are the schemas).
This test reads the source for the part it cannot see: ``msgspec.json`` spelled
as an attribute, ``import msgspec.json`` or ``from msgspec import json``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.paths import ROOT

PACKAGES = ("gputriage", "streams", "connectors", "schemas")
CODEC = ROOT / "schemas" / "codec.py"


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if p != CODEC)


def _json_uses(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "json":
            if isinstance(node.value, ast.Name) and node.value.id == "msgspec":
                lines.append(node.lineno)
        elif isinstance(node, ast.Import):
            lines += [node.lineno for a in node.names if a.name in ("msgspec.json", "orjson")]
        elif isinstance(node, ast.ImportFrom):
            names = {a.name for a in node.names}
            if node.module in {"msgspec.json", "orjson"} or (
                node.module == "msgspec" and "json" in names
            ):
                lines.append(node.lineno)
    return lines


def test_the_check_sees_each_spelling() -> None:
    spelled = "import msgspec.json\nfrom msgspec import json\nmsgspec.json.decode(b'1')\n"
    assert _json_uses(ast.parse(spelled)) == [1, 2, 3]
    assert _json_uses(ast.parse(CODEC.read_text(encoding="utf-8")))


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_the_codec_uses_msgspec_json(path: Path) -> None:
    assert _json_uses(ast.parse(path.read_text(encoding="utf-8"))) == []
