"""``[connect.topo]``: the settings of ``gputriage connect topo``, each declared once.

The CLI's options are generated from this struct (:mod:`gputriage.cli.options`).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from connectors.prometheus import MetricsPort
from connectors.publish import HEARTBEAT_SECONDS
from connectors.settings import (
    Brokers,
    Cluster,
    HeartbeatSeconds,
    Node,
    PrintOnly,
)


class TopoSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How ``connect topo`` reads the node's GPU topology, and how often."""

    node: Node = None
    cluster: Cluster = None
    interval_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=1.0,
            le=86400,
            description="Seconds between reads; a snapshot is published only when it changed.",
        ),
    ] = 300.0
    nvml: Annotated[
        bool,
        msgspec.Meta(
            description="Read NVML where a driver is (else, or with --no-nvml, run nvidia-smi "
            "topo)."
        ),
    ] = True
    nvidia_smi: Annotated[
        str,
        msgspec.Meta(
            description="The nvidia-smi to run where NVML cannot be used.",
            extra={"metavar": "PATH"},
        ),
    ] = "nvidia-smi"
    timeout_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=1.0,
            le=600,
            description="Seconds one nvidia-smi run may take (a hung driver hangs it).",
        ),
    ] = 30.0
    metrics_port: MetricsPort | None = None
    """None serves no ``/metrics`` (the DaemonSet sets 9471)."""
    once: Annotated[bool, msgspec.Meta(description="Publish one snapshot, then exit.")] = False
    print_only: PrintOnly = False
    brokers: Brokers = None
    heartbeat_seconds: HeartbeatSeconds = HEARTBEAT_SECONDS
