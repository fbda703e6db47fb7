"""Slimming the DRA kinds and the pods' DRA fields, on the real-shaped objects of tests/data/dra.

Each object there is cited in its SOURCES.md (NVIDIA's DRA driver and the Kubernetes API
types); the variations below (older attribute names, older request shapes, v1alpha3
rules) change one field of those objects as the cited API versions spell it.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.k8s.dra import ClaimTemplate, TaintRule
from connectors.k8s.slim import SlimConfig, slim_object
from schemas import codec
from schemas.codec import RecordError
from schemas.events import (
    ClaimRequest,
    DeviceHealth,
    PodClaim,
    PodEvent,
    PodRef,
    ResourceClaimEvent,
    ResourceSliceEvent,
)
from tests.paths import DATA

DRA = DATA / "dra"
OBSERVED = datetime(2026, 12, 1, 4, 0, tzinfo=UTC)


def load(name: str) -> dict[str, Any]:
    value: dict[str, Any] = orjson.loads((DRA / f"{name}.json").read_bytes())
    return value


def slim(obj: dict[str, Any], **kwargs: Any) -> Any:
    return slim_object(obj, cluster="c1", **kwargs)


def slice_of(obj: dict[str, Any], **kwargs: Any) -> ResourceSliceEvent:
    event = slim(obj, **kwargs)
    assert isinstance(event, ResourceSliceEvent), event
    return event


def test_a_gpu_slice_is_the_nodes_inventory_with_canonical_bus_ids() -> None:
    raw = load("resourceslice_gpu_node")
    event = slice_of(raw)
    meta = raw["metadata"]
    assert event.id == f"k8s:{meta['uid']}:{meta['resourceVersion']}"
    node = "gpu-a100-node-01"
    assert (event.node, event.driver, event.pool) == (node, "gpu.nvidia.com", node)
    assert (event.generation, event.slice_count) == (1, 1)
    assert event.time == datetime.fromisoformat(meta["creationTimestamp"])  # offline: its own
    by_name = {d.name: d for d in event.devices}
    assert list(by_name) == [d["name"] for d in raw["spec"]["devices"]]
    for device in raw["spec"]["devices"]:
        slimmed = by_name[device["name"]]
        attributes = device["attributes"]
        assert slimmed.uuid == attributes["uuid"]["string"]
        assert slimmed.product == attributes["productName"]["string"]
        assert slimmed.type == "gpu"
        assert slimmed.pci_bus_id == attributes["resource.kubernetes.io/pciBusID"]["string"]
        assert slimmed.taints == ()
    assert by_name["gpu-1"].uuid == "GPU-13719f71-412c-d11e-b236-a262f530a4fc"


def test_the_driver_taints_a_device_and_the_observed_time_is_the_records() -> None:
    event = slice_of(load("resourceslice_device_taint"), observed=OBSERVED)
    assert event.time == OBSERVED
    assert event.generation == 2
    tainted = {d.name: d.taints for d in event.devices if d.taints}
    assert list(tainted) == ["gpu-2"]
    (taint,) = tainted["gpu-2"]
    assert (taint.key, taint.value, taint.effect, taint.rule) == (
        "gpu.nvidia.com/xid",
        "79",
        "NoSchedule",
        "",
    )
    assert taint.time_added == datetime(2026, 12, 1, 3, 27, 41, tzinfo=UTC)


def test_mig_devices_name_their_parent_and_profile() -> None:
    raw = load("resourceslice_mig")
    event = slice_of(raw)
    assert len(event.devices) == 14
    for device, spec in zip(event.devices, raw["spec"]["devices"], strict=True):
        assert device.type == "mig"
        assert device.uuid.startswith("MIG-")
        assert device.parent_uuid == spec["attributes"]["parentUUID"]["string"]
        assert device.parent_uuid.startswith("GPU-")
        assert device.mig_profile == "1g.12gb"
    parents = {d.parent_uuid for d in event.devices}
    assert len(parents) == 2


def test_older_attribute_spellings_typed_values_and_the_v1beta1_device_shape() -> None:
    raw = load("resourceslice_gpu_node")
    devices = raw["spec"]["devices"]
    # The older driver's typo'd, unqualified bus attribute, in upper case and short form.
    del devices[0]["attributes"]["resource.kubernetes.io/pciBusID"]
    devices[0]["attributes"]["pcieBusID"] = {"string": "0000:B3:00"}
    # A name qualified by the driver's domain, and an int member of the union.
    devices[1]["attributes"]["gpu.nvidia.com/uuid"] = devices[1]["attributes"].pop("uuid")
    devices[2]["attributes"]["productName"] = {"int": 7}
    # v1beta1: the device's fields under "basic".
    devices[3] = {"name": "gpu-3", "basic": {"attributes": devices[3]["attributes"]}}
    event = slice_of(raw)
    assert event.devices[0].pci_bus_id == "0000:b3:00.0"
    assert event.devices[1].uuid == "GPU-13719f71-412c-d11e-b236-a262f530a4fc"
    assert event.devices[2].product == "7"
    assert event.devices[3].type == "gpu"
    assert event.devices[3].uuid.startswith("GPU-")


def test_slices_of_other_drivers_give_nothing_unless_configured() -> None:
    raw = load("resourceslice_gpu_node")
    raw["spec"]["driver"] = "dra.example.com"
    assert slim(raw) is None
    config = SlimConfig(gpu_drivers=("dra.example.com",))
    assert slice_of(raw, config=config).driver == "dra.example.com"


def test_an_allocated_claim_names_its_node_devices_and_pods() -> None:
    raw = load("resourceclaim_allocated")
    event = slim(raw)
    assert isinstance(event, ResourceClaimEvent)
    assert event.id == "k8s:e1d2c3b4-a596-4877-8f60-5a4b3c2d1e0f:520214"
    assert (event.namespace, event.name, event.node) == (
        "gpu-test1",
        "pod1-gpu-h6vrt",
        "gpu-a100-node-01",
    )
    assert event.requests == (ClaimRequest(name="gpu", device_class="gpu.nvidia.com", count=1),)
    [device] = event.devices
    assert (device.request, device.driver, device.pool, device.device) == (
        "gpu",
        "gpu.nvidia.com",
        "gpu-a100-node-01",
        "gpu-2",
    )
    assert event.reserved_for == (PodRef(namespace="gpu-test1", name="pod1"),)
    assert event.gpus == 1


def test_an_unallocated_claim_has_no_node_and_counts_what_its_gpu_requests_ask() -> None:
    raw = load("resourceclaim_allocated")
    del raw["status"]
    raw["spec"]["devices"]["requests"][0]["exactly"]["count"] = 4
    event = slim(raw)
    assert isinstance(event, ResourceClaimEvent)
    assert (event.node, event.devices, event.reserved_for, event.gpus) == ("", (), (), 4)


def test_the_older_flat_request_and_first_available_subrequests() -> None:
    raw = load("resourceclaim_allocated")
    del raw["status"]
    raw["spec"]["devices"]["requests"] = [
        {"name": "flat", "deviceClassName": "gpu.nvidia.com", "count": 2},
        {
            "name": "any",
            "firstAvailable": [
                {"name": "nic", "deviceClassName": "nic.example.com"},
                {"name": "mig", "deviceClassName": "mig.nvidia.com", "count": 3},
            ],
        },
        {"name": "all", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "All"}},
        {"name": "cpu", "exactly": {"deviceClassName": "cpu.example.com"}},
    ]
    event = slim(raw)
    assert isinstance(event, ResourceClaimEvent)
    assert [(r.name, r.device_class, r.count) for r in event.requests] == [
        ("flat", "gpu.nvidia.com", 2),
        ("any", "mig.nvidia.com", 3),
        ("all", "gpu.nvidia.com", 0),
        ("cpu", "cpu.example.com", 1),
    ]
    assert event.gpus == 5


def test_a_template_is_cached_not_published() -> None:
    event = slim(load("resourceclaimtemplate"))
    assert isinstance(event, ClaimTemplate)
    assert (event.namespace, event.name) == ("gpu-test1", "single-gpu")
    assert event.requests == (ClaimRequest(name="gpu", device_class="gpu.nvidia.com", count=1),)


def test_device_taint_rules_in_v1beta2_and_v1alpha3() -> None:
    raw = load("devicetaintrule")
    rule = slim(raw)
    assert isinstance(rule, TaintRule)
    assert (rule.driver, rule.pool, rule.device, rule.exact) == (
        "gpu.nvidia.com",
        "gpu-a100-node-01",
        "gpu-2",
        True,
    )
    assert (rule.taint.key, rule.taint.value, rule.taint.effect, rule.taint.rule) == (
        "example.com/gpu-fault",
        "xid-79",
        "NoExecute",
        "evict-gpu-2-xid-79",
    )
    assert rule.selects("gpu.nvidia.com", "gpu-a100-node-01", "gpu-2")
    assert not rule.selects("gpu.nvidia.com", "gpu-a100-node-01", "gpu-1")
    old = copy.deepcopy(raw)
    old["apiVersion"] = "resource.k8s.io/v1alpha3"
    old["spec"]["deviceSelector"]["deviceClassName"] = "gpu.nvidia.com"
    alpha = slim(old)
    assert isinstance(alpha, TaintRule)
    assert not alpha.exact  # a device class this connector cannot evaluate: not applied
    assert not alpha.selects("gpu.nvidia.com", "gpu-a100-node-01", "gpu-2")


def test_a_pod_carries_its_claims_disruption_and_device_health() -> None:
    raw = load("pod_with_claims")
    raw["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByDeviceTaintManager",
            "message": "Device Taint manager: deleting due to NoExecute taint",
            "lastTransitionTime": "2026-12-01T03:31:02Z",
        }
    )
    statuses = raw["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
    statuses.append(
        {"name": "nvidia.com/gpu", "resources": [{"resourceID": "GPU-1", "health": "Unhealthy"}]}
    )
    statuses.append({"name": "example.com/nic", "resources": [{"resourceID": "n", "health": "x"}]})
    event = slim(raw)
    assert isinstance(event, PodEvent)
    assert event.claims == (PodClaim(name="gpu", claim="pod1-gpu-h6vrt", template="single-gpu"),)
    assert event.disruption is not None
    assert event.disruption.reason == "DeletionByDeviceTaintManager"
    assert event.scheduled is not None
    assert event.scheduled.status == "True"
    (container,) = event.containers
    assert container.devices == (
        DeviceHealth(
            resource="claim:gpu/gpu",
            device="k8s.gpu.nvidia.com/claim=e1d2c3b4-a596-4877-8f60-5a4b3c2d1e0f-gpu-2",
            health="Unknown",
        ),
        DeviceHealth(resource="nvidia.com/gpu", device="GPU-1", health="Unhealthy"),
    )
    assert event.time == datetime(2026, 12, 1, 3, 31, 2, tzinfo=UTC)


def test_a_pod_without_its_claim_status_names_the_claim_it_was_given() -> None:
    raw = load("pod_with_claims")
    del raw["status"]["resourceClaimStatuses"]
    raw["spec"]["resourceClaims"] = [{"name": "shared", "resourceClaimName": "team-gpus"}]
    event = slim(raw)
    assert isinstance(event, PodEvent)
    assert event.claims == (PodClaim(name="shared", claim="team-gpus"),)


@pytest.mark.parametrize(
    ("name", "path", "value", "field"),
    [
        ("resourceslice_gpu_node", ("metadata", "uid"), None, "$.metadata.uid"),
        ("resourceslice_gpu_node", ("spec", "pool", "name"), None, "$.spec.pool.name"),
        ("resourceclaim_allocated", ("metadata", "resourceVersion"), None, "$.metadata."),
        ("devicetaintrule", ("spec", "taint"), None, "$.spec.taint"),
        ("devicetaintrule", ("spec", "taint", "timeAdded"), "yesterday", "$.spec.taint"),
    ],
)
def test_bad_objects_are_errors_naming_the_field(
    name: str, path: tuple[str, ...], value: Any, field: str
) -> None:
    raw = load(name)
    parent = raw
    for key in path[:-1]:
        parent = parent[key]
    if value is None:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    result = slim(raw)
    assert isinstance(result, RecordError)
    assert result.field.startswith(field), result


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)
_OBJECTS = [
    "resourceslice_mig",
    "resourceclaim_allocated",
    "resourceclaimtemplate",
    "devicetaintrule",
]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path to a value inside ``value`` (dict keys and list indexes)."""
    out = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            out += _paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value[:3]):
            out += _paths(inner, (*prefix, index))
    return out


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_value_anywhere_in_a_dra_object_is_a_record_or_an_error(data: st.DataObject) -> None:
    raw = load(data.draw(st.sampled_from(_OBJECTS)))
    path = data.draw(st.sampled_from(_paths(raw)[1:]))
    parent = raw
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = data.draw(_JSON)
    result = slim(raw)
    if result is None or isinstance(result, RecordError | ClaimTemplate | TaintRule):
        return
    assert codec.decode_event(codec.encode(result)) == result
