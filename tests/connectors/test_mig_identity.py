"""One MIG instance, three sources, one name: (parent GPU, GPU instance id).

The kernel names an instance by the parent's bus id and ``GPU-I:NN`` (NVIDIA/
open-gpu-kernel-modules, kernel_rc.c ``krcReportXid_IMPL``: ``"PCI:%04x:%02x:%02x
GPU-I:%02u"``); dcgm-exporter by the parent's ``UUID`` (and ``pci_bus_id``, when it has
the label) and ``GPU_I_ID``; NVML by a ``MIG-`` uuid under the parent, whose
``nvmlDeviceGetGpuInstanceId`` is that same id, and its XID events by the parent's
handle and ``gpuInstanceId`` (NVIDIA/k8s-device-plugin internal/rm/health.go). Every
connector must put it on the wire the same way, so the core can join an XID on instance 3
to the pod dcgm bound to instance 3, and to nothing else.

The node: the A30 of tests/data/dcgm/mig/ (real labels from NVIDIA/dcgm-exporter#317),
given the bus id 0000:41:00.0; its NVML ``MIG-`` uuids are made up (the issue shows none).
The kernel line is the driver's error-containment example (kern_gpu_error_cont_ga100.c:
``"NVRM: Xid (PCI:0000:01:00 GPU-I:05): 94, pid=7194, Contained: CE User Channel (0x9).
RST: No, D-RST: No"``) moved to this GPU and instance.
"""

from __future__ import annotations

from datetime import UTC, datetime

from connectors.dcgm.diff import diff
from connectors.dcgm.exposition import Scrape, parse_exposition
from connectors.nvml.devices import Nvml, attribute, bindings, bus_map, xid_event
from connectors.xid.lines import LineContext, parse_line
from schemas.events import GpuBindingEvent, XidEvent
from tests import paths
from tests.connectors.nvml.test_nvml import FakeNvml, xid_data

A30 = "GPU-265c9814-6156-355b-e589-ff2064894f16"
BUS = "0000:41:00.0"
MIG_GI3 = "MIG-0b1c2d3e-4f50-5617-8293-a4b5c6d7e8f9"
MIG_GI4 = "MIG-1a2b3c4d-5e6f-5a7b-8c9d-0e1f2a3b4c5d"
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
KMSG = (
    b"3,8812,3600000000,-;NVRM: Xid (PCI:0000:41:00 GPU-I:03): 94, pid=7194, "
    b"Contained: CE User Channel (0x9). RST: No, D-RST: No"
)


def a30_nvml() -> FakeNvml:
    fake = FakeNvml()
    fake.gpus = [{"uuid": A30, "bus": b"00000000:41:00.0", "name": "NVIDIA A30"}]
    fake.migs = {
        (0, 0): {"uuid": MIG_GI3, "gi": 3, "name": "NVIDIA A30 MIG 1g.6gb"},
        (0, 1): {"uuid": MIG_GI4, "gi": 4, "name": "NVIDIA A30 MIG 1g.6gb"},
    }
    return fake


def dcgm_bindings(*, with_bus_label: bool) -> list[GpuBindingEvent]:
    text = (paths.DATA / "dcgm" / "mig" / "01.prom").read_text()
    if with_bus_label:  # as exporters since NVIDIA/dcgm-exporter#326 write it
        text = text.replace(f'UUID="{A30}",', f'UUID="{A30}",pci_bus_id="00000000:41:00.0",')
    scrape = parse_exposition(text)
    assert isinstance(scrape, Scrape), scrape
    result = diff(None, scrape, cluster="c1", node="n1", time=T0)
    return [e for e in result.events if isinstance(e, GpuBindingEvent)]


def kmsg_xid() -> XidEvent:
    boot = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    event = parse_line(KMSG, LineContext(node="n1", cluster="c1", boot_time=boot, boot_id="b"))
    assert isinstance(event, XidEvent), event
    return event


def test_kmsg_dcgm_and_nvml_name_one_instance_by_parent_bus_id_and_instance_id() -> None:
    xid = kmsg_xid()
    with Nvml(a30_nvml()) as nvml:
        devices = nvml.devices()
        nvml.lib.events = [xid_data(0, 94, instance=3, compute=0)]
        nvml.watch_xids()
        raw = nvml.wait_xid()
    assert raw is not None
    nvml_xid = xid_event(raw, cluster="c1", node="n1", time=T0, serial=1)
    nvml_instances = {
        (b.pci_bus_id, b.gpu_instance): b
        for b in bindings(devices, cluster="c1", node="n1", time=T0)
    }
    dcgm_instances = {(b.pci_bus_id, b.gpu_instance): b for b in dcgm_bindings(with_bus_label=True)}

    key = (xid.pci_bus_id, xid.gpu_instance)
    assert key == (BUS, 3)
    assert (nvml_xid.pci_bus_id, nvml_xid.gpu_instance) == key
    assert key in nvml_instances
    assert key in dcgm_instances
    # The instance's pod comes from dcgm, its MIG uuid from NVML: the same instance.
    assert [p.name for p in dcgm_instances[key].pods] == ["a-0"]
    assert nvml_instances[key].mig_uuid == MIG_GI3
    # Both sources bind every instance under the same keys, and the parent under no instance.
    assert set(dcgm_instances) == {(BUS, 3), (BUS, 4)}
    assert set(nvml_instances) == {(BUS, None), (BUS, 3), (BUS, 4)}


def test_they_name_it_by_parent_uuid_and_instance_id_too() -> None:
    """Without the exporter's bus id label (3.x), dcgm names the parent by uuid only; the
    kernel XID gets the parent's uuid from NVML's map, and the pairs agree again."""
    with Nvml(a30_nvml()) as lib:
        devices = lib.devices()
    xid = attribute(kmsg_xid(), bus_map(devices))
    dcgm = {(b.gpu_uuid, b.gpu_instance): b for b in dcgm_bindings(with_bus_label=False)}
    nvml = {(b.gpu_uuid, b.gpu_instance) for b in bindings(devices, cluster="c", node="n", time=T0)}
    key = (xid.gpu_uuid, xid.gpu_instance)
    assert key == (A30, 3)
    assert key in nvml
    assert [p.name for p in dcgm[key].pods] == ["a-0"]
    assert all(b.pci_bus_id == "" and b.gpu_index == 0 for b in dcgm.values())
    # No source names the instance by a MIG- uuid or a "<uuid>/GI<id>" spelling any more.
    names = {xid.gpu_uuid} | {u for u, _ in dcgm} | {u for u, _ in nvml}
    assert names == {A30}
