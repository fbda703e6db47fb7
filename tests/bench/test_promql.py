"""The PromQL baseline (bench/promql): series as the exporters expose them, the rules file,
and the whole path on a real Prometheus.

The tests that need ``prometheus``/``promtool`` (Debian's prometheus package, which ``make
tools`` installs) skip elsewhere, saying so. One small stream (:func:`stream`) drives them:

* node ``n1`` runs ``ml/train-0`` on GPU ``GPU-a`` and gets a burst of XIDs between two
  scrapes (79, 79, then 43): the gauge shows only the 43, the fatal 79 never;
* node ``n2``'s allocatable drops 8 -> 7 at 300 s and stays: capacity - allocatable fires
  after its ``for: 5m``; node ``n1``'s drops for 2 minutes only: nothing fires;
* ``ml/wait-0`` (1 GPU) is pending throughout;
* ``ml/crash-0`` restarts 4 times with ``Error``, ``ml/oom-0`` 4 times ``OOMKilled``: the
  restart alert fires for both (its ``unless`` reads the *current* termination reason,
  gone once the container restarts), so it cannot tell host OOM from CUDA OOM;
* ``ml/big-0`` holds 8 GPUs on ``n2`` and restarts once: the restart alert fires for it too
  (it multiplies the increase by the GPU count).
"""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner
from msgspec.structs import replace
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from bench.promql import prometheus
from bench.promql.__main__ import main
from bench.promql.alerts import Firing, firings
from bench.promql.match import score, types_of
from bench.promql.run import RULES, Baseline, evaluate
from bench.promql.series import (
    ALLOCATABLE,
    POD_PHASE,
    REQUESTS,
    XID,
    Labels,
    Scraped,
    scrape,
    write_openmetrics,
)
from bench.promql.verify import PROMTOOL_LOOKBACK, to_epoch, unit_test, verify
from gputriage.demo.events import T0
from schemas.codec import AnyEvent, encode, loads
from schemas.truth import ExpectedIncident
from tests.factories import Cluster, term
from tests.paths import ROOT
from tests.tools import skip_missing_tool

GPU_A = "GPU-aaaaaaaa-0000-4000-8000-000000000001"
BUS_A = "0000:01:00.0"


def stream() -> list[AnyEvent]:
    """The module's scenario, seconds after ``T0``."""
    c = Cluster("c1")
    c.node("n1", 0)
    c.node("n2", 0)
    c.pod("n1", "train-0", 0, namespace="ml", container="trainer")
    c.bind("n1", 0, GPU_A, BUS_A, ["train-0"], namespace="ml")
    c.pending("wait-0", 0, namespace="ml", created=0)
    for restarts, t in enumerate((60, 120, 180, 240), start=1):
        c.pod("n2", "crash-0", t, namespace="ml", restarts=restarts, last=term(t, "Error", 1))
        c.pod("n2", "oom-0", t, namespace="ml", restarts=restarts, last=term(t, "OOMKilled", 137))
    # One restart of an 8-GPU pod (its 8 GPUs bound, so the §10 count stays within 5).
    c.pod("n2", "big-0", 0, namespace="ml", gpus=8)
    for index in range(8):
        c.bind(
            "n2",
            0,
            f"GPU-bbbbbbbb-0000-4000-8000-00000000000{index}",
            f"0000:{index + 16:02x}:00.0",
            ["big-0"],
            namespace="ml",
        )
    c.pod("n2", "big-0", 120, namespace="ml", gpus=8, restarts=1, last=term(120, "Error", 1))
    # The burst: between the scrapes at 90 s and 120 s.
    c.xid("n1", 95, 79, bus=BUS_A)
    c.xid("n1", 100, 79, bus=BUS_A)
    c.xid("n1", 110, 43, bus=BUS_A)
    c.node("n2", 300, alloc=7)
    c.node("n1", 420, alloc=7)
    c.node("n1", 540, alloc=8)
    c.node("n1", 600)
    return c.events


def points(scraped: Scraped, family: object, **match: str) -> list[tuple[float, float]]:
    """The samples of the one series of ``family`` whose labels include ``match``."""
    found = [
        pts
        for labels, pts in scraped.series[family].items()  # type: ignore[index]
        if match.items() <= dict(labels).items()
    ]
    assert len(found) == 1, (family, match, len(found))
    return found[0]


def at_s(seconds: float) -> float:
    return (T0 + timedelta(seconds=seconds)).timestamp()


# -- series, without Prometheus --------------------------------------------------------------
def test_a_burst_between_scrapes_shows_only_its_last_value() -> None:
    scraped = scrape(stream(), tail=60)
    gauge = dict(points(scraped, XID, Hostname="n1", UUID=GPU_A))
    assert gauge[at_s(90)] == 0
    assert gauge[at_s(120)] == 43, "the last XID of the burst"
    assert 79 not in gauge.values(), "the fatal XID is never scraped"
    assert scraped.xids == 3
    assert scraped.xids_visible == 1


def test_kube_state_metrics_series_are_named_and_valued_as_kube_state_metrics_does() -> None:
    scraped = scrape(stream(), tail=60)
    pending = dict(points(scraped, POD_PHASE, pod="wait-0", phase="Pending"))
    running = dict(points(scraped, POD_PHASE, pod="train-0", phase="Pending"))
    assert set(pending.values()) == {1.0}
    assert set(running.values()) == {0.0}, "a 0 row for every phase a pod is not in"
    request = points(scraped, REQUESTS, pod="train-0")
    labels = dict(next(lab for lab in scraped.series[REQUESTS] if ("pod", "train-0") in lab))
    assert labels["resource"] == "nvidia_com_gpu"
    assert labels["unit"] == "integer"
    assert labels["container"] == "trainer"
    assert {v for _, v in request} == {1.0}
    drop = dict(points(scraped, ALLOCATABLE, node="n2"))
    assert drop[at_s(270)] == 8
    assert drop[at_s(300)] == 7, "a scrape sees every event up to its instant"
    # A pending pod has no node: the label is left out, never written empty.
    wait_labels = next(lab for lab in scraped.series[REQUESTS] if ("pod", "wait-0") in lab)
    assert "node" not in dict(wait_labels)


def test_a_deleted_pod_leaves_the_scrape() -> None:
    c = Cluster("c1")
    c.pod("n1", "gone-0", 0)
    c.pod("n1", "gone-0", 65, op="deleted")
    scraped = scrape(c.events, tail=60)
    instants = [t for t, _ in points(scraped, POD_PHASE, pod="gone-0", phase="Running")]
    assert instants == [at_s(0), at_s(30), at_s(60)]


def test_a_deleted_node_takes_its_gpus_series_with_it() -> None:
    c = Cluster("c1")
    c.node("n1", 0)
    c.bind("n1", 0, GPU_A, BUS_A, ["train-0"])
    c.node("n1", 65, op="deleted")
    scraped = scrape(c.events, tail=60)
    instants = [t for t, _ in points(scraped, XID, UUID=GPU_A)]
    assert instants == [at_s(0), at_s(30), at_s(60)]


def test_the_openmetrics_text_parses_as_openmetrics() -> None:
    out = io.StringIO()
    scraped = scrape(stream(), tail=60)
    written = write_openmetrics(scraped, out)
    text = out.getvalue()
    assert text.endswith("# EOF\n")
    assert written == scraped.sample_count()
    # The strict OpenMetrics parser (untyped in prometheus-client): families, _total, # EOF.
    parsed = text_string_to_metric_families(text)  # type: ignore[no-untyped-call]
    families = {f.name: f for f in parsed}
    restarts = families["kube_pod_container_status_restarts"]
    assert restarts.type == "counter"
    assert {s.name for s in restarts.samples} == {"kube_pod_container_status_restarts_total"}
    assert sum(len(f.samples) for f in families.values()) == written
    temps = families["DCGM_FI_DEV_GPU_TEMP"].samples
    assert {s.labels.get("pod") for s in temps} == {"train-0", "big-0"}
    bus_ids = {s.labels["pci_bus_id"] for s in temps if s.labels["UUID"] == GPU_A}
    assert bus_ids == {"00000000:01:00.0"}, "NVML's spelling"


def test_several_clusters_are_one_at_a_time() -> None:
    a, b = Cluster("a"), Cluster("b")
    a.node("n1", 0)
    b.node("n9", 0)
    scraped = scrape([*a.events, *b.events], cluster="b", tail=0)
    assert {dict(lab)["node"] for lab in scraped.series[ALLOCATABLE]} == {"n9"}
    with pytest.raises(ValueError, match="no events"):
        scrape(a.events, cluster="zzz")


# -- the for: state machine and the matcher ----------------------------------------------------
def test_for_fires_after_its_duration_and_a_gap_restarts_it() -> None:
    series: Labels = (("node", "n1"),)
    grid = [60.0 * i for i in range(20)]
    returned = {series: [t for t in grid if t not in (360.0,)]}
    fired = firings("A", returned, for_seconds=300, step=60, until=grid[-1])
    # 0..300 is 6 evaluations, fires at 300, resolved at 360 (the gap); again 420 + 300.
    assert [(f.active_at, f.start, f.end) for f in fired] == [(0, 300, 360), (420, 720, None)]
    assert fired[0].labels == (("alertname", "A"), ("node", "n1"))
    short = firings("A", {series: [0.0, 60.0]}, for_seconds=300, step=60, until=600)
    assert short == []
    instant = firings("A", {series: [120.0]}, for_seconds=0, step=60, until=600)
    assert [(f.start, f.end) for f in instant] == [(120, 180)]


def _expected(
    type_: str, start: float, *, node: str = "", pods: tuple[str, ...] = ()
) -> ExpectedIncident:
    begin = T0 + timedelta(seconds=start)
    return ExpectedIncident(
        id=f"{type_}-{start:g}",
        fault="test",
        type=type_,
        cluster="c1",
        node=node,
        pods=pods,
        start=begin,
        not_before=begin,
        not_after=begin + timedelta(minutes=5),
    )


def test_the_matcher_counts_catches_delays_misses_false_and_confused_firings() -> None:
    alert_types = {"Gap": ("gpu_degraded",), "Restarts": ("suspected_cuda_oom",)}
    fired = [
        Firing("Gap", (("node", "n2"),), at_s(600), None, at_s(300)),
        Firing("Restarts", (("namespace", "ml"), ("pod", "oom-0")), at_s(240), None, at_s(240)),
        Firing("Restarts", (("namespace", "ml"), ("pod", "crash-0")), at_s(240), None, at_s(240)),
    ]
    truth = [
        _expected("gpu_degraded", 300, node="n2"),
        _expected("gpu_degraded", 300, node="n7"),
        _expected("suspected_cuda_oom", 60, node="n2", pods=("ml/crash-0",)),
        _expected("host_oom_kill", 60, node="n2", pods=("ml/oom-0",)),
    ]
    types, alerts = score(fired, alert_types, truth)
    by_type = {t.type: t for t in types}
    assert (by_type["gpu_degraded"].expected, by_type["gpu_degraded"].caught) == (2, 1)
    assert by_type["gpu_degraded"].delays == [300.0]
    assert by_type["gpu_degraded"].missed == ["gpu_degraded-300"]
    assert by_type["host_oom_kill"].alerts == ()
    assert by_type["host_oom_kill"].caught == 0
    restarts = next(a for a in alerts if a.alert == "Restarts")
    assert (restarts.firings, restarts.true, restarts.false) == (2, 1, 1)
    assert restarts.confused == {"host_oom_kill": 1}
    # dcgm-exporter names the GPU: an XID firing on another GPU of the node is not this one.
    on_gpu = replace(_expected("xid_repeat", 60, node="n1"), gpus=(GPU_A,))
    other = Firing("Xid", (("Hostname", "n1"), ("UUID", "GPU-other")), at_s(90), None, at_s(90))
    same = Firing("Xid", (("Hostname", "n1"), ("UUID", GPU_A)), at_s(90), None, at_s(90))
    xid_types = {"Xid": ("xid_repeat",)}
    assert score([other], xid_types, [on_gpu])[0][0].caught == 0
    assert score([same], xid_types, [on_gpu])[0][0].caught == 1
    # A firing that began before the fault is no detection of it.
    early = [Firing("Gap", (("node", "n2"),), at_s(0), None, at_s(0))]
    assert score(early, alert_types, truth[:1])[0][0].caught == 0
    # An optional truth (due where the stream ends) is not expected, and a firing that
    # matches only it is neither true nor false.
    optional = [replace(truth[0], optional=True)]
    types, alerts = score(fired[:1], alert_types, optional)
    assert types == []
    gap = next(a for a in alerts if a.alert == "Gap")
    assert (gap.firings, gap.true, gap.false) == (1, 0, 0)


# -- with a real Prometheus ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def bins() -> tuple[str, str]:
    found = prometheus.binaries()
    if found is None:
        skip_missing_tool(prometheus.MISSING)
    return found


def test_the_rules_file_passes_promtool_check_rules(bins: tuple[str, str]) -> None:
    out = prometheus.check_rules(bins[1], RULES)
    assert "SUCCESS: 7 rules found" in out


@pytest.fixture(scope="module")
def baseline(bins: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    return evaluate(stream(), workdir=tmp_path_factory.mktemp("promql"))


def fired(baseline: Baseline, alert: str) -> list[Firing]:
    return [f for f in baseline.firings if f.alert == alert]


def test_prometheus_loads_the_rules_with_their_for_and_types(baseline: Baseline) -> None:
    rules = {r.name: r for r in baseline.rules}
    assert rules["GpuCapacityAllocatableGap"].for_seconds == 300
    assert types_of(rules["GpuXidError"].annotations) == (
        "device_unhealthy_eviction",
        "gpu_app_fault",
        "xid_repeat",
    )
    assert baseline.evaluated_from == at_s(0)


def test_a_gpu_pod_pending_long_enough_fires_the_pending_alerts(baseline: Baseline) -> None:
    pending = fired(baseline, "GpuPodPending")
    assert [(f.label("pod"), f.start, f.end) for f in pending] == [("wait-0", at_s(300), None)]
    fixed = fired(baseline, "GpuPodPendingOver10mFixed")
    # time() - created > 600 first holds at the evaluation after 600 s.
    assert [(f.label("pod"), f.start) for f in fixed] == [("wait-0", at_s(660))]


def test_the_documents_pending_over_10m_fires_for_every_running_gpu_pod(baseline: Baseline) -> None:
    """§7.4 as written: `time() - created * pending` is `time() - 0` for a running pod."""
    verbatim = {f.label("pod"): f.start for f in fired(baseline, "GpuPodPendingOver10m")}
    assert verbatim["train-0"] == at_s(0)
    assert verbatim["wait-0"] == at_s(660)


def test_an_allocatable_drop_fires_after_its_for_and_a_short_one_never(baseline: Baseline) -> None:
    gap = fired(baseline, "GpuCapacityAllocatableGap")
    assert [(f.label("node"), f.active_at, f.start, f.end) for f in gap] == [
        ("n2", at_s(300), at_s(600), None)
    ]


def test_the_xid_gauge_alert_sees_the_last_code_only(
    baseline: Baseline, bins: tuple[str, str]
) -> None:
    xid = fired(baseline, "GpuXidError")
    assert [(f.label("Hostname"), f.label("pod"), f.start) for f in xid] == [
        ("n1", "train-0", at_s(120))
    ]
    assert xid[0].end is None, "the gauge never resets: it fires until the end"


def test_the_restart_alert_cannot_tell_host_oom_from_cuda_oom(baseline: Baseline) -> None:
    """§9 as written: OOMKilled restarts fire it too, and one restart of an 8-GPU pod reads 8
    (the increase is multiplied by the pod's GPU count)."""
    restarts = {f.label("pod") for f in fired(baseline, "GpuPodRestartsNotOOM")}
    assert restarts == {"crash-0", "oom-0", "big-0"}


def test_the_cross_source_count_stays_quiet_within_five(baseline: Baseline) -> None:
    assert fired(baseline, "GpuAllocationMismatch") == []


def test_pending_pods_alone_trip_the_cross_source_count(
    bins: tuple[str, str], tmp_path: Path
) -> None:
    """§10 sums every pod's requests, pending ones included: one GPU bound and six pending
    1-GPU pods differ by 6 > 5, and it fires after its 5 minutes. Without the bound GPU it
    can never fire: `count()` of no series is no result, not 0, so a cluster where
    dcgm-exporter labels no GPU with a pod (the exporters down: the case §10 is for) is
    silent."""
    c = Cluster("c1")
    c.node("n1", 0)
    for index in range(6):
        c.pending(f"queued-{index}", 0, namespace="ml", created=0)
    unbound = evaluate(c.events, workdir=tmp_path / "unbound", tail=600)
    assert [f for f in unbound.firings if f.alert == "GpuAllocationMismatch"] == []
    c.pod("n1", "train-0", 0, namespace="ml")
    c.bind("n1", 0, GPU_A, BUS_A, ["train-0"], namespace="ml")
    bound = evaluate(c.events, workdir=tmp_path / "bound", tail=600)
    mismatch = [f for f in bound.firings if f.alert == "GpuAllocationMismatch"]
    assert [(f.labels, f.active_at, f.start) for f in mismatch] == [
        ((("alertname", "GpuAllocationMismatch"), ("severity", "ticket")), at_s(0), at_s(300))
    ]


# -- the for: state machine against Prometheus' own rule evaluation ------------------------------
def test_firings_agree_with_promtool_test_rules(bins: tuple[str, str], tmp_path: Path) -> None:
    """The stream moved to 1970, where promtool's unit tests start: Prometheus' own rule
    manager (``for:`` included) sees exactly the firings query_range + alerts.py give, at
    every evaluation; and it would say so if one were a minute off."""
    moved = to_epoch(stream())
    assert min(e.time for e in moved) == datetime(1970, 1, 1, tzinfo=UTC)
    verified = verify(moved, tmp_path / "ok", tail=600)
    assert verified.firings >= 8
    assert verified.checks == 7 * 21, "7 alerts x 21 evaluations (0..20 min)"
    baseline = evaluate(moved, workdir=tmp_path / "run", tail=600, lookback=PROMTOOL_LOOKBACK)
    early = baseline.firings[0]
    wrong = dataclasses.replace(
        baseline,
        firings=[dataclasses.replace(early, start=early.start + 60), *baseline.firings[1:]],
    )
    path = tmp_path / "wrong.json"
    path.write_bytes(msgspec.json.encode(unit_test(wrong, RULES)))
    done = subprocess.run(
        [bins[1], "test", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode != 0
    assert early.alert in done.stdout + done.stderr


# -- the command -----------------------------------------------------------------------------
def _write(path: Path, records: list[AnyEvent] | list[ExpectedIncident]) -> str:
    path.write_bytes(b"".join(encode(r) + b"\n" for r in records))
    return str(path)


def test_the_command_scores_against_a_truth_file_as_json(
    bins: tuple[str, str], tmp_path: Path
) -> None:
    events = _write(tmp_path / "events.jsonl", stream())
    truth = _write(
        tmp_path / "truth.jsonl",
        [
            _expected("gpu_degraded", 300, node="n2"),
            _expected("xid_repeat", 95, node="n1"),
            _expected("host_oom_kill", 60, node="n2", pods=("ml/oom-0",)),
        ],
    )
    result = CliRunner().invoke(main, [events, "--truth", truth, "-o", "json"])
    assert result.exit_code == 0, result.output
    report = loads(result.output)
    types = {t["type"]: t for t in report["types"]}
    assert types["gpu_degraded"]["caught"] == 1
    assert types["gpu_degraded"]["delay_median_s"] == 300
    assert types["host_oom_kill"]["alerts"] == []
    assert report["stream"]["xid_records"] == 3
    assert report["stream"]["xid_gauge_changes_seen"] == 1
    alerts = {a["alert"]: a for a in report["alerts"]}
    assert alerts["GpuPodRestartsNotOOM"]["confused_with"] == {"host_oom_kill": 1}
    table = CliRunner().invoke(main, [events, "--truth", truth, "--verify"])
    assert table.exit_code == 0, table.output
    assert "GpuCapacityAllocatableGap" in table.output
    assert "verified: promtool test rules agrees on" in table.output


def test_without_prometheus_the_command_says_so(tmp_path: Path) -> None:
    events = _write(tmp_path / "events.jsonl", stream())
    done = subprocess.run(
        [sys.executable, "-m", "bench.promql", events],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PATH": str(tmp_path)},
        cwd=ROOT,
    )
    assert done.returncode != 0
    assert done.stderr.strip() == f"Error: {prometheus.MISSING}"


def test_command_mistakes_are_one_line(tmp_path: Path) -> None:
    missing = CliRunner().invoke(main, [str(tmp_path / "nope.jsonl")])
    assert missing.exit_code != 0
    assert "nope.jsonl" in missing.output
    assert "Traceback" not in missing.output
    a, b = Cluster("a"), Cluster("b")
    a.node("n1", 0)
    b.node("n2", 0)
    both = _write(tmp_path / "both.jsonl", [*a.events, *b.events])
    several = CliRunner().invoke(main, [both])
    assert several.exit_code != 0
    assert "--cluster" in several.output
    used = tmp_path / "used"
    (used / "data" / "01BLOCK").mkdir(parents=True)
    again = CliRunner().invoke(
        main, [_write(tmp_path / "one.jsonl", a.events), "--keep", str(used)]
    )
    assert again.exit_code != 0
    assert "not empty" in again.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"schema": "pod.v1"}\n')
    broken = CliRunner().invoke(main, [str(bad)])
    assert broken.exit_code != 0
    assert "bad.jsonl:1:" in broken.output
