"""Loads the XID catalog (``xid_catalog.toml`` beside this module).

The catalog is data so that a new driver's codes, or a site's disagreement with
NVIDIA about a code, never needs a code change: users override classes in their
configuration, and unknown codes are classed ``unknown`` rather than dropped.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources

import msgspec

from schemas.types import Severity, XidClass


class XidInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One catalog entry."""

    code: int
    mnemonic: str
    action: str = ""
    xid_class: XidClass = msgspec.field(default="unknown", name="class")
    severity: Severity = "info"
    line_severity: bool = False
    """The line names its own severity (``Fatal`` / ``Nonfatal``): NVLink5 XIDs 144-150."""


class _Catalog(msgspec.Struct, frozen=True):
    xid: tuple[XidInfo, ...]


@cache
def load_catalog() -> dict[int, XidInfo]:
    """The packaged catalog, by code. Raises ``ValueError`` if the file is malformed."""
    text = resources.files("schemas").joinpath("xid_catalog.toml").read_text(encoding="utf-8")
    try:
        catalog = msgspec.convert(tomllib.loads(text), _Catalog)
    except (tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise ValueError(f"xid_catalog.toml: {exc}") from exc
    return {entry.code: entry for entry in catalog.xid}
