"""PCI bus ids: every source's spelling of one GPU must meet in one canonical form."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schemas.pci import canonical_bus_id


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("PCI:0000:9b:00", "0000:9b:00.0"),  # kernel XID line
        ("0000:03:00", "0000:03:00.0"),  # legacy XID line, no PCI: prefix
        ("00000000:9B:00.0", "0000:9b:00.0"),  # NVML
        ("0000:9b:00.0", "0000:9b:00.0"),  # dcgm-exporter
        ("PCI:0019:01:00", "0019:01:00.0"),  # 32-bit domain
        ("10000:01:00.0", "10000:01:00.0"),  # domain above 0xffff keeps its digits
        ("pci:0000:3B:00", "0000:3b:00.0"),  # any case of the prefix
        ("  0000:3b:00.0\n", "0000:3b:00.0"),  # surrounding whitespace
        ("3b:00", "0000:3b:00.0"),  # no domain means domain 0
        ("0:3:0.1", "0000:03:00.1"),  # short fields are padded
    ],
)
def test_common_spellings(raw: str, canonical: str) -> None:
    assert canonical_bus_id(raw) == canonical


@pytest.mark.parametrize(
    "raw", ["", "garbage", "0000:9b", "0000:9b:00.8", "0000:9b:00:00", "PCI:", "0000:xyz:00"]
)
def test_non_bus_ids_give_empty(raw: str) -> None:
    assert canonical_bus_id(raw) == ""


@given(
    domain=st.integers(0, 0xFFFFFFFF),
    bus=st.integers(0, 0xFF),
    dev=st.integers(0, 0xFF),
    fn=st.integers(0, 7),
    upper=st.booleans(),
    prefix=st.booleans(),
)
def test_canonical_form_is_a_fixed_point(
    *, domain: int, bus: int, dev: int, fn: int, upper: bool, prefix: bool
) -> None:
    raw = f"{domain:08x}:{bus:02x}:{dev:02x}.{fn}"
    raw = raw.upper() if upper else raw
    raw = f"PCI:{raw}" if prefix else raw
    once = canonical_bus_id(raw)
    assert once == f"{domain:04x}:{bus:02x}:{dev:02x}.{fn}"
    assert canonical_bus_id(once) == once
