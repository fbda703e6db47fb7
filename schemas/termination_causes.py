"""Loads the termination-cause table (``termination_causes.toml`` beside this module).

A crash-looping GPU container exits 1 whatever killed it; its termination message
(``FallbackToLogsOnError``: the last log lines) is where the cause is named. Which
texts name which cause is data, like the XID catalog: a new driver's or NCCL's
wording is a TOML edit with its source, never a code change.

Why it is compiled here, once: the core must stay pure and cheap per crash, so the
table is read and its regular expressions compiled at first use (then cached), and
:meth:`CauseTable.classify` does one ``search`` per class. Traps: patterns are
searched case-insensitively anywhere in the message (never anchored), and the *first
class in precedence order* wins, not the leftmost match in the text: NCCL's watchdog
re-raises the CUDA error that killed it, and that CUDA error is the cause.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache
from importlib import resources

import msgspec

OOM = "cuda_oom"
"""The class that *is* CUDA OOM: the rule's original guess, now confirmed by text."""


class CauseClass(msgspec.Struct, frozen=True, kw_only=True):
    """One cause: its words for a summary and its recommended action."""

    name: str = ""
    label: str
    action: str
    names_gpu: bool = False
    """The cause is the GPU (or its driver): the incident names the pod's GPUs."""
    device: bool = False
    """The words alone say the GPU or its driver failed (not the workload, not the
    network): a loop of them is typed ``gpu_fault_crash_loop``, never
    ``suspected_cuda_oom`` (:mod:`streams.core.rules.cuda`). Default False: a table
    written before the field still loads, its classes typed as before."""


class CausePattern(msgspec.Struct, frozen=True, kw_only=True):
    """One text that names a cause, with where it was seen."""

    cause: str = msgspec.field(name="class")
    regex: str
    source: str


class _File(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    precedence: tuple[str, ...]
    # ``class`` is a keyword: the field is renamed, the TOML key stays ``class``.
    classes: dict[str, CauseClass] = msgspec.field(name="class")
    pattern: tuple[CausePattern, ...] = ()


class CauseTable:
    """The compiled table: classes in precedence order, each with one combined regex."""

    __slots__ = ("_compiled", "classes", "patterns")

    def __init__(self, classes: tuple[CauseClass, ...], patterns: tuple[CausePattern, ...]) -> None:
        self.classes = classes
        self.patterns = patterns
        compiled: list[tuple[CauseClass, re.Pattern[str]]] = []
        for cls in classes:
            mine = [f"(?:{p.regex})" for p in patterns if p.cause == cls.name]
            if mine:
                compiled.append((cls, re.compile("|".join(mine), re.IGNORECASE)))
        self._compiled = tuple(compiled)

    def classify(self, message: str) -> CauseClass | None:
        """The first class (in precedence order) a pattern of which occurs in ``message``."""
        if not message:
            return None
        for cls, regex in self._compiled:
            if regex.search(message) is not None:
                return cls
        return None

    def get(self, name: str) -> CauseClass | None:
        for cls in self.classes:
            if cls.name == name:
                return cls
        return None


def parse_causes(text: str) -> CauseTable:
    """A table from TOML text. Raises ``ValueError`` naming what is wrong."""
    try:
        data = msgspec.convert(tomllib.loads(text), _File)
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"termination_causes.toml: {exc}") from exc
    missing = [name for name in data.classes if name not in data.precedence]
    unknown = [name for name in data.precedence if name not in data.classes]
    if missing or unknown or len(set(data.precedence)) != len(data.precedence):
        raise ValueError(
            f"termination_causes.toml: precedence must list each class once "
            f"(missing {missing}, unknown {unknown})"
        )
    if OOM not in data.classes:
        raise ValueError(f"termination_causes.toml: class {OOM!r} is required")
    for pattern in data.pattern:
        if pattern.cause not in data.classes:
            raise ValueError(f"termination_causes.toml: unknown class {pattern.cause!r}")
        if not pattern.source.startswith("https://"):
            raise ValueError(f"termination_causes.toml: {pattern.regex!r} has no source URL")
        try:
            re.compile(pattern.regex, re.IGNORECASE)
        except re.error as exc:
            raise ValueError(f"termination_causes.toml: {pattern.regex!r}: {exc}") from exc
    classes = tuple(
        msgspec.structs.replace(data.classes[name], name=name) for name in data.precedence
    )
    return CauseTable(classes, data.pattern)


@cache
def load_causes() -> CauseTable:
    """The packaged table. Raises ``ValueError`` if the file is malformed."""
    text = (
        resources.files("schemas").joinpath("termination_causes.toml").read_text(encoding="utf-8")
    )
    return parse_causes(text)
