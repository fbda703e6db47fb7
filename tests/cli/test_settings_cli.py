"""Each setting is declared once: a settings-backed command's options ARE its struct's fields.

Walks the click tree against the settings structs: every field is exactly one option of
the same name, with the struct's default shown, its ``Meta`` range and its description
as the help, and no option exists without a field but the command-only ones listed
here. The expectations are read from the structs with ``msgspec.inspect`` directly, not
through the generator (:mod:`gputriage.cli.options`), so a generator that drifts fails.

Register another settings-backed command (``process``, ``bridge``) with one line in
:data:`COMMANDS`.
"""

from __future__ import annotations

import math
from typing import Any

import click
import msgspec
import msgspec.inspect as mi
import pytest

from connectors.autoscaler.settings import AutoscalerSettings
from connectors.dcgm.settings import DcgmSettings
from connectors.k8s.settings import K8sSettings
from connectors.nvml.settings import NvmlSettings
from connectors.podresources.settings import PodResourcesSettings
from connectors.topology.settings import TopoSettings
from connectors.xid.settings import KmsgSettings
from gputriage.cli import cli
from gputriage.cli.options import lay_over
from gputriage.demo.settings import DemoSettings
from gputriage.settings import ConnectSettings
from streams.app.settings import ProcessorSettings
from streams.bridges.settings import BridgeSettings

COMMANDS: dict[tuple[str, ...], tuple[type[msgspec.Struct], frozenset[str]]] = {
    ("connect", "k8s"): (K8sSettings, frozenset()),
    ("connect", "kmsg"): (KmsgSettings, frozenset()),
    ("connect", "dcgm"): (DcgmSettings, frozenset()),
    ("connect", "nvml"): (NvmlSettings, frozenset()),
    ("connect", "topo"): (TopoSettings, frozenset()),
    ("connect", "autoscaler"): (AutoscalerSettings, frozenset()),
    ("connect", "podresources"): (PodResourcesSettings, frozenset({"from_json"})),
    ("process",): (ProcessorSettings, frozenset({"brokers", "engine"})),
    ("bridge",): (BridgeSettings, frozenset({"brokers"})),
    ("demo",): (DemoSettings, frozenset({"brokers", "bridge"})),
}
"""Command path -> its settings struct, and the parameters it has that are no setting."""

FILE_ONLY: dict[type[msgspec.Struct], frozenset[str]] = {
    BridgeSettings: frozenset({"modules", "kinds"}),
}
"""Fields that are tables (a kind's routes, extra modules): the file only, no option."""


def command_at(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group), path
        command = command.commands[name]
    return command


def unwrapped(kind: Any) -> tuple[Any, str, dict[str, Any]]:
    """A field's type without ``Metadata`` and ``None``; its description and ``extra``."""
    description, extra = "", {}
    while isinstance(kind, mi.Metadata | mi.UnionType):
        if isinstance(kind, mi.UnionType):
            (kind,) = (t for t in kind.types if not isinstance(t, mi.NoneType))
            continue
        description = (kind.extra_json_schema or {}).get("description", description)
        extra.update(kind.extra or {})
        kind = kind.type
    return kind, description, extra


def fields_of(struct: type[msgspec.Struct]) -> list[tuple[mi.Field, Any, str, dict[str, Any]]]:
    info = mi.type_info(struct)
    assert isinstance(info, mi.StructType)
    return [(f, *unwrapped(f.type)) for f in info.fields]


def shown(default: Any) -> str | None:
    if default is None or default is False or default in ("", ()):  # 0 == False: a port
        return None
    if default is True:
        return "true"
    return ", ".join(default) if isinstance(default, tuple) else str(default)


def test_every_connect_table_has_a_registered_command() -> None:
    connect = {path[1] for path in COMMANDS if path[0] == "connect"}
    assert connect == set(ConnectSettings.__struct_fields__)
    for table in msgspec.structs.fields(ConnectSettings):
        assert COMMANDS["connect", table.name][0] is table.type, table.name


@pytest.mark.parametrize("path", list(COMMANDS), ids=" ".join)
def test_each_field_is_exactly_one_option_and_each_option_a_field(path: tuple[str, ...]) -> None:
    struct, command_only = COMMANDS[path]
    options = {p.name: p for p in command_at(path).params if isinstance(p, click.Option)}
    options.pop("help", None)
    for field, kind, description, extra in fields_of(struct):
        if field.name in FILE_ONLY.get(struct, frozenset()):
            assert field.name not in options, f"{' '.join(path)}: {field.name} is file only"
            continue
        where = f"{' '.join(path)}: {field.name}"
        option = options.pop(field.name, None)
        assert option is not None, f"{where}: no option"
        repeatable = isinstance(kind, mi.VarTupleType)
        name = extra.get("option") or "--" + field.name.replace("_", "-")
        assert option.opts == [*([extra["short"]] if "short" in extra else []), name], where
        if isinstance(kind, mi.BoolType) and field.default is True:
            assert option.secondary_opts == ["--no-" + name[2:]], where
        else:
            assert option.secondary_opts == [], where
        assert option.is_flag == isinstance(kind, mi.BoolType), where
        assert option.multiple == repeatable, where
        # Unset unless given, so the file and the environment can fill it.
        assert option.default == (() if repeatable else None), where
        help_text = description
        if repeatable:
            help_text = description.removesuffix(".") + " (repeatable)."
        assert option.help == help_text, where
        assert option.required == bool(extra.get("required")), where
        if not option.required:
            assert (option.show_default or None) == shown(field.default), where
        if isinstance(kind, mi.IntType | mi.FloatType):
            check_range(option.type, kind, where)
        if isinstance(kind, mi.LiteralType):
            assert isinstance(option.type, click.Choice), where
            assert sorted(option.type.choices) == sorted(str(v) for v in kind.values if v != ""), (
                where
            )
        for key in ("metavar", "envvar"):
            assert getattr(option, key) == extra.get(key), f"{where}: {key}"
    assert set(options) == command_only, f"{' '.join(path)}: options without a field"


def check_range(param_type: Any, kind: Any, where: str) -> None:
    assert isinstance(param_type, click.IntRange | click.FloatRange), where
    low = kind.ge if kind.ge is not None else kind.gt
    high = kind.le if kind.le is not None else kind.lt
    assert low is not None, f"{where}: numbers always carry a range"
    assert high is not None, f"{where}: numbers always carry a range"
    if isinstance(kind, mi.IntType):
        low += 0 if kind.ge is not None else 1
        high -= 0 if kind.le is not None else 1
    else:
        assert param_type.min_open == (kind.gt is not None), where
        assert param_type.max_open == (kind.lt is not None), where
        assert math.isfinite(low), where
        assert math.isfinite(high), where
    assert (param_type.min, param_type.max) == (low, high), where


def test_given_options_win_and_the_table_fills_the_rest() -> None:
    table = KmsgSettings(cluster="from-file", node="n1", poll_interval_seconds=1.0)
    merged = lay_over(
        table,
        {"cluster": "given", "poll_interval_seconds": None, "journal": None},
        where="connect.kmsg",
    )
    assert (merged.cluster, merged.node, merged.poll_interval_seconds) == ("given", "n1", 1.0)
    with pytest.raises(click.UsageError, match=r"'--node' \(or connect.kmsg.node in the settings"):
        lay_over(KmsgSettings(cluster="c"), {}, where="connect.kmsg")
    with pytest.raises(click.BadParameter, match="unknown time zone"):
        lay_over(table, {"tz": "Mars/Olympus"}, where="connect.kmsg")
