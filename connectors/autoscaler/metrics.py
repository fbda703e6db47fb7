"""The autoscaler connector's Prometheus metrics (one registry per connector process)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter

from connectors.delivery import DeliveryMetrics


class AutoscalerMetrics:
    """The autoscaler connector's metrics (its own registry, like every connector).

    ``gputriage_autoscaler_lines_total{outcome}``: lines read, by ``parsed``,
    ``unrecognised``, ``dead_letter``; ``gputriage_autoscaler_log_streams_total{reason}``:
    log streams ended (closed, silent, broken, error); ``..._api_errors_total{code}``.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = r = registry or CollectorRegistry()
        self.delivery = DeliveryMetrics(r)
        self.lines = Counter(
            "gputriage_autoscaler_lines",
            "Autoscaler log lines read, by outcome (parsed, unrecognised, dead_letter).",
            ["outcome"],
            registry=r,
        )
        self.streams = Counter(
            "gputriage_autoscaler_log_streams",
            "Log streams that ended, by reason (closed, silent, broken, error).",
            ["reason"],
            registry=r,
        )
        self.status_updates = Counter(
            "gputriage_autoscaler_status_updates",
            "Changes of the status ConfigMap with new facts, by outcome (parsed, dead_letter).",
            ["outcome"],
            registry=r,
        )
        self.api_errors = Counter(
            "gputriage_autoscaler_api_errors",
            "Kubernetes API requests that failed, by HTTP status (0: no answer).",
            ["code"],
            registry=r,
        )

    def value(self, name: str, **labels: str) -> float:
        """One sample's current value (0 when absent)."""
        value = self.registry.get_sample_value(name, labels or None)
        return 0.0 if value is None else value
