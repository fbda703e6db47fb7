"""The core's settings: every threshold and the XID policy, as plain data.

The core never reads files or the environment; it is handed a frozen
:class:`CoreSettings`. The ``[core]`` table of the settings tree is this struct;
:func:`streams.config.core_config` resolves it (the XID policy from ``[xid]`` and
the packaged catalog, ``[core.severity]`` merged into the defaults), which is the
one the core must be given.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from schemas.progress import DEFAULT_GRACE_SECONDS
from schemas.types import Severity, XidClass

Seconds = Annotated[float, msgspec.Meta(ge=0, le=30 * 86400)]
"""A duration in seconds of event time (0 allowed: "no window"; at most 30 days)."""
Count = Annotated[int, msgspec.Meta(ge=1, le=1_000_000)]
"""A count that must be reached (at least 1)."""
Amount = Annotated[int, msgspec.Meta(ge=0, le=1_000_000)]
"""A threshold that may be 0 (exceeded, not reached)."""
ConditionMark = Annotated[
    str, msgspec.Meta(pattern=r"^[A-Za-z0-9._/-]+=(True|False|Unknown)$", max_length=320)
]
"""A node condition and the status that marks the node: ``AcceleratedHardwareReady=False``."""


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


class CoreSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Every threshold the rules use, with its range and a one-line description
    (docs/detection.md says what each rule does with them).

    Times are seconds of *event time*. ``grace_seconds`` is how far out of order
    events may arrive and still be correlated exactly as if they had arrived in
    order; it is also the latency the watermark adds before a rule can fire, so
    it trades reordering tolerance against time to page.

    Traps: the struct as loaded from ``[core]`` is not yet the core's (``xid`` empty,
    ``severity`` only what was set): give the core
    :meth:`gputriage.settings.Settings.core_config` or
    :func:`streams.config.core_config` of it. ``xid`` cannot be set from ``[core]``
    (refused at load, with where XID classes go).
    """

    grace_seconds: Annotated[
        Seconds,
        msgspec.Meta(description="How far out of order events may arrive and still correlate."),
    ] = DEFAULT_GRACE_SECONDS

    eviction_window_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="Pod failures this long after a fatal XID or GPU drop join its chain."
        ),
    ] = 600.0
    """device_unhealthy_eviction: pod failures this long after a fatal XID / drop join it."""
    eviction_lookback_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="Pod failures this long before a fatal XID or GPU drop join its chain."
        ),
    ] = 120.0
    """...and how long *before* it (kubelet may report a failed pod before the node status)."""
    failure_reasons: Annotated[
        tuple[str, ...],
        msgspec.Meta(description="Pod failure reasons that may join an eviction chain."),
    ] = (
        "Evicted",
        "UnexpectedAdmissionError",
        "DeviceFailed",
        "NodeLost",
        "NodeShutdown",
        "Terminated",
        "TaintManagerEviction",
        "Preempting",
        "DeviceTaintManagerEviction",
    )
    drop_persist_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="A GPU drop without a fatal XID arms the eviction chain after this long."
        ),
    ] = 60.0
    """An allocatable drop with no fatal XID arms the eviction chain only once it has lasted
    this long: a device plugin that restarts re-registers its GPUs (8 -> 0 -> 8 in seconds),
    which is not a fault."""
    device_fault_near_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="A plain container crash joins a device chain only this close to it."
        ),
    ] = 60.0
    """An ordinary container crash joins a device chain only if it happened this close to
    one of the chain's triggers (the XID killed it, the kubelet saw it before the drop)."""
    device_failure_patterns: Annotated[
        tuple[str, ...],
        msgspec.Meta(description="Texts in a pod failure that say the device failed."),
    ] = (
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

    oom_join_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="A node OOM kill and a container OOMKilled this close are one kill."
        ),
    ] = 60.0
    """host_oom_kill: a node OOMKilling event and a container OOMKilled this close are one kill."""
    oom_quiet_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="host_oom_kill resolves after this long without another OOM kill."
        ),
    ] = 900.0

    cuda_oom_restarts: Annotated[
        Amount,
        msgspec.Meta(
            description="suspected_cuda_oom fires at more GPU container restarts than this."
        ),
    ] = 3
    """suspected_cuda_oom fires when a GPU container restarts *more* than this often..."""
    cuda_oom_window_seconds: Annotated[
        Seconds, msgspec.Meta(description="suspected_cuda_oom counts restarts within this window.")
    ] = 900.0
    """...within this window (and resolves after this long without a restart)."""
    cuda_oom_patterns: Annotated[
        tuple[str, ...],
        msgspec.Meta(description="Texts that say a container ran out of GPU memory."),
    ] = (
        "CUDA out of memory",
        "OutOfMemoryError",
        "CUDA error: out of memory",
        "CUBLAS_STATUS_ALLOC_FAILED",
        "cudaErrorMemoryAllocation",
    )

    degraded_after_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="gpu_degraded opens when GPUs stay missing (or a fatal XID unanswered)."
        ),
    ] = 300.0
    """gpu_degraded: capacity - allocatable > 0 for longer than this; or a fatal XID (or an
    XID 154 asking for a reset, drain or reboot) that no eviction chain has reported after
    this long (the chain opening first keeps one root cause, one page)."""
    degraded_quiet_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="A gpu_degraded of XIDs alone resolves after this long without one."
        ),
    ] = 86400.0
    """A gpu_degraded opened by XIDs alone (no allocatable drop) resolves after this long
    without another fatal XID on the node. Nothing else says a GPU that never left the
    allocatable pool was repaired (a reset is invisible to Kubernetes), so it stays open
    for a day: the ``xid_repeat`` window, so a fault that comes back within it is the same
    ticket, not a new one. An allocatable drop, once seen, resolves it only on recovery."""

    # -- Dynamic Resource Allocation (ResourceSlices, DRA bindings) --------------------------
    dra_absent_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="gpu_degraded opens when a DRA GPU is gone from its slices this long."
        ),
    ] = 300.0
    """gpu_degraded: a GPU (a DRA device, or every MIG device of it) gone from its node's
    ResourceSlices this long, while the node is not being removed, is a fault. A DRA
    plugin that restarts deletes its slices and publishes them again within seconds:
    noise, which this window absorbs."""

    app_fault_quiet_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="gpu_app_fault resolves after this long without an application XID."
        ),
    ] = 3600.0
    app_fault_escalate_count: Annotated[
        Count, msgspec.Meta(description="gpu_app_fault becomes a ticket at this many XID episodes.")
    ] = 3
    """gpu_app_fault goes from ``info`` to ``ticket`` at this many XID *episodes* (see
    ``xid_episode_gap_seconds``) in one incident."""

    xid_repeat_count: Annotated[
        Count,
        msgspec.Meta(
            description="xid_repeat fires at this many episodes of one fatal code on one GPU."
        ),
    ] = 5
    """xid_repeat: this many *episodes* of one fatal code on one GPU..."""
    xid_repeat_window_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="xid_repeat counts episodes within this window; resolves after it."
        ),
    ] = 86400.0
    """...within this window (their first lines), and it resolves after this long quiet."""
    xid_coalesce_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="The same XID on the same GPU within this long is one occurrence."
        ),
    ] = 1.0
    """The same code on the same GPU within this long is one occurrence (sources overlap):
    the floor of ``xid_episode_gap_seconds``, so setting that to 0 (count every occurrence)
    still counts a line seen by the kernel log and by dcgm-exporter once."""
    xid_episode_gap_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="A line of an XID this long after its last one starts a new episode."
        ),
    ] = 600.0
    """One fault is logged as many lines (one XID 13 as three, a GSP hang as an XID 119
    every few minutes): a line of a code less than this after the previous line of the same
    code on the same GPU continues that fault's *episode*; at or past it, a new episode
    starts. ``xid_repeat`` and ``gpu_app_fault`` count episodes, not lines, and an XID 45
    follows the XIDs of its GPU this recent."""

    not_ready_statuses: Annotated[
        tuple[str, ...],
        msgspec.Meta(description="Node Ready condition statuses that count as not ready."),
    ] = ("False", "Unknown")
    not_ready_grace_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="gpu_node_not_ready pages when a node is NotReady longer than this."
        ),
    ] = 120.0
    """gpu_node_not_ready pages only when the node stays NotReady longer than this (event
    time), or a GPU pod on it fails meanwhile. Kubernetes itself waits out blips: the
    node-monitor grace period and the NoExecute tolerations (300 s by default) mean a
    30 s NotReady evicts nothing, so it must not wake anyone. 0 pages at once."""

    # -- cluster-scoped (streams.core.cluster) ----------------------------------------
    starved_pending_seconds: Annotated[
        Seconds, msgspec.Meta(description="A GPU pod unschedulable this long counts as starved.")
    ] = 600.0
    """gpu_pods_starved: how long a GPU pod must have been pending (and found
    unschedulable) before it counts as starved."""
    starved_failures: Annotated[
        Count,
        msgspec.Meta(description="Failed scale-up attempts that make pending GPU pods starved."),
    ] = 3
    """gpu_pods_starved: failed scale-up attempts of a matching node group (within
    ``scale_up_window_seconds``) that make pending GPU pods starved, not just waiting."""
    scale_up_window_seconds: Annotated[
        Seconds,
        msgspec.Meta(description="Failed scale-up attempts older than this no longer count."),
    ] = 3600.0
    scale_up_attempt_gap_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="Failures of one node group less than this apart are one attempt."
        ),
    ] = 60.0
    """Failure records of one node group less than this apart are one attempt: one failed
    scale-up is logged as several lines (the error, the backoff, the status), and a
    group at its max size is reported on every autoscaler loop (10 s)."""
    scale_up_quiet_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="scale_up_failure resolves after this long without a new failure."
        ),
    ] = 1800.0
    """scale_up_failure resolves after this long without a new failure of its group and
    reason."""
    quota_severity: Annotated[
        Severity,
        msgspec.Meta(
            description="Severity of starved pods and scale-up failures due to a cloud quota."
        ),
    ] = "page"
    """gpu_pods_starved and scale_up_failure when the reason is a cloud quota."""
    gpu_node_group_pattern: Annotated[
        str,
        msgspec.Meta(description="A node group whose name matches this regex is a GPU node group."),
    ] = (
        r"gpu|nvidia|(?<![a-z0-9])(a100|h100|h200|b200|gb200|l40s?|l4|t4|v100|p4de?|p5e?n?"
        r"|p3dn|p3|g4dn|g5g?|g6e?|a2-|a3-|g2-|nc\d|nd\d|nv\d)"
    )
    """A node group whose name matches this (case-insensitive) is a GPU node group, for
    scale_up_failure; one an autoscaler record ties to a GPU pod is one whatever its name."""
    mismatch_threshold: Annotated[
        Amount, msgspec.Meta(description="GPUs by which Kubernetes and dcgm-exporter may disagree.")
    ] = 5
    """allocation_mismatch: GPUs by which Kubernetes and dcgm-exporter may disagree, summed
    over nodes (|requested - bound| per node: two nodes that err both ways are two errors)."""
    mismatch_after_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="allocation_mismatch opens when the disagreement lasts this long."
        ),
    ] = 300.0
    """allocation_mismatch opens when the disagreement stays above the threshold this long
    (a pod starts before the next dcgm-exporter scrape binds it: seconds, not minutes)."""
    mismatch_ignore_namespaces: Annotated[
        tuple[str, ...],
        msgspec.Meta(description="Namespaces whose pods allocation_mismatch leaves out."),
    ] = ()
    """Namespaces whose pods are left out of the count (time-sliced workloads on nodes not
    labelled as shared)."""

    nvlink_cross_numa: Annotated[
        bool,
        msgspec.Meta(
            description="multi_gpu_pod_without_nvlink also fires for GPUs on two NUMA nodes."
        ),
    ] = False
    """multi_gpu_pod_without_nvlink also fires when a pod's GPUs, NVLink-connected or
    not, sit on different NUMA nodes (the matrix's ``NUMA Affinity``): its host-side
    traffic (data loading, pinned copies, the NIC) then crosses the socket interconnect.
    Off by default: on an HGX board the two halves of an 8-GPU job are on two NUMA nodes
    by design."""

    revision_interval_seconds: Annotated[
        Seconds,
        msgspec.Meta(description="At most one updated revision of an incident per this long."),
    ] = 30.0
    """At most one ``updated`` revision of an incident per this long (event time): one
    node's device plugin rejecting 62 pods in a few minutes is one incident, and each
    revision is a PagerDuty re-trigger and a Slack update. The held changes go out in one
    revision when the interval ends, naming every pod. The first ``open``, the
    ``resolved`` and a change of severity are never held. 0 publishes every change."""
    fabric_window_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="NVLink fabric XIDs of one domain less than this apart are one fault."
        ),
    ] = 30.0
    """nvlink_domain_fault: NVLink fabric XIDs (144-149) of the GPUs of one NVLink domain
    less than this apart are one fault. NVIDIA's catalog: a follow-up XID 145 is a
    by-product when any link of the partition went down "within that last 30 seconds"
    (CHECK_NVLINK_FAILURE_FLOW). The root is chosen this long after the first line, so it
    is also the page's delay."""
    fabric_quiet_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="nvlink_domain_fault resolves after this long without a fabric XID."
        ),
    ] = 3600.0
    """nvlink_domain_fault resolves after this long without another fabric XID in its
    fault (a GPU reset is invisible to Kubernetes: only time says it is over)."""

    # -- monitoring_gap (streams.core.rules.watchers) -------------------------------------
    monitoring_resolution_seconds: Annotated[
        Seconds,
        msgspec.Meta(description="A node source's heartbeat is recorded to this resolution."),
    ] = 10.0
    """When a node's source was last heard is kept rounded down to this step (the processor
    forwards a heartbeat only when the step rises): a node agent beats every 0.5 s, and one
    state write per beat would cost more than the silence it measures. 0 keeps every beat."""
    monitoring_silence_seconds: Annotated[
        Seconds,
        msgspec.Meta(description="monitoring_gap opens when a node source is silent this long."),
    ] = 300.0
    """monitoring_gap (``silent``): a source heard on a Ready node, silent this long. Five
    times the worker's ``source_idle_seconds`` (60 s: a source slow to reconnect is back
    well within), twenty dcgm-exporter scrapes at the connector's 15 s, and longer than a
    rolling update of the exporter's DaemonSet (the new pod is scraped within a minute or
    two): a gap this long is a source that stopped, not one that hiccuped."""
    monitoring_restarts: Annotated[
        Count,
        msgspec.Meta(description="A monitoring pod restarting this often in the window loops."),
    ] = 3
    """monitoring_gap (``crash_loop``): a monitoring pod (dcgm-exporter, device plugin, DRA
    plugin, node agent) whose containers restart this often within
    ``monitoring_restart_window_seconds`` crash-loops (so does one the kubelet shows in
    ``CrashLoopBackOff`` or backs off, whatever the count)."""
    monitoring_restart_window_seconds: Annotated[
        Seconds,
        msgspec.Meta(description="Monitoring pod restarts are counted within this window."),
    ] = 900.0
    monitoring_recovered_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="A failing monitoring pod counts as back after running this long."
        ),
    ] = 7200.0
    """monitoring_gap of a monitoring pod resolves when it has run this long without a
    restart (or a new pod of its role runs). The kubelet calls a container well after 10 min
    (its back-off reset), but a monitor stalled by a degrading GPU is liveness-killed about
    every 90 min (NVIDIA/NVSentinel#1748: 49 kills in 3 days): 2 h keeps such a loop one
    ticket instead of one a kill."""
    monitoring_start_errors: Annotated[
        Count,
        msgspec.Meta(description="GPU containers failing to start (StartError) that are a burst."),
    ] = 3
    """monitoring_gap (``start_error_burst``): this many GPU container starts failing with
    ``StartError`` / ``ContainerCannotRun`` (exit 128: the runtime could not start it,
    e.g. ``nvidia-container-cli: initialization error: nvml error: driver/library version
    mismatch``) within ``monitoring_start_error_window_seconds`` on one node, of at least
    two workloads (owners; a pod without one is its own) or naming the NVIDIA container
    stack: the replicas of one workload share its broken spec, which is theirs."""
    monitoring_start_error_window_seconds: Annotated[
        Seconds,
        msgspec.Meta(description="StartErrors of GPU pods are counted within this window."),
    ] = 600.0
    monitoring_start_error_quiet_seconds: Annotated[
        Seconds,
        msgspec.Meta(
            description="A StartError burst resolves after this long without another one."
        ),
    ] = 3600.0
    """...and resolves when a GPU container runs on the node afterwards, or after this long
    without another StartError (the node may get no GPU pod to prove it)."""

    # -- remediation_stalled (streams.core.rules.stalled) ----------------------------------
    repair_conditions: Annotated[
        tuple[ConditionMark, ...],
        msgspec.Meta(description="Node conditions (Type=Status) that mark a node for repair."),
    ] = (
        "AcceleratedHardwareReady=False",
        "SysLogsXIDError=True",
        "SysLogsSXIDError=True",
        "SysLogsGPUFallenOff=True",
        "NVSwitchFatalError=True",
        "NVSwitchDown=True",
        "GpuMemWatch=True",
        "GpuNvlinkWatch=True",
        "GpuPcieWatch=True",
        "GpuInforomWatch=True",
        "GpuSmWatch=True",
        "GpuThermalWatch=True",
        "GpuPowerWatch=True",
        "GpuMcuWatch=True",
        "GpuPmuWatch=True",
        "GpuDriverWatch=True",
        "XIDError=True",
        "FabricManagerDown=True",
    )
    """remediation_stalled: the conditions by which a tool marks a node's GPUs unhealthy
    for a repair system to act on (tests/data/writeback/messages.md cites each): EKS's
    node monitoring agent's ``AcceleratedHardwareReady=False`` (what Karpenter and EKS
    repair read; also what gputriage's write-back writes when told
    ``--condition-type AcceleratedHardwareReady``);
    NVSentinel's fatal health checks, status ``True`` = faulty (``SysLogsXIDError``,
    ``SysLogsGPUFallenOff``, the DCGM ``Gpu*Watch`` types, NVSwitch); NPD's on AKS
    (``XIDError=True``) and its Fabric Manager check (``FabricManagerDown=True``). Not
    ``Ready``: ``gpu_node_not_ready`` says that, and a monitor's own failure (NVSentinel's
    ``DCGMError``) is blindness, not a GPU to repair. Not gputriage's own
    ``GPUHealthy=False`` (``schemas.wellknown.GPU_HEALTH_CONDITION``): nothing reads it
    unless told to, so a stall on it would be a second page for every page-level hardware
    incident left open; a cluster whose repair system reads it adds it here (the incident
    then says ``marked_by=gputriage``)."""
    remediation_stalled_seconds: Annotated[
        Seconds,
        msgspec.Meta(description="remediation_stalled pages when a repair mark stands this long."),
    ] = 1800.0
    """remediation_stalled: a node marked unhealthy this long (counted from when the core
    first saw the mark, never the condition's ``lastTransitionTime``, which aggregating
    agents reset: kubernetes-sigs/karpenter#2833) and neither repaired nor being removed.
    Karpenter repairs ``AcceleratedHardwareReady=False`` after 10 min and its other
    conditions after 30 min; 30 min is three times the first, so a repair that works has
    begun (the node tainted for removal) long before, and a node still marked then is one
    no repair will reach (a blocked NodePool above 20 % unhealthy:
    kubernetes-sigs/karpenter#2134, a tripped breaker, no policy for the condition)."""

    max_evidence: Annotated[
        Count,
        msgspec.Meta(
            description="Evidence events kept per incident; further ones are only counted."
        ),
    ] = 50
    """Evidence kept per incident; further events are counted in ``evidence_omitted``."""

    severity: Annotated[
        dict[str, Severity],
        msgspec.Meta(description="Severity by incident type, merged into the defaults."),
    ] = msgspec.field(default_factory=default_severity)
    xid: Annotated[
        dict[int, XidRule],
        msgspec.Meta(
            description="The XID policy by code, from [xid] and the catalog (not set here)."
        ),
    ] = {}
    """The XID policy by code. Empty means every code is ``unknown``: build the config
    with :func:`streams.config.default_core_config` to get the catalog."""
