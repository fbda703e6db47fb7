"""What both processor engines read off :class:`streams.app.metrics.Metrics` alike."""

from __future__ import annotations

from streams.app.metrics import Metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def test_a_gauge_round_is_due_once_a_second_of_the_callers_clock() -> None:
    metrics = Metrics()
    rounds = [t for t in (0.0, 0.4, 0.99, 1.0, 1.5, 2.2, 2.3) if metrics.gauges_due(t)]
    assert rounds == [0.0, 1.0, 2.2]


def test_events_are_counted_in_by_source() -> None:
    metrics = Metrics()
    metrics.count_events({"k8s": 3, "kmsg": 1})
    metrics.count_events({"k8s": 2})
    assert sample(metrics, "gputriage_events_in_total", source="k8s") == 5
    assert sample(metrics, "gputriage_events_in_total", source="kmsg") == 1
