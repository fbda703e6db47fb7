"""The pure planner: Flyte's gpufault note, reasons, roles, names, desired marks, the breaker.

The expected notes are Flyte's own rendered test lines (tests/data/writeback/messages.md,
FLYTE GF/message_test.go), so a drift from the contract fails here.
"""

from __future__ import annotations

import json
import re

import msgspec
import pytest

from connectors.writeback.breaker import judge, pool_allowance
from connectors.writeback.plan import (
    NOTE_LIMIT,
    XID_REASON,
    desired_marks,
    event_name,
    fault_note,
    node_event,
    pod_events,
    tail,
)
from connectors.writeback.settings import HARDWARE_TYPES
from schemas.incidents import GpuRef, PodInfo
from tests.connectors.writeback.incidents import eviction, flyte_parse, resolved
from tests.paths import DATA

WRITEBACK = DATA / "writeback"


def test_the_tail_keeps_flytes_order_and_leaves_out_what_is_unknown() -> None:
    """FLYTE GF/message_test.go:26-27 and :46-47, rendered by our tail."""
    gpu = GpuRef(uuid="GPU-6f3c1234-5678-90ab-cdef-1234567890ab", index=0)
    assert tail(
        xid=79,
        label="CRITICAL",
        gpu=gpu,
        pci="0000:3b:00.0",
        node="ip-10-0-0-1",
        pid=1234,
        process="python",
    ) == (
        "xid=79 severity=critical gpu_uuid=GPU-6f3c1234-5678-90ab-cdef-1234567890ab gpu_index=0 "
        "pci=0000:3b:00.0 node=ip-10-0-0-1 pid=1234 process=python"
    )
    assert tail(xid=48, label="CRITICAL", pci="0000:af:00.0", node="gke-node-1") == (
        "xid=48 severity=critical pci=0000:af:00.0 node=gke-node-1"
    )
    assert tail(sxid=12028, label="CRITICAL", pci="0000:05:00.0", node="n") == (
        "sxid=12028 severity=critical pci=0000:05:00.0 node=n"
    )
    assert "pid=" not in tail(xid=13, label="USER", pid=0)
    assert tail(xid=13, label="USER", process="my proc=1\tx").endswith("process=my_proc_1_x")


def test_an_xid_79_eviction_renders_the_note_of_the_flyte_fixture() -> None:
    """The fixture's note without its pid/process (an incident names no process)."""
    [fixture] = json.loads((WRITEBACK / "flyte_event_xid79_eventsv1.json").read_text())["items"]
    incident = eviction(node="ip-10-0-12-34.ec2.internal")
    reason, note = fault_note(incident)
    assert reason == fixture["reason"] == XID_REASON
    assert fixture["note"].startswith(note + " pid=")
    assert flyte_parse(note) == {
        "xid": "79",
        "severity": "critical",
        "gpu_uuid": "GPU-3f8a1c52-7d0e-4b9a-8c61-0e2f5d7b9a14",
        "gpu_index": "2",
        "pci": "0000:53:00.0",
        "node": "ip-10-0-12-34.ec2.internal",
    }


def test_an_application_xid_is_a_user_fault() -> None:
    """FLYTE GF/message_test.go:36-37's line, from a gpu_app_fault naming XID 13."""
    gpu = GpuRef(uuid="GPU-6f3c1234-5678-90ab-cdef-1234567890ab", index=3, pci_bus_id="0000:3B:00")
    incident = eviction(
        node="ip-10-0-0-1",
        type="gpu_app_fault",
        severity="ticket",
        gpus=(gpu,),
        attributes={"xid": "13"},
    )
    assert fault_note(incident) == (
        XID_REASON,
        "[gpu-health] [USER] Xid 13 (Graphics Engine Exception) on GPU 3 "
        "GPU-6f3c1234-5678-90ab-cdef-1234567890ab. xid=13 severity=user "
        "gpu_uuid=GPU-6f3c1234-5678-90ab-cdef-1234567890ab gpu_index=3 pci=0000:3b:00.0 "
        "node=ip-10-0-0-1",
    )


def test_a_gpu_known_only_by_bus_and_an_sxid() -> None:
    """FLYTE GF/message_test.go:46-47 (PCI phrase) and :56-57 (NVSwitch)."""
    incident = eviction(
        node="gke-node-1", gpus=(GpuRef(pci_bus_id="0000:af:00.0"),), attributes={"xids": "48"}
    )
    _, note = fault_note(incident)
    assert note.endswith(
        "on GPU at PCI 0000:af:00.0. xid=48 severity=critical pci=0000:af:00.0 node=gke-node-1"
    )
    switch = eviction(
        node="ip-10-0-0-1", gpus=(GpuRef(pci_bus_id="0000:05:00.0"),), attributes={"sxid": "12028"}
    )
    assert fault_note(switch) == (
        "GPUSXidError",
        "[gpu-health] [CRITICAL] SXid 12028 on NVSwitch 0000:05:00.0. sxid=12028 "
        "severity=critical pci=0000:05:00.0 node=ip-10-0-0-1",
    )


def test_without_an_xid_our_own_reason_and_no_xid_key() -> None:
    incident = eviction(attributes={}, summary="GPU 2 left allocatable; 2 pods failed")
    reason, note = fault_note(incident)
    assert reason == "GPUDeviceUnhealthy"
    assert note.startswith("[gpu-health] [CRITICAL] GPU 2 left allocatable; 2 pods failed. ")
    assert flyte_parse(note) is None, "Flyte must not read a fault it has no code for"


def test_several_gpus_name_no_gpu_and_a_fatal_code_wins() -> None:
    incident = eviction(
        gpus=(GpuRef(uuid="GPU-a", index=0), GpuRef(uuid="GPU-b", index=1)),
        attributes={"xids": "13,79"},
    )
    _, note = fault_note(incident)
    assert "Xid 79 (GPU has fallen off the bus)." in note
    assert "gpu_uuid" not in note


def test_a_candidate_is_told_so_and_only_warned() -> None:
    """A shared GPU: Flyte attaches a WARN, never reclassifies the pod's own failure."""
    pods = (
        PodInfo(namespace="ml", name="a", role="candidate"),
        PodInfo(namespace="ml", name="b", role="running"),
    )
    [write] = pod_events(eviction(type="gpu_degraded", pods=pods))
    assert write.object_name == "a"
    assert write.note.startswith("[gpu-health] [WARN] Xid 79")
    assert "may not be the one affected" in write.note
    assert flyte_parse(write.note) is not None
    assert flyte_parse(write.note)["severity"] == "warn"  # type: ignore[index]


def test_the_note_fits_the_api_limit_and_keeps_its_tail() -> None:
    incident = eviction(attributes={}, summary="x" * 5000)
    _, note = fault_note(incident)
    assert len(note) == NOTE_LIMIT
    assert note.endswith("node=gpu-1")


@pytest.mark.parametrize(
    ("type_", "pod_events_", "node_events_"),
    [
        ("device_unhealthy_eviction", True, True),
        ("gpu_degraded", True, True),
        ("xid_repeat", True, True),
        ("gpu_app_fault", True, False),
        ("suspected_cuda_oom", False, False),
        ("host_oom_kill", False, False),
        ("gpu_node_not_ready", False, True),
        ("monitoring_gap", False, True),
        ("remediation_stalled", False, True),
        ("gpu_pods_starved", False, False),
    ],
)
def test_which_incidents_write_which_events(
    type_: str, pod_events_: bool, node_events_: bool
) -> None:
    incident = eviction(type=type_)
    assert bool(pod_events(incident)) is pod_events_
    assert (node_event(incident) is not None) is node_events_


def test_names_are_deterministic_valid_and_per_incident_and_object() -> None:
    incident = eviction()
    first = [w.name for w in pod_events(incident)]
    again = [w.name for w in pod_events(msgspec.structs.replace(incident, revision=7))]
    assert first == again
    assert len(set(first)) == 2
    other = event_name("another", "Pod", "ml", "train-0")
    assert other not in first
    long = event_name("i", "Pod", "ml", "p" * 253)
    assert len(long) <= 253
    assert all(re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", n) for n in [*first, long])


def test_resolved_node_event_is_normal_and_distinct() -> None:
    incident = eviction()
    open_ = node_event(incident)
    done = node_event(resolved(incident))
    assert open_ is not None
    assert done is not None
    assert done.type == "Normal"
    assert done.reason == "GPUIncidentResolved"
    assert done.name != open_.name
    assert done.namespace == open_.namespace == "default"


def test_desired_marks_only_open_pages_of_hardware_types() -> None:
    incidents = [
        eviction("n1"),
        eviction("n2", severity="ticket", id="b"),
        resolved(eviction("n3", id="c")),
        eviction("n4", type="host_oom_kill", id="d"),
        eviction("n1", id="e", minutes=-5),
    ]
    marks = desired_marks(incidents, HARDWARE_TYPES)
    assert list(marks) == ["n1"]
    assert [i.id for i in marks["n1"]] == ["e", "c1/n1/device_unhealthy_eviction/1"]


def test_breaker_bounds_nodes_and_pool_share_and_keeps_what_is_marked() -> None:
    assert [pool_allowance(n, 0.2) for n in (0, 1, 3, 5, 6, 10)] == [0, 1, 1, 1, 2, 2]
    pools = {f"a{i}": "a" for i in range(10)} | {f"b{i}": "b" for i in range(3)}
    sizes = {"a": 10, "b": 3}
    verdict = judge(
        ["a0", "a1", "a2", "b0", "b1"], [], pools, sizes, max_nodes=10, max_fraction=0.2
    )
    assert verdict.allowed == ("a0", "a1", "b0")
    assert verdict.withheld == ("a2", "b1")
    assert verdict.tripped
    kept = judge(["a5", "a0"], ["a0", "a1"], pools, sizes, max_nodes=10, max_fraction=0.2)
    assert kept.allowed == ()
    assert kept.withheld == ("a5",)
    capped = judge(["a0", "b0"], [], pools, sizes, max_nodes=1, max_fraction=1.0)
    assert capped.allowed == ("a0",)
    assert capped.withheld == ("b0",)


def _flyte_severity_table() -> dict[str, set[int]]:
    """Flyte's XID severity table as messages.md quotes it (FLYTE GF/xid.go:36-66)."""
    text = " ".join((WRITEBACK / "messages.md").read_text().split())
    found = re.search(r"user = ([\d, ]+); critical = ([\d, ]+); warn = ([\d, ]+) and", text)
    assert found is not None, "messages.md quotes Flyte's severity table"
    user, critical, warn = (set(map(int, re.findall(r"\d+", g))) for g in found.groups())
    return {"user": user, "critical": critical, "warn": warn}


FLYTE_TABLE = _flyte_severity_table()


@pytest.mark.parametrize("xid", range(1, 160))
def test_the_label_and_severity_are_flytes_own_for_every_xid(xid: int) -> None:
    """Flyte reads ``severity=`` over its own table: an XID 94 (contained ECC, hardware)
    said to be USER would burn the user's retries. Our catalog only names the code."""
    expected = next((k for k, codes in FLYTE_TABLE.items() if xid in codes), "warn")
    for severity in ("page", "ticket"):
        _, note = fault_note(eviction(attributes={"xid": str(xid)}, severity=severity))
        parsed = flyte_parse(note)
        assert parsed is not None
        assert parsed["severity"] == expected
        assert note.startswith(f"[gpu-health] [{expected.upper()}] Xid {xid} ")
    _, shared = fault_note(eviction(attributes={"xid": str(xid)}), candidate=True)
    assert (flyte_parse(shared) or {})["severity"] == "warn", "a candidate stays WARN"


def test_every_sxid_is_critical_as_flyte_says() -> None:
    for severity in ("page", "ticket", "info"):
        _, note = fault_note(eviction(attributes={"sxid": "12028"}, severity=severity))
        assert (flyte_parse(note) or {})["severity"] == "critical"


@pytest.mark.parametrize("summary", ["é" * 2000, "pod ml/trainé-0 OOM " * 200, "€" * 341])
def test_the_note_fits_1024_bytes_even_with_non_ascii_text(summary: str) -> None:
    """The API bounds ``note`` in bytes: an ``é`` is two, a ``…`` would be three."""
    for node in (None, node_event(eviction(attributes={}, summary=summary, status="resolved"))):
        note = (
            fault_note(eviction(attributes={}, summary=summary))[1] if node is None else node.note
        )
        assert len(note.encode()) <= NOTE_LIMIT
        assert note.isascii() or "..." in note
        assert note.endswith("node=gpu-1")


DNS_1123_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"


@pytest.mark.parametrize("cut_at", ["-", ".", "-.", ".-"])
def test_a_long_pod_name_cut_where_a_dash_or_dot_falls_still_names_a_valid_event(
    cut_at: str,
) -> None:
    """236 characters are kept: a name whose 236th is ``-`` or ``.`` must not leave
    ``-.`` before the hash."""
    name = "p" * (236 - len(cut_at)) + cut_at + "q" * 16
    event = event_name("i", "Pod", "ml", name)
    assert len(event) <= 253
    assert re.fullmatch(DNS_1123_SUBDOMAIN, event), event
