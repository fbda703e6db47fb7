"""``gputriage ingest autoscaler`` end to end, as a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parents[2] / "data" / "autoscaler"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gputriage", "ingest", "autoscaler", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_ingest_prints_records_and_counts() -> None:
    """ca_klog.log (all real lines; SOURCES.md): 82 lines, 74 with facts (the three
    final plans of #3835 name 8 groups; L6 is the priority expander's choice), 8
    unrecognised."""
    done = _run("--cluster", "prod", "--file", str(DATA / "ca_klog.log"), "--year", "2026")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in done.stdout.splitlines()]
    assert records
    assert all(r["schema"] == "autoscaler.v1" for r in records)
    assert {r["cluster"] for r in records} == {"prod"}
    assert records[0]["time"] == "2026-03-13T12:34:34.470823Z"
    assert done.stderr.strip().endswith("82 lines, 79 records, 8 unrecognised, 0 bad")
    again = _run("--cluster", "prod", "--file", str(DATA / "ca_klog.log"), "--year", "2026")
    assert again.stdout == done.stdout


def test_karpenter_format_and_stdin() -> None:
    text = (DATA / "karpenter.jsonl").read_text()
    done = subprocess.run(
        [sys.executable, "-m", "gputriage", "ingest", "autoscaler", "--cluster", "p",
         "--format", "karpenter", "--file", "-", "--reference-time", "2026-01-01T00:00:00Z"],
        input=text, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert {json.loads(line)["source"] for line in done.stdout.splitlines()} == {"karpenter"}


def test_gke_visibility_entries_auto_and_gke_format_agree() -> None:
    """gke_visibility.jsonl (SOURCES.md): 19 entries, 15 records (one per MIG, node,
    failed result or unhandled pod group), 4 without a fact (node pool created/deleted,
    noScaleDown, a successful result)."""
    path = str(DATA / "gke_visibility.jsonl")
    ref = ("--reference-time", "2026-07-01T00:00:00Z")
    auto = _run("--cluster", "gke", "--file", path, *ref)
    assert auto.returncode == 0, auto.stderr
    assert auto.stderr.strip().endswith("19 lines, 15 records, 4 unrecognised, 0 bad")
    records = [json.loads(line) for line in auto.stdout.splitlines()]
    assert {r["cloud"] for r in records} == {"gce"}
    assert {r["source"] for r in records} == {"cluster-autoscaler"}
    gke = _run("--cluster", "gke", "--file", path, "--format", "gke", *ref)
    assert gke.returncode == 0, gke.stderr
    assert gke.stdout == auto.stdout
    klog = _run("--cluster", "gke", "--file", path, "--format", "klog", *ref)
    assert klog.stdout == ""


def test_bad_line_exit_1_and_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.log"
    bad.write_text("W1399 12:49:40.563382 1 c.go:1] Scale-up timed out for node group g after 1m\n")
    done = _run("--cluster", "p", "--file", str(bad), "--year", "2026")
    assert done.returncode == 1
    assert "bad.log:1:" in done.stderr
    for args in (
        ("--cluster", "p", "--file", str(tmp_path / "missing")),
        ("--file", str(bad)),
        ("--cluster", "p", "--file", str(bad), "--format", "yaml"),
        ("--cluster", "p", "--file", str(bad), "--year", "2026", "--reference-time", "x"),
    ):
        done = _run(*args)
        assert done.returncode == 2, args
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "Traceback" not in done.stderr
    help_text = _run("--help")
    assert help_text.returncode == 0
    assert "--reference-time" in help_text.stdout
