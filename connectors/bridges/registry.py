"""Which module serves which bridge kind, loaded only when that kind runs.

``gputriage bridge <kind>`` imports ``connectors.bridges.<kind>`` and nothing else: the
runner knows no vendor, and a vendor's dependencies (``slack_sdk``) are imported only
by the bridge that needs them. ``[bridge] modules = {name = "package.module"}`` adds a
kind served by a module of the operator's own (the tests' JSON receiver is one).

An endpoint module exposes (see :mod:`connectors.bridges.base`):

* ``Settings``: a frozen ``msgspec.Struct`` with ``forbid_unknown_fields``, every field
  defaulted, holding its ``[bridge.<kind>]`` settings (never a secret); a module of an
  operator's own may still call it ``Options``, its earlier name (:func:`settings_type`);
* ``build(options, http, environ=None) -> Endpoint``: ``http`` is the bridge's shared
  ``aiohttp.ClientSession``, ``environ`` the environment secrets are read from.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Final

KINDS: Final[Mapping[str, str]] = {
    "pagerduty": "connectors.bridges.pagerduty",
    "slack": "connectors.bridges.slack",
    "alertmanager": "connectors.bridges.alertmanager",
    "webhook": "connectors.bridges.webhook",
}
"""The kinds gputriage ships, and their modules."""


class UnknownKind(LookupError):
    """A kind no module serves (one line naming the kinds that exist)."""


def modules(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every kind and its module: the shipped ones, then ``extra`` (which may not replace them)."""
    return {**(extra or {}), **KINDS}


def load(kind: str, extra: Mapping[str, str] | None = None) -> ModuleType:
    """The module of ``kind``, checked to have ``Settings`` and ``build``."""
    known = modules(extra)
    name = known.get(kind)
    if name is None:
        raise UnknownKind(f"unknown bridge kind {kind!r} (expected one of: {', '.join(known)})")
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and name.startswith(exc.name):
            raise UnknownKind(f"bridge kind {kind!r}: module {name} is not installed") from None
        raise
    if not hasattr(module, "Settings") and not hasattr(module, "Options"):
        raise UnknownKind(f"bridge kind {kind!r}: module {name} has no Settings")
    if not hasattr(module, "build"):
        raise UnknownKind(f"bridge kind {kind!r}: module {name} has no build")
    return module


def settings_type(module: ModuleType) -> type[Any]:
    """The struct of a kind's ``[bridge.<kind>]`` table: ``Settings`` (``Options`` in
    modules written before the name changed)."""
    found: type[Any] = getattr(module, "Settings", None) or module.Options
    return found
