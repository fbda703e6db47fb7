"""Which offset of a partition may be committed, when records finish out of order.

The correlator releases records in event-time order, not in offset order: a
record held for the watermark can sit behind later offsets that are already
done. Kafka commits one number per partition ("everything below this is
done"), so the committable offset is the *lowest offset not yet released*,
or the next offset to read when nothing is outstanding.

Pure bookkeeping, no I/O: the worker adds every record it hands to the
pipeline, releases what the pipeline releases, and commits
:meth:`PartitionOffsets.committable` once the effects of those releases are
delivered.

Trap: the same offset may be added twice when a partition is re-read after a
seek (it is then a new outstanding record); :meth:`add` ignores offsets below
the last one added, so a re-read before the read position is never counted
twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence


class PartitionOffsets:
    """Outstanding and released offsets of one partition, read in order."""

    __slots__ = ("_outstanding", "_released", "next_offset")

    def __init__(self) -> None:
        self._outstanding: deque[int] = deque()
        self._released: set[int] = set()
        self.next_offset: int | None = None
        """The offset after the last one added (the read position); None before any."""

    def add(self, offset: int) -> None:
        """A record was handed to the pipeline."""
        if self.next_offset is not None and offset < self.next_offset:
            return
        self._outstanding.append(offset)
        self.next_offset = offset + 1

    def extend(self, offsets: Sequence[int]) -> None:
        """Records handed to the pipeline, ascending (one fetched batch of a partition):
        :meth:`add` for each, in one step when the batch starts at the read position or
        past it (the usual case; a re-read after a seek takes :meth:`add`'s path)."""
        if not offsets:
            return
        if self.next_offset is not None and offsets[0] < self.next_offset:
            for offset in offsets:
                self.add(offset)
            return
        self._outstanding.extend(offsets)
        self.next_offset = offsets[-1] + 1

    def release(self, offset: int) -> None:
        """The pipeline is done with the record at ``offset``."""
        self._released.add(offset)

    def committable(self) -> int | None:
        """The offset to commit: every record below it is released (None: nothing read)."""
        outstanding = self._outstanding
        released = self._released
        while outstanding and outstanding[0] in released:
            released.discard(outstanding.popleft())
        if outstanding:
            return outstanding[0]
        return self.next_offset

    @property
    def outstanding(self) -> int:
        """Records read but not yet released (an upper bound until :meth:`committable`)."""
        return len(self._outstanding)
