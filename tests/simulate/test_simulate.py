"""``gputriage simulate``: deterministic bytes, honest ground truth, one-line errors.

Small runs (a few thousand events) through the real command, in process.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from gputriage.cli import run
from gputriage.simulate import Simulation, StreamSpec
from gputriage.simulate.run import parse_duration
from gputriage.simulate.truth import SLACK
from schemas.codec import decode_event
from schemas.events import PodEvent
from schemas.truth import CLUSTER_SCOPED, decode_truth

SMALL = ["--nodes", "20", "--duration", "1h", "--fault-rate", "20"]


def simulate(tmp_path: Path, *args: str, name: str = "a") -> tuple[bytes, bytes]:
    events, truth = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.truth.jsonl"
    status = run(["simulate", *args, "--out", str(events), "--truth", str(truth)])
    assert status == 0
    return events.read_bytes(), truth.read_bytes()


def test_same_options_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    first = simulate(tmp_path, *SMALL, "--seed", "7", name="a")
    again = simulate(tmp_path, *SMALL, "--seed", "7", name="b")
    other = simulate(tmp_path, *SMALL, "--seed", "8", name="c")
    assert first == again
    assert first[0] != other[0]
    assert first[1] != other[1]
    assert first[1].count(b"\n") > 10  # the faults were there to compare


def test_gzip_output_is_deterministic_too(tmp_path: Path) -> None:
    paths = [tmp_path / "a.jsonl.gz", tmp_path / "b.jsonl.gz"]
    for path in paths:
        assert run(["simulate", "--nodes", "5", "--duration", "10m", "--out", str(path)]) == 0
    assert paths[0].read_bytes() == paths[1].read_bytes()


def test_truth_decodes_and_refers_to_the_stream(tmp_path: Path) -> None:
    events_bytes, truth_bytes = simulate(tmp_path, *SMALL, "--seed", "3")
    events = [decode_event(line) for line in events_bytes.splitlines()]
    truth = [decode_truth(line) for line in truth_bytes.splitlines()]
    assert {t.type for t in truth} >= {"host_oom_kill", "gpu_app_fault"}
    assert len({t.id for t in truth}) == len(truth)
    nodes = {(e.cluster, getattr(e, "node", "")) for e in events}
    pods = {(e.cluster, f"{e.namespace}/{e.name}") for e in events if isinstance(e, PodEvent)}
    gpus = {getattr(e, "gpu_uuid", "") for e in events}
    first, last = min(e.time for e in events), max(e.time for e in events)
    for t in truth:
        assert first - SLACK <= t.not_before <= t.start <= t.not_after <= last + SLACK
        if t.type not in CLUSTER_SCOPED:
            assert (t.cluster, t.node) in nodes, t
        assert all((t.cluster, pod) in pods for pod in t.pods), t
        assert all(gpu in gpus for gpu in t.gpus), t


def test_a_crash_loop_truth_has_more_than_three_restarts_in_15_min(tmp_path: Path) -> None:
    events_bytes, truth_bytes = simulate(tmp_path, *SMALL, "--seed", "5")
    truth = [decode_truth(line) for line in truth_bytes.splitlines()]
    loops = [t for t in truth if t.type == "suspected_cuda_oom"]
    assert loops
    terminations: dict[str, set[datetime]] = {}
    for line in events_bytes.splitlines():
        record = json.loads(line)
        if record["schema"] != "pod.v1":
            continue
        for status in record.get("containers", []):
            last = status.get("last_terminated")
            if last and last.get("exit_code") not in (0, 137, 143):
                key = f"{record['namespace']}/{record['name']}"
                terminations.setdefault(key, set()).add(last["finished_at"])
    for t in loops:
        assert len(terminations[t.pods[0]]) > 3, t


def test_a_crash_loop_never_ends_in_phase_failed(tmp_path: Path) -> None:
    """Under restartPolicy Always/OnFailure the kubelet restarts a crashing container: the
    pod stays Running (CrashLoopBackOff) until someone deletes it. The loop used to end
    "Failed, exit 1" with one exit more than the truth counted."""
    events_bytes, _ = simulate(tmp_path, *SMALL, "--seed", "5")
    looping: set[str] = set()
    failed: set[str] = set()
    for line in events_bytes.splitlines():
        record = json.loads(line)
        if record["schema"] != "pod.v1":
            continue
        key = f"{record['namespace']}/{record['name']}"
        if any(c.get("reason") == "CrashLoopBackOff" for c in record.get("containers", [])):
            looping.add(key)
        if key in looping and record.get("phase") == "Failed" and not record.get("reason"):
            failed.add(key)
    assert looping
    assert not failed


def test_noise_only_writes_no_truth(tmp_path: Path) -> None:
    events, truth = simulate(tmp_path, "--nodes", "20", "--duration", "1h", "--noise-only")
    assert events.count(b"\n") > 500
    assert truth == b""


def test_event_count_mode_keeps_the_benchmarks_stream() -> None:
    spec = StreamSpec(events=3000, nodes=30)
    sim = Simulation(spec)
    lines = list(sim.lines())
    assert len(lines) == 3000
    assert b'"schema":"pod.v1"' in lines[0]  # no snapshot: the bench's bytes as before
    assert "-snap" not in spec.cache_name()


def test_out_dash_writes_stdout(capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    assert run(["simulate", "--nodes", "3", "--duration", "5m", "--out", "-"]) == 0
    out = capsysbinary.readouterr()
    assert out.out.count(b"\n") > 10
    assert all(line.startswith(b'{"schema":') for line in out.out.splitlines())
    assert b"simulated" in out.err


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--duration", "6"], "is not a duration"),
        (["--duration", "soon"], "is not a duration"),
        (["--nodes", "0"], "--nodes"),
        (["--clusters", "9"], "--clusters"),
        (["--fault-rate", "nan"], "--fault-rate"),
        (["--storm", "0.5"], "--storm"),
        (["--start", "2025-01-01T00:00:00"], "no UTC offset"),
        (["--truth", "-"], "both go to stdout"),
    ],
)
def test_mistakes_are_one_line(
    args: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["simulate", *args]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1, err
    assert err[0].startswith("gputriage: error: ")
    assert says in err[0]


def test_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["simulate", "--help"]) == 0
    out = capsys.readouterr().out
    for option in ("--nodes", "--duration", "--truth", "--fault-rate", "--noise-only", "--storm"):
        assert option in out


def test_parse_duration() -> None:
    assert parse_duration("6h") == 6 * 3600
    assert parse_duration("1h30m") == 5400
    assert parse_duration("45s") == 45
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("0s")
