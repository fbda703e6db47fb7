"""The PromQL firings against a truth file: what the incumbent's alerts catch, late or not,
what they miss and what they raise falsely, per incident type.

Deliberately small and independent of ``gputriage score``. A firing of alert ``A`` matches
an expected incident when its type is one ``A`` answers, the subject agrees (pod, else
node and GPU; a firing naming neither agrees with anything in its cluster), and it fired
within ``[x.start, x.not_after + late]``. Delay is from ``x.start`` to the earliest match.

Traps: an alert already firing before the fault began is no detection of it; a firing that
matches an expected incident of another type is a confusion, not a hit; an alert answering
several types counts for each (generous to the incumbent, which cannot tell them apart);
the cluster is not matched (one run is one cluster's Prometheus).
bench/README.md, design notes: promql/match.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Final

from bench.promql.alerts import Firing
from schemas.truth import ExpectedIncident

LATE_SECONDS: Final = 15 * 60.0

LIMITS: Final = {
    "device_unhealthy_eviction": "no chain: the XID gauge and the allocatable gap fire on "
    "their own; the pods' failure is no part of either",
    "gpu_app_fault": "the XID alert fires for every code alike, and shows only the last "
    "code a scrape saw",
    "xid_repeat": "the gauge holds the last code: repeats between scrapes, or of the code "
    "it already shows, are invisible; there is no count",
    "gpu_degraded": "only after capacity - allocatable has held for the whole for: 5m",
    "suspected_cuda_oom": "the unless reads the current termination reason, gone after the "
    "restart, so host OOM fires it too; the increase is multiplied by the GPU count",
    "host_oom_kill": "no alert: the reference's OOMKilled signal is a panel",
    "gpu_node_not_ready": "no alert in the reference",
    "scale_up_failure": "needs cluster-autoscaler's own metrics (not simulated)",
    "gpu_pods_starved": "pending time only: the autoscaler's failures are no part of it; "
    "§7.4 as written fires for every running GPU pod",
    "allocation_mismatch": "counts pending pods' requests; silent when no GPU has a pod label",
    "multi_gpu_pod_without_nvlink": "§4.3's query needs pod_gpu_assignment from a "
    "topology-aware scheduler (not simulated): no alert",
    "nvlink_domain_fault": "the XID gauge fires once per GPU of the domain: one alert per "
    "tray, none names the root (not simulated)",
}
"""Why an alert misses or blurs each type: shown beside the type in the report."""


def types_of(annotations: Mapping[str, str]) -> tuple[str, ...]:
    """The incident types an alert answers, from its ``gputriage_types`` annotation."""
    raw = annotations.get("gputriage_types", "")
    return tuple(t.strip() for t in raw.split(",") if t.strip())


def _subject_agrees(firing: Firing, truth: ExpectedIncident) -> bool:
    namespace, pod = firing.label("namespace"), firing.label("pod")
    node = firing.label("node") or firing.label("Hostname")
    if pod and truth.pods:
        return f"{namespace}/{pod}" in truth.pods
    if node and truth.node:
        uuid = firing.label("UUID")
        if uuid and truth.gpus and uuid not in truth.gpus:
            return False  # dcgm-exporter names the GPU: another GPU of that node
        return node == truth.node
    # A pod-level alert and a node-level fault: the pod's node is not one of its labels.
    return not (pod and truth.node and not truth.pods)


def matches(firing: Firing, truth: ExpectedIncident, late: float = LATE_SECONDS) -> bool:
    """Subject and window agree (the type is the caller's business)."""
    start, until = truth.start.timestamp(), truth.not_after.timestamp() + late
    return start <= firing.start <= until and _subject_agrees(firing, truth)


@dataclass
class TypeScore:
    """One incident type: its expected incidents, which alerts were caught and how fast."""

    type: str
    alerts: tuple[str, ...]
    expected: int = 0
    caught: int = 0
    delays: list[float] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)
    """The truth ids no alert caught."""

    def as_dict(self) -> dict[str, object]:
        return {
            "type": self.type,
            "alerts": list(self.alerts),
            "expected": self.expected,
            "caught": self.caught,
            "recall": round(self.caught / self.expected, 3) if self.expected else None,
            "delay_median_s": median(self.delays) if self.delays else None,
            "delay_max_s": max(self.delays) if self.delays else None,
            "missed": self.missed,
            "limits": LIMITS.get(self.type, ""),
        }


@dataclass
class AlertScore:
    """One alert: its firings, how many matched a truth of its types, the false ones."""

    alert: str
    types: tuple[str, ...]
    firings: int = 0
    true: int = 0
    false: int = 0
    confused: dict[str, int] = field(default_factory=dict)
    """Of the false ones: how many matched a truth of another type, by that type."""

    def as_dict(self) -> dict[str, object]:
        return {
            "alert": self.alert,
            "types": list(self.types),
            "firings": self.firings,
            "true": self.true,
            "false": self.false,
            "confused_with": dict(sorted(self.confused.items())),
        }


def score(
    firings: Sequence[Firing],
    alert_types: Mapping[str, Sequence[str]],
    truth: Iterable[ExpectedIncident],
    late: float = LATE_SECONDS,
) -> tuple[list[TypeScore], list[AlertScore]]:
    """Per type and per alert (see the module for the rule). An optional truth (due where
    the stream ends, as ``gputriage score`` treats it) is neither expected nor makes a
    firing false: a firing that matches one only is counted neither true nor false."""
    every = list(truth)
    expected = [x for x in every if not x.optional]
    excusing = [x for x in every if x.optional]
    by_type: dict[str, TypeScore] = {}
    for incident in expected:
        if incident.type not in by_type:
            answering = tuple(a for a, ts in alert_types.items() if incident.type in ts)
            by_type[incident.type] = TypeScore(incident.type, answering)
    for incident in expected:
        entry = by_type[incident.type]
        entry.expected += 1
        hits = [
            f
            for f in firings
            if incident.type in alert_types.get(f.alert, ()) and matches(f, incident, late)
        ]
        if hits:
            entry.caught += 1
            entry.delays.append(min(f.start for f in hits) - incident.start.timestamp())
        else:
            entry.missed.append(incident.id)
    per_alert = {a: AlertScore(a, tuple(ts)) for a, ts in alert_types.items()}
    for firing in firings:
        entry_a = per_alert[firing.alert]
        entry_a.firings += 1
        own = [x for x in expected if x.type in entry_a.types and matches(firing, x, late)]
        if own:
            entry_a.true += 1
            continue
        if any(x.type in entry_a.types and matches(firing, x, late) for x in excusing):
            continue
        entry_a.false += 1
        for other in {x.type for x in expected if matches(firing, x, late)}:
            entry_a.confused[other] = entry_a.confused.get(other, 0) + 1
    return sorted(by_type.values(), key=lambda t: t.type), list(per_alert.values())
