"""Properties of the core that must hold for *any* input, checked with hypothesis.

* Arrival order within the grace period does not matter: the revisions are
  byte-identical to an in-order run.
* Replaying the same input gives the same ids (and the same bytes).
* A resolved incident keeps the id it was opened with.
* suspected_cuda_oom is never raised for a container whose last termination was
  OOMKilled.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.codec import AnyEvent, decode_event, encode
from schemas.incidents import Incident
from streams.core import Correlator
from tests.core_helpers import config, run
from tests.factories import Cluster, term

GRACE = 30.0
KINDS = ("chain", "oom", "cuda", "degraded", "app", "repeat", "not_ready", "noise")
NODES = 3

episodes = st.lists(
    st.tuples(st.sampled_from(KINDS), st.integers(0, NODES - 1), st.integers(0, 3 * 3600)),
    min_size=1,
    max_size=10,
)


def build(plan: list[tuple[str, int, int]]) -> list[AnyEvent]:
    """A timeline (sorted by event time) from a list of (episode, node, start) tuples."""
    c = Cluster()
    restarts: dict[str, int] = {}

    def crash(node: str, pod: str, t: float, reason: str = "Error", code: int = 1) -> None:
        restarts[pod] = restarts.get(pod, 0) + 1
        c.pod(node, pod, t + 2, restarts=restarts[pod], last=term(t, reason, code))

    for n in range(NODES):
        node = f"n{n}"
        shared = {"nvidia.com/gpu.sharing-strategy": "mps"} if n == 2 else None
        c.node(node, 0, labels=shared)
        for p in range(3):
            c.pod(node, f"{node}-p{p}", 1)
        c.bind(
            node,
            2,
            f"GPU-{n}",
            "0000:9b:00.0",
            [f"{node}-p0", f"{node}-p1"] if shared else [f"{node}-p0"],
        )
    for kind, n, s in plan:
        node = f"n{n}"
        if kind == "chain":
            c.xid(node, s, 79)
            c.node(node, s + 5, alloc=7)
            c.pod(node, f"{node}-p0", s + 20, phase="Failed", current=term(s + 18))
            c.kube(node, s + 40, "Evicted", name=f"{node}-p1")
            c.node(node, s + 1800)
        elif kind == "oom":
            c.kube(node, s, "OOMKilling", kind="Node", name=node)
            crash(node, f"{node}-p2", s + 1, "OOMKilled", 137)
        elif kind == "cuda":
            for k in range(5):
                crash(node, f"{node}-p1", s + 120 * k)
        elif kind == "degraded":
            c.node(node, s, alloc=7)
            c.node(node, s + 900)
        elif kind == "app":
            c.xid(node, s, 13)
            c.xid(node, s + 30, 31)
        elif kind == "repeat":
            for k in range(5):
                c.xid(node, s + 600 * k, 48, bus="0000:cb:00.0")
        elif kind == "not_ready":
            c.node(node, s, ready="False")
            c.node(node, s + 600)
        else:
            c.pod(node, f"{node}-p2", s)
    horizon = max(e.time.timestamp() for e in c.events)
    events = sorted(c.events, key=lambda e: e.time)
    c.events = []
    c.tick(horizon - events[0].time.timestamp() + 2 * 86400)
    return [*events, *c.events]


def within_grace(events: list[AnyEvent], rnd: random.Random) -> list[AnyEvent]:
    """Reorder so that no event arrives more than ``GRACE`` seconds behind another."""
    keyed = [
        (e.time.timestamp() + rnd.uniform(0, GRACE * 0.99), i, e) for i, e in enumerate(events)
    ]
    return [e for _, _, e in sorted(keyed, key=lambda k: (k[0], k[1]))]


def as_bytes(revisions: list[Incident]) -> list[bytes]:
    return [encode(r) for r in revisions]


@settings(max_examples=150, deadline=None)
@given(plan=episodes, rnd=st.randoms(use_true_random=False))
def test_arrival_order_within_grace_does_not_change_incidents(
    plan: list[tuple[str, int, int]], rnd: random.Random
) -> None:
    cfg = config(grace_seconds=GRACE)
    ordered = build(plan)
    shuffled = within_grace(ordered, rnd)
    correlator = Correlator(cfg)
    out: list[Incident] = []
    for event in shuffled:
        out.extend(correlator.ingest(event))
    out.extend(correlator.flush())
    assert correlator.stats.late == 0
    assert as_bytes(out) == as_bytes(run(ordered, cfg))


@settings(max_examples=60, deadline=None)
@given(plan=episodes)
def test_replaying_the_same_input_gives_the_same_ids(plan: list[tuple[str, int, int]]) -> None:
    lines = [encode(e) for e in build(plan)]
    first = run(decode_event(line) for line in lines)
    second = run(decode_event(line) for line in lines)
    assert [r.id for r in first] == [r.id for r in second]
    assert as_bytes(first) == as_bytes(second)


@settings(max_examples=100, deadline=None)
@given(plan=episodes)
def test_a_resolved_incident_keeps_its_id(plan: list[tuple[str, int, int]]) -> None:
    revisions = run(build(plan))
    by_id: dict[str, list[Incident]] = {}
    for rev in revisions:
        by_id.setdefault(rev.id, []).append(rev)
    opened = [r for r in revisions if r.status == "open"]
    assert len(opened) == len(by_id), "every incident opens once, under the id it keeps"
    for history in by_id.values():
        assert [r.revision for r in history] == list(range(1, len(history) + 1))
        assert history[0].status == "open"
        assert len({(r.type, r.cluster, r.node) for r in history}) == 1
        # Two days of quiet at the end close every window.
        assert history[-1].status == "resolved", history[-1]
        assert all(r.status != "resolved" for r in history[:-1])


terminations = st.lists(
    st.tuples(
        st.sampled_from([("Error", 1), ("OOMKilled", 137), ("Completed", 0)]), st.integers(10, 400)
    ),
    min_size=1,
    max_size=14,
)


@settings(max_examples=200, deadline=None)
@given(seq=terminations)
def test_cuda_oom_is_never_raised_after_an_oomkill(seq: list[tuple[tuple[str, int], int]]) -> None:
    c = Cluster()
    c.node("n", 0)
    c.pod("n", "ft", 1)
    correlator = Correlator(config(grace_seconds=0))
    for event in c.events:
        correlator.ingest(event)
    t = 10.0
    last_reason = ""
    for k, ((reason, code), gap) in enumerate(seq, start=1):
        t += gap
        ev = c.pod("n", "ft", t + 1, restarts=k, last=term(t, reason, code))
        last_reason = reason
        for rev in correlator.ingest(ev):
            if rev.type == "suspected_cuda_oom" and rev.status != "resolved":
                assert last_reason != "OOMKilled"
                assert rev.attributes["confidence"] == "suspected", "no log source needed"
