"""The processor's Prometheus metrics (names follow Prometheus conventions).

One :class:`Metrics` per worker, on its own registry (tests can run several workers in
one process without the default registry's duplicate-name errors). The families, each
with a line of what it counts, are listed in docs/operations.md, design notes: the
processor's metrics.

Trap: sources are counted, never labelled: 5,000 kmsg connectors would be 5,000 series.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from connectors.health import Health, observe_consumer
from connectors.prometheus import serve_metrics
from schemas.incidents import Incident
from streams.app.fleet import GpuKey, IncidentKey, Tally, tally

if TYPE_CHECKING:
    from streams.app.lanes import Lanes

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 2.0, 5.0, 10.0, 30.0)
DAY = 86400.0
RESOLUTION_BUCKETS = (
    60.0,
    300.0,
    900.0,
    1800.0,
    3600.0,
    7200.0,
    14400.0,
    43200.0,
    DAY,
    3 * DAY,
    7 * DAY,
)
"""Minutes (a blip) to a week (an RMA)."""


class Metrics:
    """Every metric of one worker."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.health = Health()
        """``/healthz`` and ``/readyz`` on the metrics port (:mod:`connectors.health`)."""
        self.kafka = self.health.condition("kafka", detail="not in the group yet")
        """Partitions assigned and fetch responses arriving (:meth:`observe_kafka`). A
        broker error past the clients' retries ends the worker anyway (exit 1, restarted);
        this says what the retries are hiding meanwhile."""
        self.events_in = Counter(
            "gputriage_events_in", "Decoded events, by source.", ["source"], registry=r
        )
        self.incidents_out = Counter(
            "gputriage_incidents_out",
            "Incident revisions published, by type, severity and status.",
            ["type", "severity", "status"],
            registry=r,
        )
        self.open_incidents = Gauge(
            "gputriage_open_incidents",
            "Incidents open in this worker, by cluster, type and severity.",
            ["cluster", "type", "severity"],
            registry=r,
        )
        self._open_keys: set[IncidentKey] = set()
        self.fleet_gpus = Gauge(
            "gputriage_fleet_gpus",
            "GPUs of the nodes this worker holds, by cluster, pool, product and state: "
            "healthy (in a Ready node's capacity, named by no open page-level hardware "
            "incident) or unhealthy.",
            ["cluster", "pool", "product", "state"],
            registry=r,
        )
        self._fleet_keys: set[GpuKey] = set()
        self.resolution = Histogram(
            "gputriage_incident_resolution_seconds",
            "From an incident's first_seen to its resolved_at, observed once per resolved "
            "incident published, by type (the mean time to resolve).",
            ["type"],
            buckets=RESOLUTION_BUCKETS,
            registry=r,
        )
        self._gauges_at = -math.inf
        self.dead_letters = Counter(
            "gputriage_dead_letters",
            "Records sent to the dead-letter topic.",
            ["topic"],
            registry=r,
        )
        self.dead_letter_failures = Counter(
            "gputriage_dead_letter_failures",
            "Dead letters the broker refused even cut small: logged, and committed past.",
            registry=r,
        )
        self.consumer_lag = Gauge(
            "gputriage_consumer_lag",
            "Records between the consumer position and the partition's high watermark.",
            ["topic", "partition"],
            registry=r,
        )
        self.watermark_delay = Gauge(
            "gputriage_watermark_delay_seconds",
            "Wall clock minus the event-time watermark.",
            registry=r,
        )
        self.buffered = Gauge(
            "gputriage_buffered_events", "Events waiting for the watermark.", registry=r
        )
        self.buffered_peak = Gauge(
            "gputriage_buffered_events_peak",
            "The most events waiting for the watermark at once, since the worker started.",
            registry=r,
        )
        self.buffered_cap = Gauge(
            "gputriage_buffered_events_cap",
            "max_buffered_events: at this many buffered events, fetching pauses on the "
            "partitions ahead of the watermark (soft by up to one batch).",
            registry=r,
        )
        self.paused_partitions = Gauge(
            "gputriage_paused_partitions",
            "Raw partitions whose fetching is paused: ahead of the watermark while the "
            "buffer is full.",
            registry=r,
        )
        self.pauses = Counter(
            "gputriage_partition_pauses",
            "Times a raw partition was paused because the buffer was full.",
            registry=r,
        )
        self.suppressed = Counter(
            "gputriage_incident_revisions_suppressed",
            "Incident revisions made again after a restore (records re-read past the last "
            "flush) that the incident topic already held, or held a newer one of: not "
            "published twice.",
            registry=r,
        )
        self.stale = Counter(
            "gputriage_stale_events",
            "Events skipped because their key had already applied a later one.",
            registry=r,
        )
        self.late_applied = Counter(
            "gputriage_late_applied_events",
            "Events behind their key's position applied anyway because their Kubernetes "
            "object's resourceVersion was newer (a relist's copy): evidence, not duplicates.",
            registry=r,
        )
        self.sources_alive = Gauge(
            "gputriage_sources_alive",
            "Sources (connectors) heard within source_idle_seconds: they hold the watermark.",
            registry=r,
        )
        self.sources_idle = Gauge(
            "gputriage_sources_idle",
            "Sources known to this worker but silent for longer than source_idle_seconds.",
            registry=r,
        )
        self.malformed_progress = Counter(
            "gputriage_malformed_progress_headers",
            "Records whose source progress headers could not be read (taken as header-less).",
            registry=r,
        )
        self.pipeline_seconds = Counter(
            "gputriage_pipeline_seconds",
            "Seconds the worker's loop spent in the Pipeline (decode, checks, the core, "
            "ticks): the rest of its busy time is the worker's own (fetch, produce, commit).",
            registry=r,
        )
        self.flush_seconds = Counter(
            "gputriage_flush_seconds",
            "Seconds the worker's loop spent starting flushes (snapshots encoded and queued); "
            "the acks and the commit are awaited off the loop.",
            registry=r,
        )
        self.latency = Histogram(
            "gputriage_processing_latency_seconds",
            "From the record that completed an incident landing on Kafka to the incident "
            "revision being acknowledged by the broker.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )

    def serve(self, port: int, addr: str = "0.0.0.0") -> int:
        """Expose ``/metrics``, ``/healthz`` and ``/readyz`` on ``port`` (0 picks a free
        one); the port."""
        return serve_metrics(self.registry, port, addr, self.health)

    def observe_tally(self, counts: Tally) -> None:
        """Set ``gputriage_open_incidents`` and ``gputriage_fleet_gpus`` from one round.
        An incident series whose last incident closed goes to 0 rather than keeping its
        last value (as it always did: alerts may read the 0); a fleet series no longer
        counted (a pool emptied, a node deleted) is removed, so a gone pool disappears."""
        for key in self._open_keys - counts.incidents.keys():
            self.open_incidents.labels(*key).set(0)
        for key, count in counts.incidents.items():
            self.open_incidents.labels(*key).set(count)
        self._open_keys |= counts.incidents.keys()
        for gone in self._fleet_keys - counts.gpus.keys():
            self.fleet_gpus.remove(*gone)
        for series, count in counts.gpus.items():
            self.fleet_gpus.labels(*series).set(count)
        self._fleet_keys = set(counts.gpus)

    def observe_published(self, incident: Incident) -> None:
        """Observe a published revision: a ``resolved`` one adds its time to resolve. Call it
        once per revision actually sent (not for one suppressed as already held after a
        restore), so each resolved incident id is observed once."""
        if incident.status == "resolved" and incident.resolved_at is not None:
            seconds = (incident.resolved_at - incident.first_seen).total_seconds()
            self.resolution.labels(incident.type).observe(max(0.0, seconds))

    def gauges_due(self, now: float) -> bool:
        """Whether a round of the gauges is due at ``now`` (the caller's loop clock): one a
        second at most, since counting open incidents walks every key's state."""
        if now - self._gauges_at < 1.0:
            return False
        self._gauges_at = now
        return True

    def observe_lanes(self, lanes: Lanes) -> None:
        """The gauges both engines read off the pipeline's lanes: open incidents, the
        fleet's GPUs (one walk over every key's state: :func:`streams.app.fleet.tally`) and
        how far the least decided lane's watermark trails the wall clock."""
        self.observe_tally(tally(lanes.keys.values()))
        reached = lanes.reached()
        if reached > 0:  # nothing decided yet: no delay to tell
            self.watermark_delay.set(max(0.0, time.time() - reached))

    def count_events(self, by_source: Mapping[str, int]) -> None:
        """Count a batch's events in by source (``gputriage_events_in_total``)."""
        for source, count in by_source.items():
            self.events_in.labels(source).inc(count)

    def observe_kafka(self, assigned: int, fetched_ago_seconds: float | None) -> None:
        """Set the ``kafka`` condition once a gauge round
        (:func:`connectors.health.observe_consumer`)."""
        observe_consumer(self.kafka, assigned, fetched_ago_seconds)
