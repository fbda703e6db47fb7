""" "GPU has fallen off the bus" without an Xid number: XID 79 all the same.

The driver reports a GPU that stopped answering on PCIe in three ways, and only one carries
the XID number: the Xid line, the one-line ``NVRM: GPU <bus id>: GPU has fallen off the
bus.`` and the three-line probe message ``NVRM: The NVIDIA GPU <bus id> ... fallen off the
bus and is not responding to commands.`` (gpud and NVSentinel treat them as fatal too). The
rule: an ``NVRM:`` message that says a **GPU** has fallen off the bus is XID 79 on the GPU
it names; none, or a redacted one, is an unknown GPU, still XID 79.

Traps: the Xid line and the fall-off line are one fault, counted once by the core's
episodes; the probe message arrives whole from kmsg, the journal and rsyslog but split by
``dmesg`` and old syslogs (:mod:`connectors.xid.reader` joins it); ``BR04 has fallen off
the bus`` is a PCIe bridge, and a mention without ``NVRM:`` is not the driver's. The driver
sources, by shape: docs/connectors.md, design notes.
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
