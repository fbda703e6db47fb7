"""Builds the core's :class:`~streams.core.config.CoreConfig` from the catalog and overrides.

This module may read packaged data (the XID catalog); the core itself may not,
which is why the two are apart.

User overrides have two parts, mirroring the ``[core]`` and ``[xid]`` tables of
the configuration file::

    [core]
    grace_seconds = 1.0
    xid_repeat_count = 3

    [xid]            # move codes between classes
    fatal = [13]
    info = [79]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, get_args

import msgspec

from schemas.types import XidClass
from schemas.xid_catalog import load_catalog
from streams.core.config import DEFAULT_SEVERITY, CoreConfig, XidRule

_CLASS_KEYS: dict[str, XidClass] = {name.replace("-", "_"): name for name in get_args(XidClass)}


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the key."""


def catalog_policy() -> dict[int, XidRule]:
    """The XID policy as the packaged catalog states it."""
    return {
        code: XidRule(
            xid_class=info.xid_class,
            mnemonic=info.mnemonic,
            action=info.action,
            severity=info.severity,
        )
        for code, info in sorted(load_catalog().items())
    }


def apply_xid_overrides(
    policy: dict[int, XidRule], overrides: Mapping[str, Any]
) -> dict[int, XidRule]:
    """Return ``policy`` with codes moved to the classes ``overrides`` names."""
    result = dict(policy)
    for key, codes in overrides.items():
        xid_class = _CLASS_KEYS.get(key.replace("-", "_"))
        if xid_class is None:
            known = ", ".join(sorted(_CLASS_KEYS))
            raise ConfigError(f"xid.{key}: unknown XID class (expected one of {known})")
        if not isinstance(codes, list) or not all(
            isinstance(c, int) and not isinstance(c, bool) for c in codes
        ):
            raise ConfigError(f"xid.{key}: expected a list of XID codes (integers)")
        for code in codes:
            base = result.get(code, XidRule())
            result[code] = msgspec.structs.replace(base, xid_class=xid_class)
    return dict(sorted(result.items()))


def core_config_from(
    core: Mapping[str, Any] | None = None, xid: Mapping[str, Any] | None = None
) -> CoreConfig:
    """A :class:`CoreConfig` from the ``[core]`` and ``[xid]`` tables of a config file.

    Raises :class:`ConfigError` naming the offending key.
    """
    policy = apply_xid_overrides(catalog_policy(), xid or {})
    values = dict(core or {})
    if "xid" in values:
        raise ConfigError("core.xid: set XID classes in the [xid] table, not under [core]")
    values["xid"] = policy
    if "severity" in values:
        overrides = values["severity"]
        if not isinstance(overrides, Mapping):
            raise ConfigError("core.severity: expected a table of incident type = severity")
        # Merge, do not replace: setting one type must keep the others' defaults.
        values["severity"] = {**DEFAULT_SEVERITY, **overrides}
    try:
        return msgspec.convert(values, CoreConfig, strict=False)
    except msgspec.ValidationError as exc:
        text = str(exc).replace("$.", "core.")
        raise ConfigError(text) from None


def default_core_config() -> CoreConfig:
    """The DESIGN defaults with the packaged XID catalog."""
    return core_config_from()
