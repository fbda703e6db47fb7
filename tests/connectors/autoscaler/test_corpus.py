"""Every line of the autoscaler corpus (tests/data/autoscaler) through the parsers.

The oracle is tests/data/autoscaler/labels.jsonl (action/reason per line, our reading of
each line; every line's public source is in that folder's SOURCES.md, by file and line).
Where the parser deliberately differs from a label, :data:`OVERRIDES` says why; a label
``other`` means "no fact in the vocabulary": the line is no record (counted unrecognised).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from connectors.autoscaler.lines import LineContext, parse_line
from schemas.events import AutoscalerEvent

DATA = Path(__file__).parents[2] / "data" / "autoscaler"
LOGS = (
    "ca_klog.log",
    "ca_klog_from_format.log",
    "ca_wrapped.log",
    "karpenter.jsonl",
    "karpenter_console.log",
    "karpenter_wrapped.log",
    "karpenter_azure.jsonl",
    "gke_visibility.jsonl",
)
REFERENCE = datetime(2026, 7, 1, tzinfo=UTC)
LABELS = {
    (label["file"], label["line"]): label
    for label in map(json.loads, (DATA / "labels.jsonl").read_text().splitlines())
}

OVERRIDES: dict[tuple[str, int], tuple[str, str | None, str]] = {
    # "launched nodeclaim": a step of a scale-up that did not fail, read as a plan
    # (connectors/autoscaler/karpenter.py); labelled before launches were read.
    ("karpenter.jsonl", 4): ("scale_up_planned", None, "a launch is a scale-up step"),
    ("karpenter_wrapped.log", 2): ("scale_up_planned", None, "a launch is a scale-up step"),
    ("karpenter.jsonl", 10): ("scale_up_planned", None, "a launch is a scale-up step"),
    # "No expansion options": the label says other/config here but unschedulable/config for
    # the same message at ca_klog.log L33 and L37 (#929, #4613); we follow L33/L37.
    ("ca_klog.log", 19): ("unschedulable", "config", "same message as L33 (#1537)"),
    ("ca_wrapped.log", 22): ("unschedulable", "config", "same message as ca_klog L33 (CRLF)"),
    # Loop bookkeeping printed every loop, naming no node: no decision (#3639, PR #1369).
    ("ca_klog.log", 40): ("other", None, "'Starting scale down' is bookkeeping"),
    ("ca_klog.log", 43): ("other", None, "'Scale down status:' is bookkeeping"),
    # "Cluster is not ready for autoscaling" (contrib#2547) is no scale fact.
    ("ca_klog.log", 64): ("other", None, "cluster readiness, no vocabulary action"),
    # The priority expander's decision names the group it chose (PR #5756): a plan, as
    # "Best option to resize" is for the other expanders; labelled before it was read.
    ("ca_klog.log", 6): ("scale_up_planned", None, "expander decision"),
    # errorClass=Other; errorCode=cloudProviderError: the line itself names no quota (the
    # quota is only in the preceding Azure error line, #2607); a line parser says other.
    ("ca_klog_from_format.log", 13): ("backoff", "other", "quota not in this line"),
    # "skipping, unable to resolve instance types ... EC2NodeClass not found" (#6292): the
    # NodePool can launch nothing, a scale-up that cannot happen (karpenter_real corpus).
    ("karpenter.jsonl", 20): ("scale_up_failed", "config", "a NodePool with no instance type"),
}


def _expected(name: str, number: int) -> tuple[str, str | None]:
    if (name, number) in OVERRIDES:
        action, reason, _why = OVERRIDES[name, number]
        return action, reason
    label = LABELS[name, number]
    return label["action"], label["reason"]


def parse(name: str, number: int, raw: str) -> tuple[AutoscalerEvent, ...]:
    ctx = LineContext(cluster="c1", reference=REFERENCE, source=name)
    result = parse_line(raw, ctx, number)
    assert isinstance(result, tuple), result
    return result


def corpus_lines() -> list[tuple[str, int, str]]:
    out: list[tuple[str, int, str]] = []
    for name in LOGS:
        with (DATA / name).open(newline="") as handle:
            out.extend((name, number, raw) for number, raw in enumerate(handle, 1))
    return out


@pytest.mark.parametrize(("name", "number", "raw"), corpus_lines(), ids=lambda v: str(v)[:40])
def test_every_corpus_line_matches_its_label(name: str, number: int, raw: str) -> None:
    """Each line of the log files in LOGS (sources: SOURCES.md, per file and line)."""
    action, reason = _expected(name, number)
    records = parse(name, number, raw)
    if action == "other":
        assert records == ()
        return
    assert records, f"{name}:{number} gave no record"
    for record in records:
        assert (record.action, record.reason or None) == (action, reason)
        assert record.cluster == "c1"
        assert record.line == raw.rstrip("\r\n")
        assert record.id.startswith("as-")


def test_every_label_is_checked() -> None:
    assert {(name, number) for name, number, _ in corpus_lines()} == set(LABELS)


def test_ids_are_deterministic_and_distinct() -> None:
    ids = [record.id for name, number, raw in corpus_lines() for record in parse(name, number, raw)]
    again = [
        record.id for name, number, raw in corpus_lines() for record in parse(name, number, raw)
    ]
    assert ids == again
    assert len(set(ids)) == len(ids)


def _one(name: str, number: int) -> AutoscalerEvent:
    raw = (DATA / name).read_text().splitlines()[number - 1]
    (record, *_rest) = parse(name, number, raw)
    return record


def test_gce_quota_and_stockout_share_a_class_but_not_a_reason() -> None:
    """ca_klog_from_format.log L5-L10 (format strings; SOURCES.md fmt-gce-quota/-stockout):
    both OutOfResource, told apart by the (renamed) code."""
    quota = _one("ca_klog_from_format.log", 6)
    stockout = _one("ca_klog_from_format.log", 8)
    assert quota.error_class == stockout.error_class == "OutOfResource"
    assert (quota.reason, quota.cloud_code, quota.cloud) == ("quota", "QUOTA_EXCEEDED", "gce")
    assert (stockout.reason, stockout.cloud_code) == ("capacity", "RESOURCE_POOL_EXHAUSTED")
    status = _one("ca_klog_from_format.log", 10)  # backoff with status: {true {...}}
    assert (status.action, status.reason, status.cloud_code) == (
        "backoff",
        "capacity",
        "RESOURCE_POOL_EXHAUSTED",
    )


def test_aws_placeholder_is_capacity_and_the_asg_line_names_the_ec2_code() -> None:
    """ca_klog.log L8 (PR #5756) and ca_klog_from_format.log L14 (#3241, #1402)."""
    placeholder = _one("ca_klog.log", 8)
    assert (placeholder.reason, placeholder.cloud_code, placeholder.cloud) == (
        "capacity",
        "placeholder-cannot-be-fulfilled",
        "aws",
    )
    asg = _one("ca_klog_from_format.log", 14)
    assert (asg.reason, asg.cloud_code, asg.node_group) == (
        "capacity",
        "InsufficientInstanceCapacity",
        "eks-gpu-spot-g5-4xlarge-2ac4b1f0",
    )
    vcpu = parse(
        "x",
        1,
        asg.line.replace("InsufficientInstanceCapacity", "VcpuLimitExceeded"),
    )[0]
    assert (vcpu.reason, vcpu.cloud_code) == ("quota", "VcpuLimitExceeded")


def test_azure_wording() -> None:
    """ca_klog.log L20 (#2607: OperationNotAllowed, family cores quota) and
    ca_klog_from_format.log L11 (provisioning-state-failed, format string)."""
    quota = _one("ca_klog.log", 20)
    assert (quota.action, quota.reason, quota.cloud_code, quota.cloud, quota.node_group) == (
        "scale_up_failed",
        "quota",
        "OperationNotAllowed",
        "azure",
        "k8s-workers-x-vmss",
    )
    provisioning = _one("ca_klog_from_format.log", 11)
    assert (provisioning.reason, provisioning.cloud_code, provisioning.cloud) == (
        "capacity",
        "provisioning-state-failed",
        "azure",
    )


def test_backoff_until_and_timeout() -> None:
    """ca_klog.log L3-L5 (#6128): timeout, backoff until T with errorCode=timeout, skip."""
    timeout = _one("ca_klog.log", 3)
    assert (timeout.action, timeout.reason) == ("scale_up_timeout", "timeout")
    backoff = _one("ca_klog.log", 4)
    assert backoff.until == datetime(2024, 3, 13, 12, 54, 40, 139187, tzinfo=UTC)
    assert (backoff.reason, backoff.cloud_code, backoff.error_class) == (
        "timeout",
        "timeout",
        "Other",
    )
    old = _one("ca_klog.log", 21)  # Azure/AKS#575: no class or code -> backoff
    assert (old.reason, old.until) == (
        "backoff",
        datetime(2018, 8, 1, 16, 7, 23, 327890, tzinfo=UTC),
    )


def test_final_plan_gives_one_record_per_group() -> None:
    """ca_klog.log L46 (#3835): three groups, from -> to (max)."""
    raw = (DATA / "ca_klog.log").read_text().splitlines()[45]
    records = parse("ca_klog.log", 46, raw)
    assert [(r.size_from, r.size_to, r.max_size) for r in records] == [
        (7, 19, 200),
        (7, 19, 200),
        (10, 18, 200),
    ]
    assert (
        records[2].node_group
        == "ethos51-sbx-va6-k8s-compute-1-worker2AutoScalingGroup-IDHHPMVTXE51"
    )


def test_scaled_up_group_event_and_old_triggered_scale_up() -> None:
    """ca_wrapped.log L16 (PR #9470, docker json) and ca_klog.log L63 (contrib#2547)."""
    event = _one("ca_wrapped.log", 16)
    assert (event.size_from, event.size_to, event.max_size) == (3, 5, 6)
    assert event.time == datetime(2026, 4, 9, 14, 9, 44, 822447, tzinfo=UTC)
    old = _one("ca_klog.log", 63)
    assert (old.node_group, old.size_from, old.size_to) == ("XXX", 3, 4)
    assert old.pods[0].namespace == "git"


def test_ca_resource_quotas_are_its_own_limits() -> None:
    """ca_klog_from_format.log L20 (orchestrator.go:1119): CA's limits, not cloud quota."""
    record = _one("ca_klog_from_format.log", 20)
    assert (record.action, record.reason, record.node_group) == (
        "max_size_reached",
        "max_size",
        "gpu-pool",
    )


def test_karpenter_classifies_by_code_and_finds_the_nodepool() -> None:
    """karpenter_console.log L1 (aws/karpenter-provider-aws#4346), karpenter.jsonl L7
    (#6643), L22 (#6292), L24 (kubernetes-sigs/karpenter#1288)."""
    ice = _one("karpenter_console.log", 1)
    assert (ice.reason, ice.cloud_code, ice.node_group, ice.source) == (
        "capacity",
        "InsufficientInstanceCapacity",
        "gpu",
        "karpenter",
    )
    quota = parse("x", 1, ice.line.replace("InsufficientInstanceCapacity", "VcpuLimitExceeded"))
    assert quota[0].reason == "quota"
    launch = _one("karpenter.jsonl", 7)
    assert (launch.node_group, launch.time) == (
        "gpu-g5-4",
        datetime(2024, 8, 4, 21, 21, 43, 196000, tzinfo=UTC),
    )
    limits = _one("karpenter.jsonl", 22)
    assert (limits.action, limits.node_group) == ("max_size_reached", "default")
    nodeclass = _one("karpenter.jsonl", 24)
    assert (nodeclass.action, nodeclass.reason) == ("scale_up_failed", "config")
    found = _one("karpenter.jsonl", 14)  # "... and 80 other(s)" is dropped
    assert len(found.pods) == 5
    assert found.pods[0].namespace == "dummy-test"


def test_a_cloud_is_recorded_only_where_the_line_shows_it_and_then_right() -> None:
    """``cloud`` comes from evidence in the line (codes, MIG URLs, provider file names);
    wherever it is set it agrees with the block's cloud in SOURCES.md / labels.jsonl."""
    shown = 0
    for name, number, raw in corpus_lines():
        for record in parse(name, number, raw):
            if record.cloud:
                shown += 1
                assert record.cloud in LABELS[name, number]["cloud"].split("|"), (name, number)
    assert shown >= 45  # 49 of the 150 records show their cloud


def test_the_ec2_vcpu_limit_message_without_its_code_is_quota() -> None:
    """EC2's VcpuLimitExceeded text as some wrappers quote it, without the code name."""
    from connectors.autoscaler.classify import classify  # noqa: PLC0415

    text = (
        "Failed to increase capacity: You have requested more vCPU capacity than your "
        "current vCPU limit of 32 allows for the instance bucket that the specified "
        "instance type belongs to."
    )
    assert classify(text)[0] == "quota"


def test_aks_failed_empty_node_deletion_is_a_failed_scale_down() -> None:
    """ca_klog.log L82 (Azure/AKS#3011): the VMSS refused ForceDelete under maintenance
    control; CA logs ``Problem with empty node deletion in nodegroup G: ...``."""
    record = _one("ca_klog.log", 82)
    assert (record.action, record.reason, record.node_group, record.cloud) == (
        "scale_down",
        "other",
        "aks-e80ids-18112100-vmss",
        "azure",
    )


def test_a_cut_timeout_line_behind_a_container_name_keeps_its_header_time() -> None:
    """ca_wrapped.log L23-L26 (kubernetes/autoscaler#2557, GCE): each line starts with
    ``cluster-autoscaler ``; the timeout line was cut after ``for node``."""
    timeout = _one("ca_wrapped.log", 23)
    assert (timeout.action, timeout.reason, timeout.node_group) == (
        "scale_up_timeout",
        "timeout",
        "",
    )
    assert timeout.time == datetime(2026, 11, 23, 11, 14, 33, 519660, tzinfo=UTC)
    backoff = _one("ca_wrapped.log", 25)
    assert (backoff.action, backoff.reason, backoff.cloud) == ("backoff", "backoff", "gce")
    assert backoff.time == datetime(2026, 11, 23, 11, 15, 51, 902873, tzinfo=UTC)
    assert backoff.node_group.endswith("/instanceGroups/$GROUP")
    mangled = parse("ca_wrapped.log", 26, (DATA / "ca_wrapped.log").read_text().splitlines()[25])
    assert mangled == ()  # "I112311:15:56" is no header, and min size reached is no fact


def test_azure_plans_name_their_group_and_sizes() -> None:
    """ca_klog.log L75 (#1329, VMSS) and L80 (#1118, acs-engine GPU pool)."""
    vmss = _one("ca_klog.log", 75)
    assert (vmss.node_group, vmss.size_from, vmss.size_to, vmss.max_size, vmss.cloud) == (
        "k8s-small-23489316-vmss",
        5,
        6,
        10,
        "azure",
    )
    gpu = _one("ca_klog.log", 80)
    assert (gpu.node_group, gpu.size_from, gpu.size_to, gpu.max_size) == (
        "linuxpool1",
        10,
        16,
        100,
    )
