"""The DRA join (connectors/k8s/dra.py) on the slimmed objects of tests/data/dra.

Bindings are checked as a consumer folds them (the last record per device, an empty
``pods`` unbinding it), so "the same bindings" means what the core ends up believing.
"""

from __future__ import annotations

import copy
import random
from datetime import UTC, datetime
from typing import Any

import msgspec
import orjson
import pytest

from connectors.k8s.dra import DraJoin, Joined
from connectors.k8s.slim import DEFAULT_CONFIG, is_gpu_pod, slim_object
from schemas.events import GpuBindingEvent, PodEvent, PodRef, ResourceSliceEvent
from schemas.keys import DRA
from tests.paths import DATA

NODE = "gpu-a100-node-01"
CLAIM = "gpu-test1/pod1-gpu-h6vrt"


def load(name: str) -> dict[str, Any]:
    value: dict[str, Any] = orjson.loads((DATA / "dra" / f"{name}.json").read_bytes())
    return value


def slim(obj: dict[str, Any], op: Any = "added", minute: int = 0) -> Any:
    observed = datetime(2026, 12, 1, 4, minute, tzinfo=UTC)
    result = slim_object(obj, op, cluster="c1", observed=observed)
    assert result is not None
    assert not isinstance(result, Exception), result
    return result


def version(obj: dict[str, Any], rv: int) -> dict[str, Any]:
    """``obj`` at resourceVersion ``rv`` (a copy)."""
    changed = copy.deepcopy(obj)
    changed["metadata"]["resourceVersion"] = str(rv)
    return changed


def bindings(records: list[Joined]) -> list[GpuBindingEvent]:
    return [r for r in records if isinstance(r, GpuBindingEvent)]


def fold(records: list[Joined]) -> dict[str, tuple[Any, ...]]:
    """device -> what a consumer believes holds it, from the binding records in order."""
    state: dict[str, tuple[Any, ...]] = {}
    for b in bindings(records):
        key = f"{b.node}/{b.device}"
        if b.pods:
            state[key] = (b.gpu_uuid, b.pci_bus_id, b.mig_uuid, b.pods, b.claims, b.shared)
        else:
            state.pop(key, None)
    return state


def test_an_allocated_claim_binds_its_device_with_the_slices_uuid_and_bus() -> None:
    join = DraJoin(DEFAULT_CONFIG)
    sliced = join.on(slim(load("resourceslice_gpu_node")))
    assert bindings(sliced) == []
    claim = slim(load("resourceclaim_allocated"), minute=1)
    out = join.on(claim)
    assert out[0] == claim
    (bound,) = bindings(out)
    assert bound.source == DRA
    devices = load("resourceslice_gpu_node")["spec"]["devices"]
    attributes = next(d for d in devices if d["name"] == "gpu-2")["attributes"]
    assert (bound.node, bound.device) == (NODE, "gpu-2")
    assert bound.pci_bus_id == attributes["resource.kubernetes.io/pciBusID"]["string"]
    assert bound.gpu_uuid == attributes["uuid"]["string"]
    assert bound.pods == (PodRef(namespace="gpu-test1", name="pod1"),)
    assert bound.claims == (CLAIM,)
    assert (bound.pods_known, bound.shared, bound.gpu_instance, bound.mig_uuid) == (
        True,
        False,
        None,
        "",
    )
    assert bound.time == claim.time
    assert bound.id == f"dra:{NODE}:gpu-2:{claim.uid}:520214"
    # The same claim again (a relist, a status write that changes nothing held): nothing.
    assert bindings(join.on(slim(version(load("resourceclaim_allocated"), 520300)))) == []


def test_a_slice_seen_after_its_claim_completes_the_join() -> None:
    join = DraJoin(DEFAULT_CONFIG)
    assert bindings(join.on(slim(load("resourceclaim_allocated")))) == []
    out = join.on(slim(load("resourceslice_gpu_node"), minute=2))
    assert isinstance(out[0], ResourceSliceEvent)
    (bound,) = bindings(out)
    assert (bound.device, bound.pods) == ("gpu-2", (PodRef(namespace="gpu-test1", name="pod1"),))


def test_released_deleted_and_re_reserved_claims_unbind_and_bind_again() -> None:
    join = DraJoin(DEFAULT_CONFIG)
    join.on(slim(load("resourceslice_gpu_node")))
    records = join.on(slim(load("resourceclaim_allocated")))
    released = version(load("resourceclaim_allocated"), 520400)
    del released["status"]["reservedFor"]
    records += join.on(slim(released, "modified", minute=3))
    unbound = bindings(records)[-1]
    assert (unbound.pods, unbound.claims, unbound.device) == ((), (), "gpu-2")
    assert unbound.id.endswith(":520400")
    records += join.on(slim(version(load("resourceclaim_allocated"), 520500), "modified"))
    assert fold(records) != {}
    deleted = version(load("resourceclaim_allocated"), 520600)
    records += join.on(slim(deleted, "deleted"))
    assert fold(records) == {}
    assert len(bindings(records)) == 4  # bind, unbind, bind, unbind: each change once


def test_two_claims_sharing_a_device_are_one_shared_binding() -> None:
    join = DraJoin(DEFAULT_CONFIG)
    join.on(slim(load("resourceslice_gpu_node")))
    records = join.on(slim(load("resourceclaim_allocated")))
    other = copy.deepcopy(load("resourceclaim_allocated"))
    other["metadata"].update(name="pod2-gpu-x", uid="uid-other", resourceVersion="520250")
    other["status"]["reservedFor"] = [{"resource": "pods", "name": "pod2", "uid": "u2"}]
    records += join.on(slim(other))
    last = bindings(records)[-1]
    assert last.shared
    assert [p.name for p in last.pods] == ["pod1", "pod2"]
    assert last.claims == (CLAIM, "gpu-test1/pod2-gpu-x")


def test_a_mig_device_binds_to_its_parent_gpu() -> None:
    join = DraJoin(DEFAULT_CONFIG)
    mig = load("resourceslice_mig")
    join.on(slim(mig))
    claim = load("resourceclaim_allocated")
    device = mig["spec"]["devices"][8]
    claim["status"]["allocation"]["devices"]["results"][0].update(
        pool="gpu-gh200-node-01", device=device["name"]
    )
    (bound,) = bindings(join.on(slim(claim)))
    assert bound.node == "gpu-gh200-node-01"
    assert bound.gpu_uuid == device["attributes"]["parentUUID"]["string"]
    assert bound.mig_uuid == device["attributes"]["uuid"]["string"]
    assert (bound.mig_profile, bound.gpu_instance) == ("1g.12gb", None)


def test_devices_of_other_drivers_are_never_bound() -> None:
    join = DraJoin(DEFAULT_CONFIG)
    join.on(slim(load("resourceslice_gpu_node")))
    claim = load("resourceclaim_allocated")
    claim["status"]["allocation"]["devices"]["results"][0]["driver"] = "nic.example.com"
    claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "nic.example.com"
    held = len(join)
    out = join.on(slim(claim))
    assert bindings(out) == []
    assert len(join) == held  # a claim of no GPU is not held


def test_a_plugin_restart_republishing_its_slice_changes_no_binding() -> None:
    join = DraJoin(DEFAULT_CONFIG)
    raw = load("resourceslice_gpu_node")
    join.on(slim(raw))
    records = join.on(slim(load("resourceclaim_allocated")))
    records += join.on(slim(version(raw, 600000), "deleted"))
    again = version(raw, 600010)
    again["metadata"]["uid"] = "new-slice-uid"
    records += join.on(slim(again))
    assert len(bindings(records)) == 1


def test_device_taint_rules_add_their_taint_and_re_emit_the_slices_they_touch() -> None:
    join = DraJoin(DEFAULT_CONFIG)
    join.on(slim(load("resourceslice_gpu_node")))
    rule = slim(load("devicetaintrule"), minute=5)
    (re_emitted,) = join.on(rule)
    assert isinstance(re_emitted, ResourceSliceEvent)
    assert re_emitted.resource_version == 530402  # the rule's: newer than the slice's
    assert re_emitted.id.endswith(":530402")
    assert re_emitted.time == rule.time
    taints = {d.name: d.taints for d in re_emitted.devices if d.taints}
    assert list(taints) == ["gpu-2"]
    (taint,) = taints["gpu-2"]
    assert (taint.effect, taint.rule) == ("NoExecute", "evict-gpu-2-xid-79")
    # A slice update keeps the rule's taint beside its own (the driver's NoSchedule).
    (tainted,) = join.on(slim(load("resourceslice_device_taint"), "modified"))
    assert isinstance(tainted, ResourceSliceEvent)
    gpu_2 = next(d for d in tainted.devices if d.name == "gpu-2")
    assert [(t.effect, t.rule) for t in gpu_2.taints] == [
        ("NoSchedule", ""),
        ("NoExecute", "evict-gpu-2-xid-79"),
    ]
    # The rule removed: the slice again, with the driver's taint alone.
    (cleared,) = join.on(slim(version(load("devicetaintrule"), 540000), "deleted"))
    assert isinstance(cleared, ResourceSliceEvent)
    gpu_2 = next(d for d in cleared.devices if d.name == "gpu-2")
    assert [t.rule for t in gpu_2.taints] == [""]
    assert cleared.resource_version == 540000
    # A rule older than the slice (seen late): the slice's version, an id of its own.
    older = version(load("devicetaintrule"), 100)
    older["metadata"]["uid"] = "older-rule"
    (late,) = join.on(slim(older))
    assert isinstance(late, ResourceSliceEvent)
    assert late.resource_version == 540000  # the slice keeps the newest version it had
    assert late.id not in {re_emitted.id, tainted.id, cleared.id}
    # A rule selecting nothing held re-emits nothing.
    elsewhere = load("devicetaintrule")
    elsewhere["spec"]["deviceSelector"]["pool"] = "another-node"
    assert join.on(slim(elsewhere)) == []


def test_a_pod_holding_gpus_by_claim_is_a_gpu_pod_from_its_template_or_its_claim() -> None:
    join = DraJoin(DEFAULT_CONFIG)
    raw = load("pod_with_claims")
    unresolved = slim(raw)
    assert isinstance(unresolved, PodEvent)
    assert not is_gpu_pod(join.pod(unresolved))  # nothing known of its claim yet
    assert join.pod(unresolved).containers[0].devices == ()  # not a GPU claim's, so far
    join.on(slim(load("resourceclaimtemplate")))
    (from_template,) = join.on(unresolved)
    assert isinstance(from_template, PodEvent)
    assert is_gpu_pod(from_template)
    (claim,) = from_template.claims
    assert (claim.gpus, claim.device_class) == (1, "gpu.nvidia.com")
    assert from_template.containers[0].devices[0].resource == "claim:gpu/gpu"
    bigger = load("resourceclaim_allocated")
    bigger["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
    del bigger["status"]
    join.on(slim(bigger))
    assert join.pod(unresolved).claims[0].gpus == 2  # the claim wins over its template


def interleavings(streams: list[list[Any]], seed: int) -> list[Any]:
    """One random merge of ``streams``, each kept in its own order."""
    rng = random.Random(seed)
    queues = [list(s) for s in streams]
    merged: list[Any] = []
    while any(queues):
        merged.append(rng.choice([q for q in queues if q]).pop(0))
    return merged


@pytest.mark.parametrize("seed", range(40))
def test_any_interleaving_of_the_same_objects_ends_in_the_same_bindings(seed: int) -> None:
    gpu_node = load("resourceslice_gpu_node")
    claim = load("resourceclaim_allocated")
    other = copy.deepcopy(claim)
    other["metadata"].update(name="pod2-gpu-x", uid="uid-other", resourceVersion="520250")
    other["status"]["reservedFor"] = [{"resource": "pods", "name": "pod2", "uid": "u2"}]
    other["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-1"
    moved = version(other, 520900)
    moved["status"]["allocation"]["devices"]["results"][0]["device"] = "gpu-3"
    released = version(claim, 520700)
    del released["status"]["reservedFor"]
    streams = [
        [("added", gpu_node), ("modified", version(gpu_node, 530000))],
        [("added", claim), ("modified", released), ("modified", version(claim, 520800))],
        [("added", other), ("modified", moved)],
        [("added", load("devicetaintrule"))],
        [("added", load("resourceclaimtemplate"))],
    ]
    results = []
    for order in (interleavings(streams, seed), [item for s in streams for item in s]):
        join = DraJoin(DEFAULT_CONFIG)
        records: list[Joined] = []
        for op, obj in order:
            records += join.on(slim(obj, op))
        results.append(fold(records))
    assert results[0] == results[1]
    assert set(results[0]) == {f"{NODE}/gpu-2", f"{NODE}/gpu-3"}


def test_memory_is_bounded_deleted_objects_are_forgotten() -> None:
    join = DraJoin(DEFAULT_CONFIG)
    objects = [
        load("resourceslice_gpu_node"),
        load("resourceclaim_allocated"),
        load("resourceclaimtemplate"),
        load("devicetaintrule"),
    ]
    for obj in objects:
        join.on(slim(obj))
    assert len(join) > 0
    for obj in objects:
        join.on(slim(version(obj, 900000), "deleted"))
    assert len(join) == 0


def test_the_bindings_decode_as_gpu_binding_records() -> None:
    join = DraJoin(DEFAULT_CONFIG)
    join.on(slim(load("resourceslice_gpu_node")))
    (bound,) = bindings(join.on(slim(load("resourceclaim_allocated"))))
    decoded = msgspec.json.decode(msgspec.json.encode(bound), type=GpuBindingEvent)
    assert decoded == bound
