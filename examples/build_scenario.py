"""Builds ``scenario.jsonl``: 45 recorded minutes of a small GPU cluster, eleven incident types.

Run ``python examples/build_scenario.py`` after changing a schema; the file is committed so
that users (and the tests) can replay it without running this, and the output must stay
byte-identical to ``gputriage/demo/scenario.jsonl`` (the tests rebuild it and compare).
Records are built by :mod:`gputriage.demo.events`; what stays here is the story, the id
scheme (``k8s:pod-NAME:RV``, one resourceVersion counter) and the time unit (minutes after
``START``). Seven nodes show one node-scoped type each, then three cluster-scoped stories,
the PCIe-only node and a DRA node (GPUs by ResourceClaim, a NoExecute device taint that
evicts its pod) are told after them, so that the earlier stories keep their
resourceVersions, hence their ids and their incidents' ids. The autoscaler's records are
klog lines read by the real parser. Node by node: docs/replay.md, design notes.
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from connectors.autoscaler.lines import LineContext, parse_line
from gputriage.demo import events as build_event
from gputriage.demo.events import T0
from schemas.codec import RecordError, encode
from schemas.events import (
    ClaimDevice,
    ClaimRequest,
    DeviceHealth,
    DeviceTaint,
    Event,
    GpuBindingEvent,
    NodeEvent,
    PodClaim,
    PodCondition,
    PodRef,
    ResourceClaimEvent,
    ResourceSliceEvent,
    SliceDevice,
    Termination,
    Tick,
)
from schemas.keys import DRA
from schemas.types import Op

CLUSTER = "prod-us-east"
START = T0
LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
    "nvidia.com/gpu.count": "8",
    "node.kubernetes.io/instance-type": "p5.48xlarge",
    "topology.kubernetes.io/zone": "us-east-1a",
}

events: list[Event] = []
_rv = [1000]


def at(minutes: float) -> datetime:
    """Minutes after ``START`` (the story's unit), rounded to the millisecond: the
    scenario's resolution, whatever float error ``minutes * 60`` carries."""
    return build_event.at(round(minutes * 60, 3), START)


def rv() -> str:
    """The next resourceVersion; one counter for every object, as one etcd has."""
    _rv[0] += 1
    return str(_rv[0])


def node(
    name: str,
    minutes: float,
    alloc: int = 8,
    ready: str = "True",
    reason: str = "",
    message: str = "",
    labels: dict[str, str] | None = None,
) -> None:
    events.append(
        build_event.node_event(
            id=f"k8s:node-{name}:{rv()}",
            cluster=CLUSTER,
            time=at(minutes),
            node=name,
            capacity=8,
            allocatable=alloc,
            ready=build_event.ready_condition(
                ready, reason or ("KubeletReady" if ready == "True" else ""), message
            ),
            labels={**LABELS, **(labels or {})},
        )
    )


def pod(
    node_name: str,
    ns: str,
    name: str,
    minutes: float,
    *,
    owner: tuple[str, str],
    phase: str = "Running",
    reason: str = "",
    message: str = "",
    gpus: int = 1,
    container: str = "main",
    restarts: int = 0,
    last: Termination | None = None,
    current: Termination | None = None,
    waiting: str = "",
    op: Op = "modified",
) -> None:
    state = "terminated" if current else ("waiting" if waiting else "running")
    events.append(
        build_event.pod_event(
            id=f"k8s:pod-{name}:{rv()}",
            cluster=CLUSTER,
            time=at(minutes),
            node=node_name,
            op=op,
            namespace=ns,
            name=name,
            phase=phase,
            reason=reason,
            message=message,
            gpus=gpus,
            owner=owner,
            containers=(
                build_event.container(
                    container,
                    restarts=restarts,
                    state=state,
                    reason=waiting,
                    current=current,
                    last=last,
                ),
            ),
        )
    )


def term(minutes: float, reason: str, code: int, message: str = "") -> Termination:
    return build_event.termination(at(minutes), reason, code, message)


def xid(
    node_name: str,
    minutes: float,
    code: int,
    bus: str,
    seq: int,
    message: str,
    uuid: str = "",
    pid: int | None = None,
    process: str = "",
    recovery_action: str = "",
) -> None:
    events.append(
        build_event.xid_event(
            id=f"kmsg:{node_name}:boot-1:{seq}",
            cluster=CLUSTER,
            time=at(minutes),
            node=node_name,
            code=code,
            bus=bus,
            uuid=uuid,
            pid=pid,
            process=process,
            message=message,
            recovery_action=recovery_action,
        )
    )


def binding(
    node_name: str,
    minutes: float,
    uuid: str,
    bus: str,
    index: int,
    pods: list[tuple[str, str, str]],
) -> None:
    events.append(
        build_event.binding_event(
            id=f"dcgm:{node_name}:{uuid}:{rv()}",
            cluster=CLUSTER,
            time=at(minutes),
            node=node_name,
            uuid=uuid,
            bus=bus,
            index=index,
            pods=(PodRef(namespace=n, name=p, container=c) for n, p, c in pods),
        )
    )


def kube_event(
    node_name: str,
    minutes: float,
    reason: str,
    kind: str,
    name: str,
    namespace: str = "",
    message: str = "",
    source: str = "kubelet",
) -> None:
    events.append(
        build_event.kube_event(
            id=f"k8s-event:{reason}-{name}:{rv()}",
            cluster=CLUSTER,
            time=at(minutes),
            node=node_name,
            reason=reason,
            message=message,
            warning=True,
            kind=kind,
            name=name,
            namespace=namespace,
            uid=f"uid-{name}",
            source=source,
        )
    )


def pending(
    ns: str,
    name: str,
    minutes: float,
    *,
    owner: tuple[str, str],
    created: float,
    gpus: int,
    unschedulable: str = "",
    op: Op = "modified",
) -> None:
    """A GPU pod the scheduler has not placed: no node, so the cluster key holds it;
    ``unschedulable`` is its ``PodScheduled=False`` message (empty: not tried yet)."""
    cond = (
        PodCondition(status="False", reason="Unschedulable", message=unschedulable)
        if unschedulable
        else None
    )
    events.append(
        build_event.pod_event(
            id=f"k8s:pod-{name}:{rv()}",
            cluster=CLUSTER,
            time=at(minutes),
            op=op,
            namespace=ns,
            name=name,
            phase="Pending",
            gpus=gpus,
            owner=owner,
            scheduled=cond,
            created_at=at(created),
        )
    )


CA_POD = "kube-system/cluster-autoscaler-7c9d5b8f6-q2xlm"
_CA = LineContext(cluster=CLUSTER, reference=START, source=CA_POD, cloud="aws", fmt="klog")
_ca_lines = [0]


def ca_log(minutes: float, where: str, message: str, severity: str = "I") -> None:
    """One cluster-autoscaler klog line, read by the real parser
    (:func:`connectors.autoscaler.lines.parse_line`, as ``gputriage ingest autoscaler``
    reads a log file: ``CA_POD`` as the source, the line's number as its position), so the
    scenario's autoscaler records are what the connector makes of the line, not a second
    reading of it kept here. A line that states no fact is a bug in the story: it raises."""
    moment = at(minutes)
    stamp = moment.strftime("%m%d %H:%M:%S") + f".{moment.microsecond:06d}"
    line = f"{severity}{stamp}       1 {where}] {message}"
    _ca_lines[0] += 1
    records = parse_line(line, _CA, _ca_lines[0])
    if isinstance(records, RecordError) or not records:
        raise ValueError(f"the parser reads no record in {line!r}: {records!r}")
    events.extend(records)


def go_time(minutes: float) -> str:
    """A time as Go's ``time.Time.String()`` prints it in "Disabling scale-up ... until"."""
    moment = at(minutes)
    monotonic = 261_840.0 + minutes * 60  # m=+: seconds since the autoscaler started
    return (
        moment.strftime("%Y-%m-%d %H:%M:%S")
        + f".{moment.microsecond:06d}118 +0000 UTC m=+{monotonic:.9f}"
    )


def build() -> list[Event]:
    job = ("Job", "llama-pretrain")
    # Every node starts healthy, with its GPU pods running.
    for i in range(1, 8):
        labels = {}
        if i == 3:
            labels = {
                "nvidia.com/gpu.sharing-strategy": "time-slicing",
                "nvidia.com/gpu.replicas": "4",
            }
        node(f"gpu-node-0{i}", 0, labels=labels)

    # gpu-node-01: XID 79 -> allocatable drop -> three training pods fail.
    n1 = "gpu-node-01"
    for k in range(3):
        pod(n1, "ml-train", f"llama-pretrain-{k}", 0.5, owner=job)
    binding(
        n1,
        0.6,
        "GPU-6f1c2a9e-79aa-4c1e-9d3b-000000000001",
        "0000:9b:00.0",
        3,
        [("ml-train", "llama-pretrain-0", "trainer")],
    )
    xid(n1, 5.0, 79, "0000:9b:00.0", 4711, "GPU has fallen off the bus.", pid=None)
    node(n1, 5.15, alloc=7)
    pod(
        n1,
        "ml-train",
        "llama-pretrain-0",
        5.3,
        owner=job,
        phase="Failed",
        container="trainer",
        current=term(5.28, "Error", 1, "RuntimeError: CUDA error: unspecified launch failure"),
    )
    pod(
        n1,
        "ml-train",
        "llama-pretrain-1",
        5.5,
        owner=job,
        phase="Failed",
        reason="UnexpectedAdmissionError",
        message="Allocate failed due to device unhealthy, which is unexpected",
    )
    kube_event(
        n1,
        5.6,
        "Evicted",
        "Pod",
        "llama-pretrain-2",
        "ml-train",
        "The node had condition: [DeviceUnhealthy].",
    )
    node(n1, 21.0, alloc=8)

    # gpu-node-02: container OOMKilled, and the node's OOM killer event for it.
    n2 = "gpu-node-02"
    rs = ("ReplicaSet", "vllm-serve-7d9f8")
    pod(n2, "inference", "vllm-serve-7d9f8-x2kqp", 0.5, owner=rs, container="server")
    kube_event(
        n2,
        10.0,
        "OOMKilling",
        "Node",
        n2,
        "",
        "Memory cgroup out of memory: Killed process 4242 (python3) "
        "total-vm:98765432kB, anon-rss:61234567kB",
        source="kernel-monitor",
    )
    pod(
        n2,
        "inference",
        "vllm-serve-7d9f8-x2kqp",
        10.05,
        owner=rs,
        container="server",
        restarts=1,
        last=term(10.02, "OOMKilled", 137),
    )

    # gpu-node-03: time-sliced GPU; the fine-tune crash-loops with CUDA OOM.
    n3 = "gpu-node-03"
    ft = ("Job", "qwen-finetune")
    pod(n3, "research", "qwen-finetune-0", 0.5, owner=ft, container="trainer")
    pod(
        n3,
        "research",
        "notebook-ana-0",
        0.5,
        owner=("StatefulSet", "notebook-ana"),
        container="jupyter",
    )
    binding(
        n3,
        0.7,
        "GPU-0b7e3c55-1d2f-4a8b-9c6d-000000000003",
        "0000:1a:00.0",
        0,
        [("research", "qwen-finetune-0", "trainer"), ("research", "notebook-ana-0", "jupyter")],
    )
    oom_msg = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 79.10 GiB of which 1.20 GiB is free."
    )
    for k, minute in enumerate((2.0, 4.5, 7.5, 11.0, 14.5), start=1):
        pod(
            n3,
            "research",
            "qwen-finetune-0",
            minute + 0.05,
            owner=ft,
            container="trainer",
            restarts=k,
            waiting="CrashLoopBackOff",
            last=term(minute, "Error", 1, oom_msg),
        )

    # gpu-node-04: one GPU quietly becomes unallocatable; nothing fails.
    n4 = "gpu-node-04"
    pod(n4, "batch", "embed-backfill-0", 0.5, owner=("Job", "embed-backfill"))
    xid(n4, 2.95, 92, "0000:3b:00.0", 880, "High single-bit ECC error rate")
    node(n4, 3.0, alloc=7)

    # gpu-node-05: the render job trips XID 13 twice: its fault, not the GPU's.
    n5 = "gpu-node-05"
    pod(n5, "media", "render-frames-0", 0.5, owner=("Job", "render-frames"), container="blender")
    binding(
        n5,
        0.8,
        "GPU-c3d4e5f6-0a1b-4c2d-8e9f-000000000005",
        "0000:4c:00.0",
        1,
        [("media", "render-frames-0", "blender")],
    )
    xid(
        n5,
        6.0,
        13,
        "0000:4c:00.0",
        301,
        "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 0): Out Of Range Address",
        pid=9151,
        process="blender",
    )
    xid(
        n5,
        6.5,
        13,
        "0000:4c:00.0",
        305,
        "Graphics Exception: ESR 0x504648=0x102000e 0x504650=0x0",
        pid=9151,
        process="blender",
    )

    # gpu-node-06: a GSP timeout, the driver asks for a reset, automation resets the GPU
    # and the driver clears its request; the fault comes back: five episodes, each more
    # than xid_episode_gap_seconds (10 min) after the last. Hardware: escalate (RMA).
    n6 = "gpu-node-06"
    uuid6 = "GPU-9a8b7c6d-5e4f-4321-8765-000000000006"
    for k, minute in enumerate((1.0, 11.5, 22.0, 32.5, 43.0)):
        xid(
            n6,
            minute,
            119,
            "0000:cb:00.0",
            5000 + 3 * k,
            "Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function "
            "76 (GSP_RM_CONTROL) (0x20802a02 0x8).",
            uuid=uuid6,
        )
        xid(
            n6,
            minute + 0.01,
            154,
            "0000:cb:00.0",
            5001 + 3 * k,
            "GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)",
            uuid=uuid6,
            recovery_action="GPU Reset Required",
        )
        xid(
            n6,
            minute + 1.5,
            154,
            "0000:cb:00.0",
            5002 + 3 * k,
            "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)",
            uuid=uuid6,
            recovery_action="None",
        )

    # gpu-node-07: the kubelet stops reporting with two serving pods on it.
    n7 = "gpu-node-07"
    srv = ("ReplicaSet", "triton-serve-5c6b7")
    pod(n7, "inference", "triton-serve-5c6b7-a1", 0.5, owner=srv, container="triton")
    pod(n7, "inference", "triton-serve-5c6b7-b2", 0.5, owner=srv, container="triton")
    node(
        n7,
        12.0,
        ready="Unknown",
        reason="NodeStatusUnknown",
        message="Kubelet stopped posting node status.",
    )
    for name in ("triton-serve-5c6b7-a1", "triton-serve-5c6b7-b2"):
        kube_event(
            n7,
            17.1,
            "TaintManagerEviction",
            "Pod",
            name,
            "inference",
            "Marking for deletion Pod inference/" + name,
            source="taint-controller",
        )
    node(n7, 24.0, ready="True")

    # --- The cluster key: added after the node stories, so that their records
    # keep their resourceVersions, hence their ids and their incidents' ids.
    dcgm_everywhere()
    starved_job()
    dcgm_outage()
    # --- Topology: last, for the same reason.
    pcie_node()
    # --- The DRA node: after everything else, for the same reason.
    dra_node()

    # 45 minutes in: the clock has moved on, quiet windows close.
    events.append(Tick(id="tick:45m", cluster=CLUSTER, time=at(45)))
    events.sort(key=lambda e: (e.time, e.id))
    return events


# --- The cluster key's stories ----------------------------------------------------------

BUSES = (
    "0000:18:00.0",
    "0000:2a:00.0",
    "0000:3a:00.0",
    "0000:5d:00.0",
    "0000:9a:00.0",
    "0000:ab:00.0",
    "0000:ba:00.0",
    "0000:db:00.0",
)
"""Bus ids of GPUs 0-7 for the bindings added with the cluster key's stories (the node
stories' GPUs keep their own: 9b on gpu-node-01, 1a, 3b, 4c, cb, none of them reused)."""


def gpu(node_no: int, index: int) -> tuple[str, str, int]:
    """``(uuid, bus, index)`` of GPU ``index`` of gpu-node-0``node_no``."""
    uuid = f"GPU-{node_no:02d}{index:02d}d1e7-3c5a-4b8e-a2f4-0000000{node_no:02d}{index:03d}"
    return uuid, BUSES[index], index


def bind_pod(node_no: int, minutes: float, indexes: range | tuple[int, ...], pod: str) -> None:
    """dcgm-exporter's binding of each of ``indexes`` to ``pod`` ("ns/name/container");
    an empty ``pod`` reports the GPUs free (or their pods lost)."""
    pods: list[tuple[str, str, str]] = []
    if pod:
        namespace, name, container = pod.split("/")
        pods.append((namespace, name, container))
    for index in indexes:
        binding(f"gpu-node-0{node_no}", minutes, *gpu(node_no, index), pods)


INSTRUCT = ("ReplicaSet", "llama-3-70b-instruct-6b8f9")
INSTRUCT_PODS = {2: "llama-3-70b-instruct-6b8f9-m4x8q", 6: "llama-3-70b-instruct-6b8f9-t9w2c"}


def dcgm_everywhere() -> None:
    """dcgm-exporter runs on every GPU node (the gpu-operator's DaemonSet) and reports which
    pod holds each GPU, so that Kubernetes and dcgm-exporter agree on every node before the
    outage of :func:`dcgm_outage`: a disagreement anywhere else would be named with it.

    Two node stories leave a disagreement of their own, below ``mismatch_threshold`` and
    over before the outage: on gpu-node-01 the GPU at 9b falls off the bus under
    llama-pretrain-0 (dcgm-exporter cannot see it, so its binding stands until the GPU is
    back at minute 21), and llama-pretrain-1's GPU is reported free once it failed. The
    evicted llama-pretrain-2 and gpu-node-07's pods have no later record in the scenario,
    so their bindings stay too. gpu-node-03 is time-sliced: its two pods share one bound
    GPU and it is left out of the count.
    """
    bind_pod(1, 0.6, (0,), "ml-train/llama-pretrain-1/main")
    bind_pod(1, 0.6, (1,), "ml-train/llama-pretrain-2/main")
    bind_pod(1, 5.6, (0,), "")
    binding("gpu-node-01", 21.0, "GPU-6f1c2a9e-79aa-4c1e-9d3b-000000000001", "0000:9b:00.0", 3, [])
    bind_pod(2, 0.8, (0,), "inference/vllm-serve-7d9f8-x2kqp/server")
    bind_pod(4, 0.8, (0,), "batch/embed-backfill-0/main")
    bind_pod(7, 0.8, (0,), "inference/triton-serve-5c6b7-a1/triton")
    bind_pod(7, 0.8, (1,), "inference/triton-serve-5c6b7-b2/triton")
    # A 4-GPU inference replica on gpu-node-02 (GPUs 4-7) and on gpu-node-06 (GPUs 0-3; the
    # XID 119 GPU at cb holds no pod). With them every node has a GPU in use, which is what
    # makes the scheduler say "7 Insufficient nvidia.com/gpu" to an 8-GPU pod.
    for node_no, indexes in ((2, range(4, 8)), (6, range(4))):
        name = INSTRUCT_PODS[node_no]
        pod(
            f"gpu-node-0{node_no}", "inference", name, 0.5, owner=INSTRUCT, gpus=4, container="vllm"
        )
        bind_pod(node_no, 0.8, indexes, f"inference/{name}/vllm")


GROUP = "eks-gpu-p5-48xlarge-5ac6f1d2-3b7e-9c41-a8d0-6e2f4b19c7d5"
"""The EKS managed node group's ASG (``eks-<nodegroup>-<uuid>``) the seven nodes belong to."""
SFT = ("Job", "llama-70b-sft")
SFT_PODS = tuple(
    f"llama-70b-sft-{k}-{suffix}" for k, suffix in enumerate(("8kq2v", "c7m4x", "p2w9d", "z5n3h"))
)
"""An Indexed Job's pods: ``<job>-<index>-<random>``."""
FULL = (
    "0/7 nodes are available: 7 Insufficient nvidia.com/gpu. preemption: 0/7 nodes are "
    "available: 7 No preemption victims found for incoming pod."
)
VCPU_LIMIT = (
    "Launching a new EC2 instance.  Status Reason: Could not launch On-Demand Instances. "
    "VcpuLimitExceeded - You have requested more vCPU capacity than your current vCPU limit "
    "of 1344 allows for the instance bucket that the specified instance type belongs to. "
    "Please visit http://aws.amazon.com/contact-us/ec2-request to request an adjustment to "
    "this limit. Launching EC2 instance failed."
)


def starved_job() -> None:
    """An 8-GPU-per-pod fine-tune that cannot start: the cluster is full and the GPU node
    group cannot grow, because the account's vCPU quota for P instances (1344: exactly the
    seven p5.48xlarge of 192 vCPUs) is used up. cluster-autoscaler tries four times, in
    backoff of 5, 10 and 20 minutes between tries (its defaults: 5 min doubling to 30):
    one paging ``gpu_pods_starved`` for the Job from the third failure (its pods have
    waited more than 10 min by then) and one ``scale_up_failure`` (quota, page). Neither
    ends within the 45 minutes: a quota is raised by a person.

    Every record is a klog line read by the real parser (:func:`ca_log`). The lines are
    modelled on real ones of ``tests/data/autoscaler`` (see its SOURCES.md):

    * ``Pod ns/x is unschedulable``: ``ca_klog.log`` L70 (klogx.go:87, gardener/autoscaler
      PR #253), L38 (kubernetes/autoscaler#4606) and L26-L27 (#1602);
    * ``Final scale-up plan: [{G a->b (max: m)}]``: L45-L47 (AWS ASGs,
      kubernetes/autoscaler#3835);
    * ``Scale-up: setting group G size to N``: L1 (executor.go:147, an EKS GPU node group,
      kubernetes/autoscaler#6128);
    * the ``Event(v1.ObjectReference{...}): type: 'Normal' reason: 'TriggeredScaleUp'``
      line: L51 (event_sink_logging_wrapper.go:48) and L63 (the reason), with the plan's
      item list as the current CA writes it; these tie the Job's pods to the group;
    * ``ASG G scaling failed with description: ...``: ``ca_klog_from_format.log`` L14
      (format string auto_scaling_groups.go:555, in AWS's "Could not launch ...
      Instances. <Code> - <text>" shape of kubernetes/autoscaler#3241); the text after
      the code is AWS's vCPU limit message as quoted in kubernetes/kops#15778, the code
      the EC2 error code of that message;
    * ``Disabling scale-up for node group G until T``: L21 and L25 (Azure/AKS#575,
      MicrosoftDocs/azure-docs#12832); ``Node group G is not ready for scaleup -
      backoff``: L5 (#6128).

    Names, times, sizes and the file:line numbers not in those lines are plausible fillers.

    Left out on purpose: a current cluster-autoscaler on AWS follows the ASG line with
    ``Instance group G cannot provision any more nodes!`` and ``Failed adding N nodes ...
    due to OutOfResource.placeholder-cannot-be-fulfilled`` (L6-L8, PR #5756), and its
    backoff line carries ``errorClass=OutOfResource; errorCode=placeholder-cannot-be-
    fulfilled`` (L9). The parser reads those as ``capacity`` (right: the placeholder code
    is all they say), and the rule then keeps a second ``scale_up_failure`` (capacity,
    ticket) for the same attempts beside the quota page (see NOTES-demo.md). The backoff
    line is therefore in the older shape without a cause, which sets ``until`` only.
    """
    ns = "ml-train"
    for name in SFT_PODS:
        pending(ns, name, 2.0, owner=SFT, created=2.0, gpus=8, op="added")
        pending(ns, name, 2.02, owner=SFT, created=2.0, gpus=8, unschedulable=FULL)
    for name in SFT_PODS:
        ca_log(2.2, "klogx.go:87", f"Pod {ns}/{name} is unschedulable")
    plan = f"[{{{GROUP} 7->11 (max: 16)}}]"
    # (minute of the plan, backoff minutes after its failure)
    for k, (minute, backoff) in enumerate(((2.25, 5), (7.9, 10), (18.6, 20), (39.3, 30))):
        ca_log(minute, "orchestrator.go:185", f"Final scale-up plan: {plan}")
        ca_log(minute, "executor.go:147", f"Scale-up: setting group {GROUP} size to 11")
        if k == 0:
            for rv_no, name in enumerate(SFT_PODS):
                ca_log(
                    minute + 0.001,
                    "event_sink_logging_wrapper.go:48",
                    'Event(v1.ObjectReference{Kind:"Pod", Namespace:"ml-train", '
                    f'Name:"{name}", UID:"uid-{name}", APIVersion:"v1", '
                    f'ResourceVersion:"{2200 + rv_no}", FieldPath:""}}): type: \'Normal\' '
                    f"reason: 'TriggeredScaleUp' pod triggered scale-up: {plan}",
                )
        failed = minute + 0.5
        ca_log(
            failed,
            "auto_scaling_groups.go:555",
            f"ASG {GROUP} scaling failed with description: {VCPU_LIMIT}",
            "W",
        )
        ca_log(
            failed + 0.0005,
            "clusterstate.go:223",
            f"Disabling scale-up for node group {GROUP} until {go_time(failed + backoff)}",
            "W",
        )
        ca_log(
            failed + 0.4,
            "orchestrator.go:511",
            f"Node group {GROUP} is not ready for scaleup - backoff",
            "W",
        )


def dcgm_outage() -> None:
    """A gpu-operator upgrade rolls the dcgm-exporter DaemonSet; on gpu-node-02 and
    gpu-node-06 the new pods come up without the kubelet's pod-resources socket and report
    every GPU without its pod, for about nine minutes, until someone restarts them: 5 + 4
    GPUs that Kubernetes says are held and dcgm-exporter says are not. One
    ``allocation_mismatch`` naming both nodes, from the moment the second has disagreed
    for five minutes (gpu-node-02 alone, 5 GPUs, is not above the threshold), resolved when
    the bindings come back: gpu-node-06's first, which already ends it (5 left). In the other
    order the incident would be revised once, in the same second, as gpu-node-06 became the
    larger share (see NOTES-demo.md).
    """
    vllm = "inference/vllm-serve-7d9f8-x2kqp/server"
    bind_pod(2, 26.0, (0, 4, 5, 6, 7), "")
    bind_pod(6, 26.4, range(4), "")
    bind_pod(6, 35.0, range(4), f"inference/{INSTRUCT_PODS[6]}/vllm")
    bind_pod(2, 35.2, (0,), vllm)
    bind_pod(2, 35.2, range(4, 8), f"inference/{INSTRUCT_PODS[2]}/vllm")


# --- Topology ---------------------------------------------------------------------------

PCIE_NODE = "gpu-node-08"
PCIE_LABELS = {
    "nvidia.com/gpu.product": "NVIDIA-L40S",
    "node.kubernetes.io/instance-type": "g6e.48xlarge",
}
NUMA = (0, 0, 0, 0, 1, 1, 1, 1)
"""GPUs 0-3 on the first socket's NUMA node, 4-7 on the second's (both kinds of box)."""


def topology(node_name: str, minutes: float, links: dict[tuple[int, int], str]) -> None:
    """The node agent's snapshot at its start (``nvidia-smi topo -m``: indices, no uuids)."""
    events.append(
        build_event.topology_event(
            id=f"topo:{node_name}:{rv()}",
            cluster=CLUSTER,
            time=at(minutes),
            node=node_name,
            links=links,
            numa=NUMA,
        )
    )


def pcie_node() -> None:
    """A 2-GPU DDP job scheduled by the default scheduler on a PCIe-only node: the device
    plugin hands it GPUs 3 and 4, one per socket (``SYS``), so its all-reduce crosses the
    CPUs' interconnect. One ticket naming the pod, both GPUs and the SYS link, resolved
    when the job succeeds. Every H100 node's snapshot says NV18 for every pair: their
    multi-GPU pods (the 4-GPU replicas, the training pods) give nothing."""
    for i in range(1, 8):
        topology(f"gpu-node-0{i}", 0.2, build_event.hgx_links(8))
    node(PCIE_NODE, 0, labels=PCIE_LABELS)
    topology(PCIE_NODE, 0.2, build_event.pcie_links(8, per_socket=4))
    ddp = ("Job", "resnet-ddp")
    pod(PCIE_NODE, "ml-train", "resnet-ddp-0", 1.0, owner=ddp, gpus=2)
    bind_pod(8, 1.1, (3, 4), "ml-train/resnet-ddp-0/main")
    done = term(31.0, "Completed", 0)
    pod(
        PCIE_NODE,
        "ml-train",
        "resnet-ddp-0",
        31.0,
        owner=ddp,
        gpus=2,
        phase="Succeeded",
        current=done,
    )
    bind_pod(8, 31.1, (3, 4), "")


# --- The DRA node ---------------------------------------------------------------------

DRA_NODE = "gpu-node-09"
DRIVER = "gpu.nvidia.com"
DRA_POD = "guard-serve-6d4c9-q7k2m"
DRA_OWNER = ("ReplicaSet", "guard-serve-6d4c9")
DRA_CLAIM = f"{DRA_POD}-gpu-8xk2p"
DRA_CLAIM_UID = "5f0c2b7e-9a41-4d3c-8e6f-1b2a3c4d5e09"
DRA_RULE = "evict-gpu-node-09-gpu-2"
DISRUPTION = PodCondition(
    status="True",
    reason="DeletionByDeviceTaintManager",
    message="Device Taint manager: deleting due to NoExecute taint",
)


def dra_gpu(index: int) -> tuple[str, str]:
    """``(uuid, bus)`` of GPU ``index`` of the DRA node."""
    return f"GPU-09{index:02d}d1e7-3c5a-4b8e-a2f4-00000009{index:04d}", BUSES[index]


def dra_slice(minutes: float, taint: DeviceTaint | None = None) -> None:
    """The node's ResourceSlice as the connector publishes it: taints are the effective
    ones (a DeviceTaintRule's included, ``rule`` naming it)."""
    devices = []
    for index in range(8):
        uuid, bus = dra_gpu(index)
        taints = (taint,) if taint is not None and index == 2 else ()
        devices.append(
            SliceDevice(
                name=f"gpu-{index}",
                uuid=uuid,
                pci_bus_id=bus,
                product="NVIDIA H100 80GB HBM3",
                type="gpu",
                taints=taints,
            )
        )
    version = rv()
    events.append(
        ResourceSliceEvent(
            id=f"k8s:slice-{DRA_NODE}:{version}",
            cluster=CLUSTER,
            time=at(minutes),
            node=DRA_NODE,
            name=f"{DRA_NODE}-{DRIVER}-x7k2p",
            driver=DRIVER,
            pool=DRA_NODE,
            generation=1,
            devices=tuple(devices),
            resource_version=int(version),
        )
    )


def dra_claim(minutes: float, *, held: bool, op: Op = "modified") -> None:
    """The pod's claim (from its template): allocated on gpu-2 and reserved for the pod, or
    released; the connector's DRA binding of gpu-2 follows it (bind, or unbind)."""
    version = rv()
    events.append(
        ResourceClaimEvent(
            id=f"k8s:claim-{DRA_CLAIM}:{version}",
            cluster=CLUSTER,
            time=at(minutes),
            node=DRA_NODE if held else "",
            op=op,
            namespace="inference",
            name=DRA_CLAIM,
            uid=DRA_CLAIM_UID,
            requests=(ClaimRequest(name="gpu", device_class=DRIVER, count=1),),
            devices=(ClaimDevice(request="gpu", driver=DRIVER, pool=DRA_NODE, device="gpu-2"),)
            if held
            else (),
            reserved_for=(PodRef(namespace="inference", name=DRA_POD),) if held else (),
            gpus=1,
            resource_version=int(version),
        )
    )
    if op == "deleted":
        return
    uuid, bus = dra_gpu(2)
    events.append(
        GpuBindingEvent(
            id=f"dra:{DRA_NODE}:gpu-2:{DRA_CLAIM_UID}:{version}",
            cluster=CLUSTER,
            time=at(minutes),
            node=DRA_NODE,
            gpu_uuid=uuid,
            pci_bus_id=bus,
            device="gpu-2",
            pods=(PodRef(namespace="inference", name=DRA_POD),) if held else (),
            claims=(f"inference/{DRA_CLAIM}",) if held else (),
            source=DRA,
        )
    )


def dra_pod(
    minutes: float,
    *,
    node_name: str = DRA_NODE,
    phase: str = "Running",
    op: Op = "modified",
    current: Termination | None = None,
    disruption: PodCondition | None = None,
    deleted: float | None = None,
) -> None:
    """The pod: no GPU request, its GPU by claim (its device's health ``Unknown``: NVIDIA's
    DRA driver reports none to the kubelet)."""
    state = "terminated" if current else "running"
    devices = (
        DeviceHealth(
            resource="claim:gpu/gpu",
            device=f"k8s.gpu.nvidia.com/claim={DRA_CLAIM_UID}-gpu-2",
            health="Unknown",
        ),
    )
    base = build_event.pod_event(
        id=f"k8s:pod-{DRA_POD}:{rv()}",
        cluster=CLUSTER,
        time=at(minutes),
        node=node_name,
        op=op,
        namespace="inference",
        name=DRA_POD,
        phase=phase,
        gpus=0,
        owner=DRA_OWNER,
        containers=(
            msgspec.structs.replace(
                build_event.container("guard", state=state, current=current),
                devices=devices if node_name else (),
            ),
        ),
        deleted_at=at(deleted) if deleted is not None else None,
    )
    claim = PodClaim(
        name="gpu", claim=DRA_CLAIM, template="guard-serve-gpu", gpus=1, device_class=DRIVER
    )
    events.append(msgspec.structs.replace(base, claims=(claim,), disruption=disruption))


def dra_node() -> None:
    """A DRA node of a mixed cluster: no ``nvidia.com/gpu`` at all, its eight GPUs the
    devices of its ResourceSlice, and one inference pod holding gpu-2 through a claim. At
    minute 12 an operator's DeviceTaintRule taints gpu-2 NoExecute; the device taint
    eviction controller evicts the pod (its Event, the pod's DisruptionTarget condition),
    the claim is released. One page naming the GPU, the device and the pod; the rule is
    deleted at minute 25 (the GPU was looked at)."""
    events.append(
        NodeEvent(
            id=f"k8s:node-{DRA_NODE}:{rv()}",
            cluster=CLUSTER,
            time=at(0),
            node=DRA_NODE,
            conditions=(build_event.ready_condition("True", "KubeletReady"),),
            labels={**LABELS, "nvidia.com/gpu.present": "true"},
        )
    )
    dra_slice(0.1)
    dra_pod(0.5, node_name="", phase="Pending", op="added")
    dra_claim(0.52, held=True)
    dra_pod(0.6)
    uuid, bus = dra_gpu(2)
    binding(DRA_NODE, 0.8, uuid, bus, 2, [("inference", DRA_POD, "guard")])
    taint = DeviceTaint(
        key="example.com/gpu-fault",
        value="xid-79",
        effect="NoExecute",
        time_added=at(12.0),
        rule=DRA_RULE,
    )
    dra_slice(12.0, taint)
    events.append(
        build_event.kube_event(
            id=f"k8s-event:DeviceTaintManagerEviction-{DRA_POD}:{rv()}",
            cluster=CLUSTER,
            time=at(12.02),
            node=DRA_NODE,
            reason="DeviceTaintManagerEviction",
            message="Marking for deletion",
            warning=False,
            kind="Pod",
            name=DRA_POD,
            namespace="inference",
            uid=f"uid-{DRA_POD}",
            source="device-taint-eviction-controller",
        )
    )
    dra_pod(12.03, disruption=DISRUPTION, deleted=12.03)
    killed = term(12.5, "Error", 143)
    dra_pod(12.5, phase="Failed", current=killed, disruption=DISRUPTION, deleted=12.03)
    dra_claim(12.55, held=False)
    binding(DRA_NODE, 12.8, uuid, bus, 2, [])
    dra_pod(
        13.0, phase="Failed", op="deleted", current=killed, disruption=DISRUPTION, deleted=12.03
    )
    dra_claim(13.05, held=False, op="deleted")
    dra_slice(25.0)


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).with_name("scenario.jsonl")
    lines: list[Any] = [encode(e) + b"\n" for e in build()]
    out.write_bytes(b"".join(lines))
    print(f"wrote {len(lines)} events to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
