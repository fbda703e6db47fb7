"""The dcgm-exporter state machine: previous scrape + new scrape -> typed events (pure).

A scrape is a snapshot; events are changes. :func:`diff` compares a new scrape with what
the previous one left in :class:`DcgmState` and returns the new state and the events; the
caller passes the time, so the same scrapes give the same events and ids. XIDs: a count
``DCGM_EXP_XID_ERRORS_COUNT{xid=C}`` growing by *n* is *n* events (the burst the gauge
hides), capped per scrape; the gauge changing to a new code is the fallback. Bindings: an
event when a GPU's pods, bus id, index or MIG profile change, and an empty one when it
vanishes; a MIG instance is bound on its own, named by (parent, ``gpu_instance``).

Traps: the first scrape of a GPU is a baseline that reports no XID (the gauge never resets,
and re-reporting it at each restart would start a false chain; ``--state-path`` resumes
instead); the count is net over a sliding window, so the kernel log stays the primary XID
source; an old state file re-sends every MIG instance once. docs/connectors.md, design notes.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Final

import msgspec

from connectors.dcgm.exposition import XID_COUNT, XID_GAUGE, GpuSample, Scrape
from schemas.events import GpuBindingEvent, PodRef, XidEvent
from schemas.ids import hashed_id

MAX_BURST: Final = 64
"""Events per XID code, GPU and scrape at most (a count jumping by 10,000 is a storm)."""
SOURCE: Final = "dcgm"


class XidMemory(msgspec.Struct, kw_only=True):
    """What the previous scrape said about one physical GPU's XIDs."""

    last: int | None = None
    counts: dict[int, int] | None = None


class BindingMemory(msgspec.Struct, frozen=True, kw_only=True):
    """The binding last sent for one GPU or MIG instance."""

    gpu_uuid: str
    pci_bus_id: str = ""
    gpu_index: int | None = None
    device: str = ""
    mig_profile: str = ""
    pods: tuple[PodRef, ...] = ()
    gpu_instance: int | None = None
    """A MIG instance's ``GPU_I_ID`` (``gpu_uuid`` is then its parent's); absent in state
    files saved before it existed, which spelled the instance in ``gpu_uuid``."""


class DcgmState(msgspec.Struct, kw_only=True):
    """Everything :func:`diff` remembers between scrapes (small, and JSON-serialisable so
    ``connect dcgm --state-path FILE`` can persist it)."""

    scrapes: int = 0
    """Scrapes diffed so far: part of every event id."""
    xids: dict[str, XidMemory] = {}
    """By physical GPU uuid."""
    bindings: dict[str, BindingMemory] = {}
    """By GPU key (``uuid`` or ``uuid/GI<id>``)."""


class DiffResult(msgspec.Struct, frozen=True, kw_only=True):
    state: DcgmState
    events: tuple[XidEvent | GpuBindingEvent, ...]
    suppressed: int = 0
    """XID occurrences beyond ``max_burst`` that got no event of their own."""
    baseline: int = 0
    """Non-zero gauges and counts seen on first sight and deliberately not reported."""


class _Folded(msgspec.Struct, kw_only=True):
    """One physical GPU's XID view, folded over its MIG instances."""

    uuid: str
    bus: str = ""
    index: int | None = None
    last: int | None = None
    text: str = ""
    counts: dict[int, int] | None = None
    window: int | None = None


def _fold(samples: Iterable[GpuSample]) -> dict[str, _Folded]:
    folded: dict[str, _Folded] = {}
    for s in samples:
        f = folded.get(s.uuid)
        if f is None:
            f = folded[s.uuid] = _Folded(uuid=s.uuid)
        f.bus = f.bus or s.pci_bus_id
        f.index = f.index if f.index is not None else s.gpu_index
        if s.xid_last is not None and (f.last is None or s.xid_last > f.last):
            f.last, f.text = s.xid_last, s.xid_text
        if s.xid_counts is not None:
            counts = f.counts if f.counts is not None else {}
            for code, n in s.xid_counts.items():
                counts[code] = max(n, counts.get(code, 0))
            f.counts = counts
        f.window = f.window or s.window_ms
    return folded


def event_id(*parts: object) -> str:
    """``dcgm-`` + 20 hex digits of a hash of ``parts`` (:func:`schemas.ids.hashed_id`)."""
    return hashed_id("dcgm", *parts)


def diff(
    state: DcgmState | None,
    scrape: Scrape,
    *,
    cluster: str,
    node: str,
    time: datetime,
    max_burst: int = MAX_BURST,
) -> DiffResult:
    """The events that turn ``state`` (None: nothing seen yet) into ``scrape``, observed at
    ``time``; bindings first, so the core knows a GPU's pods before its XIDs arrive."""
    old = state or DcgmState()
    seq = old.scrapes + 1
    stamp = time.isoformat()
    events: list[XidEvent | GpuBindingEvent] = []

    bindings: dict[str, BindingMemory] = {}
    for key, sample in scrape.gpus.items():
        binding = _binding(sample)
        bindings[key] = binding
        if old.bindings.get(key) != binding:
            events.append(_binding_event(key, binding, cluster, node, time, seq, stamp))
    for key, gone in old.bindings.items():
        if key not in bindings and gone.pods:
            unbound = msgspec.structs.replace(gone, pods=())
            events.append(_binding_event(key, unbound, cluster, node, time, seq, stamp))

    xids: dict[str, XidMemory] = {}
    suppressed = baseline = 0
    for uuid, f in _fold(scrape.gpus.values()).items():
        xids[uuid] = XidMemory(last=f.last, counts=f.counts)
        before = old.xids.get(uuid)
        if before is None:
            baseline += (f.last or 0) > 0
            baseline += sum(1 for n in (f.counts or {}).values() if n > 0)
            continue
        context = _XidContext(cluster, node, time, seq, stamp, f)
        grew: set[int] = set()
        if f.counts is not None and before.counts is not None:
            for code, now in sorted(f.counts.items()):
                was = before.counts.get(code, 0)
                if now > was:
                    grew.add(code)
                    suppressed += context.burst(events, code, was, now, max_burst)
        elif f.counts is not None:
            baseline += sum(1 for n in f.counts.values() if n > 0)
        last = f.last
        if last and before.last is not None and last != before.last and last not in grew:
            events.append(context.gauge(before.last, last))
    new = DcgmState(scrapes=seq, xids=xids, bindings=bindings)
    return DiffResult(state=new, events=tuple(events), suppressed=suppressed, baseline=baseline)


def _binding(sample: GpuSample) -> BindingMemory:
    return BindingMemory(
        gpu_uuid=sample.uuid,
        pci_bus_id=sample.pci_bus_id,
        gpu_index=sample.gpu_index,
        device=sample.device,
        mig_profile=sample.mig_profile,
        pods=sample.pods,
        gpu_instance=sample.gpu_instance,
    )


def _binding_event(
    key: str, b: BindingMemory, cluster: str, node: str, time: datetime, seq: int, stamp: str
) -> GpuBindingEvent:
    """``key``: the GPU's key in the state (``uuid`` or ``uuid/GI<id>``), which the id hashes:
    instances of one GPU share uuid and bus id, and would otherwise share ids."""
    pods = ",".join(f"{p.namespace}/{p.name}/{p.container}" for p in b.pods)
    return GpuBindingEvent(
        id=event_id(cluster, node, "binding", key, b.pci_bus_id, pods, seq, stamp),
        cluster=cluster,
        time=time,
        node=node,
        gpu_uuid=b.gpu_uuid,
        pci_bus_id=b.pci_bus_id,
        gpu_index=b.gpu_index,
        device=b.device,
        mig_profile=b.mig_profile,
        pods=b.pods,
        gpu_instance=b.gpu_instance,
        source="dcgm-exporter",
    )


class _XidContext:
    """Builds the XID events of one GPU in one scrape."""

    def __init__(
        self, cluster: str, node: str, time: datetime, seq: int, stamp: str, gpu: _Folded
    ) -> None:
        self.cluster, self.node, self.time = cluster, node, time
        self.seq, self.stamp, self.gpu = seq, stamp, gpu

    def _event(self, code: int, message: str, *id_parts: object) -> XidEvent:
        g = self.gpu
        return XidEvent(
            id=event_id(self.cluster, self.node, g.uuid, *id_parts, self.seq, self.stamp),
            cluster=self.cluster,
            time=self.time,
            node=self.node,
            code=code,
            pci_bus_id=g.bus,
            gpu_uuid=g.uuid,
            gpu_index=g.index,
            message=message,
            source=SOURCE,
        )

    def burst(
        self, out: list[XidEvent | GpuBindingEvent], code: int, was: int, now: int, cap: int
    ) -> int:
        """Append one event per new occurrence (at most ``cap``); return how many were not."""
        new = now - was
        shown = min(new, cap)
        window = f" in the last {self.gpu.window} ms" if self.gpu.window else ""
        for k in range(1, shown + 1):
            message = (
                f'dcgm-exporter: {XID_COUNT}{{xid="{code}"}} rose {was} -> {now}{window}: '
                f"occurrence {k} of {new}"
            )
            if k == shown and new > shown:
                message += f" ({new - shown} more not sent as separate events)"
            out.append(self._event(code, message, XID_COUNT, code, was, now, k))
        return new - shown

    def gauge(self, was: int, now: int) -> XidEvent:
        text = f": {self.gpu.text}" if self.gpu.text else ""
        message = f"dcgm-exporter: {XID_GAUGE} changed {was} -> {now}{text}"
        return self._event(now, message, XID_GAUGE, now, was, now, 1)
