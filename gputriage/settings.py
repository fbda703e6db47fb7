"""Settings: a TOML file overlaid with ``GPUTRIAGE_<SECTION>__<KEY>`` environment variables.

Precedence, lowest first: built-in defaults, the file (``--config FILE`` or
``$GPUTRIAGE_CONFIG``), then environment variables. Environment variables exist
for containers, where mounting a file for one threshold is a chore.

Traps:

* Environment values are strings, so each is parsed as a TOML value first:
  ``2`` is an integer, ``0.5`` a float, ``true`` a boolean and ``[13, 31]`` a
  list; anything that does not parse (``page``, ``Evicted``) stays a string.
  A string that happens to look like TOML (``2024-01-01`` is a date) must be
  quoted: ``GPUTRIAGE_X__Y='"2024-01-01"'``.
* ``__`` separates levels and names are lower-cased, so
  ``GPUTRIAGE_CORE__SEVERITY__HOST_OOM_KILL=page`` sets ``core.severity.host_oom_kill``
  and ``GPUTRIAGE_XID__FOLLOW_UP=[45]`` sets ``xid.follow_up`` (the XID table
  accepts ``_`` for ``-``).
* Unknown sections are errors, not ignored: a typo such as ``[cor]`` would
  otherwise silently run with the defaults. Unknown *keys* are rejected by the
  consumer of the section (:func:`streams.config.core_config_from`).
* Variables without ``__`` (``GPUTRIAGE_CONFIG`` itself) are not settings.
* The Kafka SASL password is never a setting: a ``password`` key in ``[kafka]``,
  from the file or from ``GPUTRIAGE_KAFKA__*``, is refused at load time, before
  it is stored anywhere a ``repr`` could show it. It is read only from
  ``$GPUTRIAGE_KAFKA_PASSWORD`` (captured here, masked) or from the file that
  ``kafka.sasl_password_file`` names (read by :meth:`Settings.kafka_settings`).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from connectors.kafka.config import (
    PASSWORD_ENV,
    KafkaConfigError,
    KafkaSettings,
    Secret,
    kafka_settings_from,
)
from schemas.topics import TopicConfigError, TopicSettings, topic_settings_from
from streams.config import ConfigError, core_config_from
from streams.core.config import CoreConfig

ENV_PREFIX: Final = "GPUTRIAGE_"
CONFIG_ENV: Final = "GPUTRIAGE_CONFIG"
SECTIONS: Final = ("core", "xid", "kafka", "topics", "processor", "log", "connect")
"""The tables a configuration file may hold (later: sources, sinks...)."""


class SettingsError(ValueError):
    """Settings that cannot be loaded or used; the message is one line naming the culprit."""


@dataclass(frozen=True)
class Settings:
    """Every section as plain data, after the environment overlay."""

    tables: dict[str, dict[str, Any]] = field(default_factory=dict)
    origin: str = ""
    """The file the settings came from, or empty for defaults and environment only."""
    kafka_password: Secret | None = field(default=None, repr=False, compare=False)
    """``$GPUTRIAGE_KAFKA_PASSWORD`` as it was at load time (masked even if printed)."""

    def section(self, name: str) -> dict[str, Any]:
        """One section's values (empty when not set anywhere)."""
        return self.tables.get(name, {})

    def core_config(self) -> CoreConfig:
        """The correlation core's configuration; :class:`SettingsError` names a bad key."""
        try:
            return core_config_from(core=self.section("core"), xid=self.section("xid"))
        except ConfigError as exc:
            where = f" in {self.origin}" if self.origin else ""
            raise SettingsError(f"invalid configuration{where}: {exc}") from None

    def kafka_settings(self) -> KafkaSettings:
        """The ``[kafka]`` table, validated, with the SASL password attached when SASL is on."""
        try:
            return kafka_settings_from(self.section("kafka"), password_env=self.kafka_password)
        except KafkaConfigError as exc:
            where = f" in {self.origin}" if self.origin else ""
            raise SettingsError(f"invalid configuration{where}: {exc}") from None

    def topic_settings(self) -> TopicSettings:
        """The ``[topics]`` table, validated."""
        try:
            return topic_settings_from(self.section("topics"))
        except TopicConfigError as exc:
            where = f" in {self.origin}" if self.origin else ""
            raise SettingsError(f"invalid configuration{where}: {exc}") from None


def load_settings(path: str | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Load ``path`` (or ``$GPUTRIAGE_CONFIG``, or nothing) and overlay the environment."""
    env = os.environ if environ is None else environ
    path = path or env.get(CONFIG_ENV) or None
    tables = _read_file(path) if path else {}
    for name, value in sorted(env.items()):
        if name.startswith(ENV_PREFIX) and "__" in name:
            _overlay(tables, name, value)
    _refuse_passwords(tables.get("kafka", {}), path)
    password = env.get(PASSWORD_ENV)
    return Settings(
        tables=tables,
        origin=path or "",
        kafka_password=Secret(password) if password else None,
    )


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
    try:
        with open(path, "rb") as file:
            data = tomllib.load(file)
    except OSError as exc:
        raise SettingsError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from None
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
    target[keys[-1]] = parse_env_value(text)


def parse_env_value(text: str) -> Any:
    """An environment value as the TOML value it spells, else as the plain string."""
    if "\n" in text or "\r" in text:
        return text
    try:
        return tomllib.loads(f"value = {text}")["value"]
    except tomllib.TOMLDecodeError:
        return text


def _expected() -> str:
    return "expected one of: " + ", ".join(SECTIONS)
