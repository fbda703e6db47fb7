"""Incident -> Kubernetes writes, pure: which Events, with which words, and which nodes to mark.

Pod Events follow the contract Flyte's ``gpufault`` package reads (flyteorg/flyte PR #7879;
tests/data/writeback/messages.md): reason ``GPUXidError``/``GPUSXidError``, a note
``[gpu-health] [LABEL] <sentence> k=v...`` with the keys in a fixed order, each only when
known. Causes without an XID get reasons of our own (:data:`REASONS`), which Flyte ignores.

Traps: the note carries no variable text (no pod, no time, no incident id), so a repeat
renders byte for byte the same note and a newer revision only bumps the Event's ``series``
(events.k8s.io makes ``note`` and ``reason`` immutable: a changed note means a new Event).
A ``candidate`` pod (a shared GPU) may not be the one hit: its label is ``WARN``, which
Flyte only attaches, never a ``CRITICAL`` that would turn its own bug into a retryable
system failure. The Event name is a hash of (incident id, object): a restart finds it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Final, Literal

import msgspec

from schemas.incidents import GpuRef, Incident, PodInfo
from schemas.pci import canonical_bus_id
from schemas.xid_catalog import load_catalog

PREFIX: Final = "[gpu-health]"
XID_REASON: Final = "GPUXidError"
SXID_REASON: Final = "GPUSXidError"
CONTROLLER: Final = "gputriage.io/writeback"
MANAGED_BY: Final = "gputriage-writeback"
"""The label on every Event we write and the server-side-apply field manager."""
FIELD_MANAGER: Final = MANAGED_BY
INCIDENT_ANNOTATION: Final = "gputriage.io/incident"
REVISION_ANNOTATION: Final = "gputriage.io/revision"
MANAGED_LABEL: Final = "app.kubernetes.io/managed-by"
NOTE_LIMIT: Final = 1024
NODE_EVENT_NAMESPACE: Final = "default"
"""Where the kubelet writes its Node Events; ``kubectl describe node`` finds them there."""
TAINT_KEY: Final = "gputriage.io/gpu-fault"
CLEAR_REASON: Final = "NoOpenIncident"

FAULT_ACTION: Final = "GPUFault"
RESOLVED_ACTION: Final = "GPUFaultResolved"
NODE_ACTION: Final = "GPUNodeIncident"

Label = Literal["CRITICAL", "USER", "WARN"]
Kind = Literal["Pod", "Node"]

POD_ROLES: Final = frozenset(
    ("failed", "evicted", "restarting", "oom_killed", "bound", "candidate", "")
)
"""Pods that get an Event: those the evidence names, the pod bound to the GPU, and the
candidates of a shared GPU (said so in the note). ``running`` pods are only at risk."""

REASONS: Final[Mapping[str, str]] = {
    "device_unhealthy_eviction": "GPUDeviceUnhealthy",
    "gpu_degraded": "GPUDeviceUnhealthy",
    "gpu_fault_crash_loop": "GPUDeviceUnhealthy",
    "xid_repeat": "GPUDeviceUnhealthy",
    "gpu_app_fault": "GPUApplicationFault",
    "nvlink_domain_fault": "GPUNVLinkDomainFault",
    "gpu_node_not_ready": "GPUNodeNotReady",
    "monitoring_gap": "GPUMonitoringGap",
    "remediation_stalled": "GPURemediationStalled",
}
"""Our reason for an incident that names no XID/SXid (an XID, when named, always wins)."""

POD_EVENT_TYPES: Final = frozenset(
    (
        "device_unhealthy_eviction",
        "gpu_degraded",
        "gpu_fault_crash_loop",
        "xid_repeat",
        "gpu_app_fault",
        "nvlink_domain_fault",
    )
)
"""Incident types whose pods get an Event: those that say a GPU fault hit the pod."""
NODE_EVENT_TYPES: Final = frozenset(
    (
        "device_unhealthy_eviction",
        "gpu_degraded",
        "gpu_fault_crash_loop",
        "xid_repeat",
        "nvlink_domain_fault",
        "gpu_node_not_ready",
        "monitoring_gap",
        "remediation_stalled",
    )
)
"""Node-level incidents: an Event on the node (``regarding`` the Node), and one when resolved."""


class EventWrite(msgspec.Struct, frozen=True, kw_only=True):
    """One Event to create (or to bump, when it exists at an older revision)."""

    name: str
    namespace: str
    kind: Kind
    object_name: str
    """The pod's or node's name (``regarding``)."""
    object_namespace: str
    """The pod's namespace; ``""`` for a Node."""
    reason: str
    note: str
    type: Literal["Warning", "Normal"]
    action: str
    incident_id: str
    revision: int
    not_after: datetime | None = None
    """A pod created after this (the incident's last evidence) is a namesake recreated
    since (a StatefulSet's, a training job's): it gets no Event."""


def event_name(incident_id: str, kind: str, namespace: str, name: str, phase: str = "") -> str:
    """``<object>.<16 hex>``: deterministic per (incident, object[, phase]), a valid
    DNS-1123 subdomain (a long name cut where it leaves ``-`` or ``.`` is trimmed)."""
    digest = hashlib.sha256(
        "\0".join((incident_id, kind, namespace, name, phase)).encode()
    ).hexdigest()[:16]
    return f"{name[: 253 - 17].rstrip('-.')}.{digest}"


def _codes(value: str) -> list[int]:
    return [int(c) for c in re.findall(r"\d+", value)]


def named_xid(incident: Incident) -> int | None:
    """The XID the incident is about: ``xid``, else the first fatal of ``xids``, else the first."""
    single = _codes(incident.attributes.get("xid", ""))
    if single:
        return single[0]
    codes = _codes(incident.attributes.get("xids", ""))
    catalog = load_catalog()
    fatal = [c for c in codes if c in catalog and catalog[c].xid_class == "fatal"]
    chosen = fatal or codes
    return chosen[0] if chosen else None


def named_sxid(incident: Incident) -> int | None:
    """The SXid (NVSwitch) the incident names, if any (``sxid`` / ``sxids`` attributes)."""
    codes = _codes(incident.attributes.get("sxid", "") or incident.attributes.get("sxids", ""))
    return codes[0] if codes else None


FLYTE_USER_XIDS: Final = frozenset((13, 31, 43, 45))
"""XIDs Flyte's ``gpufault`` calls the workload's own (FLYTE GF/xid.go ``userXids``)."""
FLYTE_CRITICAL_XIDS: Final = frozenset((48, 62, 63, 64, 74, 79, 94, 95, 109, 119, 120, 140))
"""XIDs Flyte's ``gpufault`` calls critical (FLYTE GF/xid.go ``criticalXids``); every other
XID is ``warn`` there, and every SXid ``critical``."""


def label_of(incident: Incident, xid: int | None, sxid: int | None = None) -> Label:
    """The ``[LABEL]``/``severity=`` Flyte would give the code itself (its own table, so the
    consumer and we agree on what is the user's fault); without a code, CRITICAL for a page,
    else WARN. Our catalog still names the code in the sentence."""
    if xid is not None:
        if xid in FLYTE_USER_XIDS:
            return "USER"
        return "CRITICAL" if xid in FLYTE_CRITICAL_XIDS else "WARN"
    if sxid is not None:
        return "CRITICAL"
    return "CRITICAL" if incident.severity == "page" else "WARN"


def _gpu(incident: Incident) -> GpuRef | None:
    """The one GPU the incident names; with several, none (a pod's own GPU is not known)."""
    return incident.gpus[0] if len(incident.gpus) == 1 else None


def _gpu_phrase(gpu: GpuRef | None, pci: str) -> str:
    if gpu is None:
        return ""
    if gpu.index is not None and gpu.index >= 0 and gpu.uuid:
        return f" on GPU {gpu.index} {gpu.uuid}"
    if gpu.uuid:
        return f" on GPU {gpu.uuid}"
    if gpu.index is not None and gpu.index >= 0:
        return f" on GPU {gpu.index}"
    return f" on GPU at PCI {pci}" if pci else ""


def _safe(value: str) -> str:
    """A tail value: whitespace and ``=`` become ``_`` (one token for the k=v parse)."""
    return re.sub(r"[\s=]", "_", value)


def tail(
    *,
    xid: int | None = None,
    sxid: int | None = None,
    label: Label,
    gpu: GpuRef | None = None,
    pci: str = "",
    node: str = "",
    pid: int | None = None,
    process: str = "",
) -> str:
    """The ``k=v`` tail in the contract's order: xid|sxid, severity, gpu_uuid, gpu_index, pci,
    node, pid, process; each only when known."""
    parts: list[str] = []
    if xid is not None:
        parts.append(f"xid={xid}")
    elif sxid is not None:
        parts.append(f"sxid={sxid}")
    parts.append(f"severity={label.lower()}")
    if gpu is not None and gpu.uuid:
        parts.append(f"gpu_uuid={_safe(gpu.uuid)}")
    if gpu is not None and gpu.index is not None and gpu.index >= 0:
        parts.append(f"gpu_index={gpu.index}")
    if pci:
        parts.append(f"pci={pci}")
    if node:
        parts.append(f"node={_safe(node)}")
    if pid is not None and pid > 0:
        parts.append(f"pid={pid}")
    if process:
        parts.append(f"process={_safe(process)}")
    return " ".join(parts)


def _fit(sentence: str, rest: str) -> str:
    """Shorten the free sentence (never the tail) so the note fits the API's 1024 *bytes*
    (a summary may carry non-ASCII pod or termination text); cut with ASCII ``...``."""
    room = NOTE_LIMIT - len(rest.encode()) - 1
    encoded = sentence.encode()
    if len(encoded) > room:
        cut = encoded[: max(room - 3, 0)].decode(errors="ignore")  # never half a character
        sentence = cut.rstrip() + "..."
    return f"{sentence} {rest}"


def fault_note(incident: Incident, *, candidate: bool = False) -> tuple[str, str]:
    """(reason, note) of the incident, as a pod would carry it (``candidate``: a shared GPU)."""
    xid, sxid = named_xid(incident), named_sxid(incident)
    gpu = _gpu(incident)
    pci = canonical_bus_id(gpu.pci_bus_id) if gpu is not None else ""
    label: Label = "WARN" if candidate else label_of(incident, xid, sxid)
    if xid is not None:
        name = (load_catalog().get(xid) or _Unnamed()).mnemonic or f"Xid {xid}"
        sentence = f"Xid {xid} ({name}){_gpu_phrase(gpu, pci)}."
        reason = XID_REASON
    elif sxid is not None:
        sentence = f"SXid {sxid} on NVSwitch {pci or 'unknown'}."
        reason = SXID_REASON
        gpu = None
    else:
        sentence = incident.summary.strip().rstrip(".") + "."
        reason = REASONS.get(incident.type, "GPUIncident")
    if candidate:
        sentence += " This pod shared the GPU: it may not be the one affected."
    head = f"{PREFIX} [{label}]"
    rest = tail(xid=xid, sxid=sxid, label=label, gpu=gpu, pci=pci, node=incident.node)
    return reason, _fit(f"{head} {sentence}", rest)


class _Unnamed:
    mnemonic = ""


def _pods(incident: Incident) -> list[PodInfo]:
    seen: dict[tuple[str, str], PodInfo] = {}
    for pod in incident.pods:
        if pod.role in POD_ROLES and pod.namespace and pod.name:
            seen.setdefault((pod.namespace, pod.name), pod)
    return list(seen.values())


def pod_events(incident: Incident) -> list[EventWrite]:
    """One Event per pod the incident names (empty for types that are not a pod's GPU fault)."""
    if incident.type not in POD_EVENT_TYPES:
        return []
    out = []
    for pod in _pods(incident):
        reason, note = fault_note(incident, candidate=pod.role == "candidate")
        out.append(
            EventWrite(
                name=event_name(incident.id, "Pod", pod.namespace, pod.name),
                namespace=pod.namespace,
                kind="Pod",
                object_name=pod.name,
                object_namespace=pod.namespace,
                reason=reason,
                note=note,
                type="Warning",
                action=FAULT_ACTION,
                incident_id=incident.id,
                revision=incident.revision,
                not_after=incident.last_seen,
            )
        )
    return out


def node_event(incident: Incident) -> EventWrite | None:
    """The Event on the incident's node: the fault while open, a Normal one once resolved."""
    if incident.type not in NODE_EVENT_TYPES or not incident.node:
        return None
    resolved = incident.status == "resolved"
    if resolved:
        reason, label = "GPUIncidentResolved", "WARN"
        note = _fit(
            f"{PREFIX} [{label}] Resolved: {incident.summary.strip().rstrip('.')}.",
            f"severity={label.lower()} node={_safe(incident.node)}",
        )
    else:
        reason, note = fault_note(incident)
    return EventWrite(
        name=event_name(incident.id, "Node", "", incident.node, "resolved" if resolved else ""),
        namespace=NODE_EVENT_NAMESPACE,
        kind="Node",
        object_name=incident.node,
        object_namespace="",
        reason=reason,
        note=note,
        type="Normal" if resolved else "Warning",
        action=RESOLVED_ACTION if resolved else NODE_ACTION,
        incident_id=incident.id,
        revision=incident.revision,
    )


def marking(incident: Incident, hardware_types: Iterable[str]) -> bool:
    """Whether the incident marks its node: open, page, a hardware type, a node."""
    return (
        incident.status != "resolved"
        and incident.severity == "page"
        and bool(incident.node)
        and incident.type in set(hardware_types)
    )


def desired_marks(
    incidents: Iterable[Incident], hardware_types: Iterable[str]
) -> dict[str, list[Incident]]:
    """Node -> the open page-level hardware incidents on it (oldest first), from the latest
    revision of each incident."""
    kinds = tuple(hardware_types)
    marks: dict[str, list[Incident]] = {}
    for incident in incidents:
        if marking(incident, kinds):
            marks.setdefault(incident.node, []).append(incident)
    for found in marks.values():
        found.sort(key=lambda i: (i.first_seen, i.id))
    return marks


def condition_message(incidents: list[Incident]) -> str:
    """The marked condition's message: the oldest incident's summary, and how many more."""
    first = incidents[0]
    more = f" (+{len(incidents) - 1} more)" if len(incidents) > 1 else ""
    return f"{first.type} {first.id}: {first.summary.strip()}{more}"[:NOTE_LIMIT]


def condition_reason(incidents: list[Incident]) -> str:
    """``GPUXidError``-like reason of the oldest incident (a CamelCase word, as the API wants)."""
    first = incidents[0]
    xid = named_xid(first)
    if xid is not None:
        return f"GPUXid{xid}"
    return REASONS.get(first.type, "GPUIncident")
