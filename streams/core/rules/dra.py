"""Dynamic Resource Allocation on the node key: the node's GPU devices from its
ResourceSlices, who holds them (``dra`` bindings), and the devices containers report
Unhealthy (``allocatedResourcesStatus``, device-plugin resources too).

Not a rule of its own: the facts ``gpu_degraded`` and the eviction chain read on a node
whose GPUs are claimed, not counted (``nvidia.com/gpu`` is absent or 0 there, so no
allocatable drop can say a GPU failed). A device fault is a ``NoSchedule``/``NoExecute``
taint, an Unhealthy report, or a GPU gone from the slices for ``dra_absent_seconds``.

Traps: a slice is a snapshot of its devices, and a newer pool generation supersedes the
older slices; a pool whose slices are all deleted starts again at any generation (a DRA
plugin restart); a MIG reconfiguration replaces a GPU's devices, so absence is judged per
physical GPU (a device whose GPU is still listed is not gone); a taint of effect ``None``
is no fault; ``Unknown`` health is NVIDIA's DRA driver's normal answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from sys import intern
from typing import Final

from schemas.events import DeviceHealth, PodEvent, ResourceSliceEvent, SliceDevice
from schemas.incidents import Evidence, GpuRef
from streams.core import evidence as text
from streams.core.config import CoreSettings
from streams.core.rules.gpuids import pack_uuid, split_gpu_key, unpack_uuid
from streams.core.state import DeviceReport, DraDevice, DraHold, DraState, NodeState

TAINT: Final = "taint"
UNHEALTHY: Final = "unhealthy"
ABSENT: Final = "absent"
_EFFECTS: Final = ("NoSchedule", "NoExecute")
"""The taint effects that keep work off a device (``None`` only informs)."""
_CLAIM_RESOURCE: Final = "claim:"
_UID_LENGTH: Final = 36
"""A claim uid's length: the kubelet's DRA resource id is ``<CDI kind>=<claim uid>-<device>``."""


def of(state: NodeState) -> DraState:
    """The node's DRA facts, made on first use."""
    if state.dra is None:
        state.dra = DraState()
    return state.dra


# -- the slices ---------------------------------------------------------------------
def _words(device: SliceDevice) -> tuple[str, ...]:
    out = []
    for taint in device.taints:
        if taint.effect not in _EFFECTS:
            continue
        word = f"{taint.key}={taint.value}:{taint.effect}" if taint.value else ""
        word = word or f"{taint.key}:{taint.effect}"
        out.append(f"{word} (rule {taint.rule})" if taint.rule else word)
    return tuple(out)


def physical(dev: DraDevice) -> bytes:
    """The GPU a device is (or is part of): its parent's uuid for a MIG device."""
    return dev.parent or dev.uuid


def where(dev: DraDevice) -> str:
    """The device's uuid and bus id, as the evidence names a GPU."""
    return " / ".join(p for p in (unpack_uuid(dev.uuid), dev.bus) if p) or "no uuid"


def apply_slice(state: NodeState, ev: ResourceSliceEvent, now: float) -> tuple[list[str], bool]:
    """Apply one slice record: ``(devices whose taint began, whether a device fault
    ended)`` (a taint lifted, a gone GPU listed again)."""
    dra = of(state)
    pool = f"{ev.driver}/{ev.pool}"
    slices = dra.slices
    leaving = {ev.name}
    listed: dict[str, SliceDevice] = {}
    if ev.op == "deleted":
        if ev.name not in slices:
            return [], False
        dra.slices = {n: s for n, s in slices.items() if n != ev.name}
        _remember_version(dra, ev.name, ev.resource_version)  # a tombstone
        left = [g for p, g in dra.slices.values() if p == pool]
        # The pool's generation is its remaining slices' newest (none: forgotten).
        dra.pools = {p: g for p, g in dra.pools.items() if p != pool}
        if left:
            dra.pools[pool] = max(left)
    else:
        newest = dra.pools.get(pool, -1)
        known = slices.get(ev.name)
        if known is not None and ev.generation < known[1]:
            return [], False  # an older copy of this very slice
        # Trap: a slice of another name with an older generation is a restarted plugin
        # (it starts its pool again at 1) whose predecessor's deletion is not seen yet
        # (a relist stamps both alike; after a connector restart, never): it is applied.
        if ev.generation > newest:
            dra.pools = {**dra.pools, pool: ev.generation}
            old = [n for n, (p, g) in slices.items() if p == pool and g < ev.generation]
            leaving.update(old)
        dra.slices = {n: s for n, s in slices.items() if n not in leaving}
        dra.slices[ev.name] = (pool, ev.generation)
        _remember_version(dra, ev.name, ev.resource_version)
        listed = {d.name: d for d in ev.devices}
    tainted: list[str] = []
    ended = False
    devices = dict(dra.devices)
    for name, device in listed.items():
        began, cleared = _list(devices, name, device, ev, now)
        if began:
            tainted.append(name)
        ended = ended or cleared
    for name, dev in list(devices.items()):
        if dev.slice in leaving and dev.gone is None and name not in listed:
            _leave(dev, name, ev, now)
    present = {physical(d) for d in devices.values() if d.gone is None}
    for name, dev in list(devices.items()):
        if dev.gone is not None and physical(dev) in present:
            # Its GPU is listed by another device (a MIG reconfiguration): not gone.
            ended = ended or dev.checked
            del devices[name]
    dra.devices = devices
    return tainted, ended


_MAX_VERSIONS: Final = 32
"""Slice versions kept per node: every slice applied, and the newest deletions (a
restarted plugin names its slices anew, so deleted names would pile up)."""


def _remember_version(dra: DraState, name: str, version: int) -> None:
    if not version:
        return
    versions = {**dra.versions, name: version}
    if len(versions) > _MAX_VERSIONS:
        gone = [n for n in versions if n not in dra.slices and n != name]
        for n in gone[: len(versions) - _MAX_VERSIONS]:
            del versions[n]
    dra.versions = versions


def _list(
    devices: dict[str, DraDevice],
    name: str,
    device: SliceDevice,
    ev: ResourceSliceEvent,
    now: float,
) -> tuple[bool, bool]:
    """One device as a slice lists it: ``(its taint began, a fault of it ended)``."""
    known = devices.get(name)
    taints = _words(device)
    dev = DraDevice(
        uuid=pack_uuid(device.uuid),
        parent=pack_uuid(device.parent_uuid),
        bus=intern(device.pci_bus_id),
        product=intern(device.product),
        type=intern(device.type),
        profile=intern(device.mig_profile),
        taints=taints,
        slice=ev.name,
        seen=now,
    )
    devices[name] = dev
    was_tainted = known is not None and bool(known.taints)
    came_back = known is not None and known.gone is not None
    if taints and was_tainted and known is not None:
        dev.fault, dev.since, dev.checked = known.fault, known.since, known.checked
        return False, False
    if taints:
        dev.since = now
        dev.fault = text.device_taint(
            f"{ev.id}#{name}", ev.time, ev.name, name, where(dev), ", ".join(taints)
        )
        return True, came_back and known is not None and known.checked
    return False, (was_tainted or came_back) and known is not None and known.checked


def _leave(dev: DraDevice, name: str, ev: ResourceSliceEvent, now: float) -> None:
    """The device left its node's slices: a fault once it stays gone (its taint, if it
    had one, stands meanwhile)."""
    dev.gone = now
    if not dev.taints:
        dev.fault = text.device_gone(
            f"{ev.id}#{name}", ev.time, ev.name, name, where(dev), ev.op == "deleted"
        )
        dev.since = now
        dev.checked = False


def postpone(state: NodeState, name: str, now: float) -> None:
    """The node is being removed: a device gone from it is its teardown; judge it again
    a window from now if the node stays."""
    dev = state.dra.devices.get(name) if state.dra is not None else None
    if dev is not None and dev.gone is not None:
        dev.gone = now
        dev.since = now


def identity(state: NodeState, bus: str, uuid: str) -> tuple[str, str]:
    """``(bus, uuid)`` of a GPU a record names by one of them, the other from the slices
    (a whole GPU's device, or a MIG device's parent); unchanged when they do not say."""
    dra = state.dra
    if dra is None:
        return bus, uuid
    packed = pack_uuid(uuid)
    for dev in dra.devices.values():
        gpu = physical(dev)
        if bus and not uuid and dev.bus == bus and gpu:
            return bus, unpack_uuid(gpu)
        if uuid and not bus and gpu == packed and dev.bus:
            return dev.bus, uuid
    return bus, uuid


# -- the kubelet's device health --------------------------------------------------------
def device_id(health: DeviceHealth) -> str:
    """The device a report names: the DRA device name for a claim's device (the kubelet's
    id is ``<CDI kind>=<claim uid>-<device>``, or ``<driver>/<pool>/<device>`` when the
    driver gave no CDI id), the GPU (or ``MIG-``) uuid for a device plugin's (a
    time-sliced replica's ``<uuid>::<n>`` is its GPU)."""
    raw = health.device
    if health.resource.startswith(_CLAIM_RESOURCE):
        _, eq, tail = raw.partition("=")
        if eq:
            if len(tail) > _UID_LENGTH + 1 and tail[_UID_LENGTH] == "-":
                return tail[_UID_LENGTH + 1 :]
            return tail
        return raw.rsplit("/", 1)[-1]
    return raw.split("::", 1)[0]


def apply_health(state: NodeState, key: str, ev: PodEvent, now: float) -> tuple[list[str], bool]:
    """What one pod record says of its devices' health: ``(devices it is the first to
    report Unhealthy, whether a report ended)``. A deleted pod reports nothing."""
    reported: dict[str, tuple[str, str, str]] = {}
    if ev.op != "deleted":
        for status in ev.containers:
            for health in status.devices:
                if health.health == "Unhealthy":
                    found = device_id(health)
                    if found and found not in reported:
                        reported[found] = (health.resource, status.name, health.device)
    dra = state.dra
    if not reported and (dra is None or not dra.unhealthy):
        return [], False
    dra = of(state)
    reports = dict(dra.unhealthy)
    ended = False
    for found, report in list(reports.items()):
        if key in report.pods and found not in reported:
            rest = tuple(p for p in report.pods if p != key)
            if rest:
                report.pods = rest
            else:
                del reports[found]
                ended = True
    started: list[str] = []
    for found, (resource, container, raw) in reported.items():
        known = reports.get(found)
        if known is None:
            item = text.device_unhealthy(ev, container, resource, raw, f"{ev.id}#{found}")
            reports[found] = DeviceReport(pods=(key,), since=now, item=item, resource=resource)
            started.append(found)
        elif key not in known.pods:
            known.pods = (*known.pods, key)
    dra.unhealthy = reports
    return started, ended


def forget_pod(state: NodeState, key: str) -> bool:
    """The pod is forgotten: its reports end. True when a device has no report left."""
    dra = state.dra
    if dra is None or not dra.unhealthy:
        return False
    reports = dict(dra.unhealthy)
    ended = False
    for found, report in list(reports.items()):
        if key in report.pods:
            rest = tuple(p for p in report.pods if p != key)
            if rest:
                report.pods = rest
            else:
                del reports[found]
                ended = True
    dra.unhealthy = reports
    return ended


# -- who holds a device ------------------------------------------------------------------
def hold(
    state: NodeState,
    device: str,
    uuid: bytes,
    instance: int | None,
    pods: tuple[str, ...],
    claims: tuple[str, ...],
    version: int = 0,
) -> tuple[str, ...]:
    """A ``dra`` binding: ``pods`` (through ``claims``) hold ``device`` now (none: it is
    released). Returns the pods it held before. ``version``: :func:`binding_version`."""
    dra = of(state)
    known = dra.holds.get(device)
    before = known.pods if known is not None else ()
    holds = {d: h for d, h in dra.holds.items() if d != device}
    if pods:
        holds[device] = DraHold(uuid=uuid, instance=instance, pods=pods, claims=claims)
    dra.holds = holds
    if version:
        bound = {**dra.bound, device: version}
        if len(bound) > _MAX_BOUND:
            gone = [d for d in bound if d not in holds and d != device]
            for d in gone[: len(bound) - _MAX_BOUND]:
                del bound[d]
        dra.bound = bound
    return before


_MAX_BOUND: Final = 256
"""Binding versions kept per node: every device held, and the newest released ones."""


def binding_version(event_id: str) -> int:
    """The version a ``dra`` binding's id ends with (``dra:<node>:<device>:<uid>:<rv>``,
    the etcd revision of the claim or slice that caused it); 0 when it names none."""
    tail = event_id.rpartition(":")[2]
    return int(tail) if tail.isdigit() and len(tail) < 19 else 0


def admits_late_binding(state: NodeState, device: str, event_id: str) -> bool:
    """Is a ``dra`` binding read behind its key's position news? One ``connect k8s``
    publishes to several topics, and a worker may read one ahead of another: a binding
    newer than the device's last is applied, as a late pod or slice is."""
    version = binding_version(event_id)
    if not version:
        return False
    dra = state.dra
    known = dra.bound.get(device, 0) if dra is not None else 0
    return version > known


def held_gpus(state: NodeState, pod: str) -> list[tuple[str, str, GpuRef, tuple[str, ...]]]:
    """``(device, GPU key, GPU identity, claims)`` of each DRA device the pod holds by
    binding: the device's GPU as its slice names it (a MIG device's parent, as a taint
    names it: :func:`gpu_of`), else as the binding did (the slice unseen)."""
    dra = state.dra
    if dra is None or not dra.holds:
        return []
    out = []
    for name, held in dra.holds.items():
        if pod not in held.pods:
            continue
        dev = dra.devices.get(name)
        if dev is not None:
            key, ref = gpu_of(name, dev)
        else:
            key, ref = _bound_gpu(state, name, held)
        out.append((name, key, ref, held.claims))
    return out


def _bound_gpu(state: NodeState, name: str, held: DraHold) -> tuple[str, GpuRef]:
    """The GPU key and identity of a held device no slice lists: the GPU its binding
    made (:attr:`NodeState.gpus`), by the binding's uuid and instance."""
    uuid = unpack_uuid(held.uuid)
    for key, gpu in state.gpus.items():
        parent, instance = split_gpu_key(key)
        if held.uuid and gpu.uuid == held.uuid and instance == held.instance:
            bus = "" if parent.startswith("uuid:") else parent
            return parent, GpuRef(uuid=uuid, pci_bus_id=bus)
    return (f"uuid:{uuid}" if uuid else f"dra:{name}"), GpuRef(uuid=uuid)


def held_pods(state: NodeState, uuid: bytes, instance: int | None) -> tuple[str, ...]:
    """The pods DRA bindings say hold the GPU (or MIG device) with this uuid and key
    instance."""
    dra = state.dra
    if dra is None or not dra.holds or not uuid:
        return ()
    return tuple(
        p for h in dra.holds.values() if h.uuid == uuid and h.instance == instance for p in h.pods
    )


# -- device faults, as gpu_degraded reads them ---------------------------------------------
@dataclass(frozen=True)
class Fault:
    """One current device fault (or a device gone and not yet for long)."""

    kind: str
    """:data:`TAINT`, :data:`UNHEALTHY` or :data:`ABSENT`."""
    ident: str
    """The device name (DRA) or the reported id (a device plugin's uuid)."""
    key: str
    """The GPU's key in the node state (bus id, or ``uuid:``)."""
    ref: GpuRef
    since: float
    due: float
    """When it is a fault worth a ticket (``degraded_after_seconds`` after a taint or a
    report, ``dra_absent_seconds`` after it left the slices)."""
    item: Evidence
    words: str
    checked: bool
    pods: tuple[str, ...]
    claims: tuple[str, ...]


def gpu_of(name: str, dev: DraDevice) -> tuple[str, GpuRef]:
    """The GPU key and published identity of a DRA device: its GPU's (the parent's, for
    a MIG device: the chain and the ticket judge whole GPUs), with its MIG profile."""
    uuid = unpack_uuid(physical(dev))
    key = dev.bus or (f"uuid:{uuid}" if uuid else f"dra:{name}")
    return key, GpuRef(uuid=uuid, pci_bus_id=dev.bus, mig_profile=dev.profile)


def _holders(dra: DraState, name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    found = dra.holds.get(name)
    return (found.pods, found.claims) if found is not None else ((), ())


def faults(state: NodeState, config: CoreSettings) -> list[Fault]:
    """Every device fault the node has now, gone devices included (``due`` says when
    their absence counts), in a fixed order."""
    dra = state.dra
    if dra is None:
        return []
    out = []
    for name, dev in dra.devices.items():
        if dev.fault is None:
            continue
        key, ref = gpu_of(name, dev)
        pods, claims = _holders(dra, name)
        if dev.taints:
            kind, due = TAINT, dev.since + config.degraded_after_seconds
            words = f"{name}: tainted {', '.join(dev.taints)}"
        elif dev.gone is not None:
            kind, due = ABSENT, dev.gone + config.dra_absent_seconds
            words = f"{name}: gone from its ResourceSlices"
        else:
            continue
        out.append(
            Fault(kind, name, key, ref, dev.since, due, dev.fault, words, dev.checked, pods, claims)
        )
    for found, report in dra.unhealthy.items():
        key, ref, pods, claims = _report_gpu(state, dra, found)
        everyone = tuple(dict.fromkeys((*report.pods, *pods)))
        words = f"{found}: reported Unhealthy ({report.resource})"
        due = report.since + config.degraded_after_seconds
        out.append(
            Fault(
                UNHEALTHY,
                found,
                key,
                ref,
                report.since,
                due,
                report.item,
                words,
                report.checked,
                everyone,
                claims,
            )
        )
    return out


def _report_gpu(
    state: NodeState, dra: DraState, found: str
) -> tuple[str, GpuRef, tuple[str, ...], tuple[str, ...]]:
    """The GPU an Unhealthy report names, and who holds it: a DRA device by its name, a
    device plugin's by its uuid (a MIG uuid the slices list finds its device)."""
    dev = dra.devices.get(found)
    name = found
    if dev is None:
        packed = pack_uuid(found)
        name, dev = next(((n, d) for n, d in dra.devices.items() if d.uuid == packed), ("", None))
        if dev is None:
            for key, gpu in state.gpus.items():
                if gpu.uuid == packed and "/" not in key:
                    pods = (gpu.pods,) if isinstance(gpu.pods, str) else gpu.pods
                    bus = "" if key.startswith("uuid:") else key
                    return key, GpuRef(uuid=found, pci_bus_id=bus, index=gpu.index), pods, ()
            return f"uuid:{found}", GpuRef(uuid=found), (), ()
    key, ref = gpu_of(name, dev)
    pods, claims = _holders(dra, name)
    return key, ref, pods, claims


def mark_checked(state: NodeState, fault: Fault) -> None:
    """``gpu_degraded`` has judged this fault: it is not due again."""
    dra = state.dra
    if dra is None:
        return
    if fault.kind == UNHEALTHY:
        report = dra.unhealthy.get(fault.ident)
        if report is not None:
            report.checked = True
        return
    dev = dra.devices.get(fault.ident)
    if dev is not None:
        dev.checked = True


def next_due(state: NodeState, config: CoreSettings) -> float:
    """When the earliest fault not yet judged becomes due (``inf``: none)."""
    found = math.inf
    for fault in faults(state, config):
        if not fault.checked:
            found = min(found, fault.due)
    return found


def faulty(state: NodeState) -> bool:
    """Is a device of the node tainted or reported Unhealthy now (what keeps an
    eviction chain open, as an allocatable drop does)?"""
    dra = state.dra
    if dra is None:
        return False
    return bool(dra.unhealthy) or any(d.taints for d in dra.devices.values())


def name_devices(state: NodeState, attributes: dict[str, str], gpus: list[GpuRef]) -> None:
    """Name in an incident's ``attributes`` the DRA devices of its GPUs and the claims
    that hold them (``dra_devices``, ``claims``): what the on-call engineer looks up."""
    dra = state.dra
    if dra is None or not dra.devices or not gpus:
        return
    names: list[str] = []
    claims: list[str] = []
    for name, dev in dra.devices.items():
        uuid, bus = unpack_uuid(physical(dev)), dev.bus
        if any((r.uuid and r.uuid == uuid) or (r.pci_bus_id and r.pci_bus_id == bus) for r in gpus):
            names.append(name)
            claims.extend(_holders(dra, name)[1])
    if names:
        attributes["dra_devices"] = ",".join(names)
    if claims:
        attributes["claims"] = ",".join(dict.fromkeys(claims))
