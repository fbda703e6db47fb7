"""NVML source: the PCI bus id <-> uuid <-> index map and XID critical-error events.

Why NVML when the kernel log has every XID: a kernel XID names its GPU by bus id only; NVML
knows which uuid and index sit there, and a binding per GPU hands that map to the core.
NVML's XID events are a second, driver-level witness. Every pynvml call goes through
:class:`Nvml`, a thin adapter over the module (tests hand it a fake of the library's
interface); :func:`inventory`, :func:`bindings` and :func:`xid_event` are pure.

Traps: no driver is normal (one line, :class:`NvmlUnavailable`); NVML's bus ids are
``00000000:9B:00.0``; a MIG device is named as every source names it, (parent uuid, GPU
instance id), its ``MIG-`` uuid in ``mig_uuid``; XID events are watched on the parent and
carry the instance ids; NVML bindings carry no pods (``pods_known=False``: identity only);
``nvmlEventSetWait`` blocks in C, so it runs in a thread with a short timeout; NVML replays
no event, so ids hash a per-process counter. docs/connectors.md, design notes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any, Final, Self

import msgspec

from schemas.events import GpuBindingEvent, XidEvent
from schemas.ids import hashed_id
from schemas.pci import canonical_bus_id

log = logging.getLogger("gputriage.nvml")

SOURCE: Final = "nvml"
WAIT_MS: Final = 1000
"""How long one ``nvmlEventSetWait`` blocks: the longest a stop request waits."""
_NOT_APPLICABLE: Final = 0xFFFFFFFF
"""``gpuInstanceId`` of an event that is not about one MIG instance."""


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here; the message is one line for the user."""


@dataclass(frozen=True)
class Device:
    """One GPU or MIG device as NVML lists it."""

    uuid: str
    index: int
    """The GPU's NVML index (a MIG device: its parent's)."""
    pci_bus_id: str = ""
    """Canonical (a MIG device: its parent's, which all its instances share)."""
    name: str = ""
    parent_uuid: str = ""
    """Set on MIG devices only."""
    gpu_instance_id: int | None = None
    """A MIG device's GPU instance id (None when NVML would not say)."""
    mig_profile: str = ""


@dataclass(frozen=True)
class RawXid:
    """One ``nvmlEventSetWait`` result, resolved to its device."""

    uuid: str
    pci_bus_id: str
    index: int | None
    code: int
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


def _instance(value: Any) -> int | None:
    """An instance id of an event, None for NVML's "not applicable" (0xFFFFFFFF)."""
    number = int(value)
    return None if number == _NOT_APPLICABLE else number


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else value


def mig_profile(name: str) -> str:
    """``1g.10gb`` from a MIG device name such as ``NVIDIA A100-SXM4-40GB MIG 1g.10gb``."""
    head, sep, tail = name.rpartition(" MIG ")
    return tail.strip() if sep and head else ""


class Nvml:
    """The pynvml calls this source makes, on a library object (the pynvml module).

    Use as a context manager: :meth:`open` initialises NVML (raising
    :class:`NvmlUnavailable`), leaving shuts it down.
    """

    def __init__(self, lib: Any = None) -> None:
        if lib is None:
            import pynvml  # type: ignore[import-untyped]  # noqa: PLC0415 - no stubs

            lib = pynvml
        self.lib = lib
        self._events: Any = None

    def open(self) -> Self:
        try:
            self.lib.nvmlInit()
        except self.lib.NVMLError as exc:
            raise NvmlUnavailable(_unavailable(exc)) from None
        return self

    def close(self) -> None:
        lib = self.lib
        if self._events is not None:
            with contextlib.suppress(lib.NVMLError):
                lib.nvmlEventSetFree(self._events)
            self._events = None
        with contextlib.suppress(lib.NVMLError):
            lib.nvmlShutdown()

    def __enter__(self) -> Self:
        return self.open()

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def driver_version(self) -> str:
        return _text(self.lib.nvmlSystemGetDriverVersion())

    def devices(self) -> list[Device]:
        """Every GPU, each followed by its MIG devices when MIG is enabled."""
        lib = self.lib
        found: list[Device] = []
        for index in range(lib.nvmlDeviceGetCount()):
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            gpu = self._device(handle, index)
            found.append(gpu)
            found.extend(self._mig_devices(handle, gpu))
        return found

    def _device(self, handle: Any, index: int) -> Device:
        lib = self.lib
        bus = canonical_bus_id(_text(lib.nvmlDeviceGetPciInfo(handle).busId))
        return Device(
            uuid=_text(lib.nvmlDeviceGetUUID(handle)),
            index=index,
            pci_bus_id=bus,
            name=_text(lib.nvmlDeviceGetName(handle)),
        )

    def _mig_devices(self, handle: Any, gpu: Device) -> Iterator[Device]:
        lib = self.lib
        try:
            current, _pending = lib.nvmlDeviceGetMigMode(handle)
        except lib.NVMLError:
            return  # NVMLError_NotSupported: not a MIG-capable GPU
        if current != lib.NVML_DEVICE_MIG_ENABLE:
            return
        for slot in range(lib.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = lib.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
            except lib.NVMLError:
                continue  # NVMLError_NotFound: an empty slot
            name = _text(lib.nvmlDeviceGetName(mig))
            try:
                instance: int | None = int(lib.nvmlDeviceGetGpuInstanceId(mig))
            except lib.NVMLError:
                instance = None  # the binding then names the parent only
            yield Device(
                uuid=_text(lib.nvmlDeviceGetUUID(mig)),
                index=gpu.index,
                pci_bus_id=gpu.pci_bus_id,
                name=name,
                parent_uuid=gpu.uuid,
                gpu_instance_id=instance,
                mig_profile=mig_profile(name),
            )

    def watch_xids(self) -> None:
        """Register every GPU for XID critical-error events (once, before :meth:`wait_xid`)."""
        lib = self.lib
        events = lib.nvmlEventSetCreate()
        self._events = events
        for index in range(lib.nvmlDeviceGetCount()):
            handle = lib.nvmlDeviceGetHandleByIndex(index)
            try:
                lib.nvmlDeviceRegisterEvents(handle, lib.nvmlEventTypeXidCriticalError, events)
            except lib.NVMLError as exc:
                raise NvmlUnavailable(
                    f"NVML: cannot watch XID events of GPU {index} ({type(exc).__name__}: {exc})"
                ) from None

    def wait_xid(self, timeout_ms: int = WAIT_MS) -> RawXid | None:
        """The next XID event, or None after ``timeout_ms`` without one (blocks: use a thread)."""
        lib = self.lib
        try:
            data = lib.nvmlEventSetWait(self._events, timeout_ms)
        except lib.NVMLError_Timeout:
            return None
        if not data.eventType & lib.nvmlEventTypeXidCriticalError:
            return None
        handle = data.device
        instance = _instance(data.gpuInstanceId)
        compute = _instance(getattr(data, "computeInstanceId", _NOT_APPLICABLE))
        if self._is_mig(handle):
            mig, handle = handle, lib.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
            if instance is None:
                instance = int(lib.nvmlDeviceGetGpuInstanceId(mig))
            if compute is None:
                compute = int(lib.nvmlDeviceGetComputeInstanceId(mig))
        try:
            index: int | None = int(lib.nvmlDeviceGetIndex(handle))
        except lib.NVMLError:
            index = None
        return RawXid(
            uuid=_text(lib.nvmlDeviceGetUUID(handle)),
            pci_bus_id=canonical_bus_id(_text(lib.nvmlDeviceGetPciInfo(handle).busId)),
            index=index,
            code=int(data.eventData),
            gpu_instance_id=instance,
            compute_instance_id=compute,
        )

    def _is_mig(self, handle: Any) -> bool:
        """Whether ``handle`` is a MIG device's (pynvml returns a ``c_uint``); False where
        the driver cannot say (no MIG support: ``NVMLError_NotSupported``, or an old one)."""
        lib = self.lib
        try:
            flag = lib.nvmlDeviceIsMigDeviceHandle(handle)
        except lib.NVMLError:
            return False
        return bool(int(getattr(flag, "value", flag)))


def _unavailable(exc: BaseException) -> str:
    name = type(exc).__name__
    if name in ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded"):
        return f"NVML: driver not found ({name}: {exc})"
    return f"NVML: cannot initialise ({name}: {exc})"


def _id(*parts: object) -> str:
    return hashed_id(SOURCE, *parts)


def bindings(
    devices: Sequence[Device], *, cluster: str, node: str, time: datetime
) -> list[GpuBindingEvent]:
    """One pod-less binding per GPU and MIG device: the bus id <-> uuid <-> index map.

    A MIG device's binding names its parent (uuid, bus id, index) and its
    ``gpu_instance``, with its own ``MIG-`` uuid in ``mig_uuid``. The id hashes the
    map entry itself (no time; a MIG device's own uuid among it): sending the same
    map again, after a restart, repeats the same ids.
    """
    out: list[GpuBindingEvent] = []
    for d in devices:
        mig = bool(d.parent_uuid)
        out.append(
            GpuBindingEvent(
                id=_id(cluster, node, "map", d.uuid, d.pci_bus_id, d.index, d.mig_profile),
                cluster=cluster,
                time=time,
                node=node,
                gpu_uuid=d.parent_uuid if mig else d.uuid,
                pci_bus_id=d.pci_bus_id,
                gpu_index=d.index,
                device=f"nvidia{d.index}",
                mig_profile=d.mig_profile,
                pods_known=False,  # NVML knows no pods: never unbind what dcgm bound
                gpu_instance=d.gpu_instance_id if mig else None,
                mig_uuid=d.uuid if mig else "",
                source="nvml",
            )
        )
    return out


def xid_event(raw: RawXid, *, cluster: str, node: str, time: datetime, serial: int) -> XidEvent:
    """The :class:`XidEvent` of one NVML XID (``serial``: this process's event counter)."""
    where = f" (GPU instance {raw.gpu_instance_id})" if raw.gpu_instance_id is not None else ""
    return XidEvent(
        id=_id(cluster, node, "xid", raw.uuid, raw.code, time.isoformat(), serial),
        cluster=cluster,
        time=time,
        node=node,
        code=raw.code,
        pci_bus_id=raw.pci_bus_id,
        gpu_uuid=raw.uuid,
        gpu_index=raw.index,
        message=f"NVML XID critical error {raw.code}{where}",
        source=SOURCE,
        gpu_instance=raw.gpu_instance_id,
        compute_instance=raw.compute_instance_id if raw.gpu_instance_id is not None else None,
    )


def bus_map(devices: Sequence[Device]) -> dict[str, Device]:
    """Whole GPUs by canonical PCI bus id (MIG devices have none of their own)."""
    return {d.pci_bus_id: d for d in devices if d.pci_bus_id and not d.parent_uuid}


def load_bus_map(lib: Any = None) -> dict[str, Device]:
    """The node's GPUs by bus id, read once; raises :class:`NvmlUnavailable`."""
    with Nvml(lib) as nvml:
        return bus_map(nvml.devices())


def attribute(event: XidEvent, gpus: Mapping[str, Device]) -> XidEvent:
    """The event with the uuid and index of the GPU at its bus id, when known.

    Why at the source: a kernel XID names only a bus id, and the GPU that just
    fell off the bus (XID 79) may be gone from NVML a second later; a map read
    while the node was healthy still names it. The event id is unchanged. An XID
    naming a MIG instance (``GPU-I:05``) gets the *parent's* uuid, as a MIG
    binding names it; its ``gpu_instance`` stays as parsed.
    """
    if event.gpu_uuid or not event.pci_bus_id:
        return event
    gpu = gpus.get(event.pci_bus_id)
    if gpu is None:
        return event
    return msgspec.structs.replace(event, gpu_uuid=gpu.uuid, gpu_index=gpu.index)


def enricher(lib: Any = None) -> Callable[[XidEvent], XidEvent] | None:
    """:func:`attribute` over NVML's bus id map, read once now; ``None`` (logged once) on a
    node without a usable driver, where XIDs carry bus ids and GPU bindings name the GPUs."""
    try:
        gpus = load_bus_map(lib)
    except NvmlUnavailable as exc:
        log.info("%s: XIDs carry bus ids only (bindings name their GPUs)", exc)
        return None
    log.info("NVML: %d GPUs; XIDs carry their uuids", len(gpus))
    return functools.partial(attribute, gpus=gpus)
