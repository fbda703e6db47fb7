"""A bridge's Prometheus metrics (one registry per bridge process; names as Prometheus wants).

The families (deliveries by outcome, retries, dead letters, resends after a restart,
delivery latency, queued revisions, endpoint errors), each with what it counts, are
listed in docs/bridges.md, design notes: the bridge metrics.

Trap: labels are the bridge kind and the route *name* (the operator's word), never a
target: a channel, a URL or a routing key could be a secret.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from connectors.health import Condition, Health
from connectors.prometheus import serve_metrics

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class BridgeMetrics:
    """Every metric of one bridge process."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.health = Health()
        """``/healthz`` and ``/readyz`` on the metrics port (:mod:`connectors.health`)."""
        self.kafka = self.health.condition("kafka", detail="not in the group yet")
        """The incident topic's partitions owned and fetch responses arriving."""

        self.deliveries = Counter(
            "gputriage_bridge_deliveries",
            "Incident revisions handled by a bridge, by route and outcome.",
            ["bridge", "route", "outcome"],
            registry=r,
        )
        self.retries = Counter(
            "gputriage_bridge_retries",
            "Deliveries tried again (429, 5xx, network errors, endpoint bugs).",
            ["bridge", "route"],
            registry=r,
        )
        self.dead_letters = Counter(
            "gputriage_bridge_dead_letters",
            "Records a bridge sent to the dead-letter topic (undecodable or rejected).",
            ["bridge"],
            registry=r,
        )
        self.resends = Counter(
            "gputriage_bridge_resends",
            "Revisions sent again because a restart found their intent unconfirmed.",
            ["bridge"],
            registry=r,
        )
        self.latency = Histogram(
            "gputriage_bridge_delivery_latency_seconds",
            "From the incident record's Kafka timestamp to the endpoint's acceptance.",
            ["bridge"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queued = Gauge(
            "gputriage_bridge_queued_revisions",
            "Incident revisions read and not yet delivered, skipped or dead-lettered.",
            ["bridge"],
            registry=r,
        )
        self.endpoint_errors = Counter(
            "gputriage_bridge_endpoint_errors",
            "Exceptions raised by the endpoint (a bug: logged, and retried).",
            ["bridge"],
            registry=r,
        )

    def endpoint(self, route: str) -> Condition:
        """The ``endpoint-<route>`` condition: fails while a delivery of that route is
        being retried (the vendor down, 429, 5xx), holds once the vendor answers; one per
        route, so one route's success does not hide another's outage. Its reason is
        scrubbed of secrets by the caller."""
        return self.health.condition(f"endpoint-{route}", ok=True, detail="")

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Expose ``/metrics``, ``/healthz`` and ``/readyz`` on ``port`` (0 picks a free
        one); the port."""
        return serve_metrics(self.registry, port, addr, self.health)
