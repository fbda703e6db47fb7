"""End to end: the kubelet's pod-resources -> the node agent -> Kafka -> a worker.

Everything real but the node: a gRPC server of the kubelet's ``v1.PodResourcesLister`` on
a Unix socket (tests/connectors/podresources/kubelet.py), the node's NVML map as a fake
*driver* reports it (the A30 of tests/connectors/test_mig_identity.py), the Tansu broker,
the ``gputriage process`` worker. The kubelet's allocations change while the agent runs,
and its ``gpu_binding.v1`` records on the broker follow. Then a kernel XID on the MIG
instance names the one pod the kubelet gave that instance, and one on a time-sliced GPU
names every pod holding a replica of it, as candidates (dcgm-exporter would have kept one
of them: NVIDIA/dcgm-exporter#151). No other source binds anything here, so the pods on
the incidents can only have come from the kubelet's records.
"""

from __future__ import annotations

import asyncio
import io
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from connectors.kafka.producer import start_producer
from connectors.podresources.devices import GpuInfo, GpuMap
from connectors.podresources.run import PodResourcesMetrics, PodResourcesSource
from connectors.podresources.settings import PodResourcesSettings
from connectors.run import Served, run_source
from connectors.xid.lines import LineContext, parse_line
from schemas.codec import decode_event, decode_incident
from schemas.events import GpuBindingEvent, XidEvent
from schemas.incidents import Incident
from tests.connectors.podresources.kubelet import serving
from tests.connectors.test_mig_identity import A30, BUS, MIG_GI3
from tests.kafka_helpers import KafkaTestEnv, consume_until
from tests.processor_helpers import Worker, final, send_events

NODE = "gpu-node-07"
CLUSTER = "prod"
SHARED = "GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763"
SHARED_BUS = "0000:18:00.0"
NVML = GpuMap.of(
    [
        GpuInfo(uuid=SHARED, pci_bus_id=SHARED_BUS, index=0),
        GpuInfo(uuid=A30, pci_bus_id=BUS, index=1),
        GpuInfo(uuid=A30, pci_bus_id=BUS, index=1, gpu_instance=3, mig_uuid=MIG_GI3),
    ]
)


def bindings(records: list[Any]) -> dict[tuple[str, int | None], tuple[str, ...]]:
    """The latest pods of every GPU / instance among the raw binding records."""
    latest: dict[tuple[str, int | None], tuple[str, ...]] = {}
    for r in records:
        event = decode_event(r.value)
        if isinstance(event, GpuBindingEvent) and event.scope == "node":
            latest[(event.gpu_uuid, event.gpu_instance)] = tuple(p.name for p in event.pods)
    return latest


def app_faults(records: list[Any]) -> list[Incident]:
    incidents = [decode_incident(r.value) for r in records if r.value is not None]
    return [i for i in final(incidents).values() if i.type == "gpu_app_fault"]


def kernel_xids(now: datetime) -> list[XidEvent]:
    """Two kernel lines logged just now: XID 94 on the A30's instance 3, XID 31 on the
    time-sliced GPU (NVIDIA's error-containment and MMU-fault examples)."""
    context = LineContext(node=NODE, cluster=CLUSTER, boot_time=now - timedelta(hours=1))
    lines = (
        b"3,8812,3600000000,-;NVRM: Xid (PCI:0000:41:00 GPU-I:03): 94, pid=7194, "
        b"Contained: CE User Channel (0x9). RST: No, D-RST: No",
        b"3,8813,3601000000,-;NVRM: Xid (PCI:0000:18:00): 31, pid=2231, name=python3, "
        b"Ch 00000008, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ "
        b"0x7f_1e200000. Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ",
    )
    out = []
    for line in lines:
        event = parse_line(line, context)
        assert isinstance(event, XidEvent), event
        out.append(event)
    return out


@pytest.mark.asyncio
async def test_the_kubelets_bindings_name_the_pods_of_a_mig_and_a_time_sliced_xid(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    await kafka.acreate_topics()
    topic = kafka.layout.raw_topic(GpuBindingEvent)
    worker = Worker(kafka, f"{kafka.prefix}-app", tmp_path / "worker.log")
    stop = asyncio.Event()
    try:
        async with serving(tmp_path) as (kubelet, target):
            kubelet.devices = {
                "nvidia.com/gpu": [f"{SHARED}::{n}" for n in range(4)],
                "nvidia.com/mig-1g.6gb": [MIG_GI3],
            }
            kubelet.pods = {"ml/notebook-a": {"nvidia.com/gpu": [f"{SHARED}::0"]}}
            command = PodResourcesSettings(
                cluster=CLUSTER,
                node=NODE,
                socket=target,
                interval_seconds=0.2,
                heartbeat_seconds=0.5,
            )
            producer = await start_producer(kafka.kwargs, kafka.layout)
            metrics = PodResourcesMetrics()
            source = PodResourcesSource(command, _lister(target), NVML, metrics)
            served = Served(metrics=metrics.delivery, port=None)
            agent = asyncio.create_task(
                run_source(
                    source, producer, name="e2e", served=served, err=io.StringIO(), stop=stop
                )
            )
            try:
                await consume_until(
                    kafka.bootstrap,
                    [topic],
                    lambda rs: bindings(rs) == {(SHARED, None): ("notebook-a",), (A30, 3): ()},
                    timeout=30,
                    what="the first poll's bindings",
                )
                kubelet.pods = {  # a second notebook gets a replica; serve the MIG instance
                    "ml/notebook-a": {"nvidia.com/gpu": [f"{SHARED}::0"]},
                    "ml/notebook-b": {"nvidia.com/gpu": [f"{SHARED}::2"]},
                    "inference/serve-0": {"nvidia.com/mig-1g.6gb": [MIG_GI3]},
                }
                records = await consume_until(
                    kafka.bootstrap,
                    [topic],
                    lambda rs: (
                        bindings(rs)
                        == {(SHARED, None): ("notebook-a", "notebook-b"), (A30, 3): ("serve-0",)}
                    ),
                    timeout=30,
                    what="the bindings following the kubelet",
                )
                latest = [decode_event(r.value) for r in records]
                shared = [e for e in latest if isinstance(e, GpuBindingEvent) and len(e.pods) == 2]
                assert shared
                assert shared[-1].shared
                assert {e.source for e in latest if isinstance(e, GpuBindingEvent)} == {
                    "pod-resources"
                }

                xids = kernel_xids(datetime.now(UTC))
                await send_events(kafka, xids)
                found = await consume_until(
                    kafka.bootstrap,
                    [kafka.layout.incidents.name],
                    lambda rs: len(app_faults(rs)) == 2,
                    timeout=60,
                    what="an app-fault incident for each XID",
                )
            finally:
                stop.set()
                assert await agent == 0, "the agent delivered everything"
                await producer.stop()
        by_code = {i.attributes["xids"]: i for i in app_faults(found)}
        mig, sliced = by_code["94"], by_code["31"]
        assert [p.name for p in mig.pods] == ["serve-0"], "the instance's own pod, no sibling"
        assert [(g.uuid, g.pci_bus_id) for g in mig.gpus] == [(A30, BUS)]
        assert sorted(p.name for p in sliced.pods) == ["notebook-a", "notebook-b"]
        assert "candidates" in sliced.summary, "a shared GPU names candidates, not a culprit"
        assert [(g.uuid, g.pci_bus_id) for g in sliced.gpus] == [(SHARED, SHARED_BUS)]
    finally:
        assert worker.stop() == 0, worker.log()


def _lister(target: str) -> Any:
    from connectors.podresources.client import Client  # noqa: PLC0415

    return Client(target, timeout_seconds=2.0)
