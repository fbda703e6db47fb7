"""The stream keeps Kubernetes' and dcgm-exporter's clocks (``gputriage.simulate.faults``
``_not_ready``, ``fleet.SCRAPE_INTERVAL``): each check reads the generated events."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import cache

from gputriage.simulate import FAULTS, Simulation, StreamSpec
from schemas.codec import AnyEvent
from schemas.events import GpuBindingEvent, KubeEvent, NodeEvent, PodEvent, XidEvent

SCRAPE = timedelta(seconds=30)
SLOT = timedelta(seconds=8)
"""Events of different stories due together leave one per slot (1.2 s here): a little
queueing."""


@cache
def _events() -> tuple[AnyEvent, ...]:
    rates = dict.fromkeys(FAULTS, 0.0) | {"not_ready": 8.0, "fatal_xid": 5.0}
    spec = StreamSpec.for_duration(seconds=2 * 3600.0, nodes=60, seed=11, rates=rates)
    return tuple(Simulation(spec).events())


def _ready(event: NodeEvent) -> str:
    return next(c.status for c in event.conditions if c.type == "Ready")


def test_a_scheduled_pods_binding_comes_at_the_next_scrape() -> None:
    events = _events()
    scheduled: set[str] = set()
    running: dict[str, datetime] = {}
    checked = 0
    for event in events:
        if isinstance(event, KubeEvent) and event.reason == "Scheduled":
            scheduled.add(event.involved.name)
        if isinstance(event, PodEvent) and event.phase == "Running" and event.name in scheduled:
            scheduled.discard(event.name)
            running[event.name] = event.time
        if isinstance(event, GpuBindingEvent):
            for ref in event.pods:
                started = running.pop(ref.name, None)
                if started is not None:
                    assert timedelta(0) < event.time - started <= SCRAPE + SLOT, event
                    checked += 1
    assert checked > 20


def test_unknown_comes_a_grace_period_after_the_last_ready() -> None:
    events = _events()
    last_ready: dict[str, datetime] = {}
    last: dict[str, str] = {}
    checked = 0
    for event in events:
        if not isinstance(event, NodeEvent):
            continue
        status = _ready(event)
        was, last[event.node] = last.get(event.node, "True"), status
        if status == "True":
            last_ready[event.node] = event.time
        elif status == "Unknown" and was == "True":
            gap = event.time - last_ready[event.node]
            assert timedelta(0) < gap <= timedelta(seconds=50) + SLOT, event
            assert {t.key for t in event.taints} >= {"node.kubernetes.io/unreachable"}
            checked += 1
    assert checked > 3


def test_taint_eviction_waits_out_the_toleration() -> None:
    events = _events()
    not_ready_since: dict[str, datetime] = {}
    evicted: set[str] = set()
    evictions = 0
    for event in events:
        if isinstance(event, NodeEvent):
            if _ready(event) == "True":
                not_ready_since.pop(event.node, None)
                evicted.discard(event.node)
            else:
                not_ready_since.setdefault(event.node, event.time)
                assert any(t.effect == "NoExecute" for t in event.taints)
        if isinstance(event, KubeEvent) and event.reason == "TaintManagerEviction":
            if event.node in evicted:
                continue  # the rest of the burst
            evicted.add(event.node)
            since = not_ready_since[event.node]
            assert timedelta(seconds=300) <= event.time - since <= timedelta(seconds=300) + SLOT
            evictions += 1
    assert evictions > 3


def test_dcgm_reports_a_kernel_xid_at_the_next_scrape() -> None:
    events = _events()
    kernel: dict[tuple[str, int], datetime] = {}
    checked = 0
    for event in events:
        if not isinstance(event, XidEvent):
            continue
        key = (event.gpu_uuid, event.code)
        if event.source == "kmsg":
            kernel[key] = event.time
        elif event.source == "dcgm":
            assert timedelta(0) < event.time - kernel[key] <= SCRAPE + SLOT, event
            checked += 1
    assert checked > 3
