"""The one shape of a rule: what it emits, reads, owns and waits for, declared once.

Every rule module exports ``SPEC``, a :class:`NodeRule` or a :class:`ClusterRule`, listed
by :mod:`streams.core.rules.registry`; from the specs come the incident types, their
default severities, the timer order and each key's earliest deadline. Plain frozen
dataclasses holding plain functions, because mypyc compiles them (msgspec Structs would
keep a module out of the compiled build); a rule's state slice lives in
``streams.core.state``.

Traps: ``settings`` names fields of ``CoreSettings``, where defaults and ranges live (a
test checks a rule reads no other); the registry's order is the order timers fire within a
key, so it is part of the output: append a new rule, never sort them.
docs/detection.md, design notes: the shape of a rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from schemas.types import Severity
from streams.core.config import CoreSettings
from streams.core.lifecycle import ClusterStep, Step
from streams.core.state import ClusterState, NodeState


@dataclass(frozen=True)
class NodeRule:
    """A rule of a node's key (``streams.core.node``)."""

    name: str
    """The rule's module name (``oom``): for messages and tests."""
    emits: tuple[tuple[str, Severity], ...]
    """Each incident type it opens, with its default severity."""
    reads: tuple[type[Any], ...]
    """The event types whose handlers call it (``schemas.events`` classes)."""
    state: tuple[str, ...]
    """The :class:`~streams.core.state.NodeState` fields it owns (no other rule writes them)."""
    settings: tuple[str, ...]
    """The ``CoreSettings`` fields it reads."""
    deadline: Callable[[NodeState, CoreSettings], float] | None = None
    """The earliest event time its ``on_timer`` has something to do (``NEVER`` if none)."""
    on_timer: Callable[[Step], None] | None = None
    """Fires what is due at ``step.now``; called in registry order on every timer."""


@dataclass(frozen=True)
class ClusterRule:
    """A rule of a cluster's key (``streams.core.cluster``)."""

    name: str
    emits: tuple[tuple[str, Severity], ...]
    reads: tuple[type[Any], ...]
    state: tuple[str, ...]
    """The :class:`~streams.core.state.ClusterState` fields it owns."""
    settings: tuple[str, ...]
    deadline: Callable[[ClusterState, CoreSettings], float] | None = None
    on_timer: Callable[[ClusterStep], None] | None = None
    """Fires what is due; called in registry order on every timer."""
    evaluate: Callable[[ClusterStep, bool], None] | None = None
    """Re-reads the rule's thresholds after an event (``timer`` True when the key's
    deadline has come with it) and on every timer (``timer`` True), before ``on_timer``:
    the cluster rules judge totals across pods and nodes, not one record."""


Rule = NodeRule | ClusterRule


def emitted(
    rules: tuple[NodeRule, ...] | tuple[ClusterRule, ...],
) -> tuple[tuple[str, Severity], ...]:
    """``(type, default severity)`` of every type the rules emit, in registry order."""
    return tuple(pair for rule in rules for pair in rule.emits)


def types_of(rules: tuple[NodeRule, ...] | tuple[ClusterRule, ...]) -> tuple[str, ...]:
    """The incident types the rules emit, in registry order."""
    return tuple(kind for kind, _ in emitted(rules))
