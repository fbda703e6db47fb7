"""XID events as the real sources make them, for the core's tests.

``kmsg`` runs a kernel-log line through the real parser (``connectors.xid.lines``), so
a test states the line exactly as the driver prints it (and as public bug reports
quote it); ``dcgm`` builds what ``connectors.dcgm.diff`` sends for a grown
``DCGM_EXP_XID_ERRORS_COUNT`` (the code and the GPU, no driver text).
"""

from __future__ import annotations

from connectors.xid.lines import XidFields, parse_message
from gputriage.demo import events as build
from schemas.events import XidEvent
from tests.factories import Cluster, at

GSP = (
    "NVRM: Xid (PCI:0000:cb:00): 119, pid=1797828, name=pt_main_thread, Timeout after 6s of "
    "waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) "
    "(0x20802a02 0x8)."
)
"""The GSP RPC timeout line (``open-gpu-kernel-modules`` #1045 quotes this shape)."""
WARP = (
    "NVRM: Xid (PCI:0000:4c:00): 13, pid=9151, name=python3, Graphics SM Warp Exception on "
    "(GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"
)
"""An XID 13 line as the driver logs it (tests/data/kmsg)."""


def kmsg(c: Cluster, node: str, t: float, line: str, uuid: str = "") -> XidEvent:
    """The ``NVRM: Xid ...`` ``line`` logged ``t`` seconds after ``T0`` on ``node``."""
    fields = parse_message(line)
    assert isinstance(fields, XidFields), fields
    ev = build.xid_event(
        id=f"kmsg:{node}:boot-1:{len(c.events)}",
        cluster=c.name,
        time=at(t),
        node=node,
        code=fields.code,
        bus=fields.pci_bus_id,
        uuid=uuid,
        pid=fields.pid,
        process=fields.process,
        message=fields.message,
        recovery_action=fields.recovery_action,
        caused_by=fields.caused_by,
    )
    c.events.append(ev)
    return ev


def dcgm(
    c: Cluster, node: str, t: float, code: int, uuid: str, bus: str = "", was: int = 0
) -> XidEvent:
    """dcgm-exporter's XID count for ``code`` on GPU ``uuid`` rose by one at scrape ``t``."""
    message = (
        f'dcgm-exporter: DCGM_EXP_XID_ERRORS_COUNT{{xid="{code}"}} rose {was} -> {was + 1}: '
        "occurrence 1 of 1"
    )
    ev = build.xid_event(
        id=f"dcgm:{node}:{uuid}:{code}:{len(c.events)}",
        cluster=c.name,
        time=at(t),
        node=node,
        code=code,
        bus=bus,
        uuid=uuid,
        message=message,
        source="dcgm",
    )
    c.events.append(ev)
    return ev
