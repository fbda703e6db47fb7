"""``monitoring_gap`` through the pipeline: signed records in, the incident out.

The core's tests feed the correlator directly; this one goes the way a worker does. A
node's dcgm source keeps heartbeating (its progress is "caught up": the publish loop
claims so after every failed scrape too) while its last good read stays put, as when the
exporter is evicted or refuses; the k8s watch moves on. The pipeline hands each bucket's
heartbeat to the lane's core and the watermark, held by both sources' progress, fires
the gap; a good read resolves it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from schemas import progress as wire
from schemas.codec import AnyEvent, encode
from schemas.events import Tick
from schemas.incidents import Incident
from schemas.keys import correlation_key
from schemas.topics import topic_layout
from streams.app.pipeline import Pipeline, RawRecord
from tests.core_helpers import config
from tests.factories import Cluster, at

LAYOUT = topic_layout()
N = "gpu-node-01"
DCGM = f"http://127.0.0.1:9400/metrics@c1/{N}"
K8S = "k8s@c1"


def signed(event: AnyEvent, offset: int, source: str, *, keyless: bool = False) -> RawRecord:
    """``event`` as its source publishes it on partition 0 (one lane) of the topic it
    uses (a source's heartbeats go where its records went), signed with its progress
    (its own time: a live source's)."""
    return RawRecord(
        topic=LAYOUT.raw["xids" if source == DCGM else "nodes"].name,
        partition=0,
        offset=offset,
        key=None if keyless else correlation_key(event).encode(),
        value=encode(event),
        token=offset,
        headers=wire.headers(source, event.time),
    )


def beat(t: float, read: float) -> Tick:
    return Tick(
        id=f"heartbeat:{DCGM}", cluster="c1", time=at(t), node=N, source="dcgm", read_at=at(read)
    )


def gaps(incidents: list[Incident]) -> list[Incident]:
    return [i for i in incidents if i.type == "monitoring_gap"]


def test_a_dcgm_exporter_that_stops_answering_opens_a_gap_and_a_good_read_resolves_it() -> None:
    c = Cluster()
    pipeline = Pipeline(config(), LAYOUT)
    silence = config().monitoring_silence_seconds
    last_good = 60.0
    back = last_good + silence + 600
    records: list[RawRecord] = []
    k8s: list[AnyEvent] = [c.node(N, 0.0)]
    k8s += [c.tick(float(t)) for t in range(30, int(back) + 120, 30)]
    beats = [beat(float(t), min(float(t), last_good)) for t in range(0, int(back), 5)]
    beats += [beat(float(t), float(t)) for t in range(int(back), int(back) + 120, 5)]
    merged: list[tuple[datetime, int, AnyEvent, str]] = [(e.time, 0, e, K8S) for e in k8s]
    merged += [(e.time, 1, e, DCGM) for e in beats]
    for offset, (_, _, event, source) in enumerate(sorted(merged, key=lambda m: m[:2])):
        records.append(signed(event, offset, source, keyless=isinstance(event, Tick)))
    out: list[Incident] = []
    for start in range(0, len(records), 25):  # batches, as a worker fetches them
        out += pipeline.process(records[start : start + 25]).incidents
    opened, *rest = gaps(out)
    assert opened.status == "open"
    assert opened.node == N
    assert opened.attributes["source"] == "dcgm"
    assert opened.attributes["since"] == at(last_good).isoformat()
    assert opened.first_seen == at(last_good)
    resolved = rest[-1]
    assert resolved.id == opened.id
    assert resolved.status == "resolved"
    assert resolved.resolved_at is not None
    assert at(back) <= resolved.resolved_at < at(back) + timedelta(seconds=30)
