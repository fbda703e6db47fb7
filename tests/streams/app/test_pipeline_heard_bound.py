"""The pipeline's memory of which node sources it forwarded stays bounded under churn.

Each node agent's heartbeat is forwarded to the core once per ``monitoring_resolution_seconds``
bucket, so the pipeline remembers the last bucket per (cluster, node, source, lane). With
autoscaler churn (thousands of node names a day) that table must forget the sources silent
for longer than ``monitoring_silence_seconds`` (a node gone, an agent silent that long),
and must keep every source heard within it (or each of its heartbeats would be forwarded).
"""

from __future__ import annotations

import math

from schemas import progress as wire
from schemas.codec import encode
from schemas.events import Tick
from schemas.topics import topic_layout
from streams.app.pipeline import Pipeline, RawRecord
from tests.core_helpers import config
from tests.factories import at

LAYOUT = topic_layout()
STEP = 10.0


def beat(node: str, t: float, offset: int) -> RawRecord:
    """A kmsg heartbeat of ``node`` at ``t``, as the publish loop sends it (keyless, signed)."""
    tick = Tick(id=f"heartbeat:kmsg@c1/{node}", cluster="c1", time=at(t), node=node, source="kmsg")
    return RawRecord(
        topic=LAYOUT.raw["xids"].name,
        partition=0,
        offset=offset,
        key=None,
        value=encode(tick),
        token=offset,
        headers=wire.headers(f"kmsg@c1/{node}", tick.time),
    )


def test_sources_silent_longer_than_the_silence_are_forgotten_and_recent_ones_kept() -> None:
    settings = config()
    pipeline = Pipeline(settings, LAYOUT)
    pipeline.heard_limit = 64
    nodes = 2000
    for n in range(nodes):  # one new node every step, each heard once (churn)
        pipeline.process([beat(f"n{n}", n * STEP, n)])
    remembered = {subject[1] for subject in pipeline._heard}
    window = math.ceil(settings.monitoring_silence_seconds / STEP)
    recent = {f"n{n}" for n in range(nodes - window, nodes)}
    assert recent <= remembered, "every source heard within the silence is kept"
    assert len(remembered) <= 2 * max(pipeline.heard_limit, 2 * window), "bounded, not 2000"
