"""The dcgm-exporter state machine, scrape by scrape (pure: no HTTP, no Kafka)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from connectors.dcgm.diff import DcgmState, DiffResult, diff
from connectors.dcgm.exposition import XID_COUNT, XID_GAUGE, Scrape, parse_exposition
from schemas.events import GpuBindingEvent, PodRef, XidEvent
from tests import paths
from tests.core_helpers import of_type
from tests.core_helpers import run as core_run
from tests.factories import Cluster, at

DATA = paths.DATA / "dcgm"
RTX = "GPU-a8394b51-c086-568a-9f1a-c1e1c934c44c"
A30 = "GPU-265c9814-6156-355b-e589-ff2064894f16"
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
LABELS = (
    f'gpu="0",UUID="{RTX}",pci_bus_id="00000000:00:02.0",device="nvidia0",'
    'modelName="NVIDIA RTX 4000 Ada Generation",Hostname="lke529760-766837-0a634ab30000"'
)


def parse(text: str) -> Scrape:
    scrape = parse_exposition(text)
    assert isinstance(scrape, Scrape), scrape
    return scrape


def burst(n: int) -> Scrape:
    return parse((DATA / "burst" / f"{n:02d}.prom").read_text())


def mig(n: int) -> Scrape:
    return parse((DATA / "mig" / f"{n:02d}.prom").read_text())


def gauge_only(code: int) -> Scrape:
    """An exporter without the count metric: only the last-value gauge."""
    return parse(f"{XID_GAUGE}{{{LABELS}}} {code}\n")


def with_counts(code: int, counts: dict[int, int]) -> Scrape:
    lines = [f"{XID_GAUGE}{{{LABELS}}} {code}"]
    lines += [f'{XID_COUNT}{{{LABELS},xid="{c}"}} {n}' for c, n in counts.items()]
    if not counts:
        lines.append(f"{XID_COUNT}{{{LABELS}}} 0")
    return parse("\n".join(lines) + "\n")


def run(*scrapes: Scrape, state: DcgmState | None = None, **kw: int) -> list[DiffResult]:
    results = []
    for i, scrape in enumerate(scrapes):
        result = diff(
            state, scrape, cluster="c1", node="n1", time=T0 + timedelta(seconds=15 * i), **kw
        )
        state = result.state
        results.append(result)
    return results


def xids(result: DiffResult) -> list[XidEvent]:
    return [e for e in result.events if isinstance(e, XidEvent)]


def bindings(result: DiffResult) -> list[GpuBindingEvent]:
    return [e for e in result.events if isinstance(e, GpuBindingEvent)]


def test_burst_hidden_by_the_gauge_is_reported_through_the_count() -> None:
    first, second, third, fourth = run(burst(1), burst(2), burst(3), burst(4))
    # First sight: a baseline. The gauge says 79 and the count 1, maybe from hours ago.
    assert xids(first) == []
    assert first.baseline == 2
    # The gauge stays 79; the count goes 1 -> 4: three new XID 79s.
    events = xids(second)
    assert [e.code for e in events] == [79, 79, 79]
    assert {e.gpu_uuid for e in events} == {RTX}
    assert {e.pci_bus_id for e in events} == {"0000:00:02.0"}
    assert {(e.source, e.gpu_index) for e in events} == {("dcgm", 0)}
    assert len({e.id for e in events}) == 3
    assert "rose 1 -> 4" in events[0].message
    assert "occurrence 3 of 3" in events[2].message
    assert all(e.time == T0 + timedelta(seconds=15) for e in events)
    # Unchanged count, then one that falls as XIDs age out of the window: nothing new.
    assert xids(third) == []
    assert xids(fourth) == []


def test_pod_labels_appearing_changing_and_disappearing_are_bindings() -> None:
    first, second, third, fourth = run(burst(1), burst(2), burst(3), burst(4))
    (bound,) = bindings(first)
    assert bound.pods == (
        PodRef(namespace="default", name="cuda-75454ffb9f-8ljq7", container="cuda"),
    )
    assert (bound.gpu_uuid, bound.pci_bus_id, bound.gpu_index, bound.device) == (
        RTX,
        "0000:00:02.0",
        0,
        "nvidia0",
    )
    assert bindings(second) == []  # same pods: nothing to say
    (gone,) = bindings(third)
    assert gone.pods == ()
    assert gone.gpu_uuid == RTX
    (new,) = bindings(fourth)
    assert new.pods == (PodRef(namespace="ml", name="trainer-0", container="trainer"),)


def test_gauge_only_exporter_reports_changes_but_not_restarts() -> None:
    results = run(
        gauge_only(0), gauge_only(31), gauge_only(31), gauge_only(79), gauge_only(0), gauge_only(79)
    )
    codes = [[e.code for e in xids(r)] for r in results]
    # 0 -> 31 and 31 -> 79 are XIDs; a repeat of 31 is invisible to the gauge; -> 0 is an
    # exporter restart; 0 -> 79 after it is a new XID.
    assert codes == [[], [31], [], [79], [], [79]]
    assert "changed 31 -> 79" in xids(results[3])[0].message


def test_a_gauge_change_the_count_already_reported_is_not_doubled() -> None:
    results = run(with_counts(0, {}), with_counts(48, {48: 1}), with_counts(13, {48: 1}))
    assert [e.code for e in xids(results[1])] == [48]  # count and gauge: one occurrence
    # The gauge moved to 13 but no count grew (it aged out already): the gauge says it.
    assert [e.code for e in xids(results[2])] == [13]


def test_a_first_scrape_after_a_saved_state_is_no_baseline() -> None:
    (first,) = run(burst(1))
    # As the state file keeps it: JSON, decoded into a fresh state after a restart.
    saved = msgspec.json.decode(msgspec.json.encode(first.state), type=DcgmState)
    (resumed,) = run(burst(2), state=saved)
    assert len(xids(resumed)) == 3
    assert resumed.baseline == 0
    assert bindings(resumed) == []  # the binding was already sent before the restart


def test_ids_are_deterministic_and_distinct_per_occurrence() -> None:
    once = run(burst(1), burst(2), burst(3), burst(4))
    again = run(burst(1), burst(2), burst(3), burst(4))
    ids = [e.id for r in once for e in r.events]
    assert ids == [e.id for r in again for e in r.events]
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("dcgm-") for i in ids)
    # The same change in another scrape (later, or on another node) is another event.
    later = diff(once[0].state, burst(2), cluster="c1", node="n1", time=T0 + timedelta(hours=1))
    other = diff(once[0].state, burst(2), cluster="c1", node="n2", time=T0 + timedelta(seconds=15))
    assert not {e.id for e in later.events} & set(ids)
    assert not {e.id for e in other.events} & set(ids)


def test_a_storm_is_capped_and_counted() -> None:
    results = run(with_counts(79, {79: 1}), with_counts(79, {79: 10_001}), max_burst=5)
    events = xids(results[1])
    assert len(events) == 5
    assert results[1].suppressed == 9_995
    assert "9995 more not sent" in events[-1].message


def test_mig_instances_bind_separately_and_an_xid_is_reported_once_per_gpu() -> None:
    """Each instance is bound on its own, named (parent uuid, GPU_I_ID): the spelling kmsg
    (``GPU-I:03`` on the parent's bus id) and NVML use for the same instance."""
    first, second = run(mig(1), mig(2))
    keys = {(b.gpu_uuid, b.gpu_instance): b for b in bindings(first)}
    assert set(keys) == {(A30, 3), (A30, 4)}
    gi3 = keys[A30, 3]
    assert gi3.pods == (PodRef(namespace="ml", name="a-0", container="main"),)
    assert (gi3.mig_profile, gi3.device, gi3.pci_bus_id, gi3.gpu_index, gi3.mig_uuid) == (
        "1g.6gb",
        "nvidia0",
        "",  # 3.x exporters had no pci_bus_id label
        0,  # the parent's index
        "",  # the exporter has no MIG uuid
    )
    assert len({b.id for b in bindings(first)}) == 2
    # The device-level gauge is repeated on both instances: one XID, on the parent GPU, which
    # names no instance (the exporter cannot tell which one, if any, it was).
    (xid,) = xids(second)
    assert (xid.code, xid.gpu_uuid, xid.gpu_index, xid.gpu_instance) == (48, A30, 0, None)
    (unbound,) = bindings(second)
    assert (unbound.gpu_uuid, unbound.gpu_instance, unbound.pods) == (A30, 3, ())
    # The state stays keyed per instance.
    assert set(second.state.bindings) == {f"{A30}/GI3", f"{A30}/GI4"}


def test_idle_mig_instances_of_one_gpu_get_distinct_binding_ids() -> None:
    """a30_mig.prom: four idle instances share uuid, bus id and (no) pods; only the instance
    tells their bindings apart, so it must be in the id."""
    (first,) = run(parse((DATA / "a30_mig.prom").read_text()))
    ours = [b for b in bindings(first) if b.gpu_uuid == A30]
    assert [b.gpu_instance for b in ours] == [3, 4, 5, 6]
    assert len({b.id for b in bindings(first)}) == len(bindings(first)) == 6


def test_a_mig_binding_names_the_parents_bus_id_when_the_scrape_has_it() -> None:
    text = (DATA / "mig" / "01.prom").read_text()
    labelled = text.replace(f'UUID="{A30}",', f'UUID="{A30}",pci_bus_id="00000000:41:00.0",')
    (first,) = run(parse(labelled))
    assert [(b.gpu_uuid, b.pci_bus_id, b.gpu_index, b.gpu_instance) for b in bindings(first)] == [
        (A30, "0000:41:00.0", 0, 3),
        (A30, "0000:41:00.0", 0, 4),
    ]


def test_a_state_saved_before_the_instance_field_resends_bindings_in_the_new_spelling() -> None:
    """A state file from a release that spelled instances ``<uuid>/GI<id>`` decodes; its
    bindings differ from the new ones, which are sent again, and nothing is unbound."""
    saved = (
        b'{"scrapes":1,"xids":{"' + A30.encode() + b'":{"last":0,"counts":null}},'
        b'"bindings":{"' + A30.encode() + b'/GI3":{"gpu_uuid":"' + A30.encode() + b'/GI3",'
        b'"pci_bus_id":"","gpu_index":null,"device":"nvidia0","mig_profile":"1g.6gb",'
        b'"pods":[{"namespace":"ml","name":"a-0","container":"main"}]},'
        b'"' + A30.encode() + b'/GI4":{"gpu_uuid":"' + A30.encode() + b'/GI4",'
        b'"pci_bus_id":"","gpu_index":null,"device":"nvidia0","mig_profile":"1g.6gb",'
        b'"pods":[{"namespace":"ml","name":"b-0","container":"main"}]}}}'
    )
    state = msgspec.json.decode(saved, type=DcgmState)
    assert state.bindings[f"{A30}/GI3"].gpu_instance is None
    (resumed,) = run(mig(1), state=state)
    assert [(b.gpu_uuid, b.gpu_instance, len(b.pods)) for b in bindings(resumed)] == [
        (A30, 3, 1),
        (A30, 4, 1),
    ]


def test_a_gpu_that_vanishes_with_pods_is_unbound() -> None:
    first, second = run(burst(1), Scrape(gpus={}))
    assert bindings(first)[0].pods
    (gone,) = bindings(second)
    assert (gone.gpu_uuid, gone.pods) == (RTX, ())
    assert second.state.bindings == {}


def test_the_core_names_the_uuid_and_pod_of_a_kernel_xid_through_a_dcgm_binding() -> None:
    """The binding's canonical bus id is what joins a kernel XID (bus id only) to the GPU."""
    c = Cluster()
    c.node("gpu-node-1", 0)
    c.pod("gpu-node-1", "cuda-75454ffb9f-8ljq7", 1, namespace="default")
    (first,) = run(burst(1))
    for event in bindings(first):
        c.events.append(msgspec.structs.replace(event, node="gpu-node-1", time=at(2)))
    c.xid("gpu-node-1", 300, 79, bus="0000:00:02.0")  # as the kernel log says it: no uuid
    c.node("gpu-node-1", 309, alloc=7)
    c.pod(
        "gpu-node-1",
        "cuda-75454ffb9f-8ljq7",
        320,
        namespace="default",
        phase="Failed",
        reason="UnexpectedAdmissionError",
    )
    [incident] = of_type(core_run(c.events), "device_unhealthy_eviction")
    assert [(g.uuid, g.pci_bus_id) for g in incident.gpus] == [(RTX, "0000:00:02.0")]
    assert [(p.namespace, p.name) for p in incident.pods] == [("default", "cuda-75454ffb9f-8ljq7")]


def through_prometheus(n: int) -> Scrape:
    return parse((DATA / "prometheus" / f"{n:02d}.prom").read_text())


WORKLOAD = PodRef(namespace="default", name="cuda-75454ffb9f-8ljq7", container="cuda")


def test_through_prometheus_the_workload_is_bound_and_the_exporter_never_is() -> None:
    first, second = run(through_prometheus(1), through_prometheus(2))
    bound = {b.gpu_uuid: b.pods for b in bindings(first)}
    assert bound == {RTX: (WORKLOAD,), "GPU-5d0a7c3e-2f41-4b8e-9c6d-1e7f3a9b2c40": ()}
    assert not any(p.name.startswith("nvidia-dcgm-exporter") for b in bound.values() for p in b)
    assert bindings(second) == []
    (xid,) = xids(second)
    assert (xid.code, xid.gpu_uuid, xid.pci_bus_id) == (13, RTX, "0000:00:02.0")
    assert "Graphics Engine Exception" in xid.message
    again = run(through_prometheus(1), through_prometheus(2))
    assert [e.id for e in again[1].events] == [xid.id]  # deterministic


def test_an_application_xid_through_prometheus_blames_the_workload_not_the_exporter() -> None:
    c = Cluster()
    c.node("gpu-node-1", 0)
    c.pod("gpu-node-1", "nvidia-dcgm-exporter-tvmlp", 1, namespace="gpu-operator", gpus=0)
    c.pod("gpu-node-1", "cuda-75454ffb9f-8ljq7", 1, namespace="default", container="cuda")
    for i, result in enumerate(run(through_prometheus(1), through_prometheus(2))):
        for event in result.events:
            c.events.append(msgspec.structs.replace(event, node="gpu-node-1", time=at(10 + i)))
    [incident] = of_type(core_run(c.events), "gpu_app_fault")
    assert incident.attributes["xids"] == "13"
    assert [(p.namespace, p.name) for p in incident.pods] == [("default", "cuda-75454ffb9f-8ljq7")]
