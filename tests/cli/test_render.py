"""Table rendering: UTC times, one line per cell, deterministic order."""

from __future__ import annotations

from datetime import timedelta

import msgspec

from gputriage import render
from schemas.incidents import GpuRef, PodInfo
from tests.sample_records import CEST, INCIDENT, T0


def test_times_are_utc_whatever_the_source_offset() -> None:
    assert render.format_time(T0.astimezone(CEST)) == "2024-05-01T12:00:00Z"
    assert render.format_time(T0 + timedelta(microseconds=5)) == "2024-05-01T12:00:00.000005Z"
    assert render.format_time(None) == "<none>"


def test_cells_stay_on_one_line() -> None:
    assert render.one_line("a\nb\t c  ") == "a b c"


def test_long_lists_are_shortened() -> None:
    assert render.listing([]) == "<none>"
    assert render.listing(["a", "b"]) == "a,b"
    assert render.listing(["a", "b", "c", "d"]) == "a,b,+2"


def test_gpu_labels_prefer_the_bus_id() -> None:
    assert render.gpu_label(GpuRef(uuid="GPU-1", pci_bus_id="0000:9b:00.0")) == "0000:9b:00.0"
    assert render.gpu_label(GpuRef(uuid="GPU-1")) == "GPU-1"
    assert render.gpu_label(GpuRef(index=2)) == "#2"


def test_table_columns_align_and_evidence_follows_its_row() -> None:
    other = msgspec.structs.replace(
        INCIDENT,
        id="inc-2",
        type="host_oom_kill",
        summary="multi\nline",
        pods=(PodInfo(namespace="a-long-namespace", name="p"),),
    )
    text = render.table([INCIDENT, other])
    lines = text.splitlines()
    header, *body = lines
    assert header.startswith("ID")
    assert header.endswith("SUMMARY")
    first, second = (line for line in body if not line.startswith(" "))
    assert first.index("ml/trainer-0") == header.index("PODS")
    assert second.index("a-long-namespace/p") == header.index("PODS")
    assert second.endswith("multi line")
    assert body[1].startswith("    2024-05-01T12:00:00Z  xid.v1  Xid 79")
    assert "    ... and 4 more evidence events" in lines
    assert text.endswith("\n")
    assert render.table([]) == ""


def test_latest_revision_of_each_incident_in_display_order() -> None:
    rev1 = msgspec.structs.replace(INCIDENT, revision=1, status="open")
    later = msgspec.structs.replace(INCIDENT, id="inc-later", first_seen=T0 + timedelta(hours=1))
    latest = render.latest_revisions([rev1, later, INCIDENT])
    assert sorted(i.revision for i in latest) == [3, 3]
    assert [i.id for i in render.display_order(latest)] == [INCIDENT.id, "inc-later"]
