"""The processor's settings, the ``[processor]`` table: declared once, read by every engine.

A module of its own, without aiokafka, because every command loads the whole
settings tree (``replay`` and ``score`` too) and must not pay for, or need, the
Kafka client; the worker, the faust engine and ``gputriage process`` take this
struct itself.

Traps:

* ``metrics_port`` ``None`` serves no ``/metrics`` (0 picks a free port); the
  ``process`` command's ``--metrics-port`` can only pick a port.
* The group timings bound a deployment's start-up and takeover: the coordinator
  waits ``rebalance_timeout_seconds`` for members before it completes a join, and a
  killed worker keeps its partitions for ``session_timeout_seconds``.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from connectors.prometheus import MetricsAddr, MetricsPort

Positive = Annotated[float, msgspec.Meta(gt=0, le=86400)]
"""Seconds of wall-clock time, more than 0 and at most a day (so never inf, never nan)."""


class ProcessorSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The ``[processor]`` table (an unknown key is an error, not a silent default)."""

    app_id: Annotated[
        str,
        msgspec.Meta(description="Consumer group / app id; workers with the same id share work."),
    ] = "gputriage"
    """Workers with the same id share the partitions, and the state topic it names."""
    batch_max: Annotated[
        int, msgspec.Meta(ge=1, le=1_000_000, description="Records per batch at most.")
    ] = 5000
    tick_seconds: Annotated[
        Positive,
        msgspec.Meta(description="How often the worker's clock advances the watermark."),
    ] = 0.1
    """The clock closes quiet keys' windows: it ticks the pipeline between batches."""
    metrics_port: MetricsPort | None = 9464
    metrics_addr: MetricsAddr = "0.0.0.0"
    session_timeout_seconds: Annotated[
        Positive,
        msgspec.Meta(description="How long a dead worker keeps its partitions (group session)."),
    ] = 10.0
    rebalance_timeout_seconds: Annotated[
        Positive, msgspec.Meta(description="How long a rebalance waits for the group's members.")
    ] = 10.0
    stop_timeout_seconds: Annotated[
        Positive,
        msgspec.Meta(description="On SIGINT/SIGTERM, exit anyway after this long."),
    ] = 15.0
    """Nothing is lost by giving up: offsets of undelivered records were never committed."""
    startup_hold_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=0, le=86400, description="How long a partition not read yet holds the watermark."
        ),
    ] = 10.0
    """After an assignment, how long a partition not yet read holds its lane where its start
    and end are not known otherwise (the faust engine; an aiokafka that hides them)."""
    snapshot_seconds: Annotated[
        Positive,
        msgspec.Meta(description="How often changed key states are written and offsets committed."),
    ] = 1.0
    """Records are committed only after the snapshot covering them, so this is also the
    commit cadence; a longer one writes less, and re-reads more after a crash."""
    fetch_max_wait_ms: Annotated[
        int,
        msgspec.Meta(
            ge=0, le=60_000, description="How long a fetch may wait on the broker for records."
        ),
    ] = 100
    """The latency floor of a quiet stream (some brokers, Tansu among them, always wait
    this long)."""
    restore_timeout_seconds: Annotated[
        Positive,
        msgspec.Meta(description="How long reading newly assigned partitions' state may take."),
    ] = 120.0
    source_idle_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=1.0,
            le=86_400.0,
            description="A source not heard this long stops holding the watermark.",
        ),
    ] = 60.0
    """Connectors heartbeat every 0.5 s when quiet; when every source has gone, the worker's
    clock drives the watermark (:class:`~streams.app.pipeline.Pipeline`)."""
    max_future_seconds: Annotated[
        float,
        msgspec.Meta(
            ge=1.0,
            le=31_536_000.0,
            description="A record further ahead of the present than this is a dead letter.",
        ),
    ] = 600.0
    """The present is the worker's clock, or the sources' progress if ahead of it: a clock
    set to 9999 would otherwise hold its partition's commit forever."""
    max_buffered_events: Annotated[
        int,
        msgspec.Meta(ge=1, le=100_000_000, description="Events waiting for the watermark at most."),
    ] = 100_000
    """The memory of a backlog: at this many, fetching pauses on the partitions ahead of the
    watermark, and resumes below 80 %. Soft: about two batches (``batch_max``) more at
    worst (:mod:`streams.app.worker`'s traps say why)."""
