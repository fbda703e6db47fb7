"""End to end: the cluster key's incidents through the producer, Tansu and a worker.

The records go through :class:`connectors.kafka.producer.EventProducer`, which routes
a scheduled GPU pod, a GPU node and a pod-aware binding to the cluster key as well
(:class:`schemas.keys.Router`): the cluster key lives on one partition and the nodes on
all three, so the incidents below can only appear if the copies reached the worker
that owns the cluster key. They must equal a replay's (:func:`reference`), and say
what an on-call needs:

* a Job pending while its GPU node group fails three times for quota: one paging
  ``gpu_pods_starved`` naming the Job and the group (and a ``scale_up_failure``);
* another Job pending, then scheduled after a successful scale-up: nothing;
* dcgm-exporter losing the pods on two nodes for ten minutes: one
  ``allocation_mismatch`` naming those two nodes, resolved when they come back;
  silent about a time-sliced node whose GPUs dcgm-exporter never binds.
"""

from __future__ import annotations

from pathlib import Path

from schemas.codec import AnyEvent
from schemas.incidents import Incident
from streams.app.changelog import partition_for
from tests.factories import Cluster
from tests.kafka_helpers import PARTITIONS, KafkaTestEnv
from tests.processor_helpers import (
    TopicReader,
    Worker,
    await_settled,
    ending_days_ago,
    final,
    produce_events,
    reference,
)

GROUP = "eks-gpu-p5-48xlarge-7a1f0c3e"


def _scenario() -> list[AnyEvent]:
    c = Cluster("prod")
    for n in range(4):
        node = f"gpu-node-{n}"
        labels = {"nvidia.com/gpu.sharing-strategy": "time-slicing"} if n == 3 else None
        c.node(node, 0, capacity=4, alloc=4, labels=labels)
        for g in range(4):
            c.pod(node, f"{node}-w{g}", 1, namespace="inference", owner=("ReplicaSet", node))
            if n != 3:  # dcgm-exporter reports one pod per GPU; none on the time-sliced node
                c.bind(node, 2, f"GPU-{n}-{g}", f"0000:{0x10 + g:02x}:00.0", [f"{node}-w{g}"])
    # A Job that starves: unschedulable, and its group fails three times for quota.
    for k in range(2):
        c.pending(f"sft-{k}", 10 + k, namespace="ml", owner=("Job", "llama-sft"), gpus=8)
    for t in (60, 400, 750):
        c.autoscaler(t, "scale_up_failed", GROUP, reason="quota", code="VcpuLimitExceeded")
        c.autoscaler(t + 1, "backoff", GROUP, reason="backoff", until=t + 300)
    # A Job that waits, and gets its node: no incident.
    c.pending("eval-0", 20, namespace="ml", owner=("Job", "eval"), gpus=8, created=20)
    c.autoscaler(30, "scale_up_planned", "eks-gpu-p4d-ok", pods=("eval-0",), namespace="ml")
    c.pod("gpu-node-new", "eval-0", 240, namespace="ml", owner=("Job", "eval"), gpus=8)
    # dcgm-exporter loses the pod mapping on two nodes for ten minutes.
    for n in (0, 1):
        for g in range(4):
            c.bind(f"gpu-node-{n}", 1000, f"GPU-{n}-{g}", f"0000:{0x10 + g:02x}:00.0", [])
            pod = f"gpu-node-{n}-w{g}"
            c.bind(f"gpu-node-{n}", 1600, f"GPU-{n}-{g}", f"0000:{0x10 + g:02x}:00.0", [pod])
    c.tick(4000)
    return ending_days_ago(sorted(c.events, key=lambda e: e.time))


def _one(incidents: dict[str, Incident], kind: str) -> Incident:
    (found,) = [i for i in incidents.values() if i.type == kind]
    return found


def test_cluster_incidents_through_kafka_equal_the_replay_and_name_what_matters(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    events = _scenario()
    expected = reference(events)
    kafka.create_topics()
    nodes = {partition_for(f"prod/gpu-node-{n}", PARTITIONS) for n in range(4)}
    assert len(nodes | {partition_for("prod", PARTITIONS)}) > 1, "the keys spread out"
    produce_events(kafka, events)
    reader = TopicReader(kafka, kafka.layout.incidents.name, fetch_max_wait_ms=50)
    worker = Worker(kafka, f"{kafka.prefix}-app", tmp_path / "worker.log")
    try:
        await_settled(reader, expected, 90)
        got = final(reader.incidents())
    finally:
        reader.close()
        assert worker.stop() == 0, worker.log()
    assert sorted(i.type for i in got.values()) == [
        "allocation_mismatch",
        "gpu_pods_starved",
        "scale_up_failure",
    ]
    starved = _one(got, "gpu_pods_starved")
    assert starved.severity == "page"
    assert starved.status == "open"  # still pending: the pods starve on
    assert starved.attributes["node_groups"] == GROUP
    assert starved.attributes["cloud_code"] == "VcpuLimitExceeded"
    assert {(p.owner_kind, p.owner_name) for p in starved.pods} == {("Job", "llama-sft")}
    failure = _one(got, "scale_up_failure")
    assert (failure.severity, failure.attributes["attempts"]) == ("page", "3")
    mismatch = _one(got, "allocation_mismatch")
    assert mismatch.status == "resolved"
    assert mismatch.attributes["nodes"] == "gpu-node-0,gpu-node-1"
    assert "gpu-node-3" not in mismatch.summary
