"""One fully populated sample of every record type, shared by codec and schema tests.

Every optional field is set to a non-default value so a round trip proves the
field survives encoding; :data:`SAMPLES` must cover every type in
``EVENT_TYPES`` (a test enforces that), so a new schema needs a sample here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import msgspec

from schemas.events import (
    AutoscalerEvent,
    ContainerStatus,
    GpuBindingEvent,
    GpuNumaAffinity,
    GpuPairLink,
    GpuTopologyEvent,
    KubeEvent,
    NodeCondition,
    NodeEvent,
    ObjectRef,
    PodCondition,
    PodEvent,
    PodRef,
    Taint,
    Termination,
    Tick,
    XidEvent,
)
from schemas.incidents import Evidence, GpuRef, Incident, PodInfo

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
CEST = timezone(timedelta(hours=2))

SAMPLES: tuple[msgspec.Struct, ...] = (
    PodEvent(
        id="uid-1/100",
        cluster="c1",
        time=T0,
        node="gpu-node-1",
        op="added",
        namespace="ml",
        name="trainer-0",
        uid="uid-1",
        phase="Running",
        reason="Evicted",
        message="The node was low on resource: memory.",
        gpu_requests={"nvidia.com/gpu": 2},
        gpu_limits={"nvidia.com/gpu": 2},
        owner_kind="Job",
        owner_name="trainer",
        containers=(
            ContainerStatus(
                name="main",
                restart_count=3,
                state="waiting",
                reason="CrashLoopBackOff",
                terminated=Termination(reason="Error", exit_code=1, finished_at=T0),
                last_terminated=Termination(
                    reason="OOMKilled",
                    exit_code=137,
                    finished_at=T0 - timedelta(seconds=5),
                    message="CUDA out of memory",
                ),
            ),
        ),
        scheduled=PodCondition(status="False", reason="Unschedulable", message="Insufficient"),
        created_at=T0 - timedelta(hours=1),
        deleted_at=T0 + timedelta(minutes=1),
    ),
    NodeEvent(
        id="node-uid/7",
        cluster="c1",
        time=T0.astimezone(CEST),
        node="gpu-node-1",
        op="modified",
        capacity={"nvidia.com/gpu": 8},
        allocatable={"nvidia.com/gpu": 7},
        conditions=(NodeCondition(type="Ready", status="True", reason="KubeletReady"),),
        labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        taints=(Taint(key="nvidia.com/gpu", value="present", effect="NoSchedule"),),
    ),
    KubeEvent(
        id="ev-1",
        cluster="c1",
        time=T0,
        node="gpu-node-1",
        reason="OOMKilling",
        message="Memory cgroup out of memory: Killed process 1234 (python)",
        type="Warning",
        involved=ObjectRef(kind="Node", name="gpu-node-1", uid="node-uid"),
        source="kernel-monitor",
        count=2,
    ),
    XidEvent(
        id="boot-1/4711",
        cluster="c1",
        time=T0 + timedelta(microseconds=250),
        node="gpu-node-1",
        code=79,
        pci_bus_id="0000:9b:00.0",
        gpu_uuid="GPU-0b7c1f7e-0000-0000-0000-000000000000",
        gpu_index=3,
        pid=4242,
        process="python",
        message="GPU has fallen off the bus.",
        source="nvml",
        sxid=False,
        recovery_action="reboot",
        caused_by=48,
        gpu_instance=5,
        compute_instance=0,
    ),
    GpuBindingEvent(
        id="dcgm/gpu-node-1/3/1",
        cluster="c1",
        time=T0,
        node="gpu-node-1",
        gpu_uuid="GPU-0b7c1f7e-0000-0000-0000-000000000000",
        pci_bus_id="0000:9b:00.0",
        gpu_index=3,
        device="nvidia3",
        mig_profile="1g.10gb",
        pods=(PodRef(namespace="ml", name="trainer-0", container="main"),),
        gpu_instance=5,
        mig_uuid="MIG-5e0b4a8c-7c1f-5b2e-9a43-2d4bc1e0f6a1",
        shared=True,
        source="pod-resources",
    ),
    GpuTopologyEvent(
        id="topo/gpu-node-1/1",
        cluster="c1",
        time=T0,
        node="gpu-node-1",
        gpus=(
            GpuNumaAffinity(gpu=0, numa_node=0, cpu_affinity="0-47", pci_bus_id="0000:18:00.0"),
            GpuNumaAffinity(gpu=1, numa_node=None, gpu_uuid="GPU-1"),
        ),
        links=(GpuPairLink(src_gpu=0, dst_gpu=1, link_type="NV18", nvlinks=18),),
        source="nvml",
    ),
    AutoscalerEvent(
        id="ca/1",
        cluster="c1",
        time=T0,
        action="scale_up_failed",
        node_group="gpu-h100",
        reason="quota",
        message="Quota 'NVIDIA_H100_GPUS' exceeded",
        pods=(PodRef(namespace="ml", name="trainer-1"),),
        source="karpenter",
    ),
    Tick(id="tick/1", cluster="c1", time=T0, node="gpu-node-1"),
)

INCIDENT = Incident(
    id="inc-0123456789abcdef0123",
    type="device_unhealthy_eviction",
    status="resolved",
    revision=3,
    severity="page",
    cluster="c1",
    node="gpu-node-1",
    gpus=(GpuRef(uuid="GPU-0b7c1f7e", pci_bus_id="0000:9b:00.0", index=3),),
    pods=(
        PodInfo(namespace="ml", name="trainer-0", owner_kind="Job", owner_name="t", role="bound"),
    ),
    first_seen=T0,
    last_seen=T0 + timedelta(minutes=2),
    resolved_at=T0 + timedelta(minutes=30),
    summary="XID 79 on gpu-node-1 then 1 GPU pod evicted",
    action="Drain the node and reset the GPU.",
    evidence=(Evidence(event_id="boot-1/4711", schema="xid.v1", time=T0, text="Xid 79"),),
    evidence_omitted=4,
    attributes={"xid": "79"},
)
