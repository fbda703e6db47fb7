"""Autoscaler Events as people paste them, read as the live objects are.

A ``kubectl describe`` row, a ``kubectl get events`` row (plain, ``-A``, ``-o wide``, the
pre-1.14 layout), cluster-autoscaler's log of the Event and the bare message must give
the record the Event object gives (:func:`connectors.autoscaler.kube_events.event_fact`).
Messages are the autoscalers' format strings (kubernetes/autoscaler executor.go,
eventing_scale_up_processor.go; kubernetes-sigs/karpenter events.go; SOURCES.md of
tests/data/autoscaler/ca_real), column layouts those of kubectl's printers.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.autoscaler import karpenter, klog, kube_events
from connectors.autoscaler.kube_events import event_fact
from connectors.autoscaler.lines import (
    ANCHORS,
    KLOG_ANCHORS,
    RECORD_ANCHORS,
    Format,
    LineContext,
    parse_line,
)
from schemas.codec import RecordError, decode_event
from schemas.events import AutoscalerEvent
from tests.cli_helpers import gputriage

CTX = LineContext(cluster="c1", reference=datetime(2026, 11, 30, tzinfo=UTC))

EVENTS = [
    # (reason, source, message, involved kind, name, expected (action, reason, group))
    (
        "TriggeredScaleUp",
        "cluster-autoscaler",
        "pod triggered scale-up: [{eks-gpu-g5-4a 0->1 (max: 4)}]",
        "Pod",
        "trainer-0",
        ("scale_up_planned", "", "eks-gpu-g5-4a"),
    ),
    (
        "NotTriggerScaleUp",
        "cluster-autoscaler",
        "pod didn't trigger scale-up: 1 in backoff after failed scale-up, 2 Insufficient "
        "nvidia.com/gpu",
        "Pod",
        "trainer-0",
        ("unschedulable", "backoff", ""),
    ),
    (
        "NotTriggerScaleUp",
        "cluster-autoscaler",
        "pod didn't trigger scale-up: 3 max node group size reached",
        "Pod",
        "trainer-0",
        ("max_size_reached", "max_size", ""),
    ),
    (
        "ScaleUpTimedOut",
        "cluster-autoscaler",
        "Nodes added to group eks-gpu-g5-4a failed to register within 15m5.5s",
        "ConfigMap",
        "cluster-autoscaler-status",
        ("scale_up_timeout", "timeout", "eks-gpu-g5-4a"),
    ),
    (
        "Nominated",
        "karpenter",
        "Pod should schedule on: nodeclaim/gpu-h100-x7k2p",
        "Pod",
        "trainer-0",
        ("scale_up_planned", "", "gpu-h100"),
    ),
    (
        "InsufficientCapacityError",
        "karpenter",
        "NodeClaim gpu-h100-x7k2p event: creating instance, insufficient capacity, with fleet "
        "error(s), InsufficientInstanceCapacity: We currently do not have sufficient p5.48xlarge "
        "capacity in the Availability Zone you requested (us-east-1a).",
        "NodeClaim",
        "gpu-h100-x7k2p",
        ("scale_up_failed", "capacity", "gpu-h100"),
    ),
    (
        "NoCompatibleInstanceTypes",
        "karpenter",
        "NodePool requirements filtered out all compatible available instance types",
        "NodePool",
        "gpu-h100",
        ("scale_up_failed", "config", "gpu-h100"),
    ),
    (
        "FailedScheduling",
        "karpenter",
        'Failed to schedule pod, incompatible with nodepool "gpu-h100", daemonset overhead='
        '{"cpu":"200m","pods":"3"}, incompatible requirements, key nvidia.com/gpu.product, '
        "nvidia.com/gpu.product In [NVIDIA-B200] not in nvidia.com/gpu.product In [NVIDIA-H100]",
        "Pod",
        "trainer-0",
        ("unschedulable", "config", "gpu-h100"),
    ),
    (
        "DisruptionBlocked",
        "karpenter",
        'Cannot disrupt Node: pod "ml/trainer-0" has "karpenter.sh/do-not-disrupt" annotation',
        "Node",
        "ip-10-0-1-2.ec2.internal",
        ("scale_down", "other", ""),
    ),
    (
        "DisruptionTerminating",
        "karpenter",
        "Disrupting Node: Underutilized",
        "Node",
        "ip-10-0-1-2.ec2.internal",
        ("scale_down", "", ""),
    ),
    (
        "Evicted",
        "karpenter",
        "Evicted pod: Drifted",
        "Pod",
        "trainer-0",
        ("scale_down", "", ""),
    ),
]


@pytest.mark.parametrize(("reason", "source", "message", "kind", "name", "want"), EVENTS)
def test_every_paste_layout_reads_as_the_live_object(
    reason: str, source: str, message: str, kind: str, name: str, want: tuple[str, str, str]
) -> None:
    live = event_fact(reason, source, message, kind, "ml", name)
    assert live is not None
    assert (live.action, live.reason, live.node_group) == want
    typ = "Warning" if want[1] else "Normal"
    obj = f"{kind.lower()}/{name}"
    # layout: (text, whether the row shows the involved object)
    layouts = {
        "describe": (f"  {typ}  {reason}  7s (x359 over 60m)  {source}  {message}", False),
        "describe-one-space": (f" {typ}  {reason}    18m        {source} {message}", False),
        "get": (f"89s         {typ}   {reason}   {obj}   {message}", True),
        "get -A": (f"ml          2m5s        {typ}   {reason}   {obj}   {message}", True),
        "get -o wide": (
            f"3m   {typ}   {reason}   {obj}      {source}   {message}   58m   12   "
            f"{name}.17d9a2b3c4d5e6f7",
            True,
        ),
        "get (kubectl 1.13)": (
            f"3m   58m   12   {name}.17d9a2b3   {kind}      {typ}   {reason}   {{{source} }}"
            f"   {message}",
            False,
        ),
        "bare": (message, False),
    }
    for layout, (text, shown) in layouts.items():
        records = parse_line(text, CTX, 1)
        assert isinstance(records, tuple), (layout, records)
        namespace = "ml" if layout == "get -A" else ""  # else the one kubectl -n was given
        same = event_fact(reason, source, message, kind if shown else "", namespace, name)
        assert same is not None
        (got,) = records
        assert (got.action, got.reason, got.node_group, got.pods) == (
            same.action,
            same.reason,
            same.node_group,
            same.pods,
        ), layout
        assert got.action == want[0], layout
        assert got.source == source, layout
        assert got.message == message, layout


def test_rows_of_other_components_and_not_a_candidate_are_no_record() -> None:
    for text in (
        "  Warning  FailedScheduling  77s (x3 over 4m14s)  default-scheduler  0/8 nodes are "
        "available: 8 Insufficient nvidia.com/gpu.",
        "5m   Warning   Evicted   pod/web-1   The node was low on resource: memory.",
        "  Normal   Unconsolidatable  2m  karpenter  Can't replace with a cheaper node",
        "  Normal   Nominated  108s (x12 over 24m)  karpenter  Pod should schedule on: "
        "nodeclaim/default-cvkcv, node/ip-10-199-71-41.ec2.internal",
        "LAST SEEN   TYPE      REASON             OBJECT                     MESSAGE",
    ):
        assert parse_line(text, CTX, 1) == (), text


def test_a_triggered_scale_up_into_two_groups_is_two_plans() -> None:
    text = (
        "  Normal  TriggeredScaleUp  1m  cluster-autoscaler  pod triggered scale-up: "
        "[{gpu-a 1->2 (max: 4)} {gpu-b 0->1 (max: 4)}]"
    )
    records = parse_line(text, CTX, 1)
    assert isinstance(records, tuple)
    assert [(r.node_group, r.size_from, r.size_to) for r in records] == [
        ("gpu-a", 1, 2),
        ("gpu-b", 0, 1),
    ]


def test_karpenter_format_reads_pasted_events_but_not_klog() -> None:
    ctx = LineContext(cluster="c1", reference=CTX.reference, fmt="karpenter")
    row = "  Normal   Nominated   30m   karpenter   Pod should schedule on: nodeclaim/gpu-4m5qp"
    records = parse_line(row, ctx, 1)
    assert isinstance(records, tuple)
    assert [(r.action, r.node_group) for r in records] == [("scale_up_planned", "gpu")]
    klog_line = "I0710 06:03:45.956023       1 scale_up.go:427] Best option to resize: gpu"
    assert parse_line(klog_line, ctx, 1) == ()


def test_the_fast_path_anchors_cover_the_event_words() -> None:
    for word in kube_events.TRIGGERS:
        assert any(anchor in word for anchor in ANCHORS), word


def test_a_klog_line_needs_only_the_klog_anchors() -> None:
    """A line with a klog header is checked against the short list: every key word of
    cluster-autoscaler's messages must still be covered by it."""
    for word in klog.TRIGGERS:
        assert any(anchor in word for anchor in KLOG_ANCHORS), word


def test_a_json_line_needs_no_event_anchor() -> None:
    """A JSON line (a Karpenter record, klog in a docker or CRI wrapper) skips the words
    of pasted Events: every record key word must be covered without them."""
    for word in (*klog.TRIGGERS, *karpenter.TRIGGERS):
        assert any(anchor in word for anchor in RECORD_ANCHORS), word


_PIECES = st.sampled_from(
    [
        "  Normal  ",
        "  Warning  ",
        "TriggeredScaleUp",
        "FailedToScaleUpGroup",
        "Nominated",
        "DisruptionBlocked",
        "FailedScheduling",
        "Evicted",
        "  7s (x359 over 60m)  ",
        "<unknown>",
        "pod/",
        "nodepool/",
        "{cluster-autoscaler }",
        "  karpenter  ",
        "cluster-autoscaler",
        "pod triggered scale-up: [{",
        " 0->99999999999 (max: 1)}]",
        "Scale-up failed for group https://www.googleapis.com/x:",
        "Pod should schedule on: nodeclaim/",
        'incompatible with nodepool "',
        "NodeClaim a event: ",
        "reason: 'NotTriggerScaleUp' ",
        'Event(v1.ObjectReference{Kind:"Pod", Namespace:"',
        "Cannot disrupt Node: ",
        "\t",
        "\x00",
        "é",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=12)), max_size=10).map("".join))
def test_arbitrary_rows_made_of_event_pieces_never_raise(raw: str) -> None:
    formats: tuple[Format, ...] = ("auto", "klog", "karpenter", "gke")
    for fmt in formats:
        ctx = LineContext(cluster="c", reference=CTX.reference, fmt=fmt)
        assert isinstance(parse_line(raw, ctx, 1), tuple | RecordError)
        assert isinstance(parse_line(raw.encode("utf-8", "replace"), ctx, 1), tuple | RecordError)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_never_raise(raw: bytes) -> None:
    assert isinstance(parse_line(b"  Warning  FailedToScaleUpGroup  " + raw, CTX, 1), tuple)
    row = kube_events.pasted(raw.decode("utf-8", "replace"))  # returns (no raise): None or a row
    assert row is None or isinstance(row, kube_events.Pasted)


def test_ingest_autoscaler_reads_pasted_events_of_both_autoscalers() -> None:
    """ca_real/events_pasted.txt (real pastes, SOURCES.md): every line its label calls a
    fact is one record, the rest (headers, the scheduler's and kubelet's rows) unrecognised."""
    data = Path(__file__).parents[2] / "data" / "autoscaler" / "ca_real"
    labels = [
        label
        for label in map(json.loads, (data / "labels.jsonl").read_text().splitlines())
        if label["file"] == "events_pasted.txt"
    ]
    facts = sum(label["action"] != "other" for label in labels)
    path = data / "events_pasted.txt"
    done = gputriage(
        "ingest", "autoscaler", "--cluster", "prod", "--file", str(path), "--year", "2026"
    )
    assert done.returncode == 0, done.stderr
    records = [decode_event(line) for line in done.stdout.splitlines()]
    assert all(isinstance(r, AutoscalerEvent) for r in records)
    assert len(records) == facts
    assert {r.source for r in records if isinstance(r, AutoscalerEvent)} == {
        "cluster-autoscaler",
        "karpenter",
    }
    tail = f"{len(labels)} lines, {facts} records, {len(labels) - facts} unrecognised, 0 bad"
    assert done.stderr.decode().strip().endswith(tail)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (
            "  Normal   NotTriggerScaleUp  2m (x90 over 3h)  cluster-autoscaler  "
            "(combined from similar events): pod didn't trigger scale-up: 3 max node group size "
            "reached",
            ("max_size_reached", "max_size", ""),
        ),
        (
            "(combined from similar events): Pod should schedule on: nodeclaim/gpu-l4-x2k4l",
            ("scale_up_planned", "", "gpu-l4"),
        ),
        (
            "pod didn't trigger scale-up: backoff after failed scale-up",
            ("backoff", "backoff", ""),
        ),
        (
            "pod didn't trigger scale-up: max node group size reached, node(s) didn't match "
            "Pod's node affinity/selector",
            ("unschedulable", "max_size", ""),
        ),
    ],
)
def test_aggregated_events_and_reasons_without_counts(
    text: str, want: tuple[str, str, str]
) -> None:
    """client-go folds repeated Events into one whose message starts ``(combined from
    similar events): ``; some tools drop NotTriggerScaleUp's counts. Both still say why."""
    records = parse_line(text, CTX, 1)
    assert isinstance(records, tuple)
    assert [(r.action, r.reason, r.node_group) for r in records] == [want]
