"""Builds ``scenario.jsonl``: a recorded 45 minutes of a small GPU cluster.

Run ``python examples/build_scenario.py`` after changing a schema; the file is
committed so that users (and the tests) can replay it without running this.
Records are built by :mod:`gputriage.demo.events` (shared with the tests and the
bench); what stays here is the story, the scenario's id scheme (``k8s:pod-NAME:RV``,
one resourceVersion counter) and its time unit (minutes after ``START``). The
output must stay byte-identical to ``gputriage/demo/scenario.jsonl``: the tests
rebuild it and compare.

Seven GPU nodes, each showing one node-scoped incident type:

==============  ===========================================================
gpu-node-01     XID 79 (fell off the bus), allocatable 8 -> 7, three training
                pods fail or are evicted: ONE device_unhealthy_eviction
gpu-node-02     an inference container OOMKilled + the node's OOMKilling event
gpu-node-03     time-sliced GPU; a fine-tune crash-loops with CUDA OOM
                while a notebook shares its GPU: suspected_cuda_oom
gpu-node-04     allocatable 8 -> 7 with no pod failure: gpu_degraded
gpu-node-05     XID 13 twice on a GPU bound to a render pod: gpu_app_fault
gpu-node-06     XID 119 (GSP RPC timeout) on one GPU, reset each time (the driver's
                XID 154 asks for a reset, then clears), back four times, 10.5 min
                apart: five fault episodes, xid_repeat
gpu-node-07     kubelet stops reporting with serving pods on it:
                gpu_node_not_ready, later evictions join it
==============  ===========================================================
"""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from gputriage.demo import events as build_event
from gputriage.demo.events import T0
from schemas.codec import encode
from schemas.events import Event, PodRef, Termination, Tick
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

    # 45 minutes in: the clock has moved on, quiet windows close.
    events.append(Tick(id="tick:45m", cluster=CLUSTER, time=at(45)))
    events.sort(key=lambda e: (e.time, e.id))
    return events


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).with_name("scenario.jsonl")
    lines: list[Any] = [encode(e) + b"\n" for e in build()]
    out.write_bytes(b"".join(lines))
    print(f"wrote {len(lines)} events to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
