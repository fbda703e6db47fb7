"""End to end: a DRA GPU tainted ``NoExecute``, its pod evicted, one page on the real broker.

Everything real but the API server: kmock serves a Kubernetes 1.36 cluster (the DRA
routes of tests/k8s_helpers.py) to the real ``connect k8s`` watchers through
kubernetes-asyncio, published by the connector runner to Tansu, read by a ``gputriage
process`` worker. The node is a DRA node: no ``nvidia.com/gpu`` at all, only the GPU
operator's ``gpu.present`` label; its GPUs are the devices of its ResourceSlice and the
pod holds ``gpu-2`` through a claim made from a template (the cited objects of
tests/data/dra). Then, over the watches and in the order the cluster writes them: a
DeviceTaintRule taints ``gpu-2`` NoExecute, the device taint eviction controller records
its Event and the pod's DisruptionTarget condition and deletes the pod (whose command
exits 0 on SIGTERM, so the kubelet's last word is ``Succeeded``), and the claim
controller releases and deletes the claim.

No record reaches the broker but the connector's, so the GPU's uuid and bus, the claim and
the pod on the page can only come from its join (slice taints, DRA bindings) and the core.
Traps: the watches are separate streams, so a step that the next one must follow is waited
for on the raw topics first, as the cluster's own controllers wait on each other; the
Event's time is in whole seconds (as the API server writes it), so it may sort before the
taint it follows, which the chain's lookback allows.
"""

from __future__ import annotations

import asyncio
import copy
import io
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from connectors.k8s.run import Connector
from connectors.kafka.producer import start_producer
from connectors.run import Served, run_source
from schemas.codec import AnyEvent, decode_event, decode_incident
from schemas.events import (
    GpuBindingEvent,
    KubeEvent,
    PodEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
)
from schemas.incidents import Incident
from schemas.keys import is_copy
from tests.k8s_helpers import FAST_WATCH, WATCHED, FakeCluster, fake_cluster, node
from tests.kafka_helpers import KafkaTestEnv, consume_until, eventually, without_heartbeats
from tests.paths import DATA
from tests.processor_helpers import Worker, final, raw_partitions

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]


def load(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = orjson.loads((DATA / "dra" / f"{name}.json").read_bytes())
    return obj


SLICE = load("resourceslice_gpu_node")
CLAIM = load("resourceclaim_allocated")
POD = load("pod_with_claims")
RULE = load("devicetaintrule")
NODE = SLICE["spec"]["nodeName"]
[DEVICE] = [r["device"] for r in CLAIM["status"]["allocation"]["devices"]["results"]]
[ATTRIBUTES] = [d["attributes"] for d in SLICE["spec"]["devices"] if d["name"] == DEVICE]
UUID = ATTRIBUTES["uuid"]["string"]
BUS = ATTRIBUTES["resource.kubernetes.io/pciBusID"]["string"]
CLAIM_NAME = f"{CLAIM['metadata']['namespace']}/{CLAIM['metadata']['name']}"
POD_NAME = f"{POD['metadata']['namespace']}/{POD['metadata']['name']}"
RULE_NAME = RULE["metadata"]["name"]
CONTROLLER = "device-taint-eviction-controller"
"""kube-controller-manager's name for the controller, its Events' source component."""
GRACE_SECONDS = 30


def rfc3339(moment: datetime) -> str:
    """As the API server writes a ``metav1.Time``: whole seconds, ``Z``."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def dra_node() -> dict[str, Any]:
    """The slice's node as a DRA node: no GPU capacity, the operator's GPU label."""
    obj = node(NODE, "500100", gpus=0)
    obj["metadata"]["labels"] = {"nvidia.com/gpu.present": "true"}
    return obj


def changed(obj: dict[str, Any], rv: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["metadata"]["resourceVersion"] = rv
    return out


def eviction_event(now: datetime) -> dict[str, Any]:
    """The controller's Event on the pod (messages.md: reason and message verbatim)."""
    meta = POD["metadata"]
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {
            "name": f"{meta['name']}.18a3c2d1e0f9b8a7",
            "namespace": meta["namespace"],
            "uid": "7e6d5c4b-3a29-4817-a6f5-e4d3c2b1a090",
            "resourceVersion": "530405",
            "creationTimestamp": rfc3339(now),
        },
        "involvedObject": {
            "kind": "Pod",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
            "apiVersion": "v1",
        },
        "reason": "DeviceTaintManagerEviction",
        "message": "Marking for deletion",
        "source": {"component": CONTROLLER},
        "firstTimestamp": rfc3339(now),
        "lastTimestamp": rfc3339(now),
        "count": 1,
        "type": "Normal",
        "reportingComponent": CONTROLLER,
    }


def disrupted(now: datetime) -> dict[str, Any]:
    """The pod once the controller has patched its condition and asked for its deletion."""
    pod = changed(POD, "530410")
    pod["metadata"]["deletionTimestamp"] = rfc3339(now + timedelta(seconds=GRACE_SECONDS))
    pod["metadata"]["deletionGracePeriodSeconds"] = GRACE_SECONDS
    pod["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "DeletionByDeviceTaintManager",
            "message": "Device Taint manager: deleting due to NoExecute taint",
            "lastTransitionTime": rfc3339(now),
        }
    )
    return pod


def terminated(pod: dict[str, Any], now: datetime) -> dict[str, Any]:
    """The kubelet's last status: the container trapped SIGTERM and exited 0, and a pod
    being deleted is terminal, so its phase is Succeeded (not Failed)."""
    out = changed(pod, "530420")
    [status] = out["status"]["containerStatuses"]
    started = status["state"]["running"]["startedAt"]
    status.update(ready=False, started=False)
    status["state"] = {
        "terminated": {
            "exitCode": 0,
            "reason": "Completed",
            "startedAt": started,
            "finishedAt": rfc3339(now),
            "containerID": status["containerID"],
        }
    }
    out["status"]["phase"] = "Succeeded"
    for condition in out["status"]["conditions"]:
        if condition["type"] in ("Ready", "ContainersReady"):
            condition.update(status="False", reason="PodCompleted", lastTransitionTime=rfc3339(now))
    return out


def decoded(records: list[Any]) -> list[AnyEvent]:
    """The records of the raw topics, without heartbeats and the cluster key's copies."""
    events = (decode_event(r.value) for r in without_heartbeats(records))
    return [e for e in events if not is_copy(e)]


def slices(records: list[Any]) -> list[ResourceSliceEvent]:
    return [e for e in decoded(records) if isinstance(e, ResourceSliceEvent) and e.node == NODE]


def taints(event: ResourceSliceEvent) -> list[tuple[str, str, str, str]]:
    return [(d.name, t.key, t.effect, t.rule) for d in event.devices for t in d.taints]


def dra_bindings(records: list[Any]) -> list[GpuBindingEvent]:
    return [e for e in decoded(records) if isinstance(e, GpuBindingEvent) and e.source == "dra"]


def claims(records: list[Any]) -> list[ResourceClaimEvent]:
    return [e for e in decoded(records) if isinstance(e, ResourceClaimEvent)]


def pods(records: list[Any]) -> list[PodEvent]:
    return [e for e in decoded(records) if isinstance(e, PodEvent) and e.node == NODE]


def incidents(records: list[Any]) -> list[Incident]:
    return list(final(decode_incident(r.value) for r in records if r.value is not None).values())


def evicted(records: list[Any]) -> bool:
    """The page names the pod as evicted."""
    return any(
        (i.type, i.node) == ("device_unhealthy_eviction", NODE)
        and any((f"{p.namespace}/{p.name}", p.role) == (POD_NAME, "evicted") for p in i.pods)
        for i in incidents(records)
    )


def started(cluster: FakeCluster) -> None:
    """The cluster before the fault: the node, its slice, the template, the claim, the pod."""
    cluster.nodes.put(dra_node())
    cluster.resource("resourceslices").put(SLICE)
    cluster.resource("resourceclaimtemplates").put(load("resourceclaimtemplate"))
    cluster.resource("resourceclaims").put(CLAIM)
    cluster.pods.put(POD)


async def everything(kafka: KafkaTestEnv, topic: str) -> list[Any]:
    """Every record on ``topic`` now: read until each partition's end offset (an offset, not a
    count: a compacted topic may have fewer records than that)."""
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        await consumer.topics()
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        ends = {tp.partition: end for tp, end in (await consumer.end_offsets(tps)).items() if end}
    finally:
        await consumer.stop()

    def read(records: list[Any]) -> bool:
        last = {r.partition: r.offset for r in records}
        return all(last.get(p, -1) >= end - 1 for p, end in ends.items())

    return await consume_until(kafka.bootstrap, [topic], read, timeout=10, what=f"all of {topic}")


async def test_a_noexecute_device_taint_on_a_dra_node_is_one_page_naming_device_claim_and_pod(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """Real time, not looptime: the broker and the worker are other processes."""
    await kafka.acreate_topics()
    layout = kafka.layout
    raw = {kind: layout.raw_topic(kind) for kind in (ResourceSliceEvent, PodEvent, KubeEvent)}
    dra = sorted({layout.raw_topic(ResourceClaimEvent), layout.raw_topic(GpuBindingEvent)})
    group = f"{kafka.prefix}-app"
    # Every revision published (no 30 s hold): the Event's time is whole seconds, so it may
    # sort before the taint, which then joins the page in a later revision.
    worker = Worker(
        kafka,
        group,
        tmp_path / "worker.log",
        extra_env={"GPUTRIAGE_CORE__REVISION_INTERVAL_SECONDS": "0"},
    )
    stop = asyncio.Event()
    try:
        async with fake_cluster(dra=True) as cluster:
            started(cluster)
            connector = Connector(cluster.api, WATCHED, watch=FAST_WATCH)
            producer = await start_producer(kafka.kwargs, layout)
            agent = asyncio.create_task(
                run_source(
                    connector.source,
                    producer,
                    name="connect k8s",
                    served=Served(metrics=connector.metrics.delivery, port=None),
                    err=io.StringIO(),
                    publish=connector.publish,
                    stop=stop,
                    source_id=connector.source_id,
                )
            )
            try:
                before = await consume_until(
                    kafka.bootstrap,
                    [raw[ResourceSliceEvent], raw[PodEvent], *dra],
                    lambda rs: bool(slices(rs) and dra_bindings(rs) and pods(rs)),
                    timeout=20,
                    what="the node's slice, the pod and its DRA binding",
                )
                rules = cluster.resource("devicetaintrules")
                await eventually(lambda: rules.watch_requests, what="the rules' watch")
                rules.event("ADDED", RULE)
                await consume_until(
                    kafka.bootstrap,
                    [raw[ResourceSliceEvent]],
                    lambda rs: any(taints(s) for s in slices(rs)),
                    timeout=10,
                    what="the slice re-emitted with the rule's taint",
                )
                now = datetime.now(UTC)
                cluster.events.event("ADDED", eviction_event(now))
                await consume_until(
                    kafka.bootstrap,
                    [raw[KubeEvent]],
                    lambda rs: any(isinstance(e, KubeEvent) for e in decoded(rs)),
                    timeout=10,
                    what="the controller's Event",
                )
                pod = disrupted(now)
                cluster.pods.event("MODIFIED", pod)
                pod = terminated(pod, datetime.now(UTC))
                cluster.pods.event("MODIFIED", pod)
                cluster.pods.event("DELETED", changed(pod, "530430"))
                await consume_until(
                    kafka.bootstrap,
                    [raw[PodEvent]],
                    lambda rs: any(p.op == "deleted" for p in pods(rs)),
                    timeout=10,
                    what="the pod's deletion",
                )
                released = changed(CLAIM, "530440")
                del released["status"]["reservedFor"]
                cluster.resource("resourceclaims").event("MODIFIED", released)
                cluster.resource("resourceclaims").event("DELETED", changed(released, "530450"))
                await consume_until(
                    kafka.bootstrap,
                    [layout.incidents.name],
                    evicted,
                    timeout=20,
                    what="the page naming the evicted pod",
                )
                after = await consume_until(
                    kafka.bootstrap,
                    [raw[ResourceSliceEvent], raw[PodEvent], raw[KubeEvent], *dra],
                    lambda rs: any(b.op == "deleted" for b in claims(rs)),
                    timeout=10,
                    what="the claim's deletion",
                )
                # Every raw record so far applied, its incidents out: nothing else is on its
                # way. While the connector runs: its idle heartbeats move the worker's
                # watermark past the last records (a stopped one's would only age out).
                await wait_committed(kafka, group)
            finally:
                stop.set()
                assert await agent == 0, "the connector delivered everything"
                await producer.stop()
        out = incidents(await everything(kafka, layout.incidents.name))
    finally:
        assert worker.stop() == 0, worker.log()

    # The raw topics carried what the connector must publish.
    [untainted, *_] = slices(before)
    assert untainted.op == "added"
    assert [(d.name, d.uuid, d.pci_bus_id) for d in untainted.devices if d.name == DEVICE] == [
        (DEVICE, UUID, BUS)
    ]
    assert taints(untainted) == []
    tainted = [s for s in slices(after) if taints(s)]
    assert [taints(s) for s in tainted] == [
        [(DEVICE, RULE["spec"]["taint"]["key"], "NoExecute", RULE_NAME)]
    ]
    bound, *unbound = dra_bindings(after)
    assert (bound.node, bound.device, bound.gpu_uuid, bound.pci_bus_id) == (NODE, DEVICE, UUID, BUS)
    assert [f"{p.namespace}/{p.name}" for p in bound.pods] == [POD_NAME]
    assert bound.claims == (CLAIM_NAME,)
    assert [b.pods for b in unbound] == [()], "the release unbinds the device once"
    [claim, *later] = claims(after)
    assert (claim.node, claim.gpus, [d.device for d in claim.devices]) == (NODE, 1, [DEVICE])
    assert [c.op for c in later] == ["modified", "deleted"]
    [first_pod, *_] = pods(after)
    assert [(c.claim, c.gpus) for c in first_pod.claims] == [(CLAIM["metadata"]["name"], 1)]
    assert [p.op for p in pods(after)] == ["added", "modified", "modified", "deleted"]
    disruption = pods(after)[1].disruption
    assert disruption is not None
    assert (disruption.status, disruption.reason) == ("True", "DeletionByDeviceTaintManager")
    [event] = [e for e in decoded(after) if isinstance(e, KubeEvent)]
    assert (event.reason, event.involved.name) == ("DeviceTaintManagerEviction", "pod1")
    assert event.node == NODE, "a controller's Event names no host: the pod's node"

    # One page, naming the device, the claim and the pod; nothing else.
    assert [(i.type, i.node) for i in out] == [("device_unhealthy_eviction", NODE)], out
    [page] = out
    assert page.severity == "page"
    assert [(g.uuid, g.pci_bus_id) for g in page.gpus] == [(UUID, BUS)]
    assert page.attributes.get("dra_devices") == DEVICE
    assert page.attributes.get("claims") == CLAIM_NAME
    assert [(f"{p.namespace}/{p.name}", p.role) for p in page.pods] == [(POD_NAME, "evicted")]
    texts = [e.text for e in page.evidence]
    assert any(RULE_NAME in t and "NoExecute" in t for t in texts), texts
    assert any("DeviceTaintManagerEviction" in t for t in texts), texts


async def wait_committed(kafka: KafkaTestEnv, group: str, timeout: float = 20) -> None:
    """Until the worker's group has committed every record on the raw topics now (polled);
    on timeout, name the partitions it has not."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=kafka.bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tps = raw_partitions(kafka)
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + timeout
        while True:
            committed = await asyncio.gather(*(consumer.committed(tp) for tp in tps))
            done = dict(zip(tps, committed, strict=True))
            behind = {
                f"{tp.topic}/{tp.partition}": (done[tp], end)
                for tp, end in ends.items()
                if (done[tp] or 0) < end
            }
            if not behind:
                return
            assert time.monotonic() < deadline, f"not committed (committed, end): {behind}"
            await asyncio.sleep(0.05)
    finally:
        await consumer.stop()
