"""Random but realistic timelines for the core's property tests (hypothesis plans).

A plan is a list of ``(episode, node, start)``; :func:`build` turns it into a
time-sorted event list over three nodes (one sharing its GPU with MPS) that
ends with a tick two days later, so every window has closed.
"""

from __future__ import annotations

from hypothesis import strategies as st

from schemas.codec import AnyEvent
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
        if not shared:  # one GPU per pod, as dcgm-exporter reports them: the counts agree
            for p, bus in ((1, "0000:9c:00.0"), (2, "0000:9d:00.0")):
                c.bind(node, 2, f"GPU-{n}-{p}", bus, [f"{node}-p{p}"])
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
