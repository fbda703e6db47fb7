"""The ``[core]`` and ``[xid]`` settings, typed, and the core's :class:`CoreConfig` built from them.

This module may read packaged data (the XID catalog); the core itself may not,
which is why the two are apart. :class:`CoreSettings` and :class:`XidSettings`
are the sub-trees of :class:`gputriage.settings.Settings`; the core never sees
them, only the :class:`~streams.core.config.CoreConfig` that
:func:`core_config` makes of them::

    [core]
    grace_seconds = 1.0
    xid_repeat_count = 3

    [xid]            # move codes between classes
    fatal = [13]
    info = [79]

Traps:

* :class:`CoreSettings` repeats :class:`CoreConfig`'s fields (minus ``xid``) so
  that each can carry its range (``msgspec.Meta``) and fail at load with its
  path; ``tests/cli/test_settings.py`` checks that the two stay field-for-field
  alike, and the defaults are *read from* ``CoreConfig`` so they cannot drift.
* ``[core.severity]`` *merges* into the defaults: setting one incident type must
  keep the others' severities.
* ``[xid]`` keys are XID classes with ``_`` for ``-`` (``follow_up``). A code
  listed under two classes ends in the later one, in the order
  ``fatal, app, follow_up, info, unknown`` (the field order, not the file's).
* XID classes belong in ``[xid]``, never ``[core] xid``: that is refused with a
  message saying where they go (:func:`gputriage.settings.load_settings`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final

import msgspec

from schemas.types import Severity, XidClass
from schemas.xid_catalog import load_catalog
from streams.core.config import CoreConfig, XidRule

_D: Final = CoreConfig()
"""The core's own defaults: the single source of every number below."""

Seconds = Annotated[float, msgspec.Meta(ge=0, le=30 * 86400)]
"""A duration in seconds of event time (0 allowed: "no window"; at most 30 days)."""
Count = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]


class CoreSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[core]`` table: :class:`CoreConfig`'s thresholds with their ranges."""

    grace_seconds: Seconds = _D.grace_seconds
    eviction_window_seconds: Seconds = _D.eviction_window_seconds
    eviction_lookback_seconds: Seconds = _D.eviction_lookback_seconds
    failure_reasons: tuple[str, ...] = _D.failure_reasons
    drop_persist_seconds: Seconds = _D.drop_persist_seconds
    device_fault_near_seconds: Seconds = _D.device_fault_near_seconds
    device_failure_patterns: tuple[str, ...] = _D.device_failure_patterns
    oom_join_seconds: Seconds = _D.oom_join_seconds
    oom_quiet_seconds: Seconds = _D.oom_quiet_seconds
    cuda_oom_restarts: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = _D.cuda_oom_restarts
    cuda_oom_window_seconds: Seconds = _D.cuda_oom_window_seconds
    cuda_oom_patterns: tuple[str, ...] = _D.cuda_oom_patterns
    degraded_after_seconds: Seconds = _D.degraded_after_seconds
    degraded_quiet_seconds: Seconds = _D.degraded_quiet_seconds
    app_fault_quiet_seconds: Seconds = _D.app_fault_quiet_seconds
    app_fault_escalate_count: Count = _D.app_fault_escalate_count
    xid_repeat_count: Count = _D.xid_repeat_count
    xid_repeat_window_seconds: Seconds = _D.xid_repeat_window_seconds
    xid_coalesce_seconds: Seconds = _D.xid_coalesce_seconds
    xid_episode_gap_seconds: Seconds = _D.xid_episode_gap_seconds
    not_ready_statuses: tuple[str, ...] = _D.not_ready_statuses
    not_ready_grace_seconds: Seconds = _D.not_ready_grace_seconds
    starved_pending_seconds: Seconds = _D.starved_pending_seconds
    starved_failures: Count = _D.starved_failures
    scale_up_window_seconds: Seconds = _D.scale_up_window_seconds
    scale_up_attempt_gap_seconds: Seconds = _D.scale_up_attempt_gap_seconds
    scale_up_quiet_seconds: Seconds = _D.scale_up_quiet_seconds
    quota_severity: Severity = _D.quota_severity
    gpu_node_group_pattern: str = _D.gpu_node_group_pattern
    mismatch_threshold: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = _D.mismatch_threshold
    mismatch_after_seconds: Seconds = _D.mismatch_after_seconds
    mismatch_ignore_namespaces: tuple[str, ...] = _D.mismatch_ignore_namespaces
    nvlink_cross_numa: bool = _D.nvlink_cross_numa
    revision_interval_seconds: Seconds = _D.revision_interval_seconds
    fabric_window_seconds: Seconds = _D.fabric_window_seconds
    fabric_quiet_seconds: Seconds = _D.fabric_quiet_seconds
    max_evidence: Count = _D.max_evidence
    severity: dict[str, Severity] = {}
    """Overrides by incident type, merged into the defaults (not replacing them)."""


XidCodes = tuple[Annotated[int, msgspec.Meta(ge=0, le=65535)], ...]


class XidSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[xid]`` table: codes to move into each class (empty: the catalog's class)."""

    fatal: XidCodes = ()
    app: XidCodes = ()
    follow_up: XidCodes = ()
    info: XidCodes = ()
    unknown: XidCodes = ()


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


def core_config(core: CoreSettings | None = None, xid: XidSettings | None = None) -> CoreConfig:
    """The core's :class:`CoreConfig` from the typed ``[core]`` and ``[xid]`` settings."""
    core = core or CoreSettings()
    values = msgspec.structs.asdict(core)
    values["severity"] = {**_D.severity, **core.severity}
    values["xid"] = apply_xid_overrides(catalog_policy(), xid or XidSettings())
    return CoreConfig(**values)


XID_UNDER_CORE: Final = "core.xid: set XID classes in the [xid] table, not under [core]"


def xid_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """``[xid]`` with ``-`` spelled ``_`` (``follow-up`` and ``follow_up`` are one key)."""
    return {key.replace("-", "_"): value for key, value in table.items()}


def default_core_config() -> CoreConfig:
    """The DESIGN defaults with the packaged XID catalog."""
    return core_config()
