"""Boundaries are inclusive: an event exactly ``grace`` late is within grace.

``grace_seconds`` promises that any arrival order in which no event is more than
``grace`` late gives the in-order result. Before, the watermark released events at
its own instant, so an event exactly ``grace`` late was behind it: applied out of
order and, behind its key's mark, skipped as stale. A kernel XID stamped at the same
second as the pod failure it caused (one-second stamps are common) was lost with a 1 s
grace, and so was the eviction page. The rules' own windows ("more than N restarts
within M minutes") include their boundary too.
"""

from __future__ import annotations

from schemas.codec import AnyEvent
from schemas.incidents import Incident
from schemas.topics import topic_layout
from streams.app.pipeline import Pipeline
from streams.core import Correlator
from tests.core_helpers import config, of_type, run
from tests.factories import Cluster, term
from tests.processor_helpers import records

LAYOUT = topic_layout()

GRACE = 1.0
UUID = "GPU-6f1c2a9e-79aa-4c1e-9d3b-000000000001"
BUS = "0000:9b:00.0"


def _xid_then_eviction() -> tuple[list[AnyEvent], AnyEvent]:
    """A pod on a GPU whose XID 79 and the pod's eviction share one second (t=60), then a
    node update at t=61. Returns the events in arrival order with the XID held back, and
    the XID: it arrives last, exactly ``GRACE`` behind the newest event."""
    c = Cluster()
    c.node("n", 0)
    c.pod("n", "p", 1)
    c.bind("n", 2, UUID, BUS, ["p"])
    xid = c.xid("n", 60, 79, bus=BUS, uuid=UUID)
    c.pod("n", "p", 60, phase="Failed", reason="Evicted")
    c.node("n", 61)
    held = [e for e in c.events if e is not xid]
    return held, xid


def _ingest(correlator: Correlator, events: list[AnyEvent]) -> list[Incident]:
    out: list[Incident] = []
    for event in events:
        out += correlator.ingest(event)
    return out + correlator.flush()


def test_an_event_exactly_grace_late_is_applied_in_order() -> None:
    """Failed before: the XID arrived when the watermark stood exactly at its time, was
    counted late and skipped as stale (its key had applied the eviction stamped at the
    same second), and the eviction page never opened. Now it is within grace: the same
    revisions as the in-order run, nothing late, nothing stale."""
    held, xid = _xid_then_eviction()
    in_order = run([*held[:3], xid, *held[3:]], config(grace_seconds=GRACE))
    correlator = Correlator(config(grace_seconds=GRACE))
    got = _ingest(correlator, [*held, xid])
    assert (correlator.stats.late, correlator.stats.stale) == (0, 0)
    assert got == in_order
    assert len(of_type(got, "device_unhealthy_eviction")) == 1


def test_an_event_just_past_grace_is_still_late() -> None:
    """Regression guard: the boundary moved by nothing else. An event more than ``grace``
    behind the newest is late (counted), as before."""
    held, xid = _xid_then_eviction()
    correlator = Correlator(config(grace_seconds=GRACE - 0.001))
    _ingest(correlator, [*held, xid])
    assert correlator.stats.late == 1


def test_the_pipelines_lane_watermark_keeps_an_event_exactly_grace_late() -> None:
    """Failed before: the lane's watermark (newest event time less the grace) released
    the eviction at its own instant; the XID of the same second, read in the next batch,
    was late and lost. Now the lane holds it, and the eviction page opens once time
    passes."""
    held, xid = _xid_then_eviction()
    pipeline = Pipeline(config(grace_seconds=GRACE), LAYOUT)
    first = pipeline.process(records(held))
    second = pipeline.process(records([xid], start=len(held)))
    done = pipeline.tick(held[-1].time.timestamp() + 2 * GRACE)
    assert pipeline.lanes.stats.late == 0
    assert pipeline.lanes.stats.stale == 0
    incidents = first.incidents + second.incidents + done.incidents
    assert len(of_type(incidents, "device_unhealthy_eviction")) == 1


def test_a_crash_exactly_the_window_before_counts_toward_the_loop() -> None:
    """Failed before: "more than 3 restarts within 15 min" dropped the crash exactly 15
    min before the fourth, so four crashes spanning exactly the window were no loop."""
    c = Cluster()
    c.node("n", 0)
    c.pod("n", "ft", 1)
    window = config().cuda_oom_window_seconds
    for k, t in enumerate([60.0, 300.0, 600.0, 60.0 + window], start=1):
        c.pod("n", "ft", t + 2, restarts=k, last=term(t, "Error", 1))
    [inc] = of_type(run(c.events), "suspected_cuda_oom")
    assert inc.attributes["restarts_in_window"] == "4"
