"""bench/promql/selection.py: only the series some rule can read are backfilled, and the
firings do not change for it.

The scenario is tests/bench/test_promql.py's stream (its docstring says what happens).
"""

from __future__ import annotations

from pathlib import Path

from bench.promql import prometheus
from bench.promql.run import RULES, evaluate
from bench.promql.selection import EVERY_SERIES, of_expressions, of_rules_file
from bench.promql.series import (
    LAST_TERMINATED,
    POD_INFO,
    POD_PHASE,
    REQUESTS,
    TEMP,
    XID,
    Labels,
    labels,
    scrape,
)
from tests.bench.test_promql import stream
from tests.tools import skip_missing_tool


def pod(**extra: str) -> Labels:
    return labels(namespace="ml", pod="train-0", uid="u", **extra)


def test_the_reference_rules_read_the_pending_phase_only_and_no_info_series() -> None:
    wanted = of_rules_file(RULES).wants
    assert wanted(POD_PHASE, pod(phase="Pending"))
    assert not wanted(POD_PHASE, pod(phase="Running")), "no rule selects another phase"
    assert not wanted(POD_INFO, pod(node="n1")), "no rule names kube_pod_info"
    assert not wanted(LAST_TERMINATED, pod(container="c", reason="OOMKilled"))
    assert wanted(REQUESTS, pod(resource="nvidia_com_gpu", container="c"))
    assert not wanted(REQUESTS, pod(resource="cpu", container="c"))


def test_a_label_a_series_lacks_matches_as_empty_as_in_prometheus() -> None:
    """§10 counts `DCGM_FI_DEV_GPU_TEMP{pod!=""}`: an idle GPU's series has no pod label."""
    wanted = of_rules_file(RULES).wants
    assert wanted(TEMP, labels(gpu="0", UUID="GPU-a", pod="train-0"))
    assert not wanted(TEMP, labels(gpu="0", UUID="GPU-a"))
    assert wanted(XID, labels(gpu="0", UUID="GPU-a")), "the gauge alert selects every GPU"


def test_regexes_are_anchored_and_or_groups_select_either() -> None:
    wanted = of_expressions(['kube_pod_status_phase{phase=~"Pend.*" or pod="x"}']).wants
    assert wanted(POD_PHASE, pod(phase="Pending"))
    assert not wanted(POD_PHASE, pod(phase="NotPending")), "=~ matches the whole value"
    assert wanted(POD_PHASE, labels(namespace="ml", pod="x", phase="Running"))
    negated = of_expressions(['kube_pod_status_phase{phase!~"Run.*"}']).wants
    assert not negated(POD_PHASE, pod(phase="Running"))
    assert negated(POD_PHASE, pod(phase="Failed"))


def test_label_names_and_strings_in_an_expression_are_not_metrics() -> None:
    """`by (kube_pod_info)` names a label and `"kube_pod_info"` is a string: neither selects."""
    selection = of_expressions(
        [
            'sum by (kube_pod_info) (label_replace(DCGM_FI_DEV_XID_ERRORS, "kube_pod_info",'
            ' "$1", "gpu", "(.*)"))'
        ]
    )
    assert selection.names() == ["DCGM_FI_DEV_XID_ERRORS"]


def test_a_selector_without_a_metric_name_keeps_everything() -> None:
    assert of_expressions(['count({__name__=~"kube_.*"})']) == EVERY_SERIES
    assert of_expressions(["info(DCGM_FI_DEV_XID_ERRORS)"]) == EVERY_SERIES, "target_info"
    assert of_expressions(['{__name__=~"kube_.*"}']).wants(POD_INFO, pod())


def test_a_rules_file_prometheus_would_reject_keeps_everything(tmp_path: Path) -> None:
    bad = tmp_path / "rules.yaml"
    bad.write_text("groups: [unclosed\n")
    assert of_rules_file(bad) == EVERY_SERIES
    assert of_expressions(["sum(("]) == EVERY_SERIES, "Prometheus judges what this cannot read"


def test_a_regex_python_reads_otherwise_keeps_every_series_of_its_metric() -> None:
    """RE2's POSIX class: Python's re compiles it (with a FutureWarning) as something else."""
    wanted = of_expressions(['kube_pod_status_phase{phase=~"[[:alpha:]]+"}']).wants
    assert wanted(POD_PHASE, pod(phase="Pending"))


def test_a_selected_scrape_holds_the_wanted_series_of_a_full_one_and_no_other() -> None:
    wanted = of_rules_file(RULES).wants
    full = scrape(stream(), tail=60)
    kept = scrape(stream(), tail=60, keep=wanted)
    expected = {
        (family, series): points
        for family, by_labels in full.series.items()
        for series, points in by_labels.items()
        if wanted(family, series)
    }
    got = {
        (family, series): points
        for family, by_labels in kept.series.items()
        for series, points in by_labels.items()
    }
    assert got == expected
    assert kept.sample_count() < full.sample_count() / 2
    assert kept.xids_visible == full.xids_visible == 1


def test_the_firings_are_the_same_with_every_series_backfilled(tmp_path: Path) -> None:
    if prometheus.binaries() is None:
        skip_missing_tool(prometheus.MISSING)
    selected = evaluate(stream(), workdir=tmp_path / "selected")
    every = evaluate(stream(), workdir=tmp_path / "every", all_series=True)
    assert selected.firings == every.firings
    assert len(selected.firings) >= 8
    assert selected.scraped.sample_count() < every.scraped.sample_count()
