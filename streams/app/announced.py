"""When an announced partition may stop holding the watermark: two fetches after it.

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

from collections.abc import Mapping

Partition = tuple[str, int]


class FetchesAfter:
    """Per announced partition, the first fetch response received after the announcement."""

    def __init__(self) -> None:
        self._first: dict[Partition, int] = {}

    def ready(
        self, announced: Mapping[Partition, float], polled: Mapping[Partition, int | None]
    ) -> list[Partition]:
        """The announced partitions whose second response since the announcement has come.

        ``announced``: partition -> when its earliest unheard announcement was read
        (epoch seconds); ``polled``: partition -> the client's last receipt time (epoch
        ms, None before the first). Partitions no longer announced are forgotten.
        """
        first = self._first
        for where in [w for w in first if w not in announced]:
            del first[where]
        out: list[Partition] = []
        for where, at in announced.items():
            when = polled.get(where)
            if when is None or when <= at * 1000:
                continue
            seen = first.setdefault(where, when)
            if when > seen:
                out.append(where)
        return out
