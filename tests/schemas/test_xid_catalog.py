"""The packaged XID catalog (``schemas/xid_catalog.toml``) as data.

The design's code -> class table is restated here, independently of the catalog, as the requirement
the catalog must meet.
"""

from __future__ import annotations

import tomllib
from importlib import resources
from typing import Any

import pytest

from gputriage.settings import SettingsError
from schemas.xid_catalog import XidInfo, load_catalog
from tests.cli_helpers import load_tables

# The design's code -> class table. Where it says "app / PCIe" (32) or "app / fatal" (68, 69)
# the first reading is used for 32 and 68; 69 is fatal.
DESIGN_CLASSES: dict[int, str] = {
    13: "app",
    31: "app",
    32: "app",
    43: "app",
    45: "follow-up",
    48: "fatal",
    61: "fatal",
    62: "fatal",
    63: "info",
    64: "fatal",
    68: "app",
    69: "fatal",
    74: "fatal",
    79: "fatal",
    92: "info",
    94: "app",
    95: "fatal",
    109: "fatal",
    119: "fatal",
    120: "fatal",
    140: "fatal",
    143: "fatal",
    **dict.fromkeys(range(144, 151), "fatal"),
    154: "follow-up",
}

CATALOG_CLASSES = {"fatal", "app", "follow-up", "info"}
ENTRY_KEYS = {"code", "mnemonic", "action", "class", "severity"}
OPTIONAL_KEYS = {"line_severity"}
"""Only where it applies: the NVLink5 codes 144-150, whose lines say Fatal / Nonfatal."""


def _raw_entries() -> list[dict[str, Any]]:
    """The catalog's entries as the TOML file states them, duplicates and order kept."""
    text = resources.files("schemas").joinpath("xid_catalog.toml").read_text(encoding="utf-8")
    entries = tomllib.loads(text)["xid"]
    assert isinstance(entries, list)
    return entries


@pytest.fixture(scope="module")
def catalog() -> dict[int, XidInfo]:
    return load_catalog()


@pytest.mark.parametrize(("code", "xid_class"), sorted(DESIGN_CLASSES.items()))
def test_design_code_present_with_design_class(
    catalog: dict[int, XidInfo], code: int, xid_class: str
) -> None:
    assert code in catalog, f"XID {code} (DESIGN §3) missing from the catalog"
    assert catalog[code].xid_class == xid_class


def test_catalog_covers_nvidia_range(catalog: dict[int, XidInfo]) -> None:
    missing = sorted(set(range(1, 161)) - set(catalog))
    assert not missing, f"codes missing from the catalog: {missing}"


def test_every_entry_is_complete_and_valid(catalog: dict[int, XidInfo]) -> None:
    for code, info in catalog.items():
        assert info.mnemonic.strip(), f"XID {code}: empty mnemonic"
        assert info.action.strip(), f"XID {code}: empty action"
        assert info.xid_class in CATALOG_CLASSES, f"XID {code}: no class (it reads unknown)"


def test_entries_have_the_expected_shape() -> None:
    for entry in _raw_entries():
        keys = set(entry) - OPTIONAL_KEYS
        assert keys == ENTRY_KEYS, f"entry {entry.get('code')}: keys {sorted(entry)}"
    flagged = [e["code"] for e in _raw_entries() if e.get("line_severity")]
    assert flagged == list(range(144, 151))


def test_codes_are_unique_and_sorted() -> None:
    codes = [entry["code"] for entry in _raw_entries()]
    duplicates = sorted({code for code in codes if codes.count(code) > 1})
    assert not duplicates, f"duplicate codes: {duplicates}"
    assert codes == sorted(codes)
    assert all(isinstance(code, int) and code > 0 for code in codes)


def test_default_config_carries_catalog_classes() -> None:
    policy = load_tables({}).core_config().xid
    for code, xid_class in DESIGN_CLASSES.items():
        assert policy[code].xid_class == xid_class


def test_override_moves_code_to_another_class() -> None:
    assert load_tables({}).core_config().xid[13].xid_class == "app"
    policy = load_tables({"xid": {"fatal": [13]}}).core_config().xid
    assert policy[13].xid_class == "fatal"
    assert policy[13].mnemonic == load_catalog()[13].mnemonic
    assert policy[31].xid_class == "app"


def test_unknown_class_in_override_is_rejected() -> None:
    with pytest.raises(SettingsError):
        load_tables({"xid": {"bogus": [1]}})
