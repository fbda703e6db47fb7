"""End to end: a kernel XID 79 line, through ``connect kmsg`` and Kafka, joins the
node's allocatable drop and the evictions into ONE ``device_unhealthy_eviction``.

Everything real but the node: a fake ``/dev/kmsg`` (a file of kmsg records), the
NVML bus id map as a fake *driver* would report it (NVML itself is an external C
library this machine lacks; :func:`connectors.nvml.devices.load_bus_map` reads it), the
Tansu broker, the ``gputriage process`` worker. The scenario's binding events
are left out, so the GPU's uuid on the incident can only have come from the
kmsg connector's attribution.
"""

from __future__ import annotations

import functools
import io
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from connectors.nvml.devices import Device, attribute
from connectors.state import load_state
from connectors.xid.kmsg import KmsgState
from connectors.xid.run import run_kmsg
from connectors.xid.settings import KmsgSettings
from schemas.codec import decode_event, decode_incident
from schemas.events import GpuBindingEvent, XidEvent
from schemas.incidents import Incident
from tests.kafka_helpers import KafkaTestEnv, consume_until
from tests.paths import EXAMPLES
from tests.processor_helpers import Worker, ending_days_ago, final, send_events

SCENARIO = EXAMPLES / "scenario.jsonl"
NODE = "gpu-node-01"
UUID = "GPU-6f1c2a9e-79aa-4c1e-9d3b-000000000001"
BUS = "0000:9b:00.0"
UPTIME_S = 3600  # the XID is logged one hour after boot


def evictions(records: list[Any]) -> list[Incident]:
    """The latest revision of every eviction incident among the incident topic's records."""
    incidents = [decode_incident(r.value) for r in records if r.value is not None]
    return [i for i in final(incidents).values() if i.type == "device_unhealthy_eviction"]


@pytest.mark.asyncio
async def test_a_kernel_xid_79_through_kafka_is_one_eviction_incident_naming_the_gpu(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """Real time, not looptime: the broker and the worker are other processes."""
    node_events = [
        e
        for e in (decode_event(line) for line in SCENARIO.read_bytes().splitlines())
        if getattr(e, "node", "") == NODE
    ]
    events = ending_days_ago(node_events)
    [recorded_xid] = [e for e in events if isinstance(e, XidEvent) and e.code == 79]
    others = [e for e in events if not isinstance(e, XidEvent | GpuBindingEvent)]
    await kafka.acreate_topics()

    device = tmp_path / "kmsg"
    device.write_text(
        "6,1,1000000,-;eth0: Link is Up\n"
        f"3,2,{UPTIME_S * 1_000_000},-;NVRM: Xid (PCI:0000:9b:00): 79, pid='<unknown>', "
        "name=<unknown>, GPU has fallen off the bus.\n"
    )
    boot_id = tmp_path / "boot_id"
    boot_id.write_text("6a1f0c3e-0000-4000-8000-00000000b007\n")
    options = KmsgSettings(
        node=NODE,
        cluster=recorded_xid.cluster,
        device=str(device),
        state_path=str(tmp_path / "state.json"),
        boot_id_file=str(boot_id),
        boot_time=(recorded_xid.time - timedelta(seconds=UPTIME_S)).isoformat(),
        once=True,
        metrics_port=None,
    )
    gpus = {BUS: Device(uuid=UUID, index=0, pci_bus_id=BUS)}
    enrich = functools.partial(attribute, gpus=gpus)
    published = await run_kmsg(options, kafka.kwargs, kafka.layout, io.StringIO(), enrich=enrich)
    assert published == 0
    assert load_state(options.state_path, KmsgState) == KmsgState(
        boot_id="6a1f0c3e-0000-4000-8000-00000000b007", seq=2
    )
    await send_events(kafka, others)

    worker = Worker(kafka, f"{kafka.prefix}-app", tmp_path / "worker.log")
    try:
        records = await consume_until(
            kafka.bootstrap,
            [kafka.layout.incidents.name],
            lambda records: any(len(i.pods) == 3 for i in evictions(records)),
            timeout=60,
            what="the eviction incident with its three pods",
        )
        found = evictions(records)
        assert len(found) == 1, "one incident for the whole chain"
        [incident] = found
        assert [(g.uuid, g.pci_bus_id) for g in incident.gpus] == [(UUID, BUS)]
        assert sorted(p.name for p in incident.pods) == [
            "llama-pretrain-0",
            "llama-pretrain-1",
            "llama-pretrain-2",
        ]
        kernel = [e for e in incident.evidence if e.event_id.startswith("kmsg:")]
        assert kernel, "the kernel line is the anchoring evidence"
        assert UUID in kernel[0].text
    finally:
        assert worker.stop() == 0, worker.log()
