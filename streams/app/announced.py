"""When a partition has been read to an end fetched after a given moment: two fetches after.

A source announces a partition before its progress covers its first record there
(:mod:`schemas.progress`); the worker holds its watermark for that source there until it
hears the source, or knows nothing of it is left to read, which needs a fetch response
built after the announcement (only receipt times are visible). The same rule lets one
partition's progress count for others (:meth:`Pipeline.spread`).

Traps: one response after is not enough (it may answer a request sent before); the second
is, since the client fetches a partition again only after handling the previous response;
the position must then reach that end (aiokafka does not refetch while records are
buffered); a response in the same millisecond does not count.
docs/operations.md, design notes: announced partitions.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

Partition = tuple[str, int]


class Receipts:
    """Per partition, the last two distinct receipt times of fetch responses seen.

    Fed every loop (:meth:`observe`); :meth:`after` answers "the latest response answers a
    request sent after when?": the receipt before it. Used to settle an announced partition
    once the position reaches the high watermark, and by
    :meth:`~streams.app.pipeline.Pipeline.spread` (a partition read to that end holds every
    record written before ``after``).

    Trap: seen less often than responses arrive, "before" is an older receipt: a smaller
    ``after``, which only ever claims less (safe). docs/operations.md, design notes: `Receipts`.
    """

    def __init__(self) -> None:
        self._seen: dict[Partition, tuple[int | None, int, object]] = {}

    def observe(self, where: Partition, stamp_ms: int | None, leader: object = None) -> None:
        """The client's last receipt time for ``where`` (epoch ms; None: never fetched),
        and the broker that leads it (anything comparable; None: unknown).

        Starts over (nothing known before the latest receipt) when the leader changed (a
        request to the new one may have left before the old one's last answer came) or
        the receipt went back (the wall clock was stepped back)."""
        if stamp_ms is None:
            return
        seen = self._seen.get(where)
        if seen is None or leader != seen[2] or stamp_ms < seen[1]:
            self._seen[where] = (None, stamp_ms, leader)
        elif stamp_ms != seen[1]:
            self._seen[where] = (seen[1], stamp_ms, leader)

    def after(self, where: Partition) -> float:
        """Epoch ms after which the latest response's request was sent (-inf: unknown)."""
        seen = self._seen.get(where)
        if seen is None or seen[0] is None:
            return -math.inf
        return float(seen[0])

    def forget(self, keep: Iterable[Partition]) -> None:
        """Drop the partitions not in ``keep`` (no longer assigned)."""
        kept = set(keep)
        for where in [w for w in self._seen if w not in kept]:
            del self._seen[where]
