"""The one shape of a rule: what it emits, reads, owns and waits for, declared once.

Every rule module exports ``SPEC``, a :class:`NodeRule` (it runs on a node's key) or a
:class:`ClusterRule` (the cluster's key), and :mod:`streams.core.rules.registry` lists
them. From the specs come the incident types and their default severities
(``registry.DEFAULT_SEVERITY``, which ``CoreSettings.severity`` starts from), the order
in which timers fire and the earliest deadline of a key (``node.apply_timer`` and
``next_deadline``, the same in ``cluster``), and what the tests count.

Why plain frozen dataclasses holding plain functions: the rules are compiled with mypyc,
which compiles these too (no metaclass, no attribute tricks), and a function stored in a
field is called like any other. msgspec Structs would keep a module out of the compiled
build (:mod:`schemas.native`), so a rule's state slice lives in ``streams.core.state``
and the spec names the fields it owns.

Traps:

* ``settings`` names fields of ``streams.core.config.CoreSettings``, where their
  defaults and ranges are declared. The spec only says which a rule reads (a test
  checks the names exist and that a rule reads no other).
* The order of the registry's tuples is the order timers fire within one key: it decides
  which of two incidents due at the same instant is published first, so it is part of
  the output. Append a new rule; never sort them.
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
