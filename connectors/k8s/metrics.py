"""The Kubernetes connector's Prometheus metrics (one registry per connector, like the processor).

Events out, dead letters, buffered events, backpressure, delivery failures, relists,
unchanged updates, watch restarts, API errors and the leader flag, each
``gputriage_connector_*``.

Lives in ``connectors/`` (not ``streams/app/metrics.py``): the layer contract forbids
connectors from importing the processor's modules. Trap: the four delivery metrics are
defined once, in :class:`connectors.delivery.DeliveryMetrics`, never here.
The table: docs/connectors.md, design notes: connectors/k8s/metrics.py.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from connectors.delivery import DeliveryMetrics
from connectors.prometheus import serve_metrics


class ConnectorMetrics:
    """Every metric of one connector process."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.delivery = DeliveryMetrics(r)
        self.dead_letters = Counter(
            "gputriage_connector_dead_letters",
            "Objects or lines that could not be slimmed, sent to the dead-letter topic.",
            ["resource"],
            registry=r,
        )
        self.relists = Counter(
            "gputriage_connector_relists",
            "Lists after the first one (the watch's resourceVersion was too old).",
            ["resource"],
            registry=r,
        )
        self.unchanged = Counter(
            "gputriage_connector_unchanged_updates",
            "Pod and node updates not published: their slimmed record equals the last one"
            " published for the object, but for its id, resourceVersion, time and op.",
            ["resource"],
            registry=r,
        )
        self.watch_restarts = Counter(
            "gputriage_connector_watch_restarts",
            "Watches re-opened, by reason (closed, silent, error).",
            ["resource", "reason"],
            registry=r,
        )
        self.api_errors = Counter(
            "gputriage_connector_api_errors",
            "Kubernetes API requests that failed, by HTTP status (0: no answer).",
            ["resource", "code"],
            registry=r,
        )
        self.leader = Gauge(
            "gputriage_connector_leader",
            "1 while this replica holds the leader Lease (or runs without election).",
            registry=r,
        )

    def value(self, name: str, **labels: str) -> float:
        """One sample's current value (0 when absent): for tests and logs."""
        value = self.registry.get_sample_value(name, labels or None)
        return 0.0 if value is None else value

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Expose ``/metrics`` on ``port`` (0 picks a free one); the port."""
        return serve_metrics(self.registry, port, addr, self.delivery.health)
