"""The marking breaker, pure: how many nodes may carry our fault condition at once.

A fleet-wide cause (a bad driver roll-out, a broken DCGM, our own bug) looks like many
GPU faults at once; marking them all would let a repair system replace a pool. Past the
bound we stop marking, say so (a gauge, a counter, a log line) and page instead.

Rules: nodes already marked stay marked (the breaker never unmarks: clearing is the
incident's resolve); new marks go in order of their oldest incident, then node name, the
same on every replica and restart; a pool's share is rounded up as Karpenter's repair does
(``20%`` of 3 nodes allows 1: tests/data/writeback/messages.md), at most ``max_nodes`` in
all. Nodes without a pool label (:data:`schemas.wellknown.POOL_LABELS`) share pool ``""``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Verdict:
    """Which nodes to mark now, which are withheld, and whether the breaker is open."""

    allowed: tuple[str, ...]
    withheld: tuple[str, ...]

    @property
    def tripped(self) -> bool:
        return bool(self.withheld)


def pool_allowance(pool_size: int, fraction: float) -> int:
    """How many nodes of a pool of ``pool_size`` may be marked (rounded up, as Karpenter)."""
    return math.ceil(round(pool_size * fraction, 9)) if pool_size > 0 else 0


def judge(
    wanted: Sequence[str],
    already: Iterable[str],
    pools: Mapping[str, str],
    pool_sizes: Mapping[str, int],
    *,
    max_nodes: int,
    max_fraction: float,
) -> Verdict:
    """``wanted``: nodes to mark, in priority order; ``already``: nodes marked now (kept).

    ``pools`` maps a node to its pool (absent: ``""``); ``pool_sizes`` counts each pool's
    nodes as listed (a wanted node that is not listed has no pool size: never marked).
    """
    kept = list(dict.fromkeys(already))
    count = len(kept)
    per_pool: dict[str, int] = {}
    for node in kept:
        pool = pools.get(node, "")
        per_pool[pool] = per_pool.get(pool, 0) + 1
    allowed: list[str] = []
    withheld: list[str] = []
    kept_set = set(kept)
    for node in dict.fromkeys(wanted):
        if node in kept_set:
            continue
        pool = pools.get(node, "")
        size = pool_sizes.get(pool, 0)
        if count >= max_nodes or per_pool.get(pool, 0) >= pool_allowance(size, max_fraction):
            withheld.append(node)
            continue
        allowed.append(node)
        count += 1
        per_pool[pool] = per_pool.get(pool, 0) + 1
    return Verdict(allowed=tuple(allowed), withheld=tuple(withheld))
