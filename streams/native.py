"""The compiled core's guard, as the processor's side names it: :mod:`schemas.native`.

The mechanics live in the bottom layer because the connectors import the compiled
:mod:`schemas.keys` without importing ``streams``; this module only re-exports them
(each setting is declared once, there), for the CLI, the benches and the tests.
"""

from __future__ import annotations

from schemas.native import (
    COMPILED,
    GROUP,
    PACKAGES,
    PURE_ENV,
    ROOT,
    ROOT_MODULES,
    SCHEMA_MODULES,
    STALE_WARNING,
    STAMP,
    active,
    built,
    ext_tail,
    extension_modules,
    extensions,
    forced,
    guard,
    inputs,
    pure_requested,
    rule_modules,
    source_digest,
    source_of,
    stale_reason,
)

__all__ = [
    "COMPILED",
    "GROUP",
    "PACKAGES",
    "PURE_ENV",
    "ROOT",
    "ROOT_MODULES",
    "SCHEMA_MODULES",
    "STALE_WARNING",
    "STAMP",
    "active",
    "built",
    "ext_tail",
    "extension_modules",
    "extensions",
    "forced",
    "guard",
    "inputs",
    "pure_requested",
    "rule_modules",
    "source_digest",
    "source_of",
    "stale_reason",
]
