"""A controller's Event about a GPU pod is published on the pod's node.

An Event's node is its source's host, which only the kubelet fills in. The device taint
eviction controller's ``DeviceTaintManagerEviction`` (and the node taint manager's
``TaintManagerEviction``) come from kube-controller-manager with no host, so before, they
went to the cluster key and the node's eviction chain never saw them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import msgspec
import pytest

from connectors.k8s.gpu_filter import GpuFilter
from connectors.k8s.run import Connector
from connectors.k8s.watch import Emitted, Synced
from schemas.events import KubeEvent, PodEvent
from tests.connectors.k8s.test_dra_join import load, slim
from tests.k8s_helpers import FAST_WATCH, WATCHED, collecting, fake_cluster, kube_event, pod
from tests.kafka_helpers import eventually

CONTROLLER = "device-taint-eviction-controller"


def controller_event(name: str, pod_name: str, namespace: str = "ml") -> dict[str, Any]:
    """A kube-controller-manager Event about a pod: a component, no host."""
    obj = kube_event(
        name,
        "30",
        reason="DeviceTaintManagerEviction",
        pod_name=pod_name,
        namespace=namespace,
        message="Marking for deletion",
    )
    obj["source"] = {"component": CONTROLLER}
    obj["type"] = "Normal"
    return obj


def test_a_controllers_event_about_a_gpu_pod_is_on_the_pods_node() -> None:
    gpu_filter = GpuFilter()
    assert gpu_filter.keep(slim(pod("trainer", "10", node="gpu-7")))
    event = slim(controller_event("ev1", "trainer"))
    assert isinstance(event, KubeEvent)
    assert event.node == ""  # as slimmed: the Event names no host
    assert gpu_filter.keep(event)
    assert gpu_filter.place(event).node == "gpu-7"


def test_the_kubelets_host_and_pending_or_unknown_pods_are_left_as_they_are() -> None:
    gpu_filter = GpuFilter()
    gpu_filter.keep(slim(pod("trainer", "10", node="gpu-7")))
    gpu_filter.keep(slim(pod("waiting", "11", node="", phase="Pending")))
    kubelet = slim(kube_event("ev1", "20", reason="Killing", pod_name="trainer"))
    assert gpu_filter.place(kubelet).node == "gpu-1", "the kubelet's own host stands"
    scheduler = slim(kube_event("ev2", "21", reason="FailedScheduling", pod_name="waiting"))
    scheduler = msgspec.structs.replace(scheduler, node="")  # the scheduler names no host
    assert gpu_filter.place(scheduler).node == "", "a pending pod has no node: cluster key"
    stranger = slim(controller_event("ev3", "elsewhere"))
    assert gpu_filter.place(stranger).node == ""


def test_a_deleted_pods_node_is_kept_while_its_name_is_then_forgotten() -> None:
    gpu_filter = GpuFilter(forget_after=timedelta(minutes=10))
    gpu_filter.keep(slim(pod("trainer", "10", node="gpu-7")))
    gone = slim(pod("trainer", "12", node="gpu-7"), op="deleted", minute=1)
    assert isinstance(gone, PodEvent)
    gpu_filter.keep(gone)
    late = slim(controller_event("ev1", "trainer"), minute=5)
    assert gpu_filter.keep(late)
    assert gpu_filter.place(late).node == "gpu-7"
    later = slim(pod("other", "40", node="gpu-8"), minute=30)
    gpu_filter.keep(later)  # time moves on: "trainer" is forgotten
    assert gpu_filter.place(late).node == ""
    assert len(gpu_filter) == 1


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_the_connector_publishes_the_eviction_event_on_the_dra_pods_node() -> None:
    async with fake_cluster(dra=True) as cluster:
        cluster.resource("resourceclaims").put(load("resourceclaim_allocated"))
        cluster.pods.put(load("pod_with_claims"))
        cluster.events.put(controller_event("ev1", "pod1", namespace="gpu-test1"))
        connector = Connector(cluster.api, WATCHED, watch=FAST_WATCH)
        watchers = connector.watchers
        async with collecting(watchers["resourceclaims"].items()) as claims:
            await eventually(lambda: any(isinstance(i, Synced) for i in claims), what="claims")
        async with collecting(watchers["pods"].items()) as pods:
            await eventually(lambda: any(isinstance(i, Emitted) for i in pods), what="the pod")
        async with collecting(watchers["events"].items()) as events:
            await eventually(lambda: any(isinstance(i, Emitted) for i in events), what="Event")
        [published] = [i.event for i in events if isinstance(i, Emitted)]
        assert isinstance(published, KubeEvent)
        assert (published.reason, published.node) == (
            "DeviceTaintManagerEviction",
            "gpu-a100-node-01",
        )
