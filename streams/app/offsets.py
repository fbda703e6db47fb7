"""Which offset of a partition may be committed, when records finish out of order.

The correlator releases records in event-time order, so a held record can sit behind
later offsets already done; Kafka commits one number per partition, so the committable
offset is the lowest offset not yet released (or the next to read). Pure bookkeeping: one
byte per offset from the lowest uncommittable one to the read position, a release one
store, the committable offset one ``find`` (no hashing, no object per record).

Traps: an offset re-read after a seek is ignored below the last one added, so it is never
counted twice; a gap in the log (compaction, transaction markers) is marked done, so it
never holds the commit; ``next_offset`` may be set from outside with nothing outstanding
(the faust engine): the bytes then start at the first offset added.
docs/operations.md, design notes: committable offsets.
"""

from __future__ import annotations

from collections.abc import Sequence

_DONE = 1


class PartitionOffsets:
    """Outstanding and released offsets of one partition, read in order."""

    __slots__ = ("_base", "_done", "next_offset")

    def __init__(self) -> None:
        self._base = 0
        """The offset of ``_done[0]``."""
        self._done = bytearray()
        """Per offset from ``_base`` to ``next_offset`` (excluded): 1 once done (see the
        module), 0 while outstanding."""
        self.next_offset: int | None = None
        """The offset after the last one added (the read position); None before any."""

    def add(self, offset: int) -> None:
        """A record was handed to the pipeline."""
        if self.next_offset is not None and offset < self.next_offset:
            return
        self._open(offset)
        self._done.append(0)
        self.next_offset = offset + 1

    def extend(self, offsets: Sequence[int]) -> None:
        """Records handed to the pipeline, ascending (one fetched batch of a partition):
        :meth:`add` for each, in one step when the batch is consecutive offsets from the
        read position or past it (the usual case: a ``range`` is the cheapest to pass); a
        re-read after a seek, or a batch with gaps, takes :meth:`add`'s path."""
        if not offsets:
            return
        first = offsets[0]
        last = offsets[-1]
        if (self.next_offset is not None and first < self.next_offset) or (
            last - first + 1 != len(offsets)
        ):
            for offset in offsets:
                self.add(offset)
            return
        self._open(first)
        self._done.extend(bytes(last - first + 1))
        self.next_offset = last + 1

    def _open(self, offset: int) -> None:
        """Make ``offset`` (at or past the read position) the next byte: a gap before it
        is marked done, or, with nothing outstanding, the bytes start again there."""
        done = self._done
        if done and offset > len(done) + self._base:
            self._trim()
        if not done:
            self._base = offset
        elif offset > self._base + len(done):
            done.extend(b"\x01" * (offset - self._base - len(done)))

    def release(self, offset: int) -> None:
        """The pipeline is done with the record at ``offset`` (one not outstanding, already
        committed or never read, changes nothing)."""
        index = offset - self._base
        if 0 <= index < len(self._done):
            self._done[index] = _DONE

    def _trim(self) -> None:
        """Drop the done bytes in front of the first outstanding one."""
        done = self._done
        first = done.find(0)
        if first < 0:
            first = len(done)
        if first:
            del done[:first]
            self._base += first

    def committable(self) -> int | None:
        """The offset to commit: every record below it is released (None: nothing read)."""
        self._trim()
        if self._done:
            return self._base
        return self.next_offset

    @property
    def outstanding(self) -> int:
        """Records read but not yet released."""
        return self._done.count(0)
