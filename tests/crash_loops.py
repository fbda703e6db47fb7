"""A GPU pod whose container crash-loops: the builders the crash-cause tests share.

The pod is ``ns/ft`` on node ``n3``, bound to one GPU (:data:`UUID` at :data:`BUS`), and
its container exits 1 at the given times saying the given termination message."""

from __future__ import annotations

from tests.factories import Cluster, term

MIN = 60.0
UUID = "GPU-1ab2485c-121c-77db-6719-0b616d1673f4"
BUS = "0000:1a:00.0"
CRASHES = [1 * MIN, 3 * MIN, 6 * MIN, 9 * MIN]
"""Four crashes in 9 min: one more than ``cuda_oom_restarts`` within its window."""


def setup(c: Cluster) -> None:
    """Node ``n3`` and GPU pod ``ns/ft`` on it, bound to the GPU."""
    c.node("n3", 0)
    c.pod("n3", "ft", 1)
    c.bind("n3", 2, UUID, BUS, ["ft"])


def loop(
    c: Cluster, times: list[float], message: str, *, first: int = 1, fresh: bool | None = None
) -> None:
    """``ns/ft``'s container exits 1 at ``times``, its ``first``, next... restart, saying
    ``message``; after :func:`setup` when ``fresh`` (by default: when ``first`` is 1)."""
    if first == 1 if fresh is None else fresh:
        setup(c)
    for k, t in enumerate(times, start=first):
        c.pod("n3", "ft", t + 2, restarts=k, last=term(t, "Error", 1, message))
