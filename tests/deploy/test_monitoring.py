"""deploy/monitoring: the PrometheusRule passes the real promtool, its baseline alerts fire
on the series they are about and stay silent otherwise (``promtool test rules``), and
the rules and the dashboard name only metrics that exist.

promtool is Debian's ``prometheus`` package (``make tools`` installs it where apt runs);
without it those tests skip, saying why. The dashboard's queries are parsed by a real
PromQL parser (the ``promql-parser`` package, a binding of the Rust parser GreptimeDB
uses), not by a regular expression.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any, Final

import promql_parser
import pytest
import yaml

from bench.promql.selection import of_expressions
from tests.deploy.rendered import render
from tests.paths import DEPLOY, ROOT
from tests.tools import skip_missing_tool

MONITORING: Final = DEPLOY / "monitoring"
BASELINE: Final = ROOT / "bench" / "promql" / "baseline-rules.yaml"
EXTERNAL: Final = frozenset(
    {
        # kube-state-metrics (https://github.com/kubernetes/kube-state-metrics/tree/main/docs)
        "kube_pod_status_phase",
        "kube_pod_container_resource_requests",
        "kube_node_status_capacity",
        "kube_node_status_allocatable",
        "kube_pod_container_status_restarts_total",
        "kube_pod_container_status_terminated_reason",
        "kube_pod_created",
        # dcgm-exporter's default counters (etc/default-counters.csv)
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_GPU_TEMP",
    }
)
"""The metrics of others the baseline alerts and the dashboard read: the same series the
bench's PromQL baseline synthesises (bench/promql/series.py)."""
REQUIRED_PANELS: Final = (
    "Open incidents by type",
    "Incident revisions out",
    "Time to detect",
    "Pipeline health",
    "GPU degradation by node",
)
"""What the dashboard must show: the incidents, their rate, time to detect, the
pipeline's health and GPU degradation by node."""
FLEET_PANELS: Final = (
    "Fleet: healthy GPUs",
    "Fleet: GPUs out of service",
    "Fleet: open pages",
    "Fleet: open incidents by severity",
    "Fleet: mean time to resolve",
)
"""The dashboard's "Fleet" row: one panel per fleet gauge and recording rule."""


def _rule_groups() -> list[dict[str, Any]]:
    [rule] = [d for d in render("production") if d["kind"] == "PrometheusRule"]
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        skip_missing_tool(
            "promtool is not installed: `make tools` installs Debian's prometheus package "
            "where apt is available"
        )
    return found


def _exported() -> set[str]:
    """Every sample name gputriage's processes can export."""
    from connectors.autoscaler.metrics import AutoscalerMetrics  # noqa: PLC0415
    from connectors.dcgm.scrape import DcgmMetrics  # noqa: PLC0415
    from connectors.k8s.metrics import ConnectorMetrics  # noqa: PLC0415
    from connectors.writeback.metrics import WritebackMetrics  # noqa: PLC0415
    from connectors.xid.run import KmsgMetrics  # noqa: PLC0415
    from streams.app.metrics import Metrics  # noqa: PLC0415
    from streams.bridges.metrics import BridgeMetrics  # noqa: PLC0415

    names: set[str] = set()
    every = (
        Metrics(),
        ConnectorMetrics(),
        KmsgMetrics("kmsg"),
        DcgmMetrics(),
        BridgeMetrics(),
        AutoscalerMetrics(),
        WritebackMetrics(),
    )
    for metrics in every:
        for family in metrics.registry.collect():
            names.add(family.name)
            if family.type == "counter":
                names.add(f"{family.name}_total")
            elif family.type == "histogram":
                names |= {f"{family.name}_{s}" for s in ("bucket", "sum", "count")}
    return names


def _dashboard_exprs() -> list[tuple[str, str]]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text(encoding="utf-8"))
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]


def _recorded() -> set[str]:
    """The series our recording rules write: the dashboard and alerts may read them."""
    return {r["record"] for g in _rule_groups() for r in g["rules"] if "record" in r}


def test_the_rules_and_the_dashboard_parse_and_name_only_metrics_that_exist() -> None:
    exprs = [(r.get("alert") or r["record"], r["expr"]) for g in _rule_groups() for r in g["rules"]]
    exprs += _dashboard_exprs()
    exported = _exported()
    recorded = _recorded()
    used: set[str] = set()
    for where, expr in exprs:
        try:
            promql_parser.parse(expr)
        except ValueError as exc:
            pytest.fail(f"{where}: {expr!r} does not parse: {exc}")
        # bench.promql.selection walks the same syntax tree for the PromQL baseline: an
        # expression it cannot bound (every series) names no metric here, and fails.
        names = set(of_expressions([expr]).names())
        assert names, f"{where} selects no metric (or one it cannot bound)"
        used |= names
    ours = {n for n in used if n.startswith("gputriage_")}
    assert ours, "the rules name gputriage metrics"
    assert not ours - exported, f"metrics nobody exports: {sorted(ours - exported)}"
    unknown = used - ours - EXTERNAL - recorded
    assert not unknown, f"unknown metrics: {sorted(unknown)}"
    assert recorded <= used, f"recorded, never read: {sorted(recorded - used)}"


def test_the_dashboard_shows_what_an_on_call_needs() -> None:
    titles = {title for title, _ in _dashboard_exprs()}
    for wanted in REQUIRED_PANELS + FLEET_PANELS:
        assert any(title.startswith(wanted) for title in titles), f"no panel {wanted!r}"


def test_the_fleet_row_reads_every_fleet_series() -> None:
    """The "Fleet" row exists and its panels read each fleet gauge or its recording."""
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text(encoding="utf-8"))
    rows = [p["title"] for p in dashboard["panels"] if p.get("type") == "row"]
    assert "Fleet" in rows
    fleet = " ".join(expr for title, expr in _dashboard_exprs() if title.startswith("Fleet"))
    for name in (
        "gputriage:fleet_gpus_healthy:ratio",
        "gputriage:fleet_gpus:sum",
        "gputriage:open_pages:sum",
        "gputriage_open_incidents",
        "gputriage:incident_resolution_seconds:mean1d",
    ):
        assert name in fleet, name


def test_our_health_alerts_cover_lag_dead_letters_watches_silence_and_bridges() -> None:
    exprs = " ".join(r["expr"] for g in _rule_groups() for r in g["rules"])
    for metric in (
        "gputriage_consumer_lag",
        "gputriage_dead_letters_total",
        "gputriage_connector_watch_restarts_total",
        "gputriage_sources_idle",
        "gputriage_bridge_retries_total",
    ):
        assert metric in exprs, metric


def test_the_baseline_alerts_are_the_benchs_expressions() -> None:
    """One set of the reference document's alerts: what is deployed is what bench/promql
    measured against our incidents (except §7.4 as written, which fires for every GPU pod
    that is not pending: the precedence-fixed one is deployed under its name)."""
    [deployed] = [g for g in _rule_groups() if g["name"] == "gpu-baseline"]
    [bench] = yaml.safe_load(BASELINE.read_text(encoding="utf-8"))["groups"]
    measured = {r["alert"]: r for r in bench["rules"]}
    measured["GpuPodPendingOver10m"] = measured.pop("GpuPodPendingOver10mFixed")
    assert {r["alert"] for r in deployed["rules"]} == set(measured)
    for rule in deployed["rules"]:
        twin = measured[rule["alert"]]
        assert rule["expr"] == twin["expr"], rule["alert"]
        assert rule.get("for") == twin.get("for"), rule["alert"]
        assert rule["labels"]["gputriage_baseline"] == "true"
        assert rule["annotations"]["gputriage_types"] == twin["annotations"]["gputriage_types"]


def test_promtool_accepts_every_rule(tmp_path: Path) -> None:
    promtool = _promtool()
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": _rule_groups()}), encoding="utf-8")
    done = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 27 rules found" in done.stdout, done.stdout


GPU_REQUEST = (
    "kube_pod_container_resource_requests"
    '{resource="nvidia_com_gpu",namespace="ml",pod="p",container="c"}'
)


def _alert(name: str, labels: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    [deployed] = [g for g in _rule_groups() if g["name"] == "gpu-baseline"]
    [rule] = [r for r in deployed["rules"] if r["alert"] == name]
    return {
        "exp_labels": {**rule["labels"], **labels},
        "exp_annotations": {
            "reference": rule["annotations"]["reference"],
            "gputriage_types": rule["annotations"]["gputriage_types"],
            **annotations,
        },
    }


def _cases() -> list[dict[str, Any]]:
    """One firing and one silent case per baseline alert, each a promtool test of its own
    (series of one case never reach another)."""

    def case(
        alert: str, at: str, series: dict[str, str], fired: list[dict[str, Any]]
    ) -> dict[str, Any]:
        return {
            "name": f"{alert} {'fires' if fired else 'stays silent'}",
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": fired}],
        }

    pending = 'kube_pod_status_phase{phase="Pending",namespace="ml",pod="p"}'
    pod = {"namespace": "ml", "pod": "p"}
    capacity = 'kube_node_status_capacity{resource="nvidia_com_gpu",node="n1"}'
    allocatable = 'kube_node_status_allocatable{resource="nvidia_com_gpu",node="n1"}'
    restarts = 'kube_pod_container_status_restarts_total{namespace="ml",pod="p",container="c"}'
    oom = (
        "kube_pod_container_status_terminated_reason"
        '{reason="OOMKilled",namespace="ml",pod="p",container="c"}'
    )
    xid = 'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-1",Hostname="n1"}'
    temps = {f'DCGM_FI_DEV_GPU_TEMP{{gpu="{i}",pod="p"}}': "40x10" for i in range(8)}
    one_temp = {'DCGM_FI_DEV_GPU_TEMP{gpu="0",pod="p"}': "40x10"}
    created = 'kube_pod_created{namespace="ml",pod="p"}'
    return [
        case(
            "GpuPodPending",
            "6m",
            {pending: "1x10", GPU_REQUEST: "1x10"},
            [
                _alert(
                    "GpuPodPending",
                    {**pod, "phase": "Pending"},
                    {"summary": "GPU pod ml/p has been Pending for 5 minutes."},
                )
            ],
        ),
        case("GpuPodPending", "6m", {pending: "1x10", GPU_REQUEST: "0x10"}, []),
        case(
            "GpuCapacityAllocatableGap",
            "6m",
            {capacity: "8x10", allocatable: "7x10"},
            [
                _alert(
                    "GpuCapacityAllocatableGap",
                    {"node": "n1", "resource": "nvidia_com_gpu"},
                    {
                        "summary": "1 GPUs on n1 are in capacity but not allocatable (the "
                        "device plugin marked them unhealthy)."
                    },
                )
            ],
        ),
        case("GpuCapacityAllocatableGap", "6m", {capacity: "8x10", allocatable: "8x10"}, []),
        case(
            "GpuPodRestartsNotOOM",
            "20m",
            {restarts: "0+1x20", GPU_REQUEST: "1x20"},
            [
                _alert(
                    "GpuPodRestartsNotOOM",
                    {**pod, "container": "c"},
                    {
                        "summary": "GPU pod ml/p restarted more than 3 times in 15 minutes "
                        "without an OOMKilled: likely a CUDA OOM."
                    },
                )
            ],
        ),
        case(
            "GpuPodRestartsNotOOM",
            "20m",
            {restarts: "0+1x20", GPU_REQUEST: "1x20", oom: "1x20"},
            [],
        ),
        case(
            "GpuXidError",
            "2m",
            {xid: "79x5"},
            [
                _alert(
                    "GpuXidError",
                    {"gpu": "0", "UUID": "GPU-1", "Hostname": "n1"},
                    {"summary": "GPU 0 on n1 reported XID 79."},
                )
            ],
        ),
        case("GpuXidError", "2m", {xid: "0x5"}, []),
        case(
            "GpuAllocationMismatch",
            "6m",
            {GPU_REQUEST.replace('container="c"', 'container="c8"'): "8x10", **one_temp},
            [
                _alert(
                    "GpuAllocationMismatch",
                    {},
                    {
                        "summary": "Kubernetes and dcgm-exporter disagree by 7 GPUs on how "
                        "many are held by pods."
                    },
                )
            ],
        ),
        case(
            "GpuAllocationMismatch",
            "6m",
            {GPU_REQUEST.replace('container="c"', 'container="c8"'): "8x10", **temps},
            [],
        ),
        case(
            "GpuPodPendingOver10m",
            "11m",
            {created: "0x15", pending: "1x15", GPU_REQUEST: "1x15"},
            [
                _alert(
                    "GpuPodPendingOver10m",
                    pod,
                    {"summary": "GPU pod ml/p has been Pending for 11m 0s."},
                )
            ],
        ),
        case(
            "GpuPodPendingOver10m",
            "11m",
            {created: "0x15", pending: "0x15", GPU_REQUEST: "1x15"},
            [],
        ),
    ]


def test_each_baseline_alert_fires_on_its_case_and_stays_silent_on_the_other(
    tmp_path: Path,
) -> None:
    promtool = _promtool()
    (tmp_path / "rules.yaml").write_text(
        yaml.safe_dump({"groups": _rule_groups()}), encoding="utf-8"
    )
    cases = _cases()
    alerts = {t["alert_rule_test"][0]["alertname"] for t in cases}
    [deployed] = [g for g in _rule_groups() if g["name"] == "gpu-baseline"]
    assert alerts == {r["alert"] for r in deployed["rules"]}, "a baseline alert has no case"
    tests = tmp_path / "baseline.test.yaml"
    tests.write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": cases}),
        encoding="utf-8",
    )
    done = subprocess.run(
        [promtool, "test", "rules", str(tests)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout, done.stdout


def _fleet_alert(name: str, labels: dict[str, str], summary: str) -> dict[str, Any]:
    [fleet] = [g for g in _rule_groups() if g["name"] == "gputriage.fleet"]
    [rule] = [r for r in fleet["rules"] if r.get("alert") == name]
    return {
        "exp_labels": {**rule["labels"], **labels},
        "exp_annotations": {**rule["annotations"], "summary": summary},
    }


def _fleet_cases() -> list[dict[str, Any]]:
    """The fleet group: each recording over series of two workers (each counts the
    nodes it holds), and each alert firing on its case and silent on the other."""
    pool = 'cluster="c1",pool="p1",product="H100"'

    def gpus(worker: str, state: str) -> str:
        return f'gputriage_fleet_gpus{{{pool},state="{state}",instance="{worker}"}}'

    def half_sick(steps: int) -> dict[str, str]:
        """Two workers' nodes: 6 of 8 GPUs healthy."""
        counts = {("w1", "healthy"): 4, ("w1", "unhealthy"): 2, ("w2", "healthy"): 2}
        counts[("w2", "unhealthy")] = 0
        return {gpus(w, state): f"{n}x{steps}" for (w, state), n in counts.items()}

    well = {gpus("w1", "healthy"): "8x60", gpus("w1", "unhealthy"): "0x60"}
    resolution = "gputriage_incident_resolution_seconds"
    pages = "gputriage_open_incidents"
    page, ticket = 'severity="page"', 'severity="ticket"'
    recorded = {
        "name": "fleet recordings",
        "interval": "1h",
        "input_series": [
            {
                "series": f'{resolution}_sum{{type="xid_repeat",instance="w1"}}',
                "values": "0+300x30",
            },
            {
                "series": f'{resolution}_count{{type="xid_repeat",instance="w1"}}',
                "values": "0+1x30",
            },
            {"series": f'{resolution}_sum{{type="gpu_degraded",instance="w1"}}', "values": "0x30"},
            {
                "series": f'{resolution}_count{{type="gpu_degraded",instance="w1"}}',
                "values": "0x30",
            },
            *({"series": s, "values": v} for s, v in half_sick(30).items()),
            {
                "series": f'{pages}{{cluster="c1",type="xid_repeat",{page},instance="w1"}}',
                "values": "2x30",
            },
            {
                "series": f'{pages}{{cluster="c1",type="xid_repeat",{page},instance="w2"}}',
                "values": "1x30",
            },
            {
                "series": f'{pages}{{cluster="c1",type="gpu_degraded",{ticket},instance="w1"}}',
                "values": "5x30",
            },
        ],
        "promql_expr_test": [
            {
                "expr": "gputriage:fleet_gpus_healthy:ratio",
                "eval_time": "1d",
                "exp_samples": [
                    {"labels": f"gputriage:fleet_gpus_healthy:ratio{{{pool}}}", "value": 0.75}
                ],
            },
            {
                "expr": 'gputriage:fleet_gpus:sum{state="unhealthy"}',
                "eval_time": "1d",
                "exp_samples": [
                    {"labels": f'gputriage:fleet_gpus:sum{{{pool},state="unhealthy"}}', "value": 2}
                ],
            },
            {
                # A type that resolved nothing in the day has no mean (not 0, not NaN).
                "expr": "gputriage:incident_resolution_seconds:mean1d",
                "eval_time": "1d",
                "exp_samples": [
                    {
                        "labels": 'gputriage:incident_resolution_seconds:mean1d{type="xid_repeat"}',
                        "value": 300,
                    }
                ],
            },
            {
                "expr": "gputriage:open_pages:sum",
                "eval_time": "1d",
                "exp_samples": [
                    {
                        "labels": 'gputriage:open_pages:sum{cluster="c1",type="xid_repeat"}',
                        "value": 3,
                    }
                ],
            },
        ],
    }

    def case(alert: str, series: dict[str, str], fired: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "name": f"{alert} {'fires' if fired else 'stays silent'}",
            "interval": "1m",
            "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": [{"eval_time": "40m", "alertname": alert, "exp_alerts": fired}],
        }

    unhealthy = "GputriageFleetUnhealthy"
    breaker = "GputriageWritebackBreakerTripped"
    tripped = 'gputriage_writeback_breaker_tripped{instance="wb"}'
    summary = "Only 75% of the H100 GPUs of pool p1 in c1 are in service."
    return [
        recorded,
        case(
            unhealthy,
            half_sick(60),
            [_fleet_alert(unhealthy, {"cluster": "c1", "pool": "p1", "product": "H100"}, summary)],
        ),
        case(unhealthy, well, []),
        case(
            breaker,
            {tripped: "0x5 1x55"},
            [
                _fleet_alert(
                    breaker,
                    {},
                    "The write-back breaker tripped; nodes with GPU faults are no longer "
                    "being marked.",
                )
            ],
        ),
        case(breaker, {tripped: "0x60"}, []),
    ]


def test_the_fleet_rules_record_and_alert_on_their_series(tmp_path: Path) -> None:
    promtool = _promtool()
    (tmp_path / "rules.yaml").write_text(
        yaml.safe_dump({"groups": _rule_groups()}), encoding="utf-8"
    )
    tests = tmp_path / "fleet.test.yaml"
    tests.write_text(
        yaml.safe_dump(
            {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": _fleet_cases()}
        ),
        encoding="utf-8",
    )
    done = subprocess.run(
        [promtool, "test", "rules", str(tests)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout, done.stdout
