"""The Karpenter parser's rules, one at a time: layouts, message families, node groups, wrappers.

Inputs are Karpenter's own format strings (the corpus in tests/data/autoscaler/karpenter_real
has the real lines); each case names the message family and generation it stands for.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connectors.autoscaler import karpenter, lines
from connectors.autoscaler.classify import classify
from connectors.autoscaler.lines import LineContext, parse_line
from connectors.autoscaler.unwrap import unwrap
from schemas.codec import RecordError
from schemas.events import PodRef

T = "\t"
CTX = LineContext(cluster="c", reference=datetime(2026, 7, 1, tzinfo=UTC))


def facts(message: str, **keys: Any) -> list[tuple[str, str, str]]:
    record: dict[str, Any] = {"message": message, **keys}
    return [(f.action, f.reason, f.node_group) for f in karpenter.parse_record(record)]


# -- the console encoder ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "logger", "message", "context"),
    [
        (  # TABs, context after a TAB
            f"2023-04-07T23:22:08.542Z{T}INFO{T}controller.termination{T}cordoned node{T}"
            '{"commit": "672a832-dirty", "node": "ip-1"}',
            "controller.termination",
            "cordoned node",
            {"node": "ip-1"},
        ),
        (  # a caller between logger and message
            f"2023-09-26T10:01:47.781Z{T}ERROR{T}controller.provisioner{T}scheduling/scheduler.go:190"
            f'{T}Could not schedule pod, x{T}{{"pod": "default/p"}}',
            "controller.provisioner",
            "Could not schedule pod, x",
            {"pod": "default/p"},
        ),
        (  # TABs turned into runs of spaces, then into one space
            "2022-03-15T19:40:06.545Z        INFO    controller.provisioning Computed packing of 1 "
            'node(s)   {"provisioner": "default"}',
            "controller.provisioning",
            "Computed packing of 1 node(s)",
            {"provisioner": "default"},
        ),
        (  # no separator before the context (aws/karpenter-provider-aws#4346)
            f"2023-07-27T20:42:45.865Z{T}ERROR{T}controller.machine.lifecycle{T}creating instance, "
            'x.{"machine": "gpu-nxb7j"}',
            "controller.machine.lifecycle",
            "creating instance, x.",
            {"machine": "gpu-nxb7j"},
        ),
        (  # JSON inside the message, and a nested context
            f"2023-02-08T16:20:05.113Z{T}INFO{T}controller.provisioner{T}launching machine with 2 "
            f'pods requesting {{"cpu":"8"}} from types g5.12xlarge{T}'
            '{"provisioner": "gpu", "allocatable": {"cpu":"1930m"}}',
            "controller.provisioner",
            'launching machine with 2 pods requesting {"cpu":"8"} from types g5.12xlarge',
            {"provisioner": "gpu", "allocatable": {"cpu": "1930m"}},
        ),
        (  # a context the paste cut: kept in the message
            f"2023-09-28T12:49:09.907Z{T}ERROR{T}controller.provisioner{T}creating scheduler{T}"
            '{"commit": "d',
            "controller.provisioner",
            'creating scheduler\t{"commit": "d',
            {},
        ),
        (  # the paste cut the time off (aws/karpenter-provider-aws#3576)
            f"INFO{T}controller.deprovisioning{T}deprovisioning via "
            f"emptiness delete, terminating 2 nodes ",
            "controller.deprovisioning",
            "deprovisioning via emptiness delete, terminating 2 nodes",
            {},
        ),
    ],
)
def test_console_layouts(line: str, logger: str, message: str, context: dict[str, Any]) -> None:
    record = karpenter.console_record(line)
    assert record is not None
    assert (record["logger"], record["message"]) == (logger, message)
    assert context.items() <= record.items()


def test_a_console_line_without_a_logger_keeps_its_whole_message() -> None:
    record = karpenter.console_record(
        f"2023-11-01T06:28:04.153Z{T}DEBUG{T}Successfully created the logger."
    )
    assert record is not None
    assert "logger" not in record
    assert record["message"] == "Successfully created the logger."


@pytest.mark.parametrize(
    "line",
    [
        "ERROR something went wrong in the autoscaler",
        "INFO cluster-autoscaler started",
        "E1123 11:14:33.519660 1 static_autoscaler.go:1] Failed",
        "",
    ],
)
def test_a_line_with_no_time_is_karpenters_only_when_its_logger_is(line: str) -> None:
    assert karpenter.console_record(line) is None


# -- message families, every generation -------------------------------------------------


FAMILIES: list[tuple[str, dict[str, Any], tuple[str, str, str] | None]] = [
    # pods wait
    ("Batched 3 pods in 1.0s", {"provisioner": "gpu"}, ("unschedulable", "", "gpu")),
    ("Found 2 provisionable pod(s)", {}, ("unschedulable", "", "")),
    ("found provisionable pod(s)", {"Pods": "ml/a, ml/b"}, ("unschedulable", "", "")),
    ("failed to compute packing", {"pods": "ml/a"}, ("unschedulable", "config", "")),
    (
        "could not schedule pod",
        {
            "error": 'incompatible with nodepool "gpu-a100", daemonset overhead={}, x; '
            'incompatible with nodepool "cpu", y',
            "Pod": {"name": "p", "namespace": "ml"},
        },
        ("unschedulable", "config", "gpu-a100"),
    ),
    ("Unable to schedule pod p/ml, no instance type", {}, ("unschedulable", "config", "")),
    (
        "Failed to find instance type option(s) for [ml/p]",
        {"provisioner": "gpu"},
        ("unschedulable", "config", "gpu"),
    ),
    # a scale-up goes on: plan, create, launch, register, initialize
    (
        "computed new nodeclaim(s) to fit pod(s)",
        {"nodeclaims": 1},
        ("scale_up_planned", "", ""),
    ),
    ("computed new machine(s) to fit pod(s)", {}, ("scale_up_planned", "", "")),
    ("Computed 1 new node(s) will fit 2 pod(s)", {}, ("scale_up_planned", "", "")),
    (
        "created nodeclaim",
        {"NodePool": {"name": "gpu"}, "NodeClaim": {"name": "gpu-x9k2p"}},
        ("scale_up_planned", "", "gpu"),
    ),
    (
        "launched nodeclaim",
        {"NodeClaim": {"name": "gpu-h100-x9k2p"}},
        ("scale_up_planned", "", "gpu-h100"),
    ),
    ("launched machine", {"machine": "runner-4vk2s"}, ("scale_up_planned", "", "runner")),
    (
        "registered nodeclaim",
        {"nodeclaim": "default-6kxff"},
        ("scale_up_planned", "", "default"),
    ),
    (
        "initialized nodeclaim",
        {"NodeClaim": {"name": "default-6kxff"}},
        ("scale_up_planned", "", "default"),
    ),
    (
        "Launched instance: i-0, hostname: ip-1, type: p3.8xlarge",
        {"provisioner": "gpu"},
        ("scale_up_planned", "", "gpu"),
    ),
    ("computed 3 unready node(s) will fit 4 pod(s)", {}, None),
    ("launched new instance", {}, None),
    ("Created instance", {"NodeClaim": {"name": "gpu-x9k2p"}}, None),
    # a scale-up fails
    (
        "failed launching nodeclaim",
        {
            "NodeClaim": {"name": "gpu-p5-7kq2d"},
            "error": "insufficient capacity, with fleet "
            "error(s), VcpuLimitExceeded: You have requested more vCPU capacity",
        },
        ("scale_up_failed", "quota", "gpu-p5"),
    ),
    (
        "Reconciler error",
        {
            "NodeClaim": {"name": "gpu-x9k2p"},
            "error": "launching nodeclaim, creating instance, "
            "with fleet error(s), InsufficientInstanceCapacity: We currently do not have",
        },
        ("scale_up_failed", "capacity", "gpu"),
    ),
    ("Reconciler error", {"error": "updating status, conflict"}, None),
    (
        "insufficient capacity, all requested instance types were unavailable during launch",
        {"nodeclaim": "a-x9k2p"},
        ("scale_up_failed", "capacity", "a"),
    ),
    (
        "Could not launch node, launching instances, with fleet "
        "error(s), InvalidBlockDeviceMapping: x",
        {},
        ("scale_up_failed", "config", ""),
    ),
    (
        "skipping, no resolved instance types found",
        {"NodePool": {"name": "gpu"}},
        ("scale_up_failed", "config", "gpu"),
    ),
    (
        "skipping, unable to resolve instance types, resolving node class",
        {"nodepool": "gpu"},
        ("scale_up_failed", "config", "gpu"),
    ),
    # limits
    (
        "40 out of 458 instance types were excluded because they would breach limits",
        {"NodePool": {"name": "gpu"}},
        ("max_size_reached", "max_size", "gpu"),
    ),
    (
        "could not schedule pod",
        {"error": 'all available instance types exceed limits for nodepool: "gpu"'},
        ("max_size_reached", "max_size", "gpu"),
    ),
    (
        'Could not schedule pod, incompatible with provisioner "cpu", x; all available '
        'instance types exceed limits for provisioner: "gpu"',
        {},
        ("max_size_reached", "max_size", "gpu"),
    ),
    # a node never came
    (
        "terminating due to registration ttl",
        {"nodeclaim": "gpu-x9k2p"},
        ("scale_up_timeout", "timeout", "gpu"),
    ),
    (
        "terminating machine due to registration ttl",
        {"machine": "gpu-x9k2p"},
        ("scale_up_timeout", "timeout", "gpu"),
    ),
    (
        "terminating due to timeout",
        {"reason": "launch_timeout"},
        ("scale_up_timeout", "timeout", ""),
    ),
    ("terminating due to timeout", {"reason": "something_else"}, None),
    (
        "Triggering termination for node that failed to join",
        {},
        ("scale_up_timeout", "timeout", ""),
    ),
    # a node goes away, as planned
    (
        "deprovisioning via consolidation delete, terminating 1 machines ip-1/m5.large/spot",
        {},
        ("scale_down", "", ""),
    ),
    (
        "disrupting via drift replace, terminating 1 nodes (3 pods) ip-1/m5.large/spot",
        {},
        ("scale_down", "", ""),
    ),
    (
        "disrupting nodeclaim(s) via delete, terminating 1 nodes "
        "(0 pods) ip-1/p4d.24xlarge/on-demand",
        {},
        ("scale_down", "", ""),
    ),
    (
        "disrupting node(s)",
        {"reason": "underutilized", "disrupted-nodes": [{"NodeClaim": {"name": "gpu-x9k2p"}}]},
        ("scale_down", "", "gpu"),
    ),
    (
        "disrupting node(s)",
        {"command": "empty/7c: delete: nodepools=[batch]: [ip-1]"},
        ("scale_down", "", "batch"),
    ),
    ("Triggering termination after 30s for empty node", {}, ("scale_down", "", "")),
    ("triggering termination for expired node after TTL", {}, ("scale_down", "", "")),
    ("Cordoned node", {}, ("scale_down", "", "")),
    ("tainted node", {"taint.Key": "karpenter.sh/disrupted"}, ("scale_down", "", "")),
    ("deleted node", {}, ("scale_down", "", "")),
    ("deleted machine", {"machine": "runner-4vk2s"}, ("scale_down", "", "runner")),
    ("annotated nodeclaim", {"NodeClaim": {"name": "gpu-x9k2p"}}, ("scale_down", "", "gpu")),
    (
        "failed to disrupt nodes, command reached timeout after 10m0s",
        {},
        ("scale_down", "other", ""),
    ),
    (
        "failed terminating nodes while executing a disruption command",
        {},
        ("scale_down", "other", ""),
    ),
    # chatter
    ("deleted launch template", {}, None),
    (
        "abandoning empty node consolidation attempt due to pod churn, command is no longer valid",
        {},
        None,
    ),
    (
        'Inflight check failed for node, Expected resource "nvidia.com/gpu" didn\'t register',
        {},
        None,
    ),
]
"""One message of each family (and chatter), its record's keys, and its fact."""


@pytest.mark.parametrize(("message", "keys", "expected"), FAMILIES)
def test_message_families(
    message: str, keys: dict[str, Any], expected: tuple[str, str, str] | None
) -> None:
    assert facts(message, **keys) == ([expected] if expected else [])


@pytest.mark.parametrize(("message", "keys", "expected"), FAMILIES)
def test_every_family_passes_the_fast_path(
    message: str, keys: dict[str, Any], expected: tuple[str, str, str] | None
) -> None:
    """The same messages as whole v1 JSON log lines through ``parse_line``: a wording the
    parser reads but the fast path's anchors miss would be dropped unread."""
    record = {"level": "INFO", "time": "2024-05-01T12:00:00Z", "logger": "controller"}
    line = json.dumps({**record, "message": message, **keys})
    result = parse_line(line, CTX, 1)
    assert isinstance(result, tuple), result
    got = [(r.action, r.reason, r.node_group) for r in result]
    assert got == ([expected] if expected else [])


def test_a_launch_is_read_not_unrecognised() -> None:
    """``launched nodeclaim`` was no record: a scale-up's progress, now a plan of its NodePool."""
    (fact,) = karpenter.parse_record(
        {"message": "launched nodeclaim", "NodeClaim": {"name": "gpu-a100-x9k2p"}}
    )
    assert (fact.action, fact.reason, fact.node_group) == ("scale_up_planned", "", "gpu-a100")


@pytest.mark.parametrize(
    ("claim", "pool"),
    [
        ("default-5b9h6", "default"),
        ("stable-multi-az-xxlarge-4gct7", "stable-multi-az-xxlarge"),
        ("gpu-g5-4-kpxk7", "gpu-g5-4"),
        ("ip-10-0-1-23", ""),  # a node name: "1-23" is no generated suffix
        ("gpu-a10-h3k8w", ""),  # "3" is not in generateName's alphabet
        ("worker-abcde", ""),  # nor are vowels
        ("<masked>", ""),
    ],
)
def test_a_claims_nodepool_is_its_name_less_the_generated_suffix(claim: str, pool: str) -> None:
    assert karpenter.node_group({"NodeClaim": {"name": claim}}) == pool


def test_pods_are_read_from_strings_and_v1_objects() -> None:
    assert facts("could not schedule pod", Pod={"name": "p", "namespace": "ml"})
    record = {"message": "could not schedule pod", "Pod": {"name": "p", "namespace": "ml"}}
    (fact,) = karpenter.parse_record(record)
    assert fact.pods == (PodRef(namespace="ml", name="p"),)
    record = {"message": "found provisionable pod(s)", "pods": "a/b, c/d and 3 other(s)"}
    (fact,) = karpenter.parse_record(record)
    assert fact.pods == (PodRef(namespace="a", name="b"), PodRef(namespace="c", name="d"))
    (fact,) = karpenter.parse_record({"message": "found provisionable pod(s)", "pods": 2})
    assert fact.pods == ()


# -- the clouds' words --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason", "code"),
    [
        (
            "subscription level on-demand vCPU quota for Standard_NC24ads_A100_v4 has been reached",
            "quota",
            "",
        ),
        (
            "this subscription has reached the regional vCPU quota for spot (LowPriorityQuota).",
            "quota",
            "",
        ),
        (
            "insufficient capacity, regional spot vCPU quota limit "
            "for subscription has been reached.",
            "quota",
            "",
        ),
        (
            "Operation could not be completed as it results in exceeding "
            "approved standardNCADSA100v4Family Cores quota.",
            "quota",
            "",
        ),
        (
            "unable to allocate resources in the selected zone "
            "(eastus-2). (will try a different zone",
            "capacity",
            "",
        ),
        (
            "the requested SKU is unavailable for instance type "
            "Standard_NC4as_T4_v3 in zone eastus-1",
            "capacity",
            "",
        ),
        (
            "with fleet error(s), "
            "InsufficientFreeAddressesInSubnet: There are not enough free addresses",
            "capacity",
            "InsufficientFreeAddressesInSubnet",
        ),
        (
            "with fleet error(s), "
            "InvalidLaunchTemplateName.NotFoundException: The specified launch template",
            "config",
            "InvalidLaunchTemplateName.NotFoundException",
        ),
        (
            "with fleet error(s), UnauthorizedOperation: You are not "
            "authorized to perform this operation.",
            "config",
            "UnauthorizedOperation",
        ),
        (
            "launching instances, with fleet error(s), "
            "InvalidBlockDeviceMapping: Invalid device name",
            "config",
            "InvalidBlockDeviceMapping",
        ),
    ],
)
def test_provider_words(text: str, reason: str, code: str) -> None:
    assert classify(text) == (reason, code)


# -- wrappers -------------------------------------------------------------------------------

JSON = (
    '{"level":"INFO","time":"2024-10-04T08:23:21.354Z","logger":"controller",'
    '"message":"created nodeclaim"}'
)
CONSOLE = (
    f"2023-09-28T22:54:03.513Z{T}INFO{T}controller.machine.lifecycle{T}launched machine{T}"
    '{"machine": "runner-4vk2s"}'
)


@pytest.mark.parametrize(
    ("line", "wrappers"),
    [
        (f"karpenter-69dcf88746-ld26m controller {JSON}", ("pod-container",)),
        (f"karpenter-dc5f65c47-w4s9p controller {CONSOLE}", ("pod-container",)),
        (f"[pod/karpenter-5d8f7c9b6-2xk4q/controller] {JSON}", ("kubectl-prefix",)),
        (f"[pod/k/controller] 2024-10-04T08:23:21.354512034Z {JSON}", ("kubectl-prefix", "ts")),
        (f"2024-10-04T08:23:21.354512034Z stdout F {JSON}", ("cri",)),
        (f"2023-09-28T22:54:03.513942518Z stderr F {CONSOLE}", ("cri",)),
        (f"2025-09-24T03:47:00.180Z{T}{JSON}", ("ts",)),
        (f"2023-09-29T00:54:03+02:00{T}{CONSOLE}", ("ts",)),
        (f"2023-03-10 01:54:42.763{T}{CONSOLE}", ("viewer-local-time",)),
        (f"2024-10-04 10:23:21,354 {JSON}", ("viewer-local-time",)),
        (f"2023-03-10 01:54:42.763  {CONSOLE}", ("viewer-local-time",)),
        (
            f"[pod/k/controller] 2023-03-10 01:54:42.763{T}{CONSOLE}",
            ("kubectl-prefix", "viewer-local-time"),
        ),
    ],
)
def test_wrappers_are_peeled_down_to_karpenters_line(line: str, wrappers: tuple[str, ...]) -> None:
    peeled = unwrap(line)
    assert peeled.wrappers == wrappers
    record = peeled.record or karpenter.console_record(peeled.text)
    assert record is not None
    assert karpenter.parse_record(record)


def test_a_console_line_whose_time_was_cut_is_decoded_by_unwrap() -> None:
    peeled = unwrap(
        f"ERROR{T}controller.provisioner{T}scheduling/scheduler.go:190{T}"
        f"Could not schedule pod, x{T}"
    )
    assert peeled.record is not None
    assert peeled.record["logger"] == "controller.provisioner"
    assert "time" not in peeled.record


def test_a_cluster_autoscaler_line_is_not_taken_for_a_pod_prefix() -> None:
    line = "cluster-autoscaler W1123 11:14:33.519660       1 clusterstate.go:1] x"
    assert unwrap(line).wrappers == ("name-prefix",)


# -- no traceback on anything ---------------------------------------------------------------

CA_ANCHORS = tuple(anchor for anchor in lines.ANCHORS if anchor not in karpenter.ANCHORS)
_PIECES = st.sampled_from(
    [
        "2023-09-28T22:54:03.513Z\t",
        "2023-03-10 01:54:42.763\t",
        "karpenter-69dcf88746-ld26m controller ",
        "[pod/k/controller] ",
        " stdout F ",
        "INFO\t",
        "ERROR   ",
        "controller.provisioner\t",
        "scheduling/scheduler.go:190\t",
        "launched machine\t",
        "disrupting node(s)",
        "could not schedule pod",
        '{"commit": "x", "machine": "a-bcdfg", ',
        '{"message":"failed launching nodeclaim","NodeClaim":{"name":',
        '"disrupted-nodes":[{"NodeClaim":',
        '"Pod":{"name":',
        '"error":"incompatible with nodepool \\"',
        "insufficient capacity, ",
        "vCPU quota ",
        "{",
        "}",
        '"',
        "\x00",
        "é",
    ]
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
_KEYS = st.sampled_from(
    [
        "message",
        "msg",
        "error",
        "NodePool",
        "nodepool",
        "NodeClaim",
        "nodeclaim",
        "machine",
        "Pod",
        "pods",
        "disrupted-nodes",
        "reason",
        "provisioner",
    ]
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(_PIECES, st.text(max_size=16)), max_size=10).map("".join))
def test_karpenter_shaped_lines_never_raise(raw: str) -> None:
    for ctx in (CTX, LineContext(cluster="c", reference=CTX.reference, fmt="karpenter")):
        result = parse_line(raw, ctx, 1)
        assert isinstance(result, tuple | RecordError)
    result = parse_line(raw.encode("utf-8", "surrogatepass"), CTX, 1)
    assert isinstance(result, tuple | RecordError)
    record = karpenter.console_record(raw)
    assert record is None or isinstance(record.get("message"), str)


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(_KEYS, _JSON, max_size=6),
    st.sampled_from(
        [
            "launched nodeclaim",
            "could not schedule pod",
            "disrupting node(s)",
            "Reconciler error",
            "failed launching nodeclaim",
            "found provisionable pod(s)",
        ]
    ),
)
def test_records_of_any_shape_never_raise(record: dict[str, Any], message: str) -> None:
    record.setdefault("message", message)
    for fact in karpenter.parse_record(record):
        assert fact.action


def test_every_key_word_has_an_anchor() -> None:
    """Each word of :data:`karpenter.TRIGGERS` holds one of cluster-autoscaler's anchors or
    one of :data:`karpenter.ANCHORS`, and those add only what is missing."""
    for word in karpenter.TRIGGERS:
        assert any(anchor in word for anchor in (*CA_ANCHORS, *karpenter.ANCHORS)), word
    for anchor in karpenter.ANCHORS:
        alone = [w for w in karpenter.TRIGGERS if not any(a in w for a in CA_ANCHORS)]
        assert any(anchor in word for word in alone), anchor
