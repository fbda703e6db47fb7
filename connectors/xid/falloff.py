""" "GPU has fallen off the bus" without an Xid number: XID 79 all the same.

The driver reports a GPU that stopped answering on PCIe (every register reads
``0xFFFFFFFF``) in three ways, and only the first carries the XID number
(NVIDIA/open-gpu-kernel-modules, ``osHandleGpuLost`` in
``src/nvidia/arch/nvalloc/unix/src/osinit.c`` and ``RmInitAdapter``'s probe in
``src/nvidia/arch/nvalloc/unix/src/osapi.c``)::

    NVRM: Xid (PCI:0000:91:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
    NVRM: GPU 0000:91:00.0: GPU has fallen off the bus.          NV_DEV_PRINTF, same instant
    NVRM: The NVIDIA GPU 0000:b3:00.0                            one printk, three lines,
    NVRM: (PCI ID: 10de:26b5) installed in this system has       logged when the GPU is
    NVRM: fallen off the bus and is not responding to commands.  probed (no Xid at all)

Older drivers split the probe message differently (``... 0000:01:00.0 (PCI ID:
10de:1e07) installed in this`` / ``NVRM: system has fallen off the bus ...``) and
the oldest said ``NVRM: GPU at 0000:01:00.0 has fallen off the bus.``. gpud
(``components/accelerator/nvidia/xid/kmsg.go``) maps both modern shapes to XID 79;
NVSentinel's syslog monitor (``pkg/gpufallen``, NVIDIA/NVSentinel#155, #195) raises
a fatal ``GPU_FALLEN_OFF_BUS`` event for the probe message.

The rule here: an ``NVRM:`` message that says a **GPU** has ``fallen off the bus`` is
XID 79 on the GPU it names. The bus id is the one written after ``GPU`` (``GPU
0000:29:00.0``, ``GPU at PCI:0000:05:00``, ``The NVIDIA GPU 0000:b3:00.0``); none, or
one the reporter redacted (``GPU 0000:XX:00.0``, ``The NVIDIA GPU ...``), is an
unknown GPU (empty bus id), still an XID 79.

Traps:

* **One fault, several lines.** The Xid line and the ``NV_DEV_PRINTF`` line come
  microseconds apart; they are one fault, and the core's episodes (one code, one GPU,
  within ``xid_episode_gap_seconds``) count them once. Nothing is dropped here.
* **The multi-line message arrives whole** from ``/dev/kmsg`` (``\\x0a``), the journal
  (newlines in ``MESSAGE``) and rsyslog (``#012``), but split into lines by ``dmesg``
  (continuations indented, no time) and by syslog files of older kernels (each line
  with its own prefix). Its last line alone names no GPU; :mod:`connectors.xid.reader`
  joins it to the header line before it. Alone it is still XID 79 of an unknown GPU:
  the tail ``fallen off the bus and is not responding to commands`` is the driver's.
* **Not every mention is a GPU.** The driver's ``*** BR04 has fallen off the bus``
  is a PCIe bridge chip; an agent logging about the fault (gpud, a forum quote) has no
  ``NVRM:``. Neither is an XID.
"""

from __future__ import annotations

import re
from typing import Final

from schemas.pci import canonical_bus_id

PHRASE: Final = "fallen off the bus"
"""Every fall-off message says this, in every shape and driver version."""
MARKER: Final = PHRASE.encode()
""":data:`PHRASE` as bytes: with ``b"Xid"``, the parser's fast path (a longer needle is
also the faster substring search)."""
HEADER_MARKER: Final = b"NVRM: The NVIDIA GPU"
"""The first line of the probe message (and of other probe messages: never a record)."""
_TAIL: Final = "fallen off the bus and is not responding to commands"
"""The probe message's last line: it names no GPU, and is the driver's own words."""
BUS_PATTERN: Final = r"(?P<bus>(?:[0-9a-fA-F]{1,8}:)?[0-9a-fA-F]{1,2}:[0-9a-fA-F]{1,2}(?:\.[0-7])?)"
"""A PCI bus id as the driver prints it (domain optional, function optional)."""
_GPU_BUS_RE: Final = re.compile(r"\bGPU(?: at)? (?:PCI:)?" + BUS_PATTERN + r"(?![0-9a-zA-Z])")
"""``GPU 0000:29:00.0``, ``GPU at 0000:01:00.0``, ``GPU at PCI:0000:05:00``."""
_CONTINUATION_RE: Final = re.compile(r"^\s*NVRM:|\s+NVRM:")
"""``NVRM:`` at the start of the message and of every continuation line (rsyslog writes
a newline as ``#012``; kmsg's newlines are spaces by the time the message gets here)."""
_NOT_A_GPU: Final = re.compile(r"\bBR0\d\b")
"""PCIe bridge chips of old multi-GPU boards (``hwbc.c``): not a GPU of their own."""


def fall_off(message: str) -> tuple[str, str] | None:
    """``(canonical bus id or "", the message from its first NVRM:)`` of a fall-off
    message, ``None`` for any other text. The caller has ruled out ``NVRM: Xid`` lines."""
    at = message.find(PHRASE)
    if at < 0:
        return None
    start = message.find("NVRM:")
    if start < 0 or start > at:
        return None
    said = message[start:at]
    if _NOT_A_GPU.search(said):
        return None
    if "GPU" not in said and not message.startswith(_TAIL, at):
        return None
    found = _GPU_BUS_RE.search(said)
    bus = canonical_bus_id(found["bus"]) if found is not None else ""
    return bus, _text(message[start:])


def _text(message: str) -> str:
    """The message as one line, each continuation's ``NVRM:`` dropped: what a person reads."""
    return " ".join(_CONTINUATION_RE.sub(" ", message.replace("#012", "\n")).split())
