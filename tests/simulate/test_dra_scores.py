"""A mixed cluster, end to end: ``gputriage simulate --dra-nodes | gputriage score``.

The DRA pool's faults (a NoExecute device taint and its eviction, a fatal XID whose
claim pod fails, a device gone from its slice, claims that cannot be allocated while
the autoscaler hits its quota) must each give their incident on the DRA nodes, the
pool's noise (DRA-plugin restarts, claims coming and going, ``nvidia.com/gpu`` 0/0)
none, and the device-plugin nodes beside them must score as they do alone. Held to
the quality smoke test's bar, per pool kind (``pools`` in the score's JSON).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cli_helpers import gputriage

BAR = (0.99, 0.99)
DRA_TYPES = frozenset(
    {"device_unhealthy_eviction", "gpu_degraded", "gpu_pods_starved", "scale_up_failure"}
)


def _simulate(tmp_path: Path, *extra: str) -> tuple[Path, Path]:
    events, truth = tmp_path / "events.jsonl", tmp_path / "truth.jsonl"
    done = gputriage(
        "simulate",
        "--nodes",
        "40",
        "--dra-nodes",
        "10",
        "--duration",
        "6h",
        *extra,
        "--out",
        str(events),
        "--truth",
        str(truth),
    )
    assert done.returncode == 0, done.stderr
    return events, truth


def _below(types: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    return {
        kind: (t["precision"], t["recall"], t["fp"], t["fn"])
        for kind, t in types.items()
        if (t["precision"] is not None and t["precision"] < BAR[0])
        or (t["recall"] is not None and t["recall"] < BAR[1])
    }


def test_dra_scores_every_dra_fault_on_a_mixed_cluster(tmp_path: Path) -> None:
    events, truth = _simulate(tmp_path)
    scored = gputriage("score", str(events), str(truth), "-o", "json")
    assert scored.returncode in {0, 1}, scored.stderr
    result = json.loads(scored.stdout)
    pools = result["pools"]
    assert set(pools["dra"]) >= DRA_TYPES, "every DRA fault has its truth"
    assert not _below(pools["dra"]), (_below(pools["dra"]), result["misses"])
    assert not _below(pools["device-plugin"])
    assert sum(t["tp"] for t in pools["dra"].values()) >= 8  # not a vacuous pass


def test_dra_scores_noise_on_dra_nodes_gives_no_incident(tmp_path: Path) -> None:
    events, truth = _simulate(tmp_path, "--noise-only")
    assert truth.read_bytes() == b""
    assert b'"resource_slice.v1"' in events.read_bytes()
    replayed = gputriage("replay", str(events), "-o", "json")
    assert replayed.returncode == 0, replayed.stderr
    incidents = [json.loads(line) for line in replayed.stdout.splitlines()]
    assert incidents == [], sorted({(i["type"], i["node"]) for i in incidents})
