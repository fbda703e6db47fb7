"""End to end: the XID 79 chain of the example scenario, through Kafka and ``gputriage
process``, becomes Flyte-contract Events on the failed pods and our condition on the node
(``gputriage writeback --mark-nodes``); when the GPU is allocatable again the incident
resolves, the pod Events go and the condition is cleared.

Real: the Tansu broker, the processor and the write-back as processes, the
kubernetes-asyncio client; the API server is kmock's (tests/connectors/writeback/cluster.py).
The chain's last two records (the GPU back in allocatable) are held back until the
write-back has acted on the open incident.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import decode_event
from schemas.events import PodEvent
from tests.connectors.writeback.cluster import Cluster, cluster, gpu_node
from tests.connectors.writeback.incidents import flyte_parse
from tests.k8s_helpers import kubeconfig
from tests.kafka_helpers import KafkaTestEnv, eventually
from tests.paths import EXAMPLES
from tests.processor_helpers import Worker, ending_days_ago, send_events

NODE = "gpu-node-01"


def pod_events(c: Cluster) -> list[dict[str, Any]]:
    return [e for e in c.events() if e["regarding"]["kind"] == "Pod"]


def condition(c: Cluster) -> dict[str, Any]:
    return c.nodes.condition(NODE, "GPUHealthy") or {}


@pytest.mark.asyncio
@pytest.mark.timeout(60)
async def test_an_xid_79_chain_is_written_back_and_cleared_on_resolve(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    lines = (EXAMPLES / "scenario.jsonl").read_bytes().splitlines()
    events = ending_days_ago(
        [e for e in map(decode_event, lines) if getattr(e, "node", "") == NODE]
    )
    held = 2  # the binding refresh and the node's GPUs allocatable again: the resolve
    pods = {(e.namespace, e.name) for e in events if isinstance(e, PodEvent)}
    await kafka.acreate_topics()
    await send_events(kafka, events[:-held])
    async with cluster() as c:
        for namespace, name in pods:
            c.add_pod(namespace, name)
        c.add_node(gpu_node(NODE, pool=""))
        worker = Worker(kafka, f"{kafka.prefix}-app", tmp_path / "worker.log")
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("GPUTRIAGE_")},
            **kafka.env,
            "POD_NAME": "gputriage-writeback-0",
        }
        config = kubeconfig(tmp_path / "kubeconfig", c.url)
        args = ["--kubeconfig", str(config), "--context", "kmock", "--metrics-port", "0"]
        with (tmp_path / "writeback.log").open("wb") as out:
            writeback = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gputriage",
                    "writeback",
                    "--mark-nodes",
                    "--cluster",
                    "prod-us-east",
                    *args,
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            await eventually(
                lambda: len(pod_events(c)) == 3 and condition(c).get("status") == "False",
                timeout=40,
                what="Events on the three pods and the node's condition",
            )
            for event in pod_events(c):
                assert event["reason"] == "GPUXidError"
                assert event["regarding"]["uid"] == f"uid-{event['regarding']['name']}"
                parsed = flyte_parse(event["note"])
                assert parsed is not None
                assert (parsed["xid"], parsed["severity"], parsed["node"]) == (
                    "79",
                    "critical",
                    NODE,
                )
            assert condition(c)["reason"] == "GPUXid79"

            await send_events(kafka, events[-held:])
            await eventually(
                lambda: pod_events(c) == [] and condition(c).get("status") == "True",
                timeout=30,
                what="the pod Events deleted and the condition cleared",
            )
            assert condition(c)["reason"] == "NoOpenIncident"
            resolved = [e for e in c.events() if e["reason"] == "GPUIncidentResolved"]
            assert [e["regarding"]["name"] for e in resolved] == [NODE]
        finally:
            writeback.terminate()
            code = await asyncio.to_thread(writeback.wait, 20)  # the loop serves kmock
            assert worker.stop() == 0, worker.log()
        assert code == 0, (tmp_path / "writeback.log").read_text(errors="replace")
