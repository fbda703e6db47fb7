"""The NVML source, on a fake of the pynvml *library* interface (NVML is external C code
this machine has no driver for), and the real CLI on this driver-less machine.

The fake keeps pynvml's shapes: its own exception classes (``NVMLError(code)``
picks the subclass) and constants, ``nvmlPciInfo_t`` for PCI info, strings
where pynvml decodes them, the attributes of ``c_nvmlEventData_t``, and the
``c_uint`` that ``nvmlDeviceIsMigDeviceHandle`` returns.

MIG references: NVIDIA/k8s-device-plugin internal/rm/health.go registers XID
events on the parent GPU and matches a MIG device by the event's
``GpuInstanceId``/``ComputeInstanceId`` (0xFFFFFFFF: not attributed);
kubernetes-sigs/dra-driver-nvidia-gpu#904 ("XID Reporting with MIG") says the
same of the kernel line and the NVML event.
"""

from __future__ import annotations

import ctypes
import io
import os
import signal
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import msgspec
import pynvml  # type: ignore[import-untyped]
import pytest

from connectors.nvml.devices import (
    Device,
    Nvml,
    NvmlUnavailable,
    RawXid,
    attribute,
    bindings,
    load_bus_map,
    mig_profile,
    xid_event,
)
from connectors.nvml.run import connect_nvml
from connectors.nvml.settings import NvmlSettings
from schemas.codec import decode_event
from schemas.events import GpuBindingEvent, XidEvent
from tests.cli_helpers import gputriage

A100 = "GPU-9d332149-daef-d8e3-1168-b247fd392cbe"
V100 = "GPU-a6158b59-2c1e-1e63-0068-9178c4298abd"
MIG_1 = "MIG-5e0b4a8c-7c1f-5b2e-9a43-2d4bc1e0f6a1"
MIG_2 = "MIG-0c8d2b11-4e7a-5f3d-8b19-7e6a9c2d5f40"
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


class FakeNvml:
    """Two GPUs: an A100 in MIG mode (instances in slots 0 and 2) and a V100 (no MIG)."""

    NVMLError = pynvml.NVMLError
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError

    def __init__(self, init_error: int | None = None) -> None:
        self.init_error = init_error
        self.gpus = [
            {"uuid": A100, "bus": b"00000000:07:00.0", "name": "NVIDIA A100-SXM4-40GB"},
            {"uuid": V100, "bus": "00000000:0F:00.0", "name": "Tesla V100-SXM2-32GB"},
        ]
        self.migs = {
            (0, 0): {"uuid": MIG_1, "gi": 1, "name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb"},
            (0, 2): {"uuid": MIG_2, "gi": 5, "name": "NVIDIA A100-SXM4-40GB MIG 1g.5gb"},
        }
        self.events: list[Any] = []
        """What nvmlEventSetWait returns next: event data, or an NVML error code to raise."""
        self.registered: list[Any] = []
        self.shutdown = False
        self.on_empty: Callable[[], None] = lambda: None

    def _error(self, code: int) -> Exception:
        return pynvml.NVMLError(code)  # type: ignore[no-any-return]

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self._error(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return "580.95.05"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> tuple[str, int]:
        return ("gpu", index)

    def _info(self, handle: tuple[Any, ...]) -> dict[str, Any]:
        info: dict[str, Any]
        info = self.gpus[handle[1]] if handle[0] == "gpu" else self.migs[handle[1], handle[2]]
        return info

    def nvmlDeviceGetUUID(self, handle: tuple[Any, ...]) -> str:
        return str(self._info(handle)["uuid"])

    def nvmlDeviceGetName(self, handle: tuple[Any, ...]) -> str:
        return str(self._info(handle)["name"])

    def nvmlDeviceGetIndex(self, handle: tuple[Any, ...]) -> int:
        return int(handle[1])

    def nvmlDeviceGetPciInfo(self, handle: tuple[Any, ...]) -> Any:
        info = pynvml.nvmlPciInfo_t()
        bus = self._info(handle)["bus"]
        info.busId = bus if isinstance(bus, bytes) else bus.encode()
        return info

    def nvmlDeviceGetMigMode(self, handle: tuple[Any, ...]) -> list[int]:
        if handle[1] == 1:
            raise self._error(pynvml.NVML_ERROR_NOT_SUPPORTED)  # a V100
        return [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: tuple[Any, ...]) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(
        self, handle: tuple[Any, ...], slot: int
    ) -> tuple[str, int, int]:
        if (handle[1], slot) not in self.migs:
            raise self._error(pynvml.NVML_ERROR_NOT_FOUND)
        return ("mig", handle[1], slot)

    def nvmlDeviceGetGpuInstanceId(self, handle: tuple[Any, ...]) -> int:
        if handle[0] != "mig":
            raise self._error(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # not a MIG handle
        return int(self._info(handle)["gi"])

    def nvmlDeviceGetComputeInstanceId(self, handle: tuple[Any, ...]) -> int:
        if handle[0] != "mig":
            raise self._error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return int(self._info(handle).get("ci", 0))

    def nvmlDeviceIsMigDeviceHandle(self, handle: tuple[Any, ...]) -> ctypes.c_uint:
        return ctypes.c_uint(1 if handle[0] == "mig" else 0)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
        self, handle: tuple[Any, ...]
    ) -> tuple[str, int]:
        if handle[0] != "mig":
            raise self._error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return ("gpu", handle[1])

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceRegisterEvents(self, handle: Any, types: int, events: str) -> None:
        assert events == "event-set"
        self.registered.append((handle, types))

    def nvmlEventSetWait(self, events: str, timeout_ms: int) -> Any:
        if not self.events:
            self.on_empty()
            raise self._error(pynvml.NVML_ERROR_TIMEOUT)
        item = self.events.pop(0)
        if isinstance(item, int):
            raise self._error(item)
        return item

    def nvmlEventSetFree(self, events: str) -> None:
        pass


def xid_data(
    index: int,
    code: int,
    instance: int = 0xFFFFFFFF,
    compute: int = 0xFFFFFFFF,
    device: tuple[Any, ...] | None = None,
) -> SimpleNamespace:
    """The fields of pynvml's c_nvmlEventData_t (``device`` is a handle)."""
    return SimpleNamespace(
        device=device or ("gpu", index),
        eventType=pynvml.nvmlEventTypeXidCriticalError,
        eventData=code,
        gpuInstanceId=instance,
        computeInstanceId=compute,
    )


def test_inventory_maps_bus_ids_uuids_and_indexes_including_mig() -> None:
    with Nvml(FakeNvml()) as nvml:
        devices = nvml.devices()
    assert devices == [
        Device(uuid=A100, index=0, pci_bus_id="0000:07:00.0", name="NVIDIA A100-SXM4-40GB"),
        Device(
            uuid=MIG_1,
            index=0,
            pci_bus_id="0000:07:00.0",  # the parent's
            name="NVIDIA A100-SXM4-40GB MIG 3g.20gb",
            parent_uuid=A100,
            gpu_instance_id=1,
            mig_profile="3g.20gb",
        ),
        Device(
            uuid=MIG_2,
            index=0,
            pci_bus_id="0000:07:00.0",
            name="NVIDIA A100-SXM4-40GB MIG 1g.5gb",
            parent_uuid=A100,
            gpu_instance_id=5,
            mig_profile="1g.5gb",
        ),
        Device(uuid=V100, index=1, pci_bus_id="0000:0f:00.0", name="Tesla V100-SXM2-32GB"),
    ]


def test_bindings_carry_the_map_and_keep_mig_instances_apart() -> None:
    """A MIG device's binding names its parent (uuid, bus id, index) and its GPU instance,
    as dcgm-exporter (``UUID`` + ``GPU_I_ID``) and the kernel (``PCI:... GPU-I:NN``) do; its
    own ``MIG-`` uuid rides along in ``mig_uuid``."""
    with Nvml(FakeNvml()) as nvml:
        devices = nvml.devices()
    events = bindings(devices, cluster="c1", node="n1", time=T0)
    rows = [
        (b.gpu_uuid, b.pci_bus_id, b.gpu_index, b.gpu_instance, b.mig_uuid, b.mig_profile)
        for b in events
    ]
    assert rows == [
        (A100, "0000:07:00.0", 0, None, "", ""),
        (A100, "0000:07:00.0", 0, 1, MIG_1, "3g.20gb"),
        (A100, "0000:07:00.0", 0, 5, MIG_2, "1g.5gb"),
        (V100, "0000:0f:00.0", 1, None, "", ""),
    ]
    assert {(b.device, b.pods, b.pods_known) for b in events} == {
        ("nvidia0", (), False),
        ("nvidia1", (), False),
    }
    later = bindings(devices, cluster="c1", node="n1", time=T0.replace(hour=11))
    assert [b.id for b in later] == [b.id for b in events]  # the same map, the same ids
    assert len({b.id for b in events}) == 4


def test_xid_events_are_read_resolved_and_typed() -> None:
    fake = FakeNvml()
    fake.events = [xid_data(1, 79), pynvml.NVML_ERROR_TIMEOUT, xid_data(0, 48, instance=5)]
    with Nvml(fake) as nvml:
        nvml.watch_xids()
        assert fake.registered == [
            (("gpu", 0), pynvml.nvmlEventTypeXidCriticalError),
            (("gpu", 1), pynvml.nvmlEventTypeXidCriticalError),
        ]
        first = nvml.wait_xid()
        assert nvml.wait_xid() is None  # NVMLError_Timeout: nothing happened
        third = nvml.wait_xid()
    assert fake.shutdown
    assert first == RawXid(uuid=V100, pci_bus_id="0000:0f:00.0", index=1, code=79)
    assert third == RawXid(
        uuid=A100, pci_bus_id="0000:07:00.0", index=0, code=48, gpu_instance_id=5
    )
    event = xid_event(third, cluster="c1", node="n1", time=T0, serial=2)
    assert (event.code, event.gpu_uuid, event.pci_bus_id, event.gpu_index, event.source) == (
        48,
        A100,
        "0000:07:00.0",
        0,
        "nvml",
    )
    assert (event.gpu_instance, event.compute_instance) == (5, None)
    assert event.message == "NVML XID critical error 48 (GPU instance 5)"
    whole = xid_event(first, cluster="c1", node="n1", time=T0, serial=1)
    assert (whole.gpu_instance, whole.compute_instance) == (None, None)
    assert event.id != xid_event(third, cluster="c1", node="n1", time=T0, serial=3).id


def test_no_driver_is_one_line_never_a_traceback() -> None:
    for code, words in (
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML: driver not found (NVMLError_LibraryNotFound"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "NVML: driver not found (NVMLError_DriverNotLoaded"),
        (pynvml.NVML_ERROR_NO_PERMISSION, "NVML: cannot initialise (NVMLError_NoPermission"),
    ):
        with pytest.raises(NvmlUnavailable, match=r"^" + words.replace("(", r"\(")):
            Nvml(FakeNvml(init_error=code)).open()
        err = io.StringIO()
        command = NvmlSettings(cluster="c", node="n", once=True, bindings=True, print_only=True)
        status = connect_nvml(command, _no_kafka, io.BytesIO(), err, lib=FakeNvml(init_error=code))
        assert status == 1
        assert err.getvalue().count("\n") == 1
        assert err.getvalue().startswith(f"gputriage: error: {words}")


def _no_kafka() -> Any:
    raise AssertionError("Kafka is not needed with --print-only")


def test_print_once_writes_the_map_as_json_lines() -> None:
    fake = FakeNvml()
    out, err = io.BytesIO(), io.StringIO()
    command = NvmlSettings(cluster="c1", node="n1", once=True, bindings=True, print_only=True)
    assert connect_nvml(command, _no_kafka, out, err, lib=fake) == 0
    events = [decode_event(line) for line in out.getvalue().splitlines()]
    assert [
        (e.gpu_uuid, e.gpu_instance, e.mig_uuid) for e in events if isinstance(e, GpuBindingEvent)
    ] == [(A100, None, ""), (A100, 1, MIG_1), (A100, 5, MIG_2), (V100, None, "")]
    assert "driver 580.95.05, 2 GPU(s), 2 MIG device(s)" in err.getvalue()
    assert fake.shutdown


@pytest.fixture
def restore_sigterm() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.mark.usefixtures("restore_sigterm")
def test_xids_stream_until_sigterm() -> None:
    fake = FakeNvml()
    fake.events = [xid_data(1, 79), xid_data(1, 79)]
    # Once the queue is drained, the "operator" sends SIGTERM; the command must stop cleanly.
    fake.on_empty = lambda: os.kill(os.getpid(), signal.SIGTERM)
    out, err = io.BytesIO(), io.StringIO()
    command = NvmlSettings(cluster="c1", node="n1", once=False, bindings=False, print_only=True)
    assert connect_nvml(command, _no_kafka, out, err, lib=fake) == 0
    events = [decode_event(line) for line in out.getvalue().splitlines()]
    assert [(type(e), getattr(e, "code", None)) for e in events] == [(XidEvent, 79), (XidEvent, 79)]
    assert len({e.id for e in events}) == 2
    assert fake.shutdown


def test_mig_profile_from_device_names() -> None:
    assert mig_profile("NVIDIA A100-SXM4-40GB MIG 1g.5gb") == "1g.5gb"
    assert mig_profile("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me") == "1g.10gb+me"
    assert mig_profile("Tesla V100-SXM2-32GB") == ""


def _driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.skipif(_driver_present(), reason="this machine has an NVIDIA driver")
def test_the_real_cli_without_a_driver_says_so_in_one_line() -> None:
    proc = gputriage("connect", "nvml", "--node", "n1", "--cluster", "c1")
    assert proc.returncode == 1
    stderr = proc.stderr.decode()
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith("gputriage: error: NVML: driver not found (NVMLError_LibraryNotFound")
    assert proc.stdout == b""


def test_kernel_xids_get_the_uuid_and_index_of_the_gpu_at_their_bus_id() -> None:
    gpus = load_bus_map(FakeNvml())
    assert sorted(gpus) == ["0000:07:00.0", "0000:0f:00.0"], "whole GPUs only, not MIG devices"
    kernel = XidEvent(
        id="kmsg:n1:boot:7", cluster="c", time=T0, node="n1", code=79, pci_bus_id="0000:0f:00.0"
    )
    named = attribute(kernel, gpus)
    assert (named.id, named.gpu_uuid, named.gpu_index) == (kernel.id, V100, 1)
    elsewhere = msgspec.structs.replace(kernel, pci_bus_id="0000:99:00.0")
    assert attribute(elsewhere, gpus) is elsewhere, "an unknown bus id stays as it was"
    with pytest.raises(NvmlUnavailable):
        load_bus_map(FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))


def test_an_xid_on_a_mig_device_handle_names_the_parent_and_the_instance() -> None:
    """An event whose handle is a MIG device's (``nvmlDeviceIsMigDeviceHandle``) is the
    parent GPU's XID with that instance: never a ``MIG-`` uuid, never without the parent's
    bus id. Instance ids the event carries win over the handle's."""
    fake = FakeNvml()
    fake.migs[0, 2]["ci"] = 0
    fake.events = [
        xid_data(0, 13, device=("mig", 0, 2)),  # the event says no instance: the handle does
        xid_data(0, 31, instance=1, compute=0),  # on the parent, attributed to GI 1 / CI 0
    ]
    with Nvml(fake) as nvml:
        nvml.watch_xids()
        on_handle, attributed = nvml.wait_xid(), nvml.wait_xid()
    assert on_handle == RawXid(
        uuid=A100,
        pci_bus_id="0000:07:00.0",
        index=0,
        code=13,
        gpu_instance_id=5,
        compute_instance_id=0,
    )
    assert attributed == RawXid(
        uuid=A100,
        pci_bus_id="0000:07:00.0",
        index=0,
        code=31,
        gpu_instance_id=1,
        compute_instance_id=0,
    )
    event = xid_event(on_handle, cluster="c1", node="n1", time=T0, serial=1)
    assert (event.gpu_uuid, event.pci_bus_id, event.gpu_instance, event.compute_instance) == (
        A100,
        "0000:07:00.0",
        5,
        0,
    )


def test_a_driver_that_cannot_tell_mig_handles_is_read_as_whole_gpus() -> None:
    """``nvmlDeviceIsMigDeviceHandle`` raises on drivers or GPUs without MIG: not an error."""

    class NoMig(FakeNvml):
        def nvmlDeviceIsMigDeviceHandle(self, handle: tuple[Any, ...]) -> ctypes.c_uint:
            raise self._error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    fake = NoMig()
    fake.events = [xid_data(1, 79)]
    with Nvml(fake) as nvml:
        nvml.watch_xids()
        raw = nvml.wait_xid()
    assert raw == RawXid(uuid=V100, pci_bus_id="0000:0f:00.0", index=1, code=79)


def test_print_shows_mig_bindings_on_the_wire() -> None:
    """``connect nvml --print-only``, the offline form: the MIG map as JSON lines."""
    out, err = io.BytesIO(), io.StringIO()
    command = NvmlSettings(cluster="c1", node="n1", once=True, bindings=True, print_only=True)
    assert connect_nvml(command, _no_kafka, out, err, lib=FakeNvml()) == 0
    mig = out.getvalue().splitlines()[2]
    assert f'"gpu_uuid":"{A100}","pci_bus_id":"0000:07:00.0","gpu_index":0,'.encode() in mig
    assert f'"pods_known":false,"gpu_instance":5,"mig_uuid":"{MIG_2}",'.encode() in mig
