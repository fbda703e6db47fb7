"""The core's configuration: thresholds and the XID policy, as plain data.

The core never reads files or the environment; it is handed a frozen
:class:`CoreConfig`. :mod:`streams.config` builds one from the packaged XID
catalog and a user's overrides.
"""

from __future__ import annotations

import msgspec

from schemas.progress import DEFAULT_GRACE_SECONDS
from schemas.types import Severity, XidClass


def default_severity() -> dict[str, Severity]:
    """Each incident type's default severity, as its rule declares it
    (``streams.core.rules.registry.DEFAULT_SEVERITY``): a type is declared once, in its
    rule module. Imported when called: the rules import this module."""
    from streams.core.rules.registry import DEFAULT_SEVERITY  # noqa: PLC0415 - a cycle

    return dict(DEFAULT_SEVERITY)


class XidRule(msgspec.Struct, frozen=True, kw_only=True):
    """How the core treats one XID code, with NVIDIA's words for the evidence text."""

    xid_class: XidClass = "unknown"
    mnemonic: str = ""
    action: str = ""
    severity: Severity | None = None
    """The catalog's severity for this code: an ``xid_repeat`` of it is at most this
    severe (the incident type's severity is the ceiling; None: no cap)."""
    line_severity: bool = False
    """The line says its own severity (NVLink5 XIDs 144-150: ``... RLW_RXPIPE Nonfatal XC0
    ...``): a ``Nonfatal`` line is recorded evidence (``info``), whatever the class."""


class CoreConfig(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every threshold the rules use; docs/detection.md says what each rule does with them.

    Times are seconds of *event time*. ``grace_seconds`` is how far out of order
    events may arrive and still be correlated exactly as if they had arrived in
    order; it is also the latency the watermark adds before a rule can fire, so
    it trades reordering tolerance against time to page.
    """

    grace_seconds: float = DEFAULT_GRACE_SECONDS

    eviction_window_seconds: float = 600.0
    """device_unhealthy_eviction: pod failures this long after a fatal XID / drop join it."""
    eviction_lookback_seconds: float = 120.0
    """...and how long *before* it (kubelet may report a failed pod before the node status)."""
    failure_reasons: tuple[str, ...] = (
        "Evicted",
        "UnexpectedAdmissionError",
        "DeviceFailed",
        "NodeLost",
        "NodeShutdown",
        "Terminated",
        "TaintManagerEviction",
        "Preempting",
    )
    drop_persist_seconds: float = 60.0
    """An allocatable drop with no fatal XID arms the eviction chain only once it has lasted
    this long: a device plugin that restarts re-registers its GPUs (8 -> 0 -> 8 in seconds),
    which is not a fault."""
    device_fault_near_seconds: float = 60.0
    """An ordinary container crash joins a device chain only if it happened this close to
    one of the chain's triggers (the XID killed it, the kubelet saw it before the drop)."""
    device_failure_patterns: tuple[str, ...] = (
        "UnexpectedAdmissionError",
        "DeviceFailed",
        "DeviceUnhealthy",
        "Unhealthy devices",
        "nvidia.com/gpu",
        "CUDA error",
        "CUDA_ERROR",
        "cudaError",
        "NVML",
        "Xid",
        "fallen off the bus",
        "uncorrectable ECC",
    )
    """A pod failure whose reason or message contains one of these says *device*: it joins
    a device chain wherever its GPU was. (A CUDA *out of memory* text is not one: it matches
    ``cuda_oom_patterns`` and is the workload's, see :mod:`streams.core.rules.chain`.)"""

    oom_join_seconds: float = 60.0
    """host_oom_kill: a node OOMKilling event and a container OOMKilled this close are one kill."""
    oom_quiet_seconds: float = 900.0
    """host_oom_kill resolves after this long without another OOM kill of the container."""

    cuda_oom_restarts: int = 3
    """suspected_cuda_oom fires when a GPU container restarts *more* than this often..."""
    cuda_oom_window_seconds: float = 900.0
    """...within this window (and resolves after this long without a restart)."""
    cuda_oom_patterns: tuple[str, ...] = (
        "CUDA out of memory",
        "OutOfMemoryError",
        "CUDA error: out of memory",
        "CUBLAS_STATUS_ALLOC_FAILED",
        "cudaErrorMemoryAllocation",
    )

    degraded_after_seconds: float = 300.0
    """gpu_degraded: capacity - allocatable > 0 for longer than this; or a fatal XID (or an
    XID 154 asking for a reset, drain or reboot) that no eviction chain has reported after
    this long (the chain opening first keeps one root cause, one page)."""
    degraded_quiet_seconds: float = 86400.0
    """A gpu_degraded opened by XIDs alone (no allocatable drop) resolves after this long
    without another fatal XID on the node. Nothing else says a GPU that never left the
    allocatable pool was repaired (a reset is invisible to Kubernetes), so it stays open
    for a day: the ``xid_repeat`` window, so a fault that comes back within it is the same
    ticket, not a new one. An allocatable drop, once seen, resolves it only on recovery."""

    app_fault_quiet_seconds: float = 3600.0
    """gpu_app_fault resolves after this long without another application XID on the GPU."""
    app_fault_escalate_count: int = 3
    """gpu_app_fault goes from ``info`` to ``ticket`` at this many XID *episodes* (see
    ``xid_episode_gap_seconds``) in one incident."""

    xid_repeat_count: int = 5
    """xid_repeat: this many *episodes* of one fatal code on one GPU..."""
    xid_repeat_window_seconds: float = 86400.0
    """...within this window (their first lines), and it resolves after this long quiet."""
    xid_coalesce_seconds: float = 1.0
    """The same code on the same GPU within this long is one occurrence (sources overlap):
    the floor of ``xid_episode_gap_seconds``, so setting that to 0 (count every occurrence)
    still counts a line seen by the kernel log and by dcgm-exporter once."""
    xid_episode_gap_seconds: float = 600.0
    """One fault is logged as many lines (one XID 13 as three, a GSP hang as an XID 119
    every few minutes): a line of a code less than this after the previous line of the same
    code on the same GPU continues that fault's *episode*; at or past it, a new episode
    starts. ``xid_repeat`` and ``gpu_app_fault`` count episodes, not lines, and an XID 45
    follows the XIDs of its GPU this recent."""

    not_ready_statuses: tuple[str, ...] = ("False", "Unknown")
    not_ready_grace_seconds: float = 120.0
    """gpu_node_not_ready pages only when the node stays NotReady longer than this (event
    time), or a GPU pod on it fails meanwhile. Kubernetes itself waits out blips: the
    node-monitor grace period and the NoExecute tolerations (300 s by default) mean a
    30 s NotReady evicts nothing, so it must not wake anyone. 0 pages at once."""

    # -- cluster-scoped (streams.core.cluster) ----------------------------------------
    starved_pending_seconds: float = 600.0
    """gpu_pods_starved: how long a GPU pod must have been pending (and found
    unschedulable) before it counts as starved."""
    starved_failures: int = 3
    """gpu_pods_starved: failed scale-up attempts of a matching node group (within
    ``scale_up_window_seconds``) that make pending GPU pods starved, not just waiting."""
    scale_up_window_seconds: float = 3600.0
    """Failed scale-up attempts older than this no longer count."""
    scale_up_attempt_gap_seconds: float = 60.0
    """Failure records of one node group less than this apart are one attempt: one failed
    scale-up is logged as several lines (the error, the backoff, the status), and a
    group at its max size is reported on every autoscaler loop (10 s)."""
    scale_up_quiet_seconds: float = 1800.0
    """scale_up_failure resolves after this long without a new failure of its group and
    reason."""
    quota_severity: Severity = "page"
    """gpu_pods_starved and scale_up_failure when the reason is a cloud quota."""
    gpu_node_group_pattern: str = (
        r"gpu|nvidia|(?<![a-z0-9])(a100|h100|h200|b200|gb200|l40s?|l4|t4|v100|p4de?|p5e?n?"
        r"|p3dn|p3|g4dn|g5g?|g6e?|a2-|a3-|g2-|nc\d|nd\d|nv\d)"
    )
    """A node group whose name matches this (case-insensitive) is a GPU node group, for
    scale_up_failure; one an autoscaler record ties to a GPU pod is one whatever its name."""
    mismatch_threshold: int = 5
    """allocation_mismatch: GPUs by which Kubernetes and dcgm-exporter may disagree, summed
    over nodes (|requested - bound| per node: two nodes that err both ways are two errors)."""
    mismatch_after_seconds: float = 300.0
    """allocation_mismatch opens when the disagreement stays above the threshold this long
    (a pod starts before the next dcgm-exporter scrape binds it: seconds, not minutes)."""
    mismatch_ignore_namespaces: tuple[str, ...] = ()
    """Namespaces whose pods are left out of the count (time-sliced workloads on nodes not
    labelled as shared)."""

    nvlink_cross_numa: bool = False
    """multi_gpu_pod_without_nvlink also fires when a pod's GPUs, NVLink-connected or
    not, sit on different NUMA nodes (the matrix's ``NUMA Affinity``): its host-side
    traffic (data loading, pinned copies, the NIC) then crosses the socket interconnect.
    Off by default: on an HGX board the two halves of an 8-GPU job are on two NUMA nodes
    by design."""

    revision_interval_seconds: float = 30.0
    """At most one ``updated`` revision of an incident per this long (event time): one
    node's device plugin rejecting 62 pods in a few minutes is one incident, and each
    revision is a PagerDuty re-trigger and a Slack update. The held changes go out in one
    revision when the interval ends, naming every pod. The first ``open``, the
    ``resolved`` and a change of severity are never held. 0 publishes every change."""
    fabric_window_seconds: float = 30.0
    """nvlink_domain_fault: NVLink fabric XIDs (144-149) of the GPUs of one NVLink domain
    less than this apart are one fault. NVIDIA's catalog: a follow-up XID 145 is a
    by-product when any link of the partition went down "within that last 30 seconds"
    (CHECK_NVLINK_FAILURE_FLOW). The root is chosen this long after the first line, so it
    is also the page's delay."""
    fabric_quiet_seconds: float = 3600.0
    """nvlink_domain_fault resolves after this long without another fabric XID in its
    fault (a GPU reset is invisible to Kubernetes: only time says it is over)."""

    max_evidence: int = 50
    """Evidence kept per incident; further events are counted in ``evidence_omitted``."""

    severity: dict[str, Severity] = msgspec.field(default_factory=default_severity)
    xid: dict[int, XidRule] = {}
    """The XID policy by code. Empty means every code is ``unknown``: build the config
    with :func:`streams.config.default_core_config` to get the catalog."""
