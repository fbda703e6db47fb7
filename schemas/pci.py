"""PCI bus id normalisation.

The same GPU is ``0000:9b:00`` in a kernel XID line, ``00000000:9B:00.0`` in
NVML and ``0000:9b:00.0`` in dcgm-exporter. Joining sources on the bus id only
works if every source writes one canonical form: lower-case hex, a domain of at
least four digits (some hosts have 32-bit domains, ``0019`` or ``10000``),
and an explicit function number.
"""

from __future__ import annotations

import re

_BUS_ID = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,8}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<dev>[0-9a-fA-F]{1,2})(?:\.(?P<fn>[0-7]))?$"
)


def canonical_bus_id(raw: str) -> str:
    """Return ``dddd:bb:dd.f`` for any common spelling, or ``""`` if ``raw`` is not one.

    A missing domain means domain 0; a missing function means function 0 (the
    kernel's XID lines omit it for GPUs, which are always function 0).
    """
    text = raw.strip()
    if text[:4].upper() == "PCI:":
        text = text[4:]
    match = _BUS_ID.match(text)
    if match is None:
        return ""
    domain = int(match["domain"] or "0", 16)
    bus = int(match["bus"], 16)
    dev = int(match["dev"], 16)
    fn = int(match["fn"] or "0")
    return f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"
