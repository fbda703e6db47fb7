"""The shipped example: every node-scoped incident type, each once, with its evidence.

This is the acceptance statement of the foundation issue, checked through the
real CLI on the committed file (and the file is checked against its builder).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from schemas.codec import decode_incident
from tests.cli_helpers import gputriage
from tests.paths import ROOT

SCENARIO = ROOT / "examples" / "scenario.jsonl"
NODE_TYPES = {
    "device_unhealthy_eviction",
    "host_oom_kill",
    "suspected_cuda_oom",
    "gpu_degraded",
    "gpu_app_fault",
    "xid_repeat",
    "gpu_node_not_ready",
}


def test_the_committed_scenario_matches_its_builder(tmp_path: Path) -> None:
    out = tmp_path / "scenario.jsonl"
    subprocess.run(
        [sys.executable, str(ROOT / "examples" / "build_scenario.py"), str(out)],
        check=True,
        capture_output=True,
    )
    assert out.read_bytes() == SCENARIO.read_bytes(), "run examples/build_scenario.py"


def test_every_node_scoped_type_once_with_evidence() -> None:
    result = gputriage("replay", "-o", "json", str(SCENARIO))
    assert result.returncode == 0, result.stderr
    revisions = [decode_incident(line) for line in result.stdout.splitlines()]
    last = {r.id: r for r in revisions}
    types = sorted(r.type for r in last.values())
    assert types == sorted(NODE_TYPES), types
    assert all(r.evidence for r in last.values())


def test_the_xid79_chain_is_one_incident_in_causal_order() -> None:
    result = gputriage("replay", "-o", "json", str(SCENARIO))
    revisions = [decode_incident(line) for line in result.stdout.splitlines()]
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
    assert len(rows) == len(NODE_TYPES)
    evidence = [line for line in text.splitlines() if line.startswith("    ")]
    assert len(evidence) >= 2 * len(NODE_TYPES)
