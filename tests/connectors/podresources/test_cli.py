"""``gputriage connect podresources``: the NVML map it composes, and its offline form.

The NVML map is read through the NVML connector's fake of the pynvml library (the A30 of
tests/connectors/test_mig_identity.py, whose kernel XID names ``GPU-I:03``): the kubelet's
``MIG-`` uuid of that instance must come out named exactly as the kernel and dcgm-exporter
name it, (parent bus id, instance 3), or no XID would ever find its pod.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

from connectors.podresources.client import Filter
from connectors.podresources.devices import Device, Holding, diff, snapshot
from gputriage.cli.compose import nvml_gpu_map
from schemas.codec import decode_event
from schemas.events import GpuBindingEvent, PodRef
from tests.cli_helpers import gputriage
from tests.connectors.nvml.test_nvml import FakeNvml
from tests.connectors.test_mig_identity import A30, MIG_GI3, a30_nvml, kmsg_xid

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def test_a_kubelet_mig_uuid_is_named_as_the_kernel_names_its_instance() -> None:
    gpus = nvml_gpu_map(a30_nvml())
    held = [Holding(PodRef(namespace="ml", name="serve"), Device("nvidia.com/mig-1g.6gb", MIG_GI3))]
    (binding,) = diff(None, snapshot(held, (), gpus), cluster="c1", node="n1", time=T0).events
    xid = kmsg_xid()
    assert (binding.pci_bus_id, binding.gpu_instance) == (xid.pci_bus_id, xid.gpu_instance)
    assert (binding.gpu_uuid, binding.mig_uuid, binding.mig_profile) == (A30, MIG_GI3, "1g.6gb")


def test_no_driver_is_an_empty_map_not_a_failure() -> None:
    gpus = nvml_gpu_map(FakeNvml(init_error=9))  # NVML_ERROR_DRIVER_NOT_LOADED
    assert not gpus.by_uuid
    assert not gpus.by_index


def _offline(saved: Path) -> subprocess.CompletedProcess[bytes]:
    """``connect podresources --from-json`` on a saved List answer, without NVML."""
    return gputriage(
        "connect",
        "podresources",
        "--cluster",
        "c1",
        "--node",
        "n1",
        "--no-nvml",
        "--from-json",
        str(saved),
    )


def test_the_offline_form_prints_a_saved_list_answers_bindings(tmp_path: Path) -> None:
    uuid = "GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763"
    saved = tmp_path / "list.json"
    saved.write_text(
        '{"pod_resources": [{"name": "nb-a", "namespace": "ml", "containers": [{"name": "main",'
        f' "devices": [{{"resource_name": "nvidia.com/gpu", "device_ids": ["{uuid}::0"]}}]}}]}},'
        ' {"name": "nb-b", "namespace": "ml", "containers": [{"name": "main",'
        f' "devices": [{{"resource_name": "nvidia.com/gpu", "device_ids": ["{uuid}::1"]}}]}}]}}]}}'
    )
    done = _offline(saved)
    assert done.returncode == 0, done.stderr
    (binding,) = [decode_event(line) for line in done.stdout.splitlines()]
    assert isinstance(binding, GpuBindingEvent)
    assert [p.name for p in binding.pods] == ["nb-a", "nb-b"]
    assert (binding.shared, binding.source) == (True, "pod-resources")
    assert Filter()("nvidia.com/gpu")


def test_a_file_that_is_not_a_list_answer_is_one_line_and_exit_1(tmp_path: Path) -> None:
    saved = tmp_path / "list.json"
    saved.write_text('{"items": []}')
    done = _offline(saved)
    assert done.returncode == 1
    assert done.stdout == b""
    (line,) = done.stderr.decode().splitlines()
    assert line.startswith("gputriage: error: not a pod-resources List answer")
