"""Noise on DRA nodes that must give nothing, and the DRA state across a restart.

A DRA plugin restarts (its slices are deleted and published again, the pool generation
starting over), a device plugin left on a DRA node restarts (``nvidia.com/gpu`` dips),
claims are allocated and released as pods come and go, a DRA node says ``nvidia.com/gpu``
0/0 or nothing at all: none of it is a fault. And the node key's DRA facts survive a
snapshot: restored mid-fault, the incident opens as in one uninterrupted run.
"""

from __future__ import annotations

import msgspec
import pytest

from gputriage.demo.events import at
from schemas.incidents import Incident
from streams.core import Correlator, shortcuts
from streams.core.snapshot import decode_state, encode_state
from tests.core_helpers import config, feed, final, of_type, run
from tests.streams.core.test_dra_node import (
    MIN,
    NODE,
    NS,
    POD,
    XID_TAINT,
    Dra,
    dra_node,
)


def test_a_dra_plugin_restart_that_republishes_its_slices_gives_nothing() -> None:
    """The kubelet deletes a stopped plugin's slices; the new plugin publishes them again
    (generation 1 again: nothing of the pool was left) within seconds."""
    c = dra_node()
    c.slice(10 * MIN, generation=2)
    c.slice(20 * MIN, op="deleted", generation=2)
    c.slice(20 * MIN + 45, generation=1)
    c.tick(40 * MIN)
    assert run(c.events) == []


def test_a_tainted_device_that_survives_a_plugin_restart_is_one_fault() -> None:
    c = dra_node()
    c.slice(10 * MIN, generation=2, taints={"gpu-2": (XID_TAINT,)})
    c.slice(12 * MIN, op="deleted", generation=2)
    c.slice(12 * MIN + 30, generation=1, taints={"gpu-2": (XID_TAINT,)})
    c.tick(40 * MIN)
    out = run(c.events)
    assert [(i.type, i.status) for i in out] == [("gpu_degraded", "open")]
    assert out[0].first_seen == at(10 * MIN), "dated from the taint, not the republish"


def test_a_device_plugin_restart_on_a_dra_node_gives_nothing() -> None:
    c = dra_node()
    c.node(NODE, 10 * MIN, capacity=8, alloc=8)
    c.node(NODE, 12 * MIN, capacity=8, alloc=0)
    c.node(NODE, 12 * MIN + 20, capacity=8, alloc=8)
    c.tick(40 * MIN)
    assert run(c.events) == []


def test_claims_allocated_and_released_as_pods_come_and_go_give_nothing() -> None:
    c = Dra("prod")
    c.dra_node(0, gpus=None)
    c.slice(1)
    for n in range(6):
        name = f"job-{n}"
        device = f"gpu-{n % 4}"
        t = (5 + 10 * n) * MIN
        c.dra_pod(t, name=name, phase="Pending", device=device)
        c.claim(t + 5, device, (name,), name=f"{name}-gpu")
        c.dra_pod(t + 10, name=name, device=device)
        c.dra_pod(t + 8 * MIN, name=name, phase="Succeeded", device=device)
        c.claim(t + 8 * MIN + 2, device, (), name=f"{name}-gpu")
        c.dra_pod(t + 8 * MIN + 5, name=name, phase="Succeeded", device=device, op="deleted")
    c.tick(2 * 60 * MIN)
    assert run(c.events) == []


@pytest.mark.parametrize("gpus", [0, None], ids=["zero", "absent"])
def test_a_dra_node_with_no_counted_gpus_gives_nothing(gpus: int | None) -> None:
    c = Dra("prod")
    c.dra_node(0, gpus=gpus)
    c.slice(1)
    c.dra_pod(5)
    c.claim(6, "gpu-2", (POD,))
    for n in range(1, 30):
        c.dra_node(n * MIN, gpus=gpus)
        c.dra_pod(n * MIN + 1)
    assert run(c.events) == []


def _faulty() -> Dra:
    c = dra_node()
    c.dra_pod(10 * MIN, health="Unhealthy")
    c.slice(11 * MIN, generation=2, devices=("gpu-0", "gpu-1", "gpu-2"))
    c.dra_pod(12 * MIN, health="Unhealthy")
    c.tick(13 * MIN)  # the cut: both faults pending
    c.dra_pod(14 * MIN, health="Unhealthy")
    c.tick(30 * MIN)
    c.dra_pod(40 * MIN, health="Unknown")
    c.slice(41 * MIN, generation=3)
    c.tick(50 * MIN)
    return c


def test_a_node_restored_from_its_snapshot_mid_fault_says_what_one_run_says() -> None:
    events = _faulty().events
    whole = run(events)
    assert [(i.type, i.status) for i in whole] == [
        ("gpu_degraded", "open"),
        ("gpu_degraded", "updated"),
        ("gpu_degraded", "resolved"),
    ]
    cut = next(n for n, e in enumerate(events) if e.time.timestamp() >= events[-6].time.timestamp())
    before = Correlator(config())
    out: list[Incident] = [i for e in events[:cut] for i in feed(before, e)]
    after = Correlator(config())
    for state in before.keys.values():
        after.restore(decode_state(encode_state(state)))
    out += [i for e in events[cut:] for i in feed(after, e)]
    out += after.flush()
    assert out == whole


def test_the_pod_shortcut_never_skips_a_device_health_report(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A pod update that only changes its devices' health is routine to the shortcut's
    eyes unless it reads them: both paths give the same revisions."""
    events = _faulty().events
    fast = run(events)
    monkeypatch.setattr(shortcuts, "ENABLED", False)
    assert run(events) == fast
    assert any(i.type == "gpu_degraded" for i in fast)
    assert {p.name for i in fast for p in i.pods} == {POD}
    assert {p.namespace for i in fast for p in i.pods} == {NS}


@pytest.mark.parametrize("deleted_first", [True, False])
def test_a_plugin_restart_seen_by_a_relist_gives_nothing_in_either_order(
    deleted_first: bool,
) -> None:
    """A relist stamps the old slice's deletion and the restarted plugin's new slice
    (another name, generation 1) with one time: their order is the ids'. Either order is
    the same node: its GPUs listed, nothing gone."""
    c = dra_node()
    c.slice(10 * MIN, generation=4)
    old = c.slice(20 * MIN, op="deleted", generation=4)
    new = c.slice(20 * MIN, generation=1, name="restarted-slice")
    first, second = ("k8s:a-slice", "k8s:b-slice")[:: 1 if deleted_first else -1]
    c.events[-2:] = [
        msgspec.structs.replace(old, id=first),
        msgspec.structs.replace(new, id=second),
    ]
    c.tick(60 * MIN)
    assert run(c.events) == []


def test_a_taint_on_a_restarted_plugins_slice_pages_before_the_old_slice_is_deleted() -> None:
    """After a connector restart the old slice's deletion is never seen: the restarted
    plugin's slice (generation 1, another name) is applied all the same, so its taint is a
    fault and not ignored as older than the old slice's generation."""
    c = dra_node()
    c.slice(10 * MIN, generation=4)
    c.slice(20 * MIN, generation=1, name="restarted-slice")
    c.slice(25 * MIN, generation=2, name="restarted-slice", taints={"gpu-2": (XID_TAINT,)})
    c.tick(60 * MIN)
    out = run(c.events)
    assert [(i.type, i.status) for i in out] == [("gpu_degraded", "open")]
    assert out[0].first_seen == at(25 * MIN)


def test_a_late_slice_of_a_newer_version_is_applied_and_an_older_copy_is_not() -> None:
    """A slice's watch relists like a node's: a tainted copy read after later records (a
    pod's topic fetched first) is news by its version and its taint pages; a copy of the
    same version read again, or an older one, is stale."""
    c = dra_node()
    c.dra_pod(10 * MIN)
    c.tick(11 * MIN)
    tainted = c.slice(9 * MIN, generation=1, taints={"gpu-2": (XID_TAINT,)})
    c.events.append(tainted)  # the same copy read again: nothing new
    older = msgspec.structs.replace(tainted, id="k8s:older", resource_version=1, devices=())
    c.events.append(older)  # an older copy listing nothing: stale, no GPU gone
    c.tick(40 * MIN)
    out = final(run(c.events))
    assert [(i.type, i.attributes.get("dra_devices")) for i in out.values()] == [
        ("gpu_degraded", "gpu-2")
    ]
    assert "gone" not in next(iter(out.values())).attributes.get("device_faults", "")


def _late_binding(version: str) -> list[Incident]:
    """pod1's binding of gpu-2 read after the node key applied a later pod record (the
    connector's gpu-bindings topic read behind its pods topic), its id ending in
    ``version``; then an application XID on gpu-2. The pods carry no
    allocatedResourcesStatus, so the binding is the only word on who holds gpu-2."""
    c = Dra("prod")
    c.dra_node(0)
    c.slice(1)
    for t in (5, 3 * MIN):
        pod = c.dra_pod(t)
        c.events[-1] = msgspec.structs.replace(
            pod, containers=tuple(msgspec.structs.replace(x, devices=()) for x in pod.containers)
        )
    c.tick(4 * MIN)  # the later pod record is applied: the key's position is past 6 s
    bound = c.dra_bind(6, "gpu-2", (POD,), claims=(f"{NS}/pod1-gpu-h6vrt",))
    c.events[-1] = msgspec.structs.replace(bound, id=f"dra:{NODE}:gpu-2:uid:{version}")
    c.xid(NODE, 10 * MIN, 13, bus=bound.pci_bus_id)
    return run(c.events)


def test_a_dra_binding_read_late_still_names_the_pod_holding_the_gpu() -> None:
    [inc] = of_type(_late_binding("520214"), "gpu_app_fault")
    assert [f"{p.namespace}/{p.name}" for p in inc.pods] == [f"{NS}/{POD}"]


def test_a_late_dra_binding_that_names_no_version_stays_stale() -> None:
    [inc] = of_type(_late_binding("rv-1"), "gpu_app_fault")
    assert inc.pods == ()
