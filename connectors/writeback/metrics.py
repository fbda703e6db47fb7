"""The write-back's Prometheus metrics (one registry per process; names as Prometheus wants).

Trap: labels are kinds and outcomes, never an object's name (unbounded) nor a message.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge


class WritebackMetrics:
    """Every metric of one ``gputriage writeback`` process."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.writes = Counter(
            "gputriage_writeback_writes",
            "API writes by kind (event, condition, taint) and outcome (created, updated, "
            "replaced, unchanged, deleted, cleared, conflict, skipped, recreated, dry_run, error).",
            ["kind", "outcome"],
            registry=r,
        )
        self.breaker_tripped = Gauge(
            "gputriage_writeback_breaker_tripped",
            "1 while the breaker withholds node marks (too many nodes or too much of a pool).",
            registry=r,
        )
        self.withheld = Counter(
            "gputriage_writeback_marks_withheld",
            "Node marks the breaker withheld (counted once per node and reconciliation).",
            registry=r,
        )
        self.marked = Gauge(
            "gputriage_writeback_marked_nodes",
            "Nodes carrying our fault condition after the last reconciliation.",
            registry=r,
        )
        self.unexplained = Gauge(
            "gputriage_writeback_unexplained_marks",
            "Nodes carrying our fault condition that no incident in the topic explains (kept: "
            "the incident may have left a time-retained topic while the GPU is still broken).",
            registry=r,
        )
        self.resyncs = Counter(
            "gputriage_writeback_mark_resyncs",
            "Reconciliations of the node marks (on a change, periodic, retried), by result "
            "(ok, failed: a write failed or met a conflict, or the nodes could not be listed).",
            ["result"],
            registry=r,
        )
        self.incidents = Counter(
            "gputriage_writeback_incident_revisions",
            "Incident revisions read from the incident topic (new ones only).",
            registry=r,
        )
        self.leader = Gauge(
            "gputriage_writeback_leader",
            "1 while this replica holds the Lease and writes.",
            registry=r,
        )

    def wrote(self, kind: str, outcome: str) -> None:
        self.writes.labels(kind, outcome).inc()
