"""Which scraped series the alerting rules can read: the rest need not be backfilled.

The exporters expose far more than the reference alerts select (a 1.7 GB OpenMetrics file
that ``promtool`` took ~56 s to backfill). A series no selector matches cannot change a
rule's result, so :func:`of_expressions` keeps exactly the matched series; the test
compares the baseline's firings with and without the selection. Expressions are parsed by
a real PromQL parser (``promql-parser``), never a regex: ``by (pod)`` names labels.

Traps: anything not understood (a selector without a metric name, an unknown syntax node,
``info()``, a rejected expression, a regex Python cannot compile as RE2 would) selects
everything: conservative, never lossy. A missing label matches as the empty string;
regex matchers are anchored; ``or`` between matcher groups selects what any group matches.
bench/README.md, design notes: promql/selection.py.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import promql_parser
import yaml

from bench.promql.series import Family, Labels

_READS_UNNAMED = "info"
"""The function that reads series its arguments do not name (Prometheus 3's ``info()``)."""
_EVERYTHING = object()
"""What :func:`_selectors` yields for a part of an expression it cannot bound."""


@dataclass(frozen=True)
class _Matcher:
    label: str
    op: str
    """``=``, ``!=``, ``=~`` or ``!~``."""
    value: str
    pattern: re.Pattern[str] | None

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.label, "")
        if self.op == "=":
            return value == self.value
        if self.op == "!=":
            return value != self.value
        if self.pattern is None:  # a pattern Python's re cannot read: keep the series
            return True
        found = self.pattern.fullmatch(value) is not None
        return found if self.op == "=~" else not found


Group = tuple[_Matcher, ...]
"""Matchers that must all hold."""


@dataclass(frozen=True)
class Selection:
    """The series some rule can read, by sample name; ``None``: every series."""

    groups: Mapping[str, tuple[Group, ...]] | None

    def wants(self, family: Family, labels: Labels) -> bool:
        """Whether some selector of some rule matches this series."""
        if self.groups is None:
            return True
        groups = self.groups.get(family.sample_name)
        if not groups:
            return False
        by_name = {"__name__": family.sample_name, **dict(labels)}
        return any(all(m.matches(by_name) for m in group) for group in groups)

    def names(self) -> list[str]:
        """The sample names kept (empty for "every series")."""
        return sorted(self.groups or ())


EVERY_SERIES = Selection(None)


def of_expressions(expressions: Iterable[str]) -> Selection:
    """The series the PromQL ``expressions`` can select (every series if one of them is
    an expression this parser rejects)."""
    groups: dict[str, list[Group]] = {}
    for text in expressions:
        try:
            parsed = promql_parser.parse(text)
        except Exception:  # the binding raises its own ValueError-like types
            return EVERY_SERIES
        for selector in _selectors(parsed):
            if selector is _EVERYTHING or not selector.name:
                return EVERY_SERIES
            groups.setdefault(selector.name, []).extend(_groups(selector))
    return Selection({name: tuple(dict.fromkeys(found)) for name, found in groups.items()})


def of_rules_file(path: Path) -> Selection:
    """:func:`of_expressions` over every rule (alerting and recording) of a Prometheus rules
    file (``groups: [{rules: [{expr: ...}]}]``). A file of another shape selects everything:
    Prometheus itself reports what is wrong with it when it loads it."""
    try:
        loaded: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
        expressions = [str(rule["expr"]) for group in loaded["groups"] for rule in group["rules"]]
    except (yaml.YAMLError, TypeError, KeyError):
        return EVERY_SERIES
    return of_expressions(expressions)


def _groups(selector: Any) -> Iterator[Group]:
    matchers = selector.matchers
    alternatives: Sequence[Any] = matchers.or_matchers or [matchers.matchers]
    for alternative in alternatives:
        yield tuple(_matcher(m) for m in alternative)


_OPS = {
    int(promql_parser.MatchOp.Equal): "=",
    int(promql_parser.MatchOp.NotEqual): "!=",
    int(promql_parser.MatchOp.Re): "=~",
    int(promql_parser.MatchOp.NotRe): "!~",
}
"""By the enum's integer: the binding's ``MatchOp`` is not hashable."""


def _matcher(found: Any) -> _Matcher:
    op = _OPS[int(found.op)]
    pattern = None
    if op in {"=~", "!~"}:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")  # FutureWarning: RE2 syntax re reads otherwise
                pattern = re.compile(found.value)
        except (re.error, Warning):
            pattern = None
    return _Matcher(found.name, op, found.value, pattern)


def _selectors(expr: Any) -> Iterator[Any]:
    """Every vector selector in a parsed expression; :data:`_EVERYTHING` for a node this
    walk does not know (so a newer parser's node type never silently drops series)."""
    if isinstance(expr, promql_parser.VectorSelector):
        yield expr
    elif isinstance(expr, promql_parser.MatrixSelector):
        yield from _selectors(expr.vector_selector)
    elif isinstance(expr, promql_parser.BinaryExpr):
        yield from _selectors(expr.lhs)
        yield from _selectors(expr.rhs)
    elif isinstance(expr, promql_parser.Call):
        if getattr(expr.func, "name", "") == _READS_UNNAMED:
            yield _EVERYTHING  # info() joins target_info, which no selector names
        for arg in expr.args:
            yield from _selectors(arg)
    elif isinstance(
        expr,
        promql_parser.AggregateExpr
        | promql_parser.ParenExpr
        | promql_parser.UnaryExpr
        | promql_parser.SubqueryExpr,
    ):
        yield from _selectors(expr.expr)
        param = getattr(expr, "param", None)
        if param is not None:
            yield from _selectors(param)
    elif not isinstance(expr, promql_parser.NumberLiteral | promql_parser.StringLiteral):
        yield _EVERYTHING
