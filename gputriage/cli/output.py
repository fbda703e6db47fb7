"""The options of the commands that print incidents (``replay``, ``score``, ``tail``).

Each is declared once here; a command gives what differs (its output formats, its
help text). The values default to ``None`` ("not given"): the command's options
dataclass owns the defaults (:func:`options_of`), and ``--help`` shows them from it.
None of these is a setting: the settings tree has no table for them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING, Any, TypeVar

import click

from gputriage.cli.common import F, StructDefault

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

T = TypeVar("T", bound="DataclassInstance")


def output_option(choices: Sequence[str], default: str, text: str) -> Callable[[F], F]:
    """``-o``/``--output``: one of the command's formats."""
    return click.option(
        "-o",
        "--output",
        type=click.Choice(choices),
        cls=StructDefault,
        show_default=default,
        help=text,
    )


def evidence_option(default: bool, text: str) -> Callable[[F], F]:
    """``--evidence/--no-evidence``: each incident's evidence chain under its row."""
    return click.option(
        "--evidence/--no-evidence",
        default=None,
        cls=StructDefault,
        show_default=str(default).lower(),
        help=text,
    )


progress_option = click.option(
    "--progress/--no-progress",
    default=None,
    help="Progress bar on stderr. Default: only when stderr is a terminal and input is large.",
)
stats_option = click.option(
    "--stats", is_flag=True, default=None, help="Print the core's counters on stderr at the end."
)


def options_of(kind: type[T], given: Mapping[str, Any]) -> T:
    """The command's options dataclass from what was given (``None``: its default).

    ``given`` may hold other parameters too (``brokers``): only the dataclass's
    fields are taken.
    """
    names = {f.name for f in fields(kind)}
    return kind(**{k: v for k, v in given.items() if k in names and v is not None})
