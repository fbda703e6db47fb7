"""Settings: a TOML file, environment overrides, and one-line errors naming the key."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any, get_args

import pytest

from gputriage.settings import Settings, SettingsError, load_settings, parse_env_value
from schemas.types import XidClass
from streams.config import default_core_config
from tests.paths import EXAMPLES


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "gputriage.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_defaults_without_file_or_environment() -> None:
    settings = load_settings(None, environ={})
    assert settings.tables == {}
    assert settings.core_config().grace_seconds == 0.5
    assert settings.core_config().xid[79].xid_class == "fatal"


def test_file_values_reach_the_core_config(tmp_path: Path) -> None:
    path = _config(tmp_path, "[core]\ngrace_seconds = 2.5\n\n[xid]\ninfo = [79]\n")
    config = load_settings(path, environ={}).core_config()
    assert config.grace_seconds == 2.5
    assert config.xid[79].xid_class == "info"


def test_environment_overrides_the_file(tmp_path: Path) -> None:
    path = _config(tmp_path, "[core]\ngrace_seconds = 2.5\nxid_repeat_count = 9\n")
    environ = {
        "GPUTRIAGE_CORE__GRACE_SECONDS": "2",
        "GPUTRIAGE_XID__FOLLOW_UP": "[13]",
        "GPUTRIAGE_CONFIG_UNRELATED": "ignored: no double underscore",
        "OTHER__THING": "ignored: no prefix",
    }
    config = load_settings(path, environ=environ).core_config()
    assert config.grace_seconds == 2.0
    assert config.xid_repeat_count == 9
    assert config.xid[13].xid_class == "follow-up"


def test_gputriage_config_names_the_file(tmp_path: Path) -> None:
    path = _config(tmp_path, "[core]\nxid_repeat_count = 7\n")
    settings = load_settings(None, environ={"GPUTRIAGE_CONFIG": path})
    assert settings.origin == path
    assert settings.core_config().xid_repeat_count == 7


def test_nested_environment_keys_build_tables() -> None:
    settings = load_settings(None, environ={"GPUTRIAGE_CORE__SEVERITY__HOST_OOM_KILL": "page"})
    assert settings.section("core") == {"severity": {"host_oom_kill": "page"}}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", 2),
        ("0.5", 0.5),
        ("true", True),
        ("[13, 31]", [13, 31]),
        ('"quoted"', "quoted"),
        ("page", "page"),
        ("Evicted,NodeLost", "Evicted,NodeLost"),
        ("2024-01-01", date(2024, 1, 1)),
        ("", ""),
        ("1\nx = 2", "1\nx = 2"),
    ],
)
def test_environment_values_parse_as_toml_or_stay_strings(text: str, value: Any) -> None:
    assert parse_env_value(text) == value


def test_a_bad_value_names_the_key_and_the_file(tmp_path: Path) -> None:
    path = _config(tmp_path, '[core]\ngrace_seconds = "soon"\n')
    with pytest.raises(SettingsError, match=r"core\.grace_seconds") as caught:
        load_settings(path, environ={}).core_config()
    assert path in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_unknown_key_is_named(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="grace_secs"):
        load_settings(_config(tmp_path, "[core]\ngrace_secs = 1\n"), environ={}).core_config()


def test_an_unknown_section_is_an_error_not_ignored(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"unknown section \[cor\]"):
        load_settings(_config(tmp_path, "[cor]\ngrace_seconds = 1\n"), environ={})
    with pytest.raises(SettingsError, match="GPUTRIAGE_COR__GRACE_SECONDS"):
        load_settings(None, environ={"GPUTRIAGE_COR__GRACE_SECONDS": "1"})


def test_a_section_that_is_not_a_table(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="core must be a table"):
        load_settings(_config(tmp_path, "core = 1\n"), environ={})


def test_an_empty_environment_key(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="SECTION__KEY"):
        load_settings(None, environ={"GPUTRIAGE_CORE__": "1"})


def test_invalid_toml_and_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="not valid TOML"):
        load_settings(_config(tmp_path, "[core\n"), environ={})
    with pytest.raises(SettingsError, match="cannot read config file"):
        load_settings(str(tmp_path / "missing.toml"), environ={})


def test_xid_overrides_are_validated(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"xid\.fatal"):
        load_settings(None, environ={"GPUTRIAGE_XID__FATAL": "thirteen"}).core_config()


# -- the typed tree: one conversion, errors with their path ----------------------------
def test_a_wrong_type_names_its_path_and_the_file(tmp_path: Path) -> None:
    path = _config(tmp_path, '[topics]\npartitions = "six"\n')
    with pytest.raises(SettingsError) as caught:
        load_settings(path, environ={})
    assert str(caught.value) == (
        f"invalid configuration in {path}: topics.partitions: Expected `int`, got `str`"
    )


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("GPUTRIAGE_CORE__GRACE_SECONDS", "-1", r"core\.grace_seconds: must be at least 0"),
        ("GPUTRIAGE_CORE__XID_REPEAT_COUNT", "0", r"core\.xid_repeat_count: must be at least 1"),
        ("GPUTRIAGE_TOPICS__REPLICATION_FACTOR", "0", r"topics\.replication_factor: must be at"),
        ("GPUTRIAGE_CONNECT__K8S__BUFFER_SIZE", "0", r"connect\.k8s\.buffer_size: must be at"),
        ("GPUTRIAGE_CONNECT__KMSG__METRICS_PORT", "70000", r"connect\.kmsg\.metrics_port: must"),
        ("GPUTRIAGE_LOG__LEVEL", "verbose", r"log\.level: 'verbose' is not a log level"),
        ("GPUTRIAGE_LOG__FORMAT", "xml", r"log\.format: Invalid enum value 'xml'"),
        ("GPUTRIAGE_XID__FATAL", "[-1]", r"xid\.fatal\[0\]: must be at least 0"),
    ],
)
def test_a_bad_value_fails_at_load_with_its_path(variable: str, value: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message) as caught:
        load_settings(None, environ={variable: value})
    assert "\n" not in str(caught.value)


def test_an_unknown_key_lists_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"core\.grace_secs: unknown key \(expected one of: "):
        load_settings(_config(tmp_path, "[core]\ngrace_secs = 1\n"), environ={})
    with pytest.raises(SettingsError, match=r"xid\.bogus: unknown key .*follow_up"):
        load_settings(None, environ={"GPUTRIAGE_XID__BOGUS": "[1]"})


def test_xid_classes_under_core_are_refused_with_where_they_go() -> None:
    with pytest.raises(SettingsError, match=r"set XID classes in the \[xid\] table"):
        load_settings(None, environ={"GPUTRIAGE_CORE__XID": "[1]"})


def test_the_xid_table_accepts_dashes_and_underscores(tmp_path: Path) -> None:
    path = _config(tmp_path, '[xid]\n"follow-up" = [13]\n')
    assert load_settings(path, environ={}).core_config().xid[13].xid_class == "follow-up"


def test_the_default_settings_give_the_default_core_and_every_xid_class() -> None:
    from streams.config import _CLASSES, XidSettings  # noqa: PLC0415

    assert load_settings(None, environ={}).core_config() == default_core_config()
    assert set(_CLASSES) == set(XidSettings.__struct_fields__)
    assert set(_CLASSES.values()) == set(get_args(XidClass))


def test_the_tree_is_typed_and_frozen() -> None:
    settings = load_settings(None, environ={"GPUTRIAGE_TOPICS__PARTITIONS": "12"})
    assert isinstance(settings, Settings)
    assert settings.topics.partitions == 12
    assert settings.connect.kmsg.metrics_port == 9465
    with pytest.raises(AttributeError):
        settings.topics = settings.topics  # type: ignore[misc]


def test_the_example_file_is_the_defaults() -> None:
    assert load_settings(str(EXAMPLES / "gputriage.toml"), environ={}).tables == {}


def test_every_number_of_every_table_has_a_range() -> None:
    """A bound on both sides of every numeric setting (so never inf, never nan)."""
    import msgspec.inspect  # noqa: PLC0415

    def numbers(kind: Any, path: str) -> list[tuple[str, Any]]:
        if isinstance(kind, msgspec.inspect.StructType):
            return [n for f in kind.fields for n in numbers(f.type, f"{path}.{f.name}")]
        if isinstance(kind, msgspec.inspect.UnionType):
            return [n for t in kind.types for n in numbers(t, path)]
        if isinstance(kind, msgspec.inspect.Metadata):
            return numbers(kind.type, path)
        if isinstance(kind, msgspec.inspect.VarTupleType | msgspec.inspect.ListType):
            return numbers(kind.item_type, f"{path}[]")
        if isinstance(kind, msgspec.inspect.IntType | msgspec.inspect.FloatType):
            return [(path, kind)]
        return []

    found = numbers(msgspec.inspect.type_info(Settings), "")
    assert len(found) > 30
    for path, kind in found:
        assert kind.ge is not None or kind.gt is not None, path
        assert kind.le is not None or kind.lt is not None, path


@pytest.mark.parametrize("table", ["core", "xid", "processor"])
def test_each_field_of_the_table_is_declared_once_with_a_one_line_description(
    table: str,
) -> None:
    """The table is its owner's struct itself (no mirror to keep alike), and each field
    carries the description that the CLI and the docs show."""
    import msgspec.inspect  # noqa: PLC0415

    from streams.app.settings import ProcessorSettings  # noqa: PLC0415
    from streams.config import XidSettings  # noqa: PLC0415
    from streams.core.config import CoreSettings  # noqa: PLC0415

    owner = {"core": CoreSettings, "xid": XidSettings, "processor": ProcessorSettings}[table]
    assert {f.name: f.type for f in msgspec.structs.fields(Settings)}[table] is owner
    info = msgspec.inspect.type_info(owner)
    assert isinstance(info, msgspec.inspect.StructType)
    for field in info.fields:
        kind = field.type
        if isinstance(kind, msgspec.inspect.UnionType):  # ``X | None``: described inside
            (kind,) = (t for t in kind.types if not isinstance(t, msgspec.inspect.NoneType))
        assert isinstance(kind, msgspec.inspect.Metadata), f"{table}.{field.name}"
        description = (kind.extra_json_schema or {}).get("description", "")
        assert description.endswith("."), f"{table}.{field.name}: {description!r}"
        assert "\n" not in description
        assert len(description) <= 80, f"{table}.{field.name}: {len(description)} characters"


def test_the_processor_settings_load_without_the_kafka_client() -> None:
    """Every command loads the settings (``replay`` too): the ``[processor]`` struct lives
    apart from the worker so that declaring it never imports aiokafka."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    code = (
        "import sys, streams.app.settings; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'aiokafka'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


def test_a_severity_set_under_core_keeps_the_other_defaults() -> None:
    from streams.core.config import default_severity  # noqa: PLC0415

    defaults = default_severity()
    other = next(kind for kind, level in defaults.items() if kind != "host_oom_kill")
    environ = {"GPUTRIAGE_CORE__SEVERITY__HOST_OOM_KILL": "info"}
    severity = load_settings(None, environ=environ).core_config().severity
    assert severity["host_oom_kill"] == "info"
    assert severity[other] == defaults[other]
    assert set(severity) == set(defaults)


def test_an_unknown_core_key_does_not_offer_the_xid_policy() -> None:
    """``xid`` is a field of the core's struct but not a key of ``[core]``."""
    with pytest.raises(SettingsError, match=r"core\.grace_secs: unknown key") as caught:
        load_settings(None, environ={"GPUTRIAGE_CORE__GRACE_SECS": "1"})
    known = str(caught.value).split("expected one of: ", 1)[1].rstrip(")").split(", ")
    assert "grace_seconds" in known
    assert "xid" not in known
