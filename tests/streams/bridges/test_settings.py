"""Every bridge setting is declared once, as the conventions say: a range on each number,
a one-line description (the CLI's help), ``_seconds`` on each duration."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import msgspec
import msgspec.inspect as mi
import pytest

from connectors.bridges.registry import KINDS, UnknownKind, load, settings_type
from streams.bridges.settings import BridgeSettings, RouteSettings

UNDESCRIBED = {(BridgeSettings, "metrics_port")}
"""Read by ``gputriage.cli.common.setting_range``, which does not unwrap a description yet."""


def _structs() -> list[type[Any]]:
    return [BridgeSettings, RouteSettings, *(settings_type(load(kind)) for kind in KINDS)]


@pytest.mark.parametrize("struct", _structs(), ids=lambda s: f"{s.__module__}.{s.__name__}")
def test_each_field_has_a_description_a_range_and_a_unit(struct: type[Any]) -> None:
    info = mi.type_info(struct)
    assert isinstance(info, mi.StructType)
    assert struct.__name__.endswith("Settings")
    assert struct.__struct_config__.forbid_unknown_fields
    for field in info.fields:
        where = f"{struct.__name__}.{field.name}"
        assert not field.name.endswith("_s"), f"{where}: durations end in _seconds"
        kind = field.type
        if isinstance(kind, mi.UnionType):
            (kind,) = (t for t in kind.types if not isinstance(t, mi.NoneType))
        if (struct, field.name) in UNDESCRIBED:
            continue
        assert isinstance(kind, mi.Metadata), f"{where}: no description"
        description = (
            kind.extra_json_schema.get("description", "") if kind.extra_json_schema else ""
        )
        assert description, f"{where}: no description"
        assert "\n" not in description, f"{where}: the description is one line"
        if isinstance(kind.type, mi.IntType | mi.FloatType):
            number = kind.type
            assert number.ge is not None or number.gt is not None, f"{where}: no lower bound"
            assert number.le is not None or number.lt is not None, f"{where}: no upper bound"
        if field.name.endswith("_seconds"):
            assert isinstance(kind.type, mi.FloatType), f"{where}: a duration is a float"


def test_a_module_of_an_operators_own_may_still_name_its_struct_options() -> None:
    class Options(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
        pass

    module = ModuleType("older")
    module.Options = Options  # type: ignore[attr-defined]
    assert settings_type(module) is Options
    with pytest.raises(UnknownKind, match="has no Settings"):
        load("odd", {"odd": "tests.kafka_helpers"})
