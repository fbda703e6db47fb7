"""Device ids -> GPUs, and snapshots -> bindings: the pure half of the pod-resources source.

The id shapes are the device plugins' own: NVIDIA/k8s-device-plugin's uuids, time-slicing
replicas ``<id>::<n>`` (internal/rm/devices.go ``NewAnnotatedID``), MIG uuids and the pre-R470
``MIG-GPU-<uuid>/<gi>/<ci>``, ``deviceIDStrategy=index``; GKE's ``nvidia<minor>`` and
``nvidia<minor>/vgpu<n>`` (GoogleCloudPlatform/container-engine-accelerators).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from connectors.podresources.client import Filter, holdings, parse_list_json
from connectors.podresources.devices import (
    Device,
    GpuInfo,
    GpuMap,
    Holding,
    diff,
    resolve,
    snapshot,
)
from schemas.events import PodRef
from tests.connectors.podresources.kubelet import list_response

GPU_A = "GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763"
GPU_B = "GPU-0b7e3c55-1d2f-4a8b-9c6d-000000000003"
A30 = "GPU-265c9814-6156-355b-e589-ff2064894f16"
MIG3 = "MIG-0b1c2d3e-4f50-5617-8293-a4b5c6d7e8f9"
T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)
NVML = GpuMap.of(
    [
        GpuInfo(uuid=GPU_A, pci_bus_id="0000:18:00.0", index=0),
        GpuInfo(uuid=A30, pci_bus_id="0000:41:00.0", index=1),
        GpuInfo(
            uuid=A30,
            pci_bus_id="0000:41:00.0",
            index=1,
            gpu_instance=3,
            mig_uuid=MIG3,
            mig_profile="1g.6gb",
        ),
    ]
)


def pod(name: str) -> PodRef:
    return PodRef(namespace="ml", name=name, container="main")


def test_a_gpu_uuid_and_its_replicas_are_one_gpu_the_replicas_shared() -> None:
    whole = resolve(Device("nvidia.com/gpu", GPU_A), NVML)
    replica = resolve(Device("nvidia.com/gpu.shared", f"{GPU_A}::3"), NVML)
    assert whole is not None
    assert replica is not None
    assert whole[0] == replica[0]
    assert whole[0].pci_bus_id == "0000:18:00.0", "the NVML map adds the bus id"
    assert (whole[1], replica[1]) == (False, True)


def test_a_mig_uuid_is_named_by_its_parent_and_gpu_instance_when_nvml_knows_it() -> None:
    found = resolve(Device("nvidia.com/mig-1g.6gb", MIG3), NVML)
    assert found is not None
    identity, shared = found
    assert (identity.gpu_uuid, identity.pci_bus_id, identity.gpu_instance) == (
        A30,
        "0000:41:00.0",
        3,
    )
    assert (identity.mig_uuid, identity.mig_profile, shared) == (MIG3, "1g.6gb", False)


def test_without_nvml_a_mig_uuid_stays_its_own_gpu_never_a_merged_unknown_one() -> None:
    found = resolve(Device("nvidia.com/gpu", MIG3), GpuMap())
    assert found is not None
    identity, _ = found
    assert (identity.gpu_uuid, identity.mig_uuid, identity.gpu_instance) == (MIG3, MIG3, None)


def test_the_pre_r470_mig_spelling_names_its_parent_and_instance_itself() -> None:
    found = resolve(Device("nvidia.com/mig-3g.20gb", f"MIG-{A30}/2/0"), GpuMap())
    assert found is not None
    identity, _ = found
    assert (identity.gpu_uuid, identity.gpu_instance, identity.mig_profile) == (A30, 2, "3g.20gb")


def test_index_ids_resolve_only_through_nvml_and_gke_minors_never() -> None:
    by_index = resolve(Device("nvidia.com/gpu", "1"), NVML)
    assert by_index is not None
    assert by_index[0].gpu_uuid == A30
    assert resolve(Device("nvidia.com/gpu", "1"), GpuMap()) is None
    assert resolve(Device("nvidia.com/gpu", "0:1"), NVML) is None, "a MIG index is no instance id"
    assert resolve(Device("nvidia.com/gpu", "nvidia0"), NVML) is None
    assert resolve(Device("nvidia.com/gpu", "nvidia0/vgpu2"), NVML) is None


def test_every_pod_of_a_time_sliced_gpu_is_on_its_one_shared_binding() -> None:
    response = list_response(
        {
            "ml/nb-a": {"nvidia.com/gpu": [f"{GPU_A}::0"]},
            "ml/nb-b": {"nvidia.com/gpu": [f"{GPU_A}::3"]},
            "ml/train": {"nvidia.com/gpu": [GPU_B], "example.com/fpga": ["fpga0"]},
        }
    )
    result = diff(
        None, snapshot(holdings(response, Filter()), (), NVML), cluster="c", node="n", time=T0
    )
    by_gpu = {e.gpu_uuid: e for e in result.events}
    assert set(by_gpu) == {GPU_A, GPU_B}, "the FPGA is not a GPU"
    assert by_gpu[GPU_A].pods == (pod("nb-a"), pod("nb-b"))
    assert by_gpu[GPU_A].shared
    assert by_gpu[GPU_B].pods == (pod("train"),)
    assert not by_gpu[GPU_B].shared
    assert all(e.source == "pod-resources" and e.pods_known for e in result.events)


def test_a_device_listed_under_an_ended_pod_and_its_successor_names_both() -> None:
    """kubernetes/kubernetes#119423: List reports pods in a terminal phase too."""
    holds = [
        Holding(pod("old"), Device("nvidia.com/gpu", GPU_B)),
        Holding(pod("new"), Device("nvidia.com/gpu", GPU_B)),
    ]
    (event,) = diff(None, snapshot(holds, (), GpuMap()), cluster="c", node="n", time=T0).events
    assert event.pods == (pod("new"), pod("old"))
    assert not event.shared


def test_first_poll_binds_all_later_polls_send_changes_and_unbind_what_lost_its_pods() -> None:
    allocatable = [Device("nvidia.com/gpu", GPU_A), Device("nvidia.com/gpu", GPU_B)]
    held = [Holding(pod("train"), allocatable[1])]
    first = diff(None, snapshot(held, allocatable, GpuMap()), cluster="c", node="n", time=T0)
    assert {(e.gpu_uuid, e.pods) for e in first.events} == {(GPU_A, ()), (GPU_B, (pod("train"),))}
    again = diff(
        first.state,
        snapshot(held, allocatable, GpuMap()),
        cluster="c",
        node="n",
        time=T0 + timedelta(seconds=10),
    )
    assert again.events == ()
    ended = diff(
        again.state,
        snapshot([], allocatable, GpuMap()),
        cluster="c",
        node="n",
        time=T0 + timedelta(seconds=20),
    )
    assert [(e.gpu_uuid, e.pods) for e in ended.events] == [(GPU_B, ())]
    gone = diff(
        first.state,
        snapshot([], [], GpuMap()),
        cluster="c",
        node="n",
        time=T0 + timedelta(seconds=30),
    )
    assert [(e.gpu_uuid, e.pods) for e in gone.events] == [(GPU_B, ())], "a vanished GPU with pods"


def test_the_same_polls_give_the_same_ids_and_different_polls_different_ones() -> None:
    held = [Holding(pod("train"), Device("nvidia.com/gpu", GPU_B))]
    one = diff(None, snapshot(held, (), GpuMap()), cluster="c", node="n", time=T0)
    two = diff(None, snapshot(held, (), GpuMap()), cluster="c", node="n", time=T0)
    assert [e.id for e in one.events] == [e.id for e in two.events]
    later = diff(
        None, snapshot(held, (), GpuMap()), cluster="c", node="n", time=T0 + timedelta(seconds=1)
    )
    assert {e.id for e in one.events}.isdisjoint(e.id for e in later.events)


def test_a_saved_list_answer_is_read_in_grpcurls_camel_case_and_a_bad_one_raises() -> None:
    saved = (
        '{"podResources": [{"name": "nb-a", "namespace": "ml", "containers": [{"name": "main",'
        f' "devices": [{{"resourceName": "nvidia.com/gpu", "deviceIds": ["{GPU_A}::1"]}}]}}]}}]}}'
    )
    (held,) = holdings(parse_list_json(saved), Filter())
    assert held == Holding(pod("nb-a"), Device("nvidia.com/gpu", f"{GPU_A}::1"))
    with pytest.raises(ValueError, match="pods"):
        parse_list_json('{"pods": 1}')
