"""The k8s connector's Events watch with the autoscaler ``derive`` hook, against kmock:
an autoscaler Event also becomes an ``autoscaler.v1`` record, past the GPU filter."""

from __future__ import annotations

import pytest

from connectors.autoscaler.kube_events import derive
from connectors.k8s.gpu_filter import GpuFilter
from connectors.k8s.metrics import ConnectorMetrics
from connectors.k8s.watch import Derived, Emitted, ResourceWatcher
from schemas.events import AutoscalerEvent, KubeEvent, PodRef
from tests.k8s_helpers import FAST_WATCH, WATCHED, collecting, fake_cluster, kube_event
from tests.kafka_helpers import eventually

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(20)]

KARPENTER = 'Failed to schedule pod, incompatible with nodepool "gpu", Insufficient nvidia.com/gpu'
NOT_TRIGGERED = "pod didn't trigger scale-up: 1 max node group size reached, 3 Insufficient cpu"


def autoscaler_kube_event(name: str, rv: str, pod: str, reason: str, message: str) -> dict:  # type: ignore[type-arg]
    event = kube_event(name, rv, reason=reason, pod_name=pod, message=message)
    event["source"] = {"component": "cluster-autoscaler"}
    event["type"] = "Normal"
    return event


async def test_autoscaler_events_pass_the_gpu_filter_as_autoscaler_records() -> None:
    async with fake_cluster() as cluster:
        # "web" is no GPU pod the filter knows: its KubeEvent is dropped, its record is not.
        cluster.events.put(
            autoscaler_kube_event("e1", "10", "web", "NotTriggerScaleUp", NOT_TRIGGERED)
        )
        cluster.events.put(kube_event("e2", "11", reason="BackOff", pod_name="web"))
        gpu_filter = GpuFilter()
        watcher = ResourceWatcher(
            cluster.api,
            "events",
            WATCHED,
            options=FAST_WATCH,
            keep=gpu_filter.keep,
            metrics=ConnectorMetrics(),
            derive=derive,
        )
        async with collecting(watcher.items()) as items:
            await eventually(lambda: len(cluster.events.watch_requests) == 1, what="a watch")
            live = autoscaler_kube_event("e3", "12", "trainer", "FailedScheduling", KARPENTER)
            live["source"] = {"component": "karpenter"}
            cluster.events.event("ADDED", live)
            await eventually(lambda: any(isinstance(i, Emitted) for i in items), what="e3")
    derived = [i for i in items if isinstance(i, Derived)]
    assert len(derived) == 1
    (record,) = derived[0].events
    assert isinstance(record, AutoscalerEvent)
    assert (record.action, record.reason) == ("unschedulable", "max_size")
    assert record.pods == (PodRef(namespace="ml", name="web"),)
    (emitted,) = [i for i in items if isinstance(i, Emitted)]
    assert isinstance(emitted.event, KubeEvent)  # it names a GPU resource: kept
    (also,) = emitted.also
    assert isinstance(also, AutoscalerEvent)
    assert (also.source, also.action, also.node_group) == ("karpenter", "unschedulable", "gpu")
