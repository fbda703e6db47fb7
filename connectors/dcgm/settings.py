"""``[connect.dcgm]``: the settings of ``gputriage connect dcgm``, each declared once.

The CLI's options are generated from this struct (:mod:`gputriage.cli.options`): a
field's description is its help text, its ``Meta`` range the option's.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from connectors.prometheus import MetricsPort
from connectors.publish import HEARTBEAT_SECONDS
from connectors.settings import Brokers, Cluster, HeartbeatSeconds, Node


class DcgmSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which dcgm-exporter ``connect dcgm`` scrapes, and how often."""

    url: Annotated[
        str | None,
        msgspec.Meta(
            description="The exporter's metrics URL, e.g. http://$NODE_IP:9400/metrics.",
            extra={"required": True, "metavar": "URL"},
        ),
    ] = None
    node: Node = None
    cluster: Cluster = None
    interval_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=0.1,
            le=86400,
            description="Seconds between scrapes (keep it well under the exporter's XID count "
            "window).",
        ),
    ] = 15.0
    timeout_seconds: Annotated[
        float, msgspec.Meta(ge=0.1, le=3600, description="Seconds one scrape may take.")
    ] = 10.0
    state_path: Annotated[
        str | None,
        msgspec.Meta(
            description="Keep the last scrape's state here, so a restart resumes instead of "
            "taking a baseline (XIDs during a baseline scrape are not reported).",
            extra={"metavar": "FILE", "path": {"dir_okay": False}},
        ),
    ] = None
    brokers: Brokers = None
    metrics_port: MetricsPort | None = 9467
    heartbeat_seconds: HeartbeatSeconds = HEARTBEAT_SECONDS
