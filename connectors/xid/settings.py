"""``[connect.kmsg]``: the settings of ``gputriage connect kmsg``, each declared once.

The CLI's options are generated from this struct (:mod:`gputriage.cli.options`):
a field's description is its help text, its ``Meta`` range the option's. Only
msgspec, the paths and the time parser are imported: every command loads the settings.

Traps: ``boot_time`` stays the text it was given (RFC 3339 or epoch seconds) and is
checked here, at load, so a bad value names its key; the reader gets it parsed
(:meth:`KmsgSettings.boot_datetime`). ``tz`` is checked here for the same reason.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

from connectors.prometheus import MetricsPort
from connectors.publish import HEARTBEAT_SECONDS
from connectors.settings import Brokers, Cluster, HeartbeatSeconds, Node, Once
from connectors.times import parse_time
from connectors.xid.paths import BOOT_ID_PATH, DEFAULT_STATE, DEVICE, JOURNALCTL, PROC_STAT


def _text(description: str, **extra: object) -> msgspec.Meta:
    return msgspec.Meta(description=description, extra=extra)


class KmsgSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What ``connect kmsg`` reads (the device, a journal or a log file) and how."""

    node: Node = None
    cluster: Cluster = None
    device: Annotated[str, _text("The kmsg device.")] = DEVICE
    state_path: Annotated[
        str,
        _text(
            "Where the boot id and last sequence number are kept (a hostPath in a DaemonSet).",
            metavar="FILE",
        ),
    ] = DEFAULT_STATE
    boot_id_file: Annotated[str, _text("The current boot id.")] = BOOT_ID_PATH
    proc_stat: Annotated[str, _text("Where btime is read.")] = PROC_STAT
    boot_time: Annotated[
        str | None,
        _text(
            "Override the boot time (RFC 3339 or epoch seconds; default: btime).", metavar="TIME"
        ),
    ] = None
    brokers: Brokers = None
    metrics_port: MetricsPort | None = 9465
    heartbeat_seconds: HeartbeatSeconds = HEARTBEAT_SECONDS
    poll_interval_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=0.01, le=10.0, description="Seconds between reads when the device has nothing new."
        ),
    ] = 0.2
    journal: Annotated[
        bool, _text("Follow the journal's kernel entries (journalctl) instead of the device.")
    ] = False
    journalctl: Annotated[str, _text("With --journal.")] = JOURNALCTL
    journal_dir: Annotated[str, _text("With --journal: journalctl -D DIR.")] = ""
    log_file: Annotated[
        str,
        _text(
            "Follow this kernel log file instead (dmesg -w, dmesg -T, syslog kern.log), "
            "like tail -F: rotation by rename or truncation is followed.",
            metavar="FILE",
        ),
    ] = ""
    tz: Annotated[
        str,
        _text("Time zone of dmesg -T and syslog times (the node's local zone).", metavar="ZONE"),
    ] = "UTC"
    year: (
        Annotated[
            int,
            msgspec.Meta(
                ge=1970,
                le=9999,
                description="Year of syslog times, which have none (default: this year).",
            ),
        ]
        | None
    ) = None
    nvml: Annotated[
        bool,
        _text(
            "Put GPU uuids and indexes on XIDs from NVML's bus id map (where a driver is; "
            "without one, XIDs carry bus ids and GPU bindings name their GPUs)."
        ),
    ] = True
    once: Once = False

    def __post_init__(self) -> None:
        if self.boot_time is not None:
            try:
                parse_time(self.boot_time, epoch_seconds=True)
            except ValueError as exc:
                raise ValueError(f"boot_time: {exc}") from None
        if not _is_time_zone(self.tz):
            raise ValueError(f"tz: unknown time zone {self.tz!r}")

    @property
    def kind(self) -> str:
        """The ``source`` label of the metrics: which of the three readers runs."""
        return "journal" if self.journal else "file" if self.log_file else "kmsg"

    def boot_datetime(self) -> datetime | None:
        """``boot_time`` parsed (checked at load, so it parses)."""
        return None if self.boot_time is None else parse_time(self.boot_time, epoch_seconds=True)


def _is_time_zone(name: str) -> bool:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # noqa: PLC0415 - only when set

    if name == "UTC":
        return True
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return False
    return True
