"""``gputriage connect k8s`` end to end: kmock (Kubernetes) -> connector -> Tansu (Kafka).

The broker outage is modelled by freezing the broker process (SIGSTOP, then
SIGCONT) rather than stopping and restarting it: Tansu keeps everything in
memory, so a restarted broker would have lost the records acknowledged before
the outage, and :class:`gputriage.demo.broker.EmbeddedBroker` picks a new free port
on every start. A frozen broker is what a network partition looks like to a
client (requests time out, nothing is refused), and after SIGCONT every record
from before and after the outage can be checked in one topic.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from kubernetes_asyncio.client import CoordinationV1Api, V1Lease, V1LeaseSpec, V1ObjectMeta

from connectors.backoff import Backoff
from connectors.k8s.metrics import ConnectorMetrics
from connectors.k8s.run import PUBLISH, Connector, run_connect
from connectors.kafka.admin import ensure_topics
from connectors.kafka.producer import EventProducer
from gputriage.cli import run as cli_run
from gputriage.demo.broker import EmbeddedBroker
from schemas.codec import decode_dead_letter, decode_event
from schemas.events import PodEvent, Tick
from schemas.keys import is_copy
from tests.http_helpers import http_get
from tests.k8s_helpers import (
    FAST_WATCH,
    WATCHED,
    elected_options,
    fake_cluster,
    kube_event,
    node,
    pod,
)
from tests.kafka_helpers import KafkaTestEnv, consume_events, consume_until, eventually


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_connect_publishes_gpu_objects_and_dead_letters_with_leader_election(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """Real time, not looptime: the connector's peers include Tansu, another process."""
    async with fake_cluster() as cluster:
        cluster.pods.put(pod("trainer", "10"))
        cluster.pods.put(pod("web", "11", gpus=0))
        bad = pod("bad", "12")
        bad["status"] = "Running"
        cluster.pods.put(bad)
        cluster.nodes.put(node("gpu-1", "5"))
        cluster.nodes.put(node("cpu-1", "6", gpus=0))
        cluster.events.put(kube_event("ev1", "20", reason="Evicted", pod_name="trainer"))
        # No failover here: deadlines a loaded machine meets (the release is bounded by one).
        options = elected_options(
            tmp_path,
            cluster.url,
            retry_period_seconds=0.1,
            lease_duration_seconds=15.0,
            renew_deadline_seconds=8.0,
        )
        await ensure_topics(kafka.kwargs, kafka.layout)  # before consuming from them
        stop = asyncio.Event()
        task = asyncio.create_task(
            run_connect(
                msgspec.structs.replace(options.settings, metrics_port=0),
                kafka.kwargs,
                kafka.layout,
                lease=options.lease,
                watch=FAST_WATCH,
                stop=stop,
            )
        )
        layout = kafka.layout
        topics = [*layout.raw_topics, layout.dead_letters.name]
        # The node and the pod are also routed to the cluster key (schemas.keys.Router).
        first = await consume_events(kafka.bootstrap, topics, 4 + 2)
        await eventually(lambda: len(cluster.pods.watch_requests) >= 1, what="pod watch")
        cluster.pods.event("MODIFIED", pod("trainer", "30", phase="Failed"))
        records = await consume_events(kafka.bootstrap, topics, 5 + 3)
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0
        lease = await CoordinationV1Api(cluster.api).read_namespaced_lease(
            "gputriage-connect-k8s", "gputriage"
        )
        assert lease.spec.holder_identity in ("", None)  # released on a clean stop
    assert len(first) == 6
    by_topic: dict[str, list[Any]] = {}
    copies = []
    for record in records:
        if record.topic != layout.dead_letters.name and is_copy(decode_event(record.value)):
            copies.append(record)
            continue
        by_topic.setdefault(record.topic, []).append(record)
    assert {r.key for r in copies} == {b"c1"}
    assert len(copies) == 3
    pods = [decode_event(r.value) for r in by_topic[layout.raw["pods"].name]]
    assert [p.id for p in pods] == ["k8s:uid-trainer:10", "k8s:uid-trainer:30"]
    assert all(isinstance(p, PodEvent) for p in pods)
    assert {r.key for r in by_topic[layout.raw["pods"].name]} == {b"c1/gpu-1"}
    nodes = [decode_event(r.value) for r in by_topic[layout.raw["nodes"].name]]
    assert [n.id for n in nodes] == ["k8s:uid-gpu-1:5"]
    events = [decode_event(r.value) for r in by_topic[layout.raw["k8s-events"].name]]
    assert [e.id for e in events] == ["k8s:uid-ev1:20"]
    (letter_record,) = by_topic[layout.dead_letters.name]
    letter = decode_dead_letter(letter_record.value)
    assert (letter.topic, letter.field) == ("kubernetes/pods", "$.status")
    assert letter.reason == "expected an object, got string"
    assert letter_record.key == b"uid-bad"


@pytest.mark.asyncio
@pytest.mark.timeout(30)
async def test_a_standby_replica_is_ready_and_live_without_watching(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """Another replica holds the Lease: this one connected to Kafka, watches nothing, and
    must read as healthy (a standby that is never ready blocks every drain through the
    PodDisruptionBudget, and one that fails liveness is restarted forever)."""
    async with fake_cluster() as cluster:
        cluster.pods.put(pod("trainer", "10"))
        options = elected_options(tmp_path, cluster.url, retry_period_seconds=0.1)
        held = V1Lease(
            metadata=V1ObjectMeta(name="gputriage-connect-k8s"),
            spec=V1LeaseSpec(
                holder_identity="replica-0",
                lease_duration_seconds=3600,
                renew_time=datetime(2099, 1, 1, tzinfo=UTC),
            ),
        )
        await CoordinationV1Api(cluster.api).create_namespaced_lease("gputriage", held)
        await ensure_topics(kafka.kwargs, kafka.layout)
        metrics = ConnectorMetrics()
        stop = asyncio.Event()
        task = asyncio.create_task(
            run_connect(
                options.settings,
                kafka.kwargs,
                kafka.layout,
                lease=options.lease,
                watch=FAST_WATCH,
                stop=stop,
                metrics=metrics,
            )
        )
        health = metrics.delivery.health
        await eventually(lambda: metrics.delivery.kafka.state.ok, what="connected")

        def lease_reads() -> int:
            return sum(
                1 for r in cluster.requests() if r.resource and r.resource.plural == "leases"
            )

        await eventually(lambda: lease_reads() >= 3, what="tries at the held Lease")
        ready = health.ready()
        assert ready.ok, ready.lines
        assert health.live().ok
        assert not any(line.startswith(("[+]watch", "[-]watch")) for line in ready.lines)
        assert cluster.pods.watch_requests == []
        assert metrics.value("gputriage_connector_leader") == 0
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0


def versions_of(records: list[Any]) -> dict[str, list[str]]:
    """Each pod's resource versions in topic order (one partition per key: topic order is
    key order), a repeat left out (a retried batch may repeat records: at-least-once), and
    the publish loop's heartbeats, which share the topic."""
    arrived: dict[str, list[str]] = {}
    for record in records:
        event = decode_event(record.value)
        if isinstance(event, Tick):
            continue
        assert isinstance(event, PodEvent)
        versions = arrived.setdefault(event.uid, [])
        rv = event.id.rsplit(":", 1)[1]
        if rv not in versions:
            versions.append(rv)
    return arrived


@pytest.mark.asyncio
@pytest.mark.timeout(40)
async def test_broker_outage_backpressures_the_watch_and_delivers_everything_in_order() -> None:
    """Real time, not looptime: the outage is a frozen Tansu process."""
    async with EmbeddedBroker() as broker, fake_cluster() as cluster:
        env = KafkaTestEnv(broker=broker, prefix="outage")
        kwargs = env.kwargs
        layout = env.layout
        await ensure_topics(kwargs, layout)
        producer = EventProducer(
            kwargs, layout, linger_ms=0, request_timeout_ms=400, retry_backoff_ms=20
        )
        await producer.start()
        settings = msgspec.structs.replace(WATCHED, buffer_size=4)
        publish = replace(PUBLISH, chunk=2, backoff=Backoff(initial_seconds=0.05, max_seconds=0.1))
        connector = Connector(cluster.api, settings, watch=FAST_WATCH, publish=publish)
        probes = f"http://127.0.0.1:{connector.metrics.serve(0, '127.0.0.1')}"
        stop = asyncio.Event()
        task = asyncio.create_task(connector.run(producer, io.StringIO(), stop))
        cluster.nodes.put(node("gpu-1", "1"))
        cluster.nodes.put(node("gpu-2", "2"))
        pods_topic = layout.raw["pods"].name
        try:
            await eventually(lambda: len(cluster.pods.watch_requests) == 1, what="watch")
            cluster.pods.event("ADDED", pod("p1", "100", node="gpu-1"))
            cluster.pods.event("ADDED", pod("p2", "101", node="gpu-2"))
            await consume_events(broker.bootstrap, [pods_topic], 2)
            # Every watch listed, not only the pods': another may be retrying an API error.
            ready = await probe_until(f"{probes}/readyz", 200)
            assert ready[0] == 200, ready
            for line in ("[+]loop ok", "[+]kafka ok", "[+]watch-pods ok: listed, watching"):
                assert line in ready[1].splitlines(), ready

            os.kill(broker.pid or 0, signal.SIGSTOP)  # the outage begins
            sent: dict[str, list[str]] = {"uid-p1": ["100"], "uid-p2": ["101"]}
            version = 200
            for round_ in range(8):
                for name, node_name in (("p1", "gpu-1"), ("p2", "gpu-2")):
                    version += 1
                    phase = "Running" if round_ % 2 else "Pending"
                    cluster.pods.event(
                        "MODIFIED", pod(name, str(version), node=node_name, phase=phase)
                    )
                    sent[f"uid-{name}"].append(str(version))
            metrics = connector.metrics
            await eventually(
                lambda: metrics.value("gputriage_connector_buffered_events") == 4,
                what="a full buffer",
            )
            await eventually(lambda: not metrics.delivery.kafka.state.ok, what="kafka failing")
            # Unready at once, still live: a restart would not bring the broker back.
            ready = await probe(f"{probes}/readyz")
            assert ready[0] == 503, ready
            assert "[-]kafka failing for" in ready[1], ready
            assert (await probe(f"{probes}/healthz"))[0] == 200
            # The watch is held: its checkpoint is behind what the server sent.
            assert connector.watchers["pods"].resource_version != str(version)
        finally:
            os.kill(broker.pid or 0, signal.SIGCONT)  # the outage ends
        # Every version, in order per pod (a pod record is also routed to the cluster key).
        records = await consume_until(
            broker.bootstrap,
            [pods_topic],
            lambda rs: versions_of(rs) == sent,
            timeout=15,
            what="every pod version, in order",
        )
        await eventually(lambda: metrics.delivery.kafka.state.ok, what="kafka ok again")
        assert (await probe(f"{probes}/readyz"))[0] == 200
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0, "everything was delivered"
        await producer.stop()
    assert versions_of(records) == sent
    assert metrics.value("gputriage_connector_backpressure_seconds_total") > 0
    assert metrics.value("gputriage_connector_delivery_failures_total") >= 1


async def probe(url: str) -> tuple[int, str]:
    """GET a health endpoint from a thread: it probes this very loop, which must turn."""
    return await asyncio.to_thread(http_get, url)


async def probe_until(url: str, status: int, timeout: float = 10.0) -> tuple[int, str]:
    """:func:`probe` until it answers ``status``; the last answer after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        answer = await probe(url)
        if answer[0] == status or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(0.05)


def test_cli_mistakes_are_one_line_and_exit_2(capsys: Any) -> None:
    assert cli_run(["connect", "k8s", "--cluster", "c", "--in-cluster", "--context", "x"]) == 2
    assert "'--in-cluster': does not go with --kubeconfig/--context" in capsys.readouterr().err
    assert cli_run(["connect", "k8s", "--cluster", "c", "--leader-election"]) == 2
    err = capsys.readouterr().err
    assert "--lease-namespace" in err
    assert err.count("\n") == 1


def test_no_service_account_outside_a_pod_is_one_line_and_exit_1(
    capsys: Any, monkeypatch: Any
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)  # even when CI runs in a pod
    args = ["connect", "k8s", "--cluster", "c", "--in-cluster", "--metrics-port", "0"]
    assert cli_run([*args, "--brokers", "127.0.0.1:1"]) == 1
    err = capsys.readouterr().err
    assert "gputriage: error: cannot load the in-cluster service account" in err
    assert "Traceback" not in err
