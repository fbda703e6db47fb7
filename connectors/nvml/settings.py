"""``[connect.nvml]``: the settings of ``gputriage connect nvml``, each declared once.

The CLI's options are generated from this struct (:mod:`gputriage.cli.options`).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from connectors.publish import HEARTBEAT_SECONDS
from connectors.settings import Brokers, Cluster, HeartbeatSeconds, Node, PrintOnly


class NvmlSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What ``connect nvml`` publishes: the GPU map, then NVML's XID events."""

    node: Node = None
    cluster: Cluster = None
    bindings: Annotated[
        bool,
        msgspec.Meta(
            description="Publish the bus id <-> uuid <-> index map at start, as identity-only GPU "
            "bindings (pods_known=false: they never unbind what dcgm-exporter bound)."
        ),
    ] = True
    once: Annotated[
        bool, msgspec.Meta(description="Publish the map, then exit (no XID watch).")
    ] = False
    print_only: PrintOnly = False
    brokers: Brokers = None
    heartbeat_seconds: HeartbeatSeconds = HEARTBEAT_SECONDS
