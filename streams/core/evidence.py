"""One-line, human-readable evidence for each kind of event.

These lines are what an on-call engineer reads in Slack at 3 a.m.: they say what
happened in the terms of the source (XID code and NVIDIA's name for it, the
allocatable numbers, the pod's reason), so nobody has to open the raw event.
"""

from __future__ import annotations

from datetime import datetime

from schemas.events import (
    AutoscalerEvent,
    GpuBindingEvent,
    KubeEvent,
    NodeCondition,
    PodCondition,
    PodEvent,
    Termination,
    XidEvent,
)
from schemas.incidents import Evidence
from streams.core.config import XidRule


def _clip(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def xid(ev: XidEvent, rule: XidRule, gpu_uuid: str) -> Evidence:
    kind = "SXid" if ev.sxid else "XID"
    name = rule.mnemonic or "unknown code"
    where = " / ".join(part for part in (gpu_uuid, ev.pci_bus_id) if part) or "unknown GPU"
    text = f"{kind} {ev.code} ({rule.xid_class}: {name}) on {where}"
    if ev.pid is not None or ev.process:
        text += f", pid={ev.pid if ev.pid is not None else '?'} {ev.process}".rstrip()
    if ev.recovery_action:
        text += f", recovery action: {ev.recovery_action}"
    if ev.message:
        text += f": {_clip(ev.message, 100)}"
    return Evidence(event_id=ev.id, schema="xid.v1", time=ev.time, text=text)


def xid_code_and_class(item: Evidence) -> tuple[int, str] | None:
    """The XID code and catalog class an XID evidence line (built by :func:`xid`) was
    made from, or None for any other line: read back here, next to the one builder of
    that format, so no rule matches the line's text itself."""
    if item.schema != "xid.v1" or not item.text.startswith("XID "):
        return None
    code, sep, rest = item.text[4:].partition(" (")
    cls, colon, _ = rest.partition(": ")
    if not sep or not colon or not code.isdigit():
        return None
    return int(code), cls


def allocatable_change(
    event_id: str, ev_time: datetime, before: int, after: int, capacity: int
) -> Evidence:
    """The device plugin changed how many GPUs are allocatable."""
    arrow = f"{before} → {after}" if before >= 0 else f"{after}"
    text = f"GPU allocatable {arrow} (capacity {capacity})"
    return Evidence(event_id=event_id, schema="node.v1", time=ev_time, text=text)


def node_condition(event_id: str, ev_time: datetime, cond: NodeCondition) -> Evidence:
    text = f"node {cond.type}={cond.status}"
    if cond.reason:
        text += f" ({cond.reason})"
    if cond.message:
        text += f": {_clip(cond.message, 100)}"
    return Evidence(event_id=event_id, schema="node.v1", time=ev_time, text=text)


def pod_status(ev: PodEvent, what: str) -> Evidence:
    text = f"pod {ev.namespace}/{ev.name} {what}"
    if ev.message:
        text += f": {_clip(ev.message, 100)}"
    return Evidence(event_id=ev.id, schema="pod.v1", time=ev.time, text=text)


def termination(ev: PodEvent, container: str, term: Termination, extra: str = "") -> Evidence:
    reason = term.reason or "Error"
    text = (
        f"container {ev.namespace}/{ev.name}/{container} terminated: "
        f"{reason}, exit code {term.exit_code}"
    )
    if extra:
        text += f"; {extra}"
    if term.message:
        text += f": {_clip(term.message, 100)}"
    return Evidence(event_id=ev.id, schema="pod.v1", time=ev.time, text=text)


def pod_unschedulable(ev: PodEvent, cond: PodCondition) -> Evidence:
    text = f"pod {ev.namespace}/{ev.name} unschedulable: {_clip(cond.message)}"
    return Evidence(event_id=ev.id, schema="pod.v1", time=ev.time, text=text)


def autoscaler_line(ev: AutoscalerEvent) -> Evidence:
    """The autoscaler's own words (its message, else the raw line)."""
    text = _clip(ev.message or ev.line, 200)
    return Evidence(event_id=ev.id, schema="autoscaler.v1", time=ev.time, text=text)


def binding(ev: GpuBindingEvent, gpu: str) -> Evidence:
    pods = ", ".join(f"{p.namespace}/{p.name}" for p in ev.pods) or "no pod"
    text = f"dcgm-exporter: GPU {gpu} on {ev.node} bound to {_clip(pods, 100)}"
    return Evidence(event_id=ev.id, schema="gpu_binding.v1", time=ev.time, text=text)


def kube_event(ev: KubeEvent) -> Evidence:
    obj = ev.involved
    target = f"{obj.kind} {obj.namespace}/{obj.name}" if obj.namespace else f"{obj.kind} {obj.name}"
    text = f"event {ev.reason} on {target}"
    if ev.message:
        text += f": {_clip(ev.message, 120)}"
    return Evidence(event_id=ev.id, schema="k8s_event.v1", time=ev.time, text=text)


def device_taint(
    event_id: str, ev_time: datetime, slice_name: str, device: str, where: str, taints: str
) -> Evidence:
    """A ResourceSlice lists a device with a NoSchedule/NoExecute taint (the driver's,
    or a DeviceTaintRule's). ``event_id`` names the record and the device: one record
    may taint several devices, and an incident keeps one item per id."""
    text = f"ResourceSlice {slice_name}: device {device} ({where}) tainted {taints}"
    return Evidence(event_id=event_id, schema="resource_slice.v1", time=ev_time, text=text)


def device_gone(
    event_id: str, ev_time: datetime, slice_name: str, device: str, where: str, deleted: bool
) -> Evidence:
    """A device left its node's ResourceSlices (its slice deleted, or republished
    without it)."""
    if deleted:
        text = f"ResourceSlice {slice_name} deleted, with device {device} ({where})"
    else:
        text = f"ResourceSlice {slice_name} no longer lists device {device} ({where})"
    return Evidence(event_id=event_id, schema="resource_slice.v1", time=ev_time, text=text)


def device_unhealthy(
    ev: PodEvent, container: str, resource: str, device: str, event_id: str
) -> Evidence:
    """A container's ``allocatedResourcesStatus`` reports one of its devices Unhealthy."""
    text = (
        f"pod {ev.namespace}/{ev.name}/{container}: {resource} device "
        f"{_clip(device, 100)} Unhealthy (allocatedResourcesStatus)"
    )
    return Evidence(event_id=event_id, schema="pod.v1", time=ev.time, text=text)


def pod_disruption(ev: PodEvent, cond: PodCondition) -> Evidence:
    """The pod's ``DisruptionTarget`` condition: who is deleting it, and why."""
    text = f"pod {ev.namespace}/{ev.name} {ev.phase or 'Running'}: {cond.reason}"
    if cond.message:
        text += f": {_clip(cond.message, 100)}"
    return Evidence(event_id=ev.id, schema="pod.v1", time=ev.time, text=text)
