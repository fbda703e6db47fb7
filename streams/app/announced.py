"""When a partition has been read to an end fetched after a given moment: two fetches after.

First needed for announcements (below); the same rule lets a source's progress read on
one partition count for its other partitions (:meth:`Pipeline.spread`).

A source announces a partition before its progress covers its first record there
(:mod:`schemas.progress`); the worker then holds its watermark for that source on
that partition until it hears the source there, or knows there is nothing of it
left to read. "Nothing left" needs a fetch response *built after* the
announcement was written, and only the client's receipt times are visible
(``AIOKafkaConsumer.last_poll_timestamp``).

Traps:

* **One response after is not enough.** The response received first after the
  announcement was read may answer a request sent before (a long poll, or the
  very response that carried the announcement for another partition), read from
  the log before the record landed. The client sends a partition's next fetch
  only after the previous response was handled, so the *second* response
  received after the announcement answers a request made after it: its high
  watermark includes everything the source had published there.
* **Then the position must reach that end**: records fetched but not yet
  consumed are not read. aiokafka does not fetch a partition again while it has
  buffered records, so the receipt time stands still until they are consumed.
* Receipt times are milliseconds and the announcement's read time is seconds: a
  response in the same millisecond does not count (conservative: one more poll).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

Partition = tuple[str, int]


class Receipts:
    """Per partition, the last two distinct receipt times of fetch responses seen.

    Fed every loop with the client's receipt times (:meth:`observe`); :meth:`after`
    answers "the latest response answers a request sent after when?": the receipt
    before it (the traps above: the next fetch of a partition is sent only after the
    previous response was handled). Two uses:

    * an announced partition settles once ``after`` is past the announcement's read
      time and the position has reached the high watermark;
    * a partition read to that high watermark holds every record written before
      ``after``: what a source had acknowledged by then is read (the pipeline's
      :meth:`~streams.app.pipeline.Pipeline.spread`).

    Seen less often than responses arrive, the receipt kept as "before" is an older
    one: a smaller ``after``, which only ever claims less (safe).
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
