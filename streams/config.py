"""The ``[xid]`` settings, and the core's :class:`CoreSettings` resolved with them.

This module may read packaged data (the XID catalog); the core itself may not, which is
why the two are apart. ``[core]`` is the core's own
:class:`~streams.core.config.CoreSettings`, :class:`XidSettings` is ``[xid]`` (codes moved
between classes), and :func:`core_config` makes of the two the struct the core is given.

Traps: ``[core.severity]`` merges into the defaults; ``[xid]`` keys use ``_`` for ``-``
(``follow_up``), and a code under two classes ends in the later one in field order
(``fatal, app, follow_up, info, unknown``), not the file's; XID classes under ``[core]
xid`` are refused with a message saying where they go.
docs/configuration.md, design notes: the ``[xid]`` settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final

import msgspec

from schemas.types import XidClass
from schemas.xid_catalog import load_catalog
from streams.core.config import CoreSettings, XidRule, default_severity

XidCodes = tuple[Annotated[int, msgspec.Meta(ge=0, le=65535)], ...]


class XidSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[xid]`` table: codes to move into each class (empty: the catalog's class)."""

    fatal: Annotated[
        XidCodes, msgspec.Meta(description="XID codes to treat as hardware or driver faults.")
    ] = ()
    app: Annotated[XidCodes, msgspec.Meta(description="XID codes to treat as the workload's.")] = ()
    follow_up: Annotated[
        XidCodes,
        msgspec.Meta(description="XID codes that follow an earlier XID or name a recovery action."),
    ] = ()
    info: Annotated[XidCodes, msgspec.Meta(description="XID codes recorded as evidence only.")] = ()
    unknown: Annotated[
        XidCodes, msgspec.Meta(description="XID codes to treat as not in the catalog.")
    ] = ()


_CLASSES: Final[dict[str, XidClass]] = {
    "fatal": "fatal",
    "app": "app",
    "follow_up": "follow-up",
    "info": "info",
    "unknown": "unknown",
}
"""Each :class:`XidSettings` field's class (a test keeps it in step with ``XidClass``)."""


def catalog_policy() -> dict[int, XidRule]:
    """The XID policy as the packaged catalog states it."""
    return {
        code: XidRule(
            xid_class=info.xid_class,
            mnemonic=info.mnemonic,
            action=info.action,
            severity=info.severity,
            line_severity=info.line_severity,
        )
        for code, info in sorted(load_catalog().items())
    }


def apply_xid_overrides(policy: dict[int, XidRule], xid: XidSettings) -> dict[int, XidRule]:
    """Return ``policy`` with codes moved to the classes ``xid`` names."""
    result = dict(policy)
    for field in XidSettings.__struct_fields__:
        for code in getattr(xid, field):
            base = result.get(code, XidRule())
            result[code] = msgspec.structs.replace(base, xid_class=_CLASSES[field])
    return dict(sorted(result.items()))


def core_config(core: CoreSettings | None = None, xid: XidSettings | None = None) -> CoreSettings:
    """``[core]`` as the core is given it: the XID policy of ``[xid]`` over the catalog, and
    ``[core.severity]`` over the default severities."""
    core = core or CoreSettings()
    return msgspec.structs.replace(
        core,
        severity={**default_severity(), **core.severity},
        xid=apply_xid_overrides(catalog_policy(), xid or XidSettings()),
    )


XID_UNDER_CORE: Final = "core.xid: set XID classes in the [xid] table, not under [core]"


def xid_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """``[xid]`` with ``-`` spelled ``_`` (``follow-up`` and ``follow_up`` are one key)."""
    return {key.replace("-", "_"): value for key, value in table.items()}


def default_core_config() -> CoreSettings:
    """The defaults with the packaged XID catalog."""
    return core_config()
