"""Click options generated from a settings struct: each setting is declared once, in its owner.

:func:`settings_options` turns every field of a frozen msgspec settings struct into one
option: ``--`` + the field name with ``_`` -> ``-``, help from ``Meta(description=...)``,
the ``Meta`` range, a ``Literal`` as a choice, a tuple repeatable, a ``bool`` a flag (or a
``--x/--no-x`` pair when it defaults to True); ``Meta(extra=...)`` carries what only the
command line needs. :func:`lay_over` lays the given options over the settings table.

Traps: every option defaults to ``None`` (a file or environment value is not overwritten;
the default shown is the struct's); a ``required`` field is checked in :func:`lay_over`,
not by click; a flag can only be given, never "off", so a field meant to be turned off
from the command line must default to True.
docs/configuration.md, design notes: the generated options.
"""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import click
import msgspec
import msgspec.inspect as mi

from connectors.settings import Brokers
from gputriage.cli.common import SettingsRequired, StructDefault, range_of

F = TypeVar("F", bound=Callable[..., Any])
S = TypeVar("S", bound=msgspec.Struct)


@dataclass(frozen=True)
class Setting:
    """One field of a settings struct, as the command line sees it."""

    name: str
    """The field's (and the click parameter's) name."""
    type: Any
    """Its ``msgspec.inspect`` type, ``Metadata`` and ``| None`` unwrapped."""
    default: Any
    description: str
    extra: Mapping[str, Any]

    @property
    def option(self) -> str:
        """``--field-name``, or the singular spelling ``extra`` gives a repeatable field."""
        return str(self.extra.get("option") or "--" + self.name.replace("_", "-"))

    @property
    def required(self) -> bool:
        return bool(self.extra.get("required"))

    @property
    def repeatable(self) -> bool:
        return isinstance(self.type, mi.VarTupleType | mi.ListType)


def settings_fields(kind: type[msgspec.Struct]) -> list[Setting]:
    """The struct's fields in declaration order (the order ``--help`` lists them)."""
    info = mi.type_info(kind)
    assert isinstance(info, mi.StructType)
    found: list[Setting] = []
    for field in info.fields:
        kind_, description, extra = field.type, "", dict[str, Any]()
        while isinstance(kind_, mi.Metadata | mi.UnionType):
            if isinstance(kind_, mi.Metadata):
                description = (kind_.extra_json_schema or {}).get("description", description)
                extra = {**extra, **(kind_.extra or {})}
                kind_ = kind_.type
            else:
                (kind_,) = (t for t in kind_.types if not isinstance(t, mi.NoneType))
        default = None if field.default is msgspec.NODEFAULT else field.default
        found.append(Setting(field.name, kind_, default, description, extra))
    return found


def shown_default(setting: Setting) -> str | None:
    """The default ``--help`` shows, or None where there is nothing worth showing."""
    value = setting.default
    if value is None or value is False or value in ("", ()):
        return None
    if value is True:
        return "true"
    if isinstance(value, tuple):
        return ", ".join(map(str, value))
    return str(value)


def help_of(setting: Setting) -> str:
    """The help text: the description, and for a repeatable option that it is one."""
    if not setting.repeatable:
        return setting.description
    return setting.description.removesuffix(".") + " (repeatable)."


def _literal_values(hint: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(hint) is Literal:
        return typing.get_args(hint)
    for arg in typing.get_args(hint):
        found = _literal_values(arg)
        if found is not None:
            return found
    return None


def _param_type(
    struct: type[msgspec.Struct], setting: Setting, where: str
) -> click.ParamType | None:
    kind = setting.type
    if isinstance(kind, mi.IntType | mi.FloatType):
        return range_of(kind, where)
    if isinstance(kind, mi.LiteralType):  # in the order declared (msgspec sorts them)
        values = _literal_values(typing.get_type_hints(struct, include_extras=True)[setting.name])
        return click.Choice([str(v) for v in values or kind.values if v != ""])
    if "path" in setting.extra:
        return click.Path(**setting.extra["path"])
    return None


def option_of(struct: type[msgspec.Struct], setting: Setting) -> Callable[[F], F]:
    """The click option of one setting (see the module for the rules)."""
    assert setting.description, f"{struct.__name__}.{setting.name} has no description"
    kwargs: dict[str, Any] = {"help": help_of(setting), "default": None}
    short = setting.extra.get("short")  # a one-letter spelling as well (``-o``)
    decls = [*([short] if short else []), setting.option, setting.name]
    if isinstance(setting.type, mi.BoolType):
        if setting.default is True:
            decls[0] = f"{setting.option}/--no-{setting.option[2:]}"
        else:
            kwargs["is_flag"] = True
    if setting.repeatable:
        kwargs["multiple"] = True
        kwargs["default"] = ()
    param_type = _param_type(struct, setting, f"{struct.__name__}.{setting.name}")
    if param_type is not None:
        kwargs["type"] = param_type
    for key in ("metavar", "envvar"):
        if key in setting.extra:
            kwargs[key] = setting.extra[key]
    if setting.required:
        kwargs.update(cls=SettingsRequired, required=True)
    else:
        shown = shown_default(setting)
        if shown is not None:
            kwargs.update(cls=StructDefault, show_default=shown)
    return click.option(*decls, **kwargs)


def settings_options(
    kind: type[msgspec.Struct], *, exclude: Iterable[str] = (), only: Iterable[str] = ()
) -> Callable[[F], F]:
    """A decorator adding one option per field of ``kind`` (but ``exclude``; or ``only``
    those, for a command that shares a few of another command's settings), in field order."""
    skip, keep = set(exclude), set(only)
    fields = settings_fields(kind)
    unknown = (skip | keep) - {s.name for s in fields}
    assert not unknown, f"{kind.__name__} has no field {sorted(unknown)}"
    options = [
        option_of(kind, s) for s in fields if s.name not in skip and (not keep or s.name in keep)
    ]

    def decorate(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return decorate


def lay_over(table: S, given: Mapping[str, Any], *, where: str) -> S:
    """``table`` with the options that were given laid over it; a required value missing from
    both is click's "Missing option" (``where`` names the table: ``connect.kmsg``)."""
    changes = {k: v for k, v in given.items() if v is not None and v != ()}
    try:
        merged = msgspec.structs.replace(table, **changes)
    except ValueError as exc:  # the struct's own check (``tz: unknown time zone 'x'``)
        name, _, reason = str(exc).partition(": ")
        raise click.BadParameter(reason, param_hint=f"'--{name.replace('_', '-')}'") from None
    for setting in settings_fields(type(table)):
        if setting.required and getattr(merged, setting.name) is None:
            raise click.UsageError(
                f"Missing option '{setting.option}' (or {where}.{setting.name} in the settings)"
            )
    return merged


class _Brokers(msgspec.Struct, frozen=True, kw_only=True):
    """The ``--brokers`` of the commands whose own table has no ``brokers`` (process,
    bridge, tail): the same field type as every ``[connect.<source>]`` table's."""

    brokers: Brokers = None


brokers_option = settings_options(_Brokers)
"""``--brokers``, generated like every other option (it overrides ``kafka.brokers``)."""
