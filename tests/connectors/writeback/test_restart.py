"""``gputriage writeback`` as a process: SIGKILLed mid-write, restarted, one Event per pod;
two replicas under leader election, only the Lease holder writes.

The incident topic is the real broker's (Tansu), the API server kmock's; the subprocess
uses the real kubernetes-asyncio client through a kubeconfig. The first Event create is
stored by the server and never answered: the process is killed while waiting for it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import kmock
import pytest

from schemas.codec import encode
from schemas.incidents import Incident
from tests.connectors.writeback.cluster import Cluster, cluster, gpu_node
from tests.connectors.writeback.incidents import eviction
from tests.k8s_helpers import kubeconfig
from tests.kafka_helpers import KafkaTestEnv, eventually, produce


def start(
    kafka: KafkaTestEnv,
    c: Cluster,
    tmp_path: Path,
    log: str,
    *more: str,
    pod: str = "gputriage-writeback-0",
) -> subprocess.Popen[bytes]:
    config = kubeconfig(tmp_path / "kubeconfig", c.url)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("GPUTRIAGE_")},
        **kafka.env,
        "POD_NAME": pod,
    }
    args = ["--kubeconfig", str(config), "--context", "kmock", "--metrics-port", "0", *more]
    with (tmp_path / log).open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "gputriage", "writeback", *args],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


async def publish(kafka: KafkaTestEnv, *incidents: Incident) -> None:
    topic = kafka.layout.incidents.name
    await produce(kafka.bootstrap, topic, [(i.id.encode(), encode(i)) for i in incidents])


def pod_event_names(c: Cluster) -> list[str]:
    return sorted(e["metadata"]["name"] for e in c.events() if e["regarding"]["kind"] == "Pod")


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_one_event_per_pod_across_a_sigkill_mid_write(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    await kafka.acreate_topics()
    async with cluster() as c:
        c.add_pod("ml", "train-0")
        c.add_pod("ml", "train-1")
        c.add_node(gpu_node("gpu-1"))
        first_create = asyncio.Event()
        hang = asyncio.Event()

        async def swallow(request: kmock.Request) -> Any:
            if str(getattr(request.method, "value", request.method)) == "POST":
                first_create.set()
                await hang.wait()  # stored by the emulator, never answered
            return None

        c.server[kmock.resource("events.k8s.io", "v1", "events")] << swallow
        await publish(kafka, eviction())
        process = start(kafka, c, tmp_path, "first.log")
        try:
            await asyncio.wait_for(first_create.wait(), 30)
            process.kill()
            await asyncio.to_thread(process.wait, 10)
        finally:
            hang.set()
            if process.poll() is None:
                process.kill()
        assert len(pod_event_names(c)) == 1, "the killed create is stored, unanswered"
        [name] = pod_event_names(c)

        c.server[kmock.resource("events.k8s.io", "v1", "events")] << (lambda _: None)
        restarted = start(kafka, c, tmp_path, "second.log")
        try:
            await eventually(
                lambda: len(pod_event_names(c)) == 2,
                timeout=30,
                what="the restart's Event for the other pod",
            )
            await publish(kafka, eviction(revision=2))
            await eventually(
                lambda: len(c.event_history("ml", name)) == 2,
                timeout=30,
                what="the Event bumped by revision 2",
            )
        finally:
            restarted.terminate()
            code = await asyncio.to_thread(restarted.wait, 20)
        log = (tmp_path / "second.log").read_text(errors="replace")
        assert code == 0, log
        assert len(pod_event_names(c)) == 2, "updated, not duplicated"
        history = c.event_history("ml", name)
        assert history[0]["metadata"]["annotations"]["gputriage.io/revision"] == "1"
        assert history[-1]["series"]["count"] == 2
        assert history[-1]["metadata"]["annotations"]["gputriage.io/revision"] == "2"


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_only_the_leader_writes_and_the_other_takes_over(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    await kafka.acreate_topics()
    async with cluster() as c:
        c.add_pod("ml", "train-0")
        c.add_pod("ml", "train-1")
        c.add_node(gpu_node("gpu-1"))
        await publish(kafka, eviction())
        elected = ("--leader-election", "--lease-namespace", "gputriage")
        a = start(kafka, c, tmp_path, "a.log", *elected, pod="writeback-a")
        await eventually(lambda: len(pod_event_names(c)) == 2, timeout=30, what="a's Events")
        b = start(kafka, c, tmp_path, "b.log", *elected, pod="writeback-b")
        try:
            instances = {e["reportingInstance"] for e in c.events()}
            assert instances == {"writeback-a"}
            a.terminate()  # a clean stop releases the Lease at once (kmock must answer: no
            # blocking wait on this loop, which serves kmock)
            code = await asyncio.to_thread(a.wait, 20)
            assert code == 0, (tmp_path / "a.log").read_text(errors="replace")
            [name, _] = pod_event_names(c)
            await publish(kafka, eviction(revision=2))
            await eventually(
                lambda: len(c.event_history("ml", name)) == 2,
                timeout=30,
                what="b, now the leader, bumping the Event",
            )
        finally:
            for process in (a, b):
                if process.poll() is None:
                    process.terminate()
                    await asyncio.to_thread(process.wait, 20)
        assert len(pod_event_names(c)) == 2
        assert {e["reportingInstance"] for e in c.events()} == {"writeback-a"}
