"""Settings: ONE typed tree, from a TOML file and ``GPUTRIAGE_<SECTION>__<KEY>`` variables.

:class:`Settings` embeds each owner's frozen msgspec ``Struct``; :func:`load_settings`
builds it with ONE ``msgspec.convert``, so every value is validated once, at load, and an
error names its path. The structs own every default; CLI options default to unset and only
override what was typed. Precedence, lowest first: defaults, the file (``--config`` or
``$GPUTRIAGE_CONFIG``), environment variables.

Traps: an environment value is parsed as a TOML value first (quote a string that looks
like TOML: a date); ``__`` separates levels and names are lower-cased; unknown sections
and keys are errors, never ignored; variables without ``__`` are not settings; the Kafka
SASL password is never a setting (refused before the conversion, so no error can quote
it). In full: docs/configuration.md, design notes: the settings tree.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from connectors.autoscaler.settings import AutoscalerSettings
from connectors.bounded import read_small
from connectors.dcgm.settings import DcgmSettings
from connectors.k8s.settings import K8sSettings
from connectors.kafka.config import (
    PASSWORD_ENV,
    KafkaConfigError,
    KafkaSettings,
    Secret,
    check_brokers,
    check_kafka,
    kafka_table,
    with_password,
)
from connectors.nvml.settings import NvmlSettings
from connectors.podresources.settings import PodResourcesSettings
from connectors.topology.settings import TopoSettings
from connectors.writeback.settings import WritebackSettings
from connectors.xid.settings import KmsgSettings
from gputriage.logs import LogSettings
from schemas.topics import (
    TopicConfigError,
    TopicSettings,
    state_topic,
    topic_layout,
    validation_text,
)
from streams.app.settings import ProcessorSettings
from streams.bridges.settings import BridgeSettings, bridge_table
from streams.config import XID_UNDER_CORE, XidSettings, core_config, xid_table
from streams.core.config import CoreSettings

ENV_PREFIX: Final = "GPUTRIAGE_"
CONFIG_ENV: Final = "GPUTRIAGE_CONFIG"


class SettingsError(ValueError):
    """Settings that cannot be loaded or used; the message is one line naming the culprit.

    Trap: a message quotes what it refuses (an unknown key, a section, a variable's
    name), which may hold a newline or another control character: those are written
    as escapes (``\\n``), so the message stays one line and still shows the culprit.
    """

    def __init__(self, message: str) -> None:
        super().__init__("".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in message))


class ConnectSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[connect]``: one table per connector, each its family's own settings struct.

    A table's keys are its command's options with ``_`` for ``-`` (the CLI is generated
    from the same structs: :mod:`gputriage.cli.options`).
    """

    k8s: K8sSettings = K8sSettings()
    kmsg: KmsgSettings = KmsgSettings()
    dcgm: DcgmSettings = DcgmSettings()
    nvml: NvmlSettings = NvmlSettings()
    autoscaler: AutoscalerSettings = AutoscalerSettings()
    podresources: PodResourcesSettings = PodResourcesSettings()
    topo: TopoSettings = TopoSettings()


class Settings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every table, typed. Build it with :func:`load_settings` (which checks it once).

    ``origin`` and ``kafka_password`` are not tables: :func:`load_settings` fills
    them after the conversion (a file cannot set them: only :data:`SECTIONS`
    reach the conversion).
    """

    core: CoreSettings = CoreSettings()
    xid: XidSettings = XidSettings()
    kafka: KafkaSettings = KafkaSettings()
    """Validated, *without* the SASL password: see :meth:`kafka_settings`."""
    topics: TopicSettings = TopicSettings()
    processor: ProcessorSettings = ProcessorSettings()
    log: LogSettings = LogSettings()
    connect: ConnectSettings = ConnectSettings()
    bridge: BridgeSettings = BridgeSettings()
    """``[bridge]`` and its ``[bridge.<kind>]`` tables (:mod:`streams.bridges.settings`)."""
    writeback: WritebackSettings = WritebackSettings()
    """``[writeback]``: what ``gputriage writeback`` writes to Kubernetes."""
    origin: str = ""
    """The file the settings came from, or empty for defaults and environment only."""
    kafka_password: Secret | None = None
    """``$GPUTRIAGE_KAFKA_PASSWORD`` as it was at load time (masked even if printed)."""

    @property
    def tables(self) -> dict[str, dict[str, Any]]:
        """What was set (file and environment), as plain data; defaults left out."""
        tables = {name: self.section(name) for name in SECTIONS}
        return {name: table for name, table in tables.items() if table}

    def section(self, name: str) -> dict[str, Any]:
        """One table's explicitly set values, as plain data (empty when none)."""
        value = explicit(getattr(self, name))
        return value if isinstance(value, dict) else {}

    def core_config(self) -> CoreSettings:
        """``[core]`` resolved for the core: its XID policy from ``[xid]`` and the catalog."""
        return core_config(self.core, self.xid)

    def kafka_settings(self) -> KafkaSettings:
        """``[kafka]`` with the SASL password attached when SASL is on.

        :class:`SettingsError` when the password is missing, set twice, or unreadable.
        """
        try:
            return with_password(self.kafka, self.kafka_password)
        except KafkaConfigError as exc:
            raise SettingsError(f"invalid configuration{self._where()}: {exc}") from None

    def topic_settings(self) -> TopicSettings:
        """The ``[topics]`` table."""
        return self.topics

    def _where(self) -> str:
        return f" in {self.origin}" if self.origin else ""


SECTIONS: Final = tuple(
    info.name
    for info in msgspec.structs.fields(Settings)
    if isinstance(info.type, type) and issubclass(info.type, msgspec.Struct)
)
"""The tables a configuration file may hold: the fields of :class:`Settings` that are
structs (not ``origin`` and ``kafka_password``), in their order."""


def explicit(value: Any) -> Any:
    """A struct as plain data without the fields that hold their defaults (recursively).

    What ``[connect.<source>]`` tables contribute to a command, and what
    :attr:`Settings.tables` shows: a default is not something the user said.
    """
    if not isinstance(value, msgspec.Struct):
        return msgspec.to_builtins(value)
    result: dict[str, Any] = {}
    for info in msgspec.structs.fields(value):
        current = getattr(value, info.name)
        if isinstance(current, Secret):
            continue
        default = (
            info.default_factory()
            if info.default_factory is not msgspec.NODEFAULT
            else info.default
        )
        if current == default:
            continue
        shown = explicit(current)
        if shown != {}:
            result[info.name] = shown
    return result


def load_settings(path: str | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Load ``path`` (or ``$GPUTRIAGE_CONFIG``, or nothing), overlay the environment, validate.

    Raises :class:`SettingsError` with one line naming the file and the key.
    """
    env = os.environ if environ is None else environ
    path = path or env.get(CONFIG_ENV) or None
    tables = _read_file(path) if path else {}
    for name, value in sorted(env.items()):
        if name.startswith(ENV_PREFIX) and "__" in name:
            _overlay(tables, name, value)
    _refuse_passwords(tables.get("kafka", {}), path)
    where = f" in {path}" if path else ""
    if "xid" in tables.get("core", {}):
        raise SettingsError(f"invalid configuration{where}: {XID_UNDER_CORE}")
    try:
        problem = _non_finite(tables)
        if problem is not None:
            raise SettingsError(f"invalid configuration{where}: {problem}")
        settings = msgspec.convert(_normalised(tables), Settings)
        check_kafka(settings.kafka)
        _check_across(settings)
    except RecursionError:
        raise SettingsError(f"invalid configuration{where}: {_TOO_DEEP}") from None
    except msgspec.ValidationError as exc:
        raise SettingsError(f"invalid configuration{where}: {_describe(exc)}") from None
    except (KafkaConfigError, TopicConfigError) as exc:
        raise SettingsError(f"invalid configuration{where}: {exc}") from None
    password = env.get(PASSWORD_ENV)
    return msgspec.structs.replace(
        settings, origin=path or "", kafka_password=Secret(password) if password else None
    )


def _non_finite(value: Any, path: str = "") -> str | None:
    """``path: nan is not a finite number`` for the first nan or infinity in the tables.

    TOML spells them ``nan`` and ``inf``; no setting means either, and a range
    constraint does not refuse them all (``nan >= 0`` is false, so msgspec would
    say "must be at least 0" of a value that is not below anything).
    """
    if isinstance(value, float) and not math.isfinite(value):
        return f"{path}: {value} is not a finite number"
    items = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in items:
        where = f"{path}[{key}]" if isinstance(key, int) else f"{path}.{key}" if path else str(key)
        problem = _non_finite(child, where)
        if problem is not None:
            return problem
    return None


def _check_across(settings: Settings) -> None:
    """What one field's constraint cannot say: values checked against other tables.

    Raises :class:`KafkaConfigError` or :class:`TopicConfigError`, each naming its key.
    """
    check_app_id(settings.processor.app_id, settings.topics, "processor.app_id")
    for source in ConnectSettings.__struct_fields__:
        brokers = getattr(getattr(settings.connect, source), "brokers", None)
        if brokers is not None:
            check_brokers(brokers, f"connect.{source}.brokers")


def check_app_id(app_id: str, topics: TopicSettings, where: str) -> None:
    """A processor app id names its state topic, ``<prefix>.state.<app id>``: it must make a
    legal topic name (:class:`TopicConfigError` naming ``where`` otherwise)."""
    try:
        state_topic(topic_layout(topics), app_id)
    except TopicConfigError as exc:
        raise TopicConfigError(
            f"{where}: {app_id!r} does not make a legal state topic name ({exc}: only "
            "letters, digits, '.', '_' and '-', at most 249 characters in all)"
        ) from None


def _normalised(tables: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The spellings each table accepts, made the fields' own (before the one conversion)."""
    values: dict[str, Any] = dict(tables)
    if "xid" in values:
        values["xid"] = xid_table(values["xid"])
    if "kafka" in values:
        values["kafka"] = kafka_table(values["kafka"])
    if isinstance(values.get("bridge"), dict):
        values["bridge"] = bridge_table(values["bridge"])
    connect = values.get("connect")
    if isinstance(connect, dict):
        values["connect"] = {
            source: (
                {key.replace("-", "_"): v for key, v in options.items()}
                if isinstance(options, dict)
                else options
            )
            for source, options in connect.items()
        }
    return values


def _describe(exc: msgspec.ValidationError) -> str:
    """msgspec's error as ``path.to.key: reason``, listing the keys an unknown one could be."""
    text = validation_text(exc)
    key, sep, rest = text.partition(": ")
    if sep and rest == "unknown key":
        *parents, name = key.split(".")
        table = _struct_at(parents)
        if table is not None:
            known = ", ".join(
                f
                for f in table.__struct_fields__
                if f != "sasl_password" and not (table is CoreSettings and f == "xid")
            )
            if not parents:
                return f"unknown section [{name}] (expected one of: {known})"
            if parents[0] == "connect" and len(parents) == 1:
                return f"unknown section connect.{name} (expected one of: {known})"
            if parents[0] == "connect":
                source = parents[1]
                return f"unknown key {key} (see 'gputriage connect {source} --help')"
            return f"{key}: unknown key (expected one of: {known})"
    return text


def _struct_at(path: list[str]) -> type[msgspec.Struct] | None:
    """The struct type at a dotted path of :class:`Settings` (for the list of known keys)."""
    kind: Any = Settings
    for name in path:
        if not (isinstance(kind, type) and issubclass(kind, msgspec.Struct)):
            return None
        info = {f.name: f for f in msgspec.structs.fields(kind)}.get(name)
        if info is None:
            return None
        kind = info.type
    return kind if isinstance(kind, type) and issubclass(kind, msgspec.Struct) else None


def _refuse_passwords(kafka: Mapping[str, Any], path: str | None) -> None:
    """Reject a password in ``[kafka]`` before it is stored (the error never quotes it)."""
    for key in kafka:
        if "password" in key and key != "sasl_password_file":
            source = f"{path} or " if path else ""
            raise SettingsError(
                f"kafka.{key} (in {source}the environment): the SASL password is never read "
                f"from settings; set ${PASSWORD_ENV} or kafka.sasl_password_file"
            )


def _read_file(path: str) -> dict[str, dict[str, Any]]:
    """The file's tables; :class:`SettingsError` for anything that is not a settings file.

    Traps: the read is bounded (:func:`connectors.bounded.read_small`), so ``--config
    /dev/zero`` is one line, not all of memory; tomllib parses nesting by recursion, so
    arrays or tables nested thousands deep are a ``RecursionError``, reported as TOML
    that is not valid.
    """
    try:
        data = tomllib.loads(read_small(path).decode("utf-8"))
    except OSError as exc:
        raise SettingsError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise SettingsError(
            f"config file {path} is not UTF-8 text (byte {exc.start}: {exc.object[exc.start]:#04x})"
        ) from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from None
    except RecursionError:
        raise SettingsError(f"config file {path} is not valid TOML: {_TOO_DEEP}") from None
    tables: dict[str, dict[str, Any]] = {}
    for name, table in data.items():
        if name not in SECTIONS:
            raise SettingsError(f"config file {path}: unknown section [{name}] ({_expected()})")
        if not isinstance(table, dict):
            raise SettingsError(f"config file {path}: {name} must be a table ([{name}])")
        tables[name] = table
    return tables


def _overlay(tables: dict[str, dict[str, Any]], name: str, text: str) -> None:
    section, *keys = name[len(ENV_PREFIX) :].lower().split("__")
    if section not in SECTIONS:
        raise SettingsError(f"environment variable {name}: unknown section {section!r}")
    if not keys or not all(keys):
        raise SettingsError(f"environment variable {name}: expected {ENV_PREFIX}SECTION__KEY")
    target = tables.setdefault(section, {})
    for key in keys[:-1]:
        child = target.get(key)
        if not isinstance(child, dict):
            child = target[key] = {}
        target = child
    try:
        target[keys[-1]] = parse_env_value(text)
    except RecursionError:
        raise SettingsError(f"environment variable {name}: {_TOO_DEEP}") from None


def parse_env_value(text: str) -> Any:
    """An environment value as the TOML value it spells, else as the plain string."""
    if "\n" in text or "\r" in text:
        return text
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


_TOO_DEEP: Final = "values nested too deeply"
"""What a value nested past Python's recursion limit is called (no setting nests past 3)."""


def _expected() -> str:
    return "expected one of: " + ", ".join(SECTIONS)
