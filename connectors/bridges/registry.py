"""Which module serves which bridge kind, loaded only when that kind runs.

``gputriage bridge <kind>`` imports ``connectors.bridges.<kind>`` and nothing else: the
runner knows no vendor, and a vendor's dependencies (``slack_sdk``) are imported only
by the bridge that needs them. ``[bridge] modules = {name = "package.module"}`` adds a
kind served by a module of the operator's own (the tests' JSON receiver is one).

An endpoint module exposes (see :mod:`connectors.bridges.base`):

* ``Options``: a frozen ``msgspec.Struct`` with ``forbid_unknown_fields``, every field
  defaulted, holding its ``[bridge.<kind>]`` settings (never a secret);
* ``build(options, http, environ=None) -> Endpoint``: ``http`` is the bridge's shared
  ``aiohttp.ClientSession``, ``environ`` the environment secrets are read from.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from types import ModuleType
from typing import Final

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
    """The module of ``kind``, checked to have ``Options`` and ``build``."""
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
    for attribute in ("Options", "build"):
        if not hasattr(module, attribute):
            raise UnknownKind(f"bridge kind {kind!r}: module {name} has no {attribute}")
    return module
