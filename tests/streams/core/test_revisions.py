"""Revisions are for people: at most one ``updated`` revision per incident per
``revision_interval_seconds`` of event time, without delaying the ``open`` or the
``resolved``; the held revision names everything that happened meanwhile."""

from __future__ import annotations

from itertools import pairwise

from schemas.incidents import Incident, PodInfo
from streams.core import Correlator
from streams.core.lifecycle import Step, held_until
from streams.core.state import NodeState
from tests.core_helpers import config, feed, final, run
from tests.factories import T0, Cluster

MIN = 60.0


def _rejections(c: Cluster, n: int, start: float, every: float) -> None:
    """One ReplicaSet's pods rejected one after another by the node's device plugin."""
    c.node("n1", 0)
    c.xid("n1", start - 5, 79)
    c.node("n1", start - 4, alloc=0)
    for i in range(n):
        c.pod(
            "n1",
            f"w-{i:02d}",
            start + i * every,
            phase="Failed",
            reason="UnexpectedAdmissionError",
            owner=("ReplicaSet", "w-5d9f"),
        )


def _chain(revisions: list[Incident]) -> list[Incident]:
    ids = {i.id for i in revisions if i.type == "device_unhealthy_eviction"}
    assert len(ids) == 1, ids
    return [i for i in revisions if i.id in ids]


def test_sixty_two_rejections_are_a_handful_of_revisions_naming_every_pod() -> None:
    c = Cluster()
    _rejections(c, 62, 5 * MIN, 3.0)  # 62 pods in ~3 minutes
    chain = _chain(run(c.events))
    every_pod = {f"w-{i:02d}" for i in range(62)}
    assert chain[0].status == "open"
    assert {p.name for p in chain[-1].pods} >= every_pod
    # 183 s of changes at one revision per 30 s: the open plus at most 7 updates.
    assert len(chain) <= 8, [r.status for r in chain]
    # Between the timed updates (the last one is the end of the input's flush), the
    # newest change each names is at least an interval minus one rejection apart.
    timed = chain[1:-1]
    gaps = [(b.last_seen - a.last_seen).total_seconds() for a, b in pairwise(timed)]
    assert gaps
    assert all(g >= 30 - 3 for g in gaps), gaps


def test_every_change_is_published_when_the_interval_is_zero() -> None:
    c = Cluster()
    _rejections(c, 10, 5 * MIN, 3.0)
    coalesced = _chain(run(c.events))
    every = _chain(run(c.events, config(revision_interval_seconds=0)))
    assert len(every) > len(coalesced)
    assert final(every).keys() == final(coalesced).keys()
    [last_every], [last_coalesced] = final(every).values(), final(coalesced).values()
    assert last_every.pods == last_coalesced.pods
    assert last_every.evidence == last_coalesced.evidence


def test_the_open_is_published_by_the_event_that_opens_it() -> None:
    """Nothing waits before the first page: the revision comes out of the ingest that
    lets the watermark pass the opening event, not a timer later."""
    c = Cluster()
    _rejections(c, 5, 5 * MIN, 3.0)
    cfg = config()
    correlator = Correlator(cfg)
    opened_by: int | None = None
    for n, event in enumerate(c.events):
        out = feed(correlator, event)
        if any(i.status == "open" and i.type == "device_unhealthy_eviction" for i in out):
            opened_by = n
            break
    assert opened_by is not None
    # The pod that opens it is the first rejection: event 3 (node, xid, drop, pod);
    # grace holds it until the next event passes the watermark.
    assert opened_by <= 4


def test_held_changes_go_out_when_the_interval_ends_even_with_no_new_event() -> None:
    c = Cluster()
    _rejections(c, 4, 5 * MIN, 2.0)
    c.tick(5 * MIN + 120)  # a quiet minute later: only the clock moves
    correlator = Correlator(config())
    out: list[Incident] = []
    for event in c.events:
        out.extend(feed(correlator, event))
    chain = _chain(out)  # no flush: the timer alone published the held update
    assert [r.status for r in chain] == ["open", "updated"]
    assert len(chain[-1].pods) == 4
    assert chain[-1].revision == 2


def test_the_resolution_is_never_held() -> None:
    """An incident resolved 5 s after a held update publishes its ``resolved`` at once,
    naming what the held update added; the held update itself is not published."""
    cfg = config()
    state = NodeState(cluster="c1", node="n1")
    first = Step(state, cfg, 100.0)
    inc = first.open("device_unhealthy_eviction", "n1", "ev-1", 100.0)
    first.add_pod(inc, PodInfo(namespace="ns", name="a", role="failed"))
    assert [r.status for r in first.finish()] == ["open"]
    second = Step(state, cfg, 110.0)
    second.add_pod(inc, PodInfo(namespace="ns", name="b", role="failed"))
    assert second.finish() == []
    assert held_until(inc, cfg) == 130.0
    third = Step(state, cfg, 115.0)
    third.resolve(inc, 115.0, "recovered")
    [resolved] = third.finish()
    assert (resolved.status, resolved.revision) == ("resolved", 2)
    assert [p.name for p in resolved.pods] == ["a", "b"]
    assert "device_unhealthy_eviction|n1" not in state.incidents


def test_held_revisions_are_the_same_in_any_arrival_order_within_grace() -> None:
    c = Cluster()
    _rejections(c, 20, 5 * MIN, 1.5)
    cfg = config(grace_seconds=5)
    ordered = run(c.events, cfg)
    shuffled = list(c.events)
    swapped = 0
    for i in range(0, len(shuffled) - 1, 2):  # swap neighbours: within grace
        a, b = shuffled[i], shuffled[i + 1]
        if abs((a.time - b.time).total_seconds()) < 5:
            shuffled[i], shuffled[i + 1] = b, a
            swapped += 1
    assert swapped >= 5, swapped
    assert run(shuffled, cfg) == ordered


def test_a_severity_change_is_published_at_once() -> None:
    """An XID-only ``gpu_app_fault`` goes from info to ticket at its third episode:
    on-call must see the escalation when it happens, not up to 30 s later."""
    c = Cluster()
    c.node("n1", 0)
    c.bind("n1", 1, "GPU-1", "0000:9b:00.0", ["a"])
    c.pod("n1", "a", 1)
    times = [5 * MIN, 16 * MIN, 27 * MIN]  # three episodes (gap > 600 s)
    for t in times:
        c.xid("n1", t, 13)
        c.xid("n1", t + 5, 13)  # a second line of the episode: an update, held
    revisions = [r for r in run(c.events) if r.type == "gpu_app_fault"]
    escalated = [r for r in revisions if r.severity == "ticket"]
    assert escalated, [(r.status, r.severity) for r in revisions]
    first = escalated[0]
    assert abs((first.last_seen - T0).total_seconds() - times[2]) < 1
