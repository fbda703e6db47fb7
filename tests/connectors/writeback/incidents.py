"""Incident revisions for the write-back tests (an XID 79 eviction chain on one node), and
Flyte's parse rule to read our notes back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from schemas.incidents import GpuRef, Incident, PodInfo

T0 = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)
UUID = "GPU-3f8a1c52-7d0e-4b9a-8c61-0e2f5d7b9a14"


def eviction(
    node: str = "gpu-1",
    *,
    id: str = "",
    revision: int = 1,
    status: str = "open",
    pods: tuple[PodInfo, ...] = (
        PodInfo(namespace="ml", name="train-0", role="failed"),
        PodInfo(namespace="ml", name="train-1", role="evicted"),
    ),
    minutes: float = 0,
    **changes: Any,
) -> Incident:
    """A ``device_unhealthy_eviction`` page naming XID 79 on GPU 2 of ``node``."""
    incident = Incident(
        id=id or f"c1/{node}/device_unhealthy_eviction/1",
        type="device_unhealthy_eviction",
        status=status,  # type: ignore[arg-type]
        revision=revision,
        severity="page",
        cluster="c1",
        node=node,
        gpus=(GpuRef(uuid=UUID, pci_bus_id="0000:53:00.0", index=2),),
        pods=pods,
        first_seen=T0 + timedelta(minutes=minutes),
        last_seen=T0 + timedelta(minutes=minutes, seconds=30),
        resolved_at=T0 + timedelta(hours=1) if status == "resolved" else None,
        summary=f"GPU fell off the bus on {node}; 2 pods failed",
        attributes={"xids": "79"},
    )
    return msgspec.structs.replace(incident, **changes) if changes else incident


def resolved(incident: Incident) -> Incident:
    """The incident's resolving revision."""
    return msgspec.structs.replace(
        incident,
        status="resolved",
        revision=incident.revision + 1,
        resolved_at=incident.last_seen + timedelta(minutes=30),
    )


def flyte_parse(note: str) -> dict[str, str] | None:
    """Flyte's parse rule (FLYTE GF/message.go:113-183, as messages.md states it): the prefix
    anywhere, then ` xid=` else ` sxid=`, the rest split on whitespace into k=v."""
    if "[gpu-health]" not in note:
        return None
    at = note.find(" xid=")
    at = at if at >= 0 else note.find(" sxid=")
    if at < 0:
        return None
    pairs = dict(part.split("=", 1) for part in note[at + 1 :].split() if "=" in part)
    key = "xid" if "xid" in pairs else "sxid"
    return pairs if pairs.get(key, "").isdigit() else None
