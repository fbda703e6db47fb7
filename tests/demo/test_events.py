"""The shared event builders (gputriage.demo.events): what they promise and the traps.

Tests, the demo scenario and the bench stream are all built on these, so a wrong
default here would be wrong in all three at once.
"""

from __future__ import annotations

from typing import Any

import pytest

from connectors.k8s.slim import is_gpu_node, is_gpu_pod
from gputriage.demo import events as build
from gputriage.demo.events import GPU, T0, at
from schemas.codec import decode_event, encode
from schemas.events import KubeEvent, NodeEvent, PodEvent, PodRef


def _pod(**kwargs: Any) -> PodEvent:
    return build.pod_event(
        id="p-1", cluster="c1", time=at(5), name="train-0", namespace="ml", node="n1", **kwargs
    )


def test_a_built_pod_round_trips_through_the_codec_with_its_gpu_request() -> None:
    last = build.termination(at(3), "OOMKilled", 137, "killed")
    pod = _pod(
        gpus=4,
        owner=("Job", "train"),
        containers=(build.container("trainer", restarts=2, state="running", last=last),),
    )
    back = decode_event(encode(pod))
    assert back == pod
    assert isinstance(back, PodEvent)
    assert back.gpu_requests == {GPU: 4}
    assert back.gpu_limits == {GPU: 4}
    assert back.uid == "uid-train-0"
    assert (back.owner_kind, back.owner_name) == ("Job", "train")
    assert back.containers[0].last_terminated == last
    assert back.time == T0.replace(second=5)


def test_a_pod_without_gpus_has_no_request_at_all() -> None:
    pod = _pod(gpus=0)
    assert pod.gpu_requests == {}
    assert pod.gpu_limits == {}
    assert not is_gpu_pod(pod)
    assert is_gpu_pod(_pod(gpus=1))


def test_limits_can_be_left_out_as_the_tests_pods_are() -> None:
    pod = _pod(gpus=2, limits=False)
    assert pod.gpu_requests == {GPU: 2}
    assert pod.gpu_limits == {}


def test_a_node_with_no_healthy_gpu_still_says_allocatable_zero() -> None:
    node = build.node_event(id="n-1", cluster="c1", time=T0, node="n1", allocatable=0)
    back = decode_event(encode(node))
    assert isinstance(back, NodeEvent)
    assert back.capacity == {GPU: 8}
    assert back.allocatable == {GPU: 0}
    assert is_gpu_node(back)
    assert [(c.type, c.status) for c in back.conditions] == [("Ready", "True")]


def test_the_ready_condition_comes_first() -> None:
    pressure = build.ready_condition("False")
    node = build.node_event(
        id="n-1",
        cluster="c1",
        time=T0,
        node="n1",
        ready=build.ready_condition("Unknown", "NodeStatusUnknown"),
        conditions=(pressure,),
    )
    assert node.conditions[0].status == "Unknown"
    assert node.conditions[0].reason == "NodeStatusUnknown"
    assert node.allocatable == node.capacity == {GPU: 8}


@pytest.mark.parametrize("bus", ["0000:9B:00.0", "9b:00", "00000000:9b:00.0", "not-a-bus"])
def test_a_non_canonical_bus_id_is_refused(bus: str) -> None:
    with pytest.raises(ValueError, match="not canonical"):
        build.xid_event(id="x", cluster="c1", time=T0, node="n1", code=79, bus=bus)
    with pytest.raises(ValueError, match="not canonical"):
        build.binding_event(id="b", cluster="c1", time=T0, node="n1", uuid="GPU-1", bus=bus)


def test_a_binding_names_its_device_from_the_index_and_round_trips() -> None:
    binding = build.binding_event(
        id="b-1",
        cluster="c1",
        time=T0,
        node="n1",
        uuid="GPU-1",
        bus="0000:9b:00.0",
        index=3,
        pods=iter([PodRef(namespace="ml", name="train-0")]),
    )
    assert binding.device == "nvidia3"
    assert binding.pods == (PodRef(namespace="ml", name="train-0"),)
    assert decode_event(encode(binding)) == binding
    unknown = build.binding_event(id="b-2", cluster="c1", time=T0, node="n1", uuid="GPU-1")
    assert (unknown.device, unknown.gpu_index, unknown.pods) == ("", None, ())


def test_a_kube_event_type_follows_warning() -> None:
    def kube(**kwargs: Any) -> KubeEvent:
        return build.kube_event(
            id="k", cluster="c1", time=T0, node="n1", reason="Evicted", **kwargs
        )

    warn = kube(kind="Pod", name="p", namespace="ml", warning=True)
    normal = kube(kind="Node", name="n1", warning=False)
    assert (warn.type, normal.type) == ("Warning", "Normal")
    assert (warn.involved.kind, warn.involved.namespace, warn.involved.name) == ("Pod", "ml", "p")
    assert decode_event(encode(warn)) == warn
