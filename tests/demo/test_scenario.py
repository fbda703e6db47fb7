"""The shipped example: every incident type but a few named ones, each once, with its evidence.

This is the acceptance statement of the scenario: the seven node-scoped types, the three
cluster-scoped ones and the pod without NVLink on the device-plugin nodes, and the DRA
node's one page, checked through the real CLI on the committed file (and the file is
checked against its builder).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from schemas.codec import decode_incident, encode
from schemas.incidents import Incident
from streams.core.rules import registry
from tests.cli_helpers import gputriage
from tests.paths import ROOT

SCENARIO = ROOT / "examples" / "scenario.jsonl"
NOT_IN_SCENARIO = {
    "gpu_fault_crash_loop": "tests/streams/core/test_gpu_fault_loops.py",
    "gpu_pods_unschedulable": "tests/streams/core/test_starvation_scope.py",
    "nvlink_domain_fault": "tests/streams/core/test_nvlink_domain.py",
    "monitoring_gap": "tests/streams/core/test_monitoring_gap.py",
    "remediation_stalled": "tests/streams/core/test_remediation_stalled.py",
}
"""Types the scenario does not show, each with the test file that shows it instead. A new
rule's type is in the scenario or here: ``ALL_TYPES`` comes from the registry."""
ALL_TYPES = set(registry.INCIDENT_TYPES) - set(NOT_IN_SCENARIO)
CLUSTER_TYPES = ALL_TYPES & set(registry.CLUSTER_TYPES)
NODE_TYPES = ALL_TYPES - CLUSTER_TYPES
GROUP = "eks-gpu-p5-48xlarge-5ac6f1d2-3b7e-9c41-a8d0-6e2f4b19c7d5"
DRA_NODE = "gpu-node-09"
"""The DRA node: its GPUs by ResourceClaim; its one incident is told apart."""


def _revisions() -> list[Incident]:
    result = gputriage("replay", "-o", "json", str(SCENARIO))
    assert result.returncode == 0, result.stderr
    return [decode_incident(line) for line in result.stdout.splitlines()]


def test_the_committed_scenario_matches_its_builder(tmp_path: Path) -> None:
    out = tmp_path / "scenario.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "build_scenario.py"), str(out)],
        check=True,
        capture_output=True,
    )
    assert out.read_bytes() == SCENARIO.read_bytes(), "run examples/build_scenario.py"


def test_each_type_left_out_is_a_real_type_shown_elsewhere() -> None:
    assert set(NOT_IN_SCENARIO) <= set(registry.INCIDENT_TYPES)
    for kind, test_file in NOT_IN_SCENARIO.items():
        assert f'"{kind}"' in (ROOT / test_file).read_text(), (kind, test_file)
    assert NODE_TYPES
    assert CLUSTER_TYPES


def test_every_type_once_with_evidence() -> None:
    last = {r.id: r for r in _revisions() if r.node != DRA_NODE}
    types = sorted(r.type for r in last.values())
    assert types == sorted(ALL_TYPES), types
    assert all(r.evidence for r in last.values())
    assert {r.type for r in last.values() if not r.node} == CLUSTER_TYPES


def test_the_starved_job_pages_once_naming_the_job_and_its_node_group() -> None:
    """The Job's four 8-GPU pods pend while the group fails four times for the vCPU quota:
    one page from the third failure (the pods have waited 10 min by then), still open."""
    revisions = _revisions()
    starved = [r for r in revisions if r.type == "gpu_pods_starved"]
    assert len({r.id for r in starved}) == 1
    opened, final = starved[0], starved[-1]
    assert (opened.status, opened.severity) == ("open", "page")
    assert "Job ml-train/llama-70b-sft" in opened.summary
    assert opened.attributes["node_groups"] == GROUP
    assert opened.attributes["match"] == "named", "TriggeredScaleUp tied the pods to the group"
    assert (opened.attributes["reason"], opened.attributes["cloud_code"]) == (
        "quota",
        "VcpuLimitExceeded",
    )
    assert opened.attributes["attempts"] == "3"
    assert {(p.owner_kind, p.owner_name) for p in opened.pods} == {("Job", "llama-70b-sft")}
    assert len(opened.pods) == 4
    assert final.status != "resolved", "a quota is raised by a person, not within 45 min"
    assert final.attributes["attempts"] == "4"


def test_the_scale_up_failure_is_one_quota_page_counting_attempts_not_lines() -> None:
    failures = [r for r in _revisions() if r.type == "scale_up_failure"]
    assert len({r.id for r in failures}) == 1, "one incident, not one per reason"
    final = failures[-1]
    assert final.severity == "page"
    assert final.attributes["node_group"] == GROUP
    assert final.attributes["reason"] == "quota"
    assert final.attributes["cloud"] == "aws"
    assert final.attributes["attempts"] == "4"
    assert "backoff_until" in final.attributes, "the backoff records' until"
    assert all(
        e.schema == "autoscaler.v1" and "VcpuLimitExceeded" in e.text for e in final.evidence
    )


def test_the_dcgm_outage_is_one_mismatch_naming_both_nodes_and_resolved() -> None:
    """dcgm-exporter on gpu-node-02 and gpu-node-06 reports GPUs without pods from minute 26
    to 35: one ticket naming exactly those two (every other node's counts agree, or are
    left out: gpu-node-03 is time-sliced), opened once both have disagreed for 5 min."""
    mismatch = [r for r in _revisions() if r.type == "allocation_mismatch"]
    assert len({r.id for r in mismatch}) == 1
    opened, final = mismatch[0], mismatch[-1]
    assert opened.status == "open"
    assert opened.attributes["nodes"] == "gpu-node-02,gpu-node-06"
    assert opened.attributes["difference"] == "9"
    assert "gpu-node-02 (5 requested, 0 bound)" in opened.summary
    assert final.status == "resolved"
    assert final.attributes["nodes"] == "gpu-node-02,gpu-node-06"


def test_the_xid79_chain_is_one_incident_in_causal_order() -> None:
    revisions = [r for r in _revisions() if r.node != DRA_NODE]
    chain = [r for r in revisions if r.type == "device_unhealthy_eviction"]
    assert len({r.id for r in chain}) == 1
    final = chain[-1]
    schemas = [e.schema for e in final.evidence]
    assert schemas[0] == "xid.v1"
    assert "XID 79" in final.evidence[0].text
    assert schemas[1] == "node.v1"
    assert "allocatable 8 → 7" in final.evidence[1].text
    assert len(final.pods) == 3
    assert final.gpus[0].uuid.startswith("GPU-"), "bus id joined to the binding's uuid"
    nothing_else_on_node = [
        r for r in revisions if r.node == final.node and r.type != "device_unhealthy_eviction"
    ]
    assert nothing_else_on_node == []


def test_the_table_lists_each_incident_with_its_evidence_chain() -> None:
    result = gputriage("replay", str(SCENARIO))
    assert result.returncode == 0
    text = result.stdout.decode()
    rows = [line for line in text.splitlines() if line.startswith("inc-")]
    assert len(rows) == len(ALL_TYPES) + 1, "and the DRA node's page"
    evidence = [line for line in text.splitlines() if line.startswith("    ")]
    assert len(evidence) >= 2 * len(rows)


def test_the_ddp_pod_on_the_pcie_node_is_one_ticket_and_the_hgx_pods_give_nothing() -> None:
    """gpu-node-08 is PCIe-only: the 2-GPU pod on its GPUs 3 and 4 (one per socket, SYS)
    is one ticket naming it, both GPUs and the link, resolved when it succeeds. The H100
    nodes' multi-GPU pods (all NV18) give none."""
    revisions = [r for r in _revisions() if r.type == "multi_gpu_pod_without_nvlink"]
    assert len({r.id for r in revisions}) == 1
    opened, final = revisions[0], revisions[-1]
    assert (opened.status, opened.severity, opened.node) == ("open", "ticket", "gpu-node-08")
    assert [(p.namespace, p.name, p.owner_kind, p.owner_name) for p in opened.pods] == [
        ("ml-train", "resnet-ddp-0", "Job", "resnet-ddp")
    ]
    assert [(g.index, g.pci_bus_id) for g in opened.gpus] == [
        (3, "0000:5d:00.0"),
        (4, "0000:9a:00.0"),
    ]
    assert opened.attributes["links"] == "GPU3-GPU4:SYS"
    assert "GPU3-GPU4 SYS" in opened.summary
    assert final.status == "resolved"
    assert final.attributes["resolution"] == "pod succeeded"


def test_the_dra_nodes_tainted_device_is_one_page_naming_the_gpu_and_its_claims_pod() -> None:
    """gpu-node-09 advertises no ``nvidia.com/gpu``: its pod holds gpu-2 through a claim.
    A DeviceTaintRule taints gpu-2 NoExecute at minute 12 and the device taint eviction
    controller evicts the pod: one page naming the GPU (uuid from the slice) and the pod,
    with the taint and the eviction in its evidence."""
    revisions = [r for r in _revisions() if r.node == DRA_NODE]
    pages = [r for r in revisions if r.type == "device_unhealthy_eviction"]
    assert len({r.id for r in pages}) == 1, [(r.type, r.id) for r in revisions]
    final = pages[-1]
    assert final.severity == "page"
    assert [(p.namespace, p.name) for p in final.pods] == [("inference", "guard-serve-6d4c9-q7k2m")]
    assert [g.uuid for g in final.gpus] == ["GPU-0902d1e7-3c5a-4b8e-a2f4-000000090002"]
    assert final.gpus[0].pci_bus_id == "0000:3a:00.0", "the bus, from the slice"
    schemas = {e.schema for e in final.evidence}
    assert schemas & {"pod.v1", "k8s_event.v1"}, "the eviction"
    named = encode(final).decode()
    assert "guard-serve-6d4c9-q7k2m-gpu-8xk2p" in named, "the claim is named"
    assert "gpu-2" in named, "the device is named"
    assert not [
        r for r in _revisions() if r.type == "allocation_mismatch" and DRA_NODE in r.summary
    ]
