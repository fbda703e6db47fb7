"""The DRA node pool of the simulator: well-formed records, the connector's joins, truth
that agrees with the records, and noise that writes none."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from functools import cache

from gputriage.demo.events import GPU
from gputriage.simulate import Simulation, StreamSpec
from gputriage.simulate.dra import CANNOT_ALLOCATE, DISRUPTION, DRA_FAULT_PREFIX, EVICTION_REASON
from gputriage.simulate.dra_records import DRIVER
from schemas.codec import AnyEvent, decode_event, encode
from schemas.events import (
    GpuBindingEvent,
    KubeEvent,
    NodeEvent,
    PodEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
    XidEvent,
)
from schemas.keys import DRA
from schemas.truth import ExpectedIncident

SPEC = StreamSpec.for_duration(seconds=4 * 3600.0, nodes=12, dra_nodes=6, seed=7)


@cache
def _run(spec: StreamSpec) -> tuple[tuple[AnyEvent, ...], tuple[ExpectedIncident, ...]]:
    sim = Simulation(spec)
    events = tuple(sim.events())
    return events, tuple(sim.truth)


def _dra_nodes(events: tuple[AnyEvent, ...]) -> set[str]:
    return {e.node for e in events if isinstance(e, ResourceSliceEvent)}


def _dra_truths(truths: tuple[ExpectedIncident, ...]) -> list[ExpectedIncident]:
    return [t for t in truths if t.fault.startswith(DRA_FAULT_PREFIX)]


def test_every_record_round_trips_and_the_pools_ids_are_its_own() -> None:
    """The fleet repeats some records on purpose (a relist, a duplicate delivery); the
    pool's ids are unique, and none is one of the fleet's."""
    events, _ = _run(SPEC)
    assert all(decode_event(encode(e)) == e for e in events)
    sim = Simulation(SPEC)
    assert sim.dra is not None
    pool = [e.id for e in sim.dra.events]
    assert len(pool) == len(set(pool))
    own = set(pool)
    assert sum(1 for e in events if e.id in own) == len(pool), "a fleet record has a pool id"


def test_dra_nodes_have_no_gpu_resource_and_one_gpu_slice_each() -> None:
    events, _ = _run(SPEC)
    dra = _dra_nodes(events)
    assert len(dra) == SPEC.dra_nodes
    nodes = [e for e in events if isinstance(e, NodeEvent) and e.node in dra]
    assert nodes
    assert all(e.capacity.get(GPU, 0) == 0 for e in nodes)
    assert any(e.capacity == {GPU: 0} for e in nodes), "some report nvidia.com/gpu 0/0"
    assert any(e.capacity == {} for e in nodes), "and some have no such resource"
    for s in (e for e in events if isinstance(e, ResourceSliceEvent)):
        assert s.driver == DRIVER
        assert s.pool == s.node
        assert all(d.name.startswith("gpu-") and d.uuid.startswith("GPU-") for d in s.devices)
        assert all(d.pci_bus_id and d.product and d.type == "gpu" for d in s.devices)


def test_the_pool_holds_gpus_only_through_claims() -> None:
    events, _ = _run(SPEC)
    dra = _dra_nodes(events)
    pods = [e for e in events if isinstance(e, PodEvent) and e.claims]
    assert pods
    assert all(not p.gpu_requests for p in pods)
    assert all(p.node in dra or not p.node for p in pods)
    assert all(c.gpus > 0 and c.device_class == DRIVER for p in pods for c in p.claims)


def test_the_same_seed_gives_the_same_stream_and_another_seed_another() -> None:
    small = StreamSpec.for_duration(seconds=3600.0, nodes=4, dra_nodes=3, seed=11)
    first = [encode(e) for e in Simulation(small).events()]
    assert first == [encode(e) for e in Simulation(small).events()]
    other = StreamSpec.for_duration(seconds=3600.0, nodes=4, dra_nodes=3, seed=12)
    assert first != [encode(e) for e in Simulation(other).events()]


def test_the_pool_leaves_the_device_plugin_fleets_records_alone() -> None:
    """The pool draws from its own random stream: the fleet's nodes, XIDs and bindings
    are the same with or without it."""
    base = StreamSpec.for_duration(seconds=3600.0, nodes=6, seed=5)
    mixed = StreamSpec.for_duration(seconds=3600.0, nodes=6, seed=5, dra_nodes=3)
    events, _ = _run(mixed)
    dra = _dra_nodes(events)

    def fleet(stream: tuple[AnyEvent, ...]) -> list[bytes]:
        kinds = (NodeEvent, XidEvent, GpuBindingEvent)
        return [
            encode(e) for e in stream if isinstance(e, kinds) and getattr(e, "node", "") not in dra
        ]

    assert fleet(events) == fleet(_run(base)[0])
    assert Simulation(base).dra is None


def test_a_dra_binding_follows_its_claims_allocation_and_reservation() -> None:
    """Every ``dra`` binding names the pods its claim was reserved for at that moment, and
    every pod that leaves its node has its devices unbound by the time it is deleted."""
    events, _ = _run(SPEC)
    reserved: dict[tuple[str, str], tuple[str, ...]] = {}
    holder: dict[tuple[str, str], str] = {}
    deleted: list[tuple[PodEvent, set[tuple[str, str]]]] = []
    held_by: dict[str, set[tuple[str, str]]] = defaultdict(set)
    binds = 0
    for e in events:
        if isinstance(e, ResourceClaimEvent):
            for d in e.devices:
                reserved[(d.pool, d.device)] = tuple(
                    f"{r.namespace}/{r.name}" for r in e.reserved_for
                )
        elif isinstance(e, GpuBindingEvent) and e.source == DRA:
            key = (e.node, e.device)
            names = tuple(f"{p.namespace}/{p.name}" for p in e.pods)
            if names:
                binds += 1
                assert names == reserved[key]
                assert e.claims
                assert e.pods_known
                assert not e.shared
                holder[key] = names[0]
                held_by[names[0]].add(key)
            else:
                assert not e.claims
                holder.pop(key, None)
        elif isinstance(e, PodEvent) and e.op == "deleted" and e.claims and e.node:
            key_pod = f"{e.namespace}/{e.name}"
            deleted.append((e, {k for k, v in holder.items() if v == key_pod}))
    assert binds > 0
    assert deleted
    assert all(not still for _, still in deleted), "a deleted pod still holds a device"


def test_dcgm_exporter_binds_the_dra_nodes_gpus_too() -> None:
    """On some nodes dcgm-exporter maps DRA claims to pods (``--kubernetes-enable-dra``),
    on the others (its default) it names no pod for a GPU held by claim."""
    events, _ = _run(SPEC)
    dra = _dra_nodes(events)
    dcgm = [
        e for e in events if isinstance(e, GpuBindingEvent) and e.node in dra and e.source != DRA
    ]
    assert dcgm
    assert all(e.id.startswith("dcgm/") for e in dcgm)
    assert all(e.gpu_index is not None for e in dcgm)
    naming = {e.node for e in dcgm if e.pods}
    assert naming
    assert dra - naming, "some nodes' exporter never names a claim's pod"
    held = {e.node for e in events if isinstance(e, GpuBindingEvent) and e.source == DRA and e.pods}
    assert (dra - naming) & held, "though their GPUs are held by claim"


def test_every_dra_truth_names_what_its_records_show() -> None:
    events, truths = _run(SPEC)
    dra = _dra_nodes(events)
    found = _dra_truths(truths)
    kinds = {(t.fault, t.type) for t in found}
    assert kinds == {
        ("dra_taint_eviction", "device_unhealthy_eviction"),
        ("dra_fatal_xid", "device_unhealthy_eviction"),
        ("dra_device_gone", "gpu_degraded"),
        ("dra_driver_taint", "gpu_degraded"),
        ("dra_pending_claims", "scale_up_failure"),
        ("dra_pending_claims", "gpu_pods_starved"),
    }
    uuids: dict[str, set[str]] = defaultdict(set)
    for s in (e for e in events if isinstance(e, ResourceSliceEvent)):
        uuids[s.node].update(d.uuid for d in s.devices)
    for truth in found:
        if truth.node:
            assert truth.node in dra
            assert set(truth.gpus) <= uuids[truth.node]
        window = (truth.not_before, truth.not_after)
        if truth.type == "device_unhealthy_eviction":
            failed = [
                e
                for e in events
                if isinstance(e, PodEvent)
                and f"{e.namespace}/{e.name}" in truth.pods
                and e.phase == "Failed"
                and e.node == truth.node
            ]
            assert failed
            assert window[0] <= failed[0].time <= window[1]
        if truth.fault == "dra_taint_eviction":
            _assert_taint_eviction(events, truth)
        if truth.fault == "dra_driver_taint":
            _assert_driver_taint(events, truth)
        if truth.fault == "dra_device_gone":
            _assert_device_gone(events, truth)
        if truth.type == "gpu_pods_starved":
            _assert_cannot_allocate(events, truth)


def _assert_taint_eviction(events: tuple[AnyEvent, ...], truth: ExpectedIncident) -> None:
    tainted = [
        e
        for e in events
        if isinstance(e, ResourceSliceEvent)
        and e.node == truth.node
        and e.time >= truth.not_before
        and any(d.uuid in truth.gpus and d.taints for d in e.devices)
    ]
    assert tainted
    assert tainted[0].time == truth.start
    taint = next(t for d in tainted[0].devices for t in d.taints)
    assert taint.effect == "NoExecute"
    assert taint.rule
    evicted = [
        e
        for e in events
        if isinstance(e, KubeEvent)
        and e.reason == EVICTION_REASON
        and f"{e.involved.namespace}/{e.involved.name}" in truth.pods
    ]
    assert len(evicted) == 1
    assert evicted[0].message == "Marking for deletion"
    marked = [
        e
        for e in events
        if isinstance(e, PodEvent) and f"{e.namespace}/{e.name}" in truth.pods and e.disruption
    ]
    assert marked
    assert marked[0].disruption == DISRUPTION
    assert marked[0].deleted_at is not None


def _assert_driver_taint(events: tuple[AnyEvent, ...], truth: ExpectedIncident) -> None:
    """The kernel's XID names the GPU by its bus; the driver's taint follows it."""
    slices = [e for e in events if isinstance(e, ResourceSliceEvent) and e.node == truth.node]
    device = next(d for s in slices for d in s.devices if d.uuid in truth.gpus)
    (xid,) = (
        e
        for e in events
        if isinstance(e, XidEvent) and e.time == truth.start and e.node == truth.node
    )
    assert xid.pci_bus_id == device.pci_bus_id
    assert not xid.gpu_uuid, "the kernel log knows the bus alone"
    taints = [
        t
        for s in slices
        if truth.not_before <= s.time <= truth.not_after
        for d in s.devices
        if d.uuid in truth.gpus
        for t in d.taints
    ]
    assert [(t.key, t.value, t.effect, t.rule) for t in taints] == [
        ("gpu.nvidia.com/xid", "79", "NoSchedule", "")
    ]


def _assert_device_gone(events: tuple[AnyEvent, ...], truth: ExpectedIncident) -> None:
    slices = [e for e in events if isinstance(e, ResourceSliceEvent) and e.node == truth.node]
    missing = [s.time for s in slices if not any(d.uuid in truth.gpus for d in s.devices)]
    back = [
        s.time
        for s in slices
        if s.time > truth.start and any(d.uuid in truth.gpus for d in s.devices)
    ]
    assert missing
    assert missing[0] == truth.start
    assert back
    assert back[0] - truth.start > timedelta(minutes=5)


def _assert_cannot_allocate(events: tuple[AnyEvent, ...], truth: ExpectedIncident) -> None:
    pending = [
        e
        for e in events
        if isinstance(e, PodEvent)
        and f"{e.namespace}/{e.name}" in truth.pods
        and e.scheduled is not None
    ]
    assert pending
    assert all(CANNOT_ALLOCATE in (e.scheduled.message or "") for e in pending if e.scheduled)
    assert all(e.claims and not e.gpu_requests for e in pending)


def test_noise_alone_writes_no_truth_but_tells_its_stories() -> None:
    """With no faults, the pool still restarts its DRA plugins (slices deleted and
    republished within two minutes), and allocates and releases claims."""
    quiet = StreamSpec.for_duration(seconds=4 * 3600.0, nodes=6, dra_nodes=4, seed=7, fault_rate=0)
    events, truths = _run(quiet)
    assert not truths
    slices = [e for e in events if isinstance(e, ResourceSliceEvent)]
    gone = [e for e in slices if e.op == "deleted"]
    assert gone
    for deletion in gone:
        again = [
            e
            for e in slices
            if e.node == deletion.node and e.op == "added" and e.time > deletion.time
        ]
        assert again
        assert again[0].time - deletion.time < timedelta(minutes=2)
    claims = [e for e in events if isinstance(e, ResourceClaimEvent)]
    assert any(e.devices for e in claims)
    assert any(e.op == "deleted" for e in claims)
