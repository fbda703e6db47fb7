"""``[connect.podresources]``: the settings of ``gputriage connect podresources``, declared once.

The CLI's options are generated from this struct (:mod:`gputriage.cli.options`).
Only msgspec and the device rules are imported (not grpc): every command loads the
settings.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from connectors.podresources.devices import PREFIXES, RESOURCES
from connectors.prometheus import MetricsPort
from connectors.publish import HEARTBEAT_SECONDS
from connectors.settings import (
    Brokers,
    Cluster,
    GpuResourcePrefixes,
    GpuResources,
    HeartbeatSeconds,
    Node,
)

SOCKET: Final = "unix:///var/lib/kubelet/pod-resources/kubelet.sock"
"""The kubelet's default pod-resources endpoint: ``<root-dir>/pod-resources/kubelet.sock``,
so a kubelet with a non-default ``--root-dir`` (some distributions) has it elsewhere."""


class PodResourcesSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which kubelet endpoint ``connect podresources`` polls, how often, and what is a GPU."""

    node: Node = None
    cluster: Cluster = None
    socket: Annotated[
        str,
        msgspec.Meta(
            description="The kubelet's pod-resources endpoint (a kubelet with another --root-dir "
            "has it there).",
            extra={"metavar": "TARGET"},
        ),
    ] = SOCKET
    interval_seconds: Annotated[
        float, msgspec.Meta(ge=0.1, le=86400, description="Seconds between polls.")
    ] = 10.0
    timeout_seconds: Annotated[
        float, msgspec.Meta(ge=0.1, le=3600, description="Seconds one call may take.")
    ] = 10.0
    nvml: Annotated[
        bool,
        msgspec.Meta(
            description="Read NVML's GPU map at start where a driver is, so MIG device ids name "
            "their parent GPU and GPU instance (as XIDs do) and index ids their uuid."
        ),
    ] = True
    resources: GpuResources = RESOURCES
    resource_prefixes: GpuResourcePrefixes = PREFIXES
    brokers: Brokers = None
    metrics_port: MetricsPort | None = 9469
    heartbeat_seconds: HeartbeatSeconds = HEARTBEAT_SECONDS
