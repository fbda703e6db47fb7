"""``gputriage status``: read the incident topic to its end, print the fleet and the open
incidents by pool (rendering: :mod:`gputriage.status`).

The topic is read like ``gputriage tail --from beginning`` (no consumer group, nothing
committed) up to the end offsets looked up at start, then the command exits: a compacted
topic holds at least the latest revision of every id. ``--prometheus`` adds each pool's
GPU total and healthy share from the processors' ``gputriage_fleet_gpus`` gauge. Traps:
the end offsets are read before ``assign()`` (see :mod:`gputriage.tail`); an empty
partition's end is its beginning; a Prometheus that does not answer is one warning line
on stderr and the totals stay unknown (the incidents are still worth printing).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import IO, Any, Final

import click

from connectors.kafka.config import KafkaSettings, KafkaUnreachable, connect_timeout, heard
from connectors.kafka.reading import assign_from_beginning
from gputriage import render
from gputriage.cli.common import CONTEXT, kafka_kwargs, settings_of
from gputriage.cli.options import brokers_option, settings_options
from gputriage.errors import PROG, error
from gputriage.status import (
    NO_POOL,
    OUTPUTS,
    Filters,
    StatusOutput,
    Totals,
    render_json,
    render_text,
    status,
    totals_from,
)
from gputriage.tail import _connect
from schemas.codec import RecordError, decode_incident, loads
from schemas.incidents import Incident
from schemas.topics import topic_layout

PROMETHEUS_TIMEOUT_SECONDS: Final = 5.0
QUERIES: Final = {
    "gpus": "sum by (cluster, pool) (gputriage_fleet_gpus)",
    "healthy": 'sum by (cluster, pool) (gputriage_fleet_gpus{state="healthy"})',
}
"""The two instant queries behind a FLEET line's total and healthy share."""
_POLL_MS: Final = 200


@click.command("status", context_settings=CONTEXT)
@click.option(
    "-o",
    "--output",
    type=click.Choice(OUTPUTS),
    default="table",
    show_default=True,
    help="table: POOL TYPE SEVERITY NODE AGE SUMMARY; wide: adds ID, GPUS, PODS; "
    "json: one object with the keys fleet and incidents.",
)
@click.option("--cluster", default="", metavar="NAME", help="Only this cluster.")
@click.option(
    "--pool", default="", metavar="NAME", help=f"Only this node pool ({NO_POOL}: no pool label)."
)
@click.option("--type", "kind", default="", metavar="TYPE", help="Only incidents of this type.")
@click.option(
    "--prometheus",
    default=None,
    metavar="URL",
    help="Prometheus scraping the processors: adds each pool's GPU total and healthy share "
    "(unknown without it).",
)
@brokers_option
@settings_options(KafkaSettings, only=("connect_timeout_seconds",))
@click.pass_context
def status_command(
    ctx: click.Context,
    /,
    *,
    output: StatusOutput,
    cluster: str,
    pool: str,
    kind: str,
    prometheus: str | None,
    brokers: str | None,
    connect_timeout_seconds: float | None,
) -> int:
    """Show the fleet's health and the open incidents by node pool.

    Reads the incident topic to its end. FLEET lines count per cluster and pool
    the GPUs open page-level hardware incidents name, and the nodes all out (one
    naming no GPU, or gpu_node_not_ready; other NotReady nodes are only in the
    totals --prometheus adds: the pool's GPUs and share healthy). No broker: one
    line, status 1; no Prometheus: a warning, the rest still printed.

    \b
    Examples:
      gputriage status
      gputriage status -o wide --pool gpu-h100
      gputriage status --type gpu_degraded --cluster prod
      gputriage status --prometheus http://prometheus:9090 -o json | jq .fleet
    """
    settings = settings_of(ctx)
    kwargs = kafka_kwargs(settings, brokers)
    topic = topic_layout(settings.topics).incidents.name
    timeout = connect_timeout_seconds or connect_timeout(kwargs)
    try:
        revisions = asyncio.run(read_to_end(kwargs, topic, timeout, sys.stderr))
    except KafkaUnreachable as exc:
        error(str(exc))
        return 1
    totals = None
    if prometheus is not None:
        try:
            totals = query_totals(prometheus, PROMETHEUS_TIMEOUT_SECONDS)
        except PrometheusUnavailable as exc:
            print(f"{PROG}: warning: {render.one_line(str(exc))}", file=sys.stderr)
    shown = status(revisions, totals, Filters(cluster=cluster, pool=pool, type=kind))
    out = sys.stdout.buffer
    if output == "json":
        out.write(render_json(shown))
    else:
        text = render_text(shown, datetime.now(UTC), wide=output == "wide")
        out.write(text.encode("utf-8"))
    out.flush()
    return 0


async def read_to_end(
    client_kwargs: Mapping[str, Any], topic: str, timeout_seconds: float, stderr: IO[str]
) -> list[Incident]:
    """Every incident revision on ``topic`` up to its end offsets at start, less those of
    an id a later tombstone deleted; a record that does not decode is one line on
    ``stderr`` and skipped."""
    from aiokafka.errors import KafkaError  # noqa: PLC0415 - aiokafka costs ~0.2 s to import

    consumer = await _connect(client_kwargs, timeout_seconds, asyncio.Event())
    assert consumer is not None  # no stop event is ever set
    revisions: dict[str, list[Incident]] = {}
    try:
        left = await _assign_all(consumer, topic)
        while left:
            batches = await consumer.getmany(*left, timeout_ms=_POLL_MS)
            for records in batches.values():
                for record in records:
                    _keep(record, revisions, stderr)
            for tp in list(left):
                if await consumer.position(tp) >= left[tp]:
                    del left[tp]
    finally:
        with heard("aiokafka"), contextlib.suppress(KafkaError, OSError):
            await consumer.stop()
    return [revision for kept in revisions.values() for revision in kept]


async def _assign_all(consumer: Any, topic: str) -> dict[Any, int]:
    """Assign every partition of ``topic`` from its beginning; the end offset of each that
    holds records. A topic that does not exist is one line, not a wait."""
    if topic not in await consumer.topics():
        raise KafkaUnreachable(f"topic {topic} does not exist (is the processor running?)")
    return await assign_from_beginning(consumer, topic)


def _keep(record: Any, revisions: dict[str, list[Incident]], stderr: IO[str]) -> None:
    """Add a revision under its id; a tombstone (null value) forgets its key's id: the
    incident was deleted, and its earlier revisions stay on the topic until compaction."""
    if record.value is None:
        if record.key is not None:
            revisions.pop(record.key.decode("utf-8", "replace"), None)
        return
    try:
        incident = decode_incident(record.value)
    except RecordError as bad:
        reason = render.one_line(bad.reason) or "invalid record"
        print(
            f"{record.topic} partition {record.partition} offset {record.offset}: {reason}",
            file=stderr,
        )
        return
    revisions.setdefault(incident.id, []).append(incident)


class PrometheusUnavailable(Exception):
    """Prometheus did not answer the fleet queries (the message is the warning line)."""


def query_totals(base: str, timeout_seconds: float) -> Totals:
    """Each pool's GPU total and healthy count, through the HTTP API's instant query."""
    vectors: dict[str, Any] = {}
    for name, query in QUERIES.items():
        url = f"{base.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
        try:
            with urllib.request.urlopen(url, timeout=timeout_seconds) as response:
                answer = loads(response.read())
            vectors[name] = answer["data"]["result"]
        except (OSError, RecordError, ValueError, KeyError, TypeError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise PrometheusUnavailable(
                f"cannot query Prometheus at {base}: {render.one_line(str(reason))}; "
                "GPU totals unknown"
            ) from None
    try:
        return totals_from(vectors)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise PrometheusUnavailable(
            f"Prometheus at {base} answered what is not an instant vector ({exc}); "
            "GPU totals unknown"
        ) from None
