"""The live topology source: NVML through the fake of the pynvml library the NVML connector's
tests use (extended here with the topology calls), nvidia-smi through a fake ``nvidia-smi``
script that prints a real sample, and the real CLI publishing to the real broker."""

from __future__ import annotations

import asyncio
import io
import re
import signal
import stat
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pynvml  # type: ignore[import-untyped]
import pytest

from connectors.nvml.devices import Nvml
from connectors.source import DeadLine
from connectors.topology.live import (
    NvmlReader,
    SmiReader,
    TopologySource,
    Unavailable,
    connect_topo,
    open_reader,
)
from connectors.topology.matrix import Topology
from connectors.topology.nvml import cpu_list, read_topology
from connectors.topology.settings import TopoSettings
from gputriage.cli.compose import open_nvml
from schemas.codec import decode_event
from schemas.events import GpuNumaAffinity, GpuPairLink, GpuTopologyEvent
from tests.cli_helpers import clean_env, gputriage
from tests.connectors.nvml.test_nvml import FakeNvml
from tests.http_helpers import http_get
from tests.kafka_helpers import KafkaTestEnv, consume_events, wait_until

SAMPLES = Path(__file__).parent / "samples"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
SWITCH = pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH
GPU = pynvml.NVML_NVLINK_DEVICE_TYPE_GPU


class FakeTopologyNvml(FakeNvml):
    """Four whole GPUs: 0 and 1 joined by a 4-link NVLink bridge under one PCIe switch;
    2 and 3 on an NVSwitch fabric (18 links, one of GPU3's down); 0/1 and 2/3 on two
    NUMA nodes. GPU3's driver will not say its NUMA node."""

    def __init__(self) -> None:
        super().__init__()
        self.gpus = [
            {
                "uuid": f"GPU-0000000{i}-aaaa-bbbb-cccc-ddddeeeeffff",
                "bus": f"00000000:{bus}:00.0",
                "name": "NVIDIA H100 80GB HBM3",
            }
            for i, bus in enumerate(("18", "2A", "9A", "AB"))
        ]
        self.migs = {}
        # (gpu, link) -> (remote device type, remote bus id); absent: link inactive
        self.nvlinks: dict[tuple[int, int], tuple[int, str]] = {}
        for link in range(4):
            self.nvlinks[0, link] = (GPU, "00000000:2A:00.0")
            self.nvlinks[1, link] = (GPU, "00000000:18:00.0")
        for link in range(18):
            self.nvlinks[2, link] = (SWITCH, "00000000:00:00.0")
            if link != 7:
                self.nvlinks[3, link] = (SWITCH, "00000000:00:00.0")
        self.ancestors = {
            (0, 1): pynvml.NVML_TOPOLOGY_SINGLE,
            (2, 3): pynvml.NVML_TOPOLOGY_NODE,
        }

    NVML_NVLINK_MAX_LINKS = pynvml.NVML_NVLINK_MAX_LINKS
    NVML_FEATURE_ENABLED = pynvml.NVML_FEATURE_ENABLED
    NVML_NVLINK_DEVICE_TYPE_SWITCH = SWITCH
    NVML_AFFINITY_SCOPE_NODE = pynvml.NVML_AFFINITY_SCOPE_NODE
    NVML_TOPOLOGY_INTERNAL = pynvml.NVML_TOPOLOGY_INTERNAL
    NVML_TOPOLOGY_SINGLE = pynvml.NVML_TOPOLOGY_SINGLE
    NVML_TOPOLOGY_MULTIPLE = pynvml.NVML_TOPOLOGY_MULTIPLE
    NVML_TOPOLOGY_HOSTBRIDGE = pynvml.NVML_TOPOLOGY_HOSTBRIDGE
    NVML_TOPOLOGY_NODE = pynvml.NVML_TOPOLOGY_NODE
    NVML_TOPOLOGY_SYSTEM = pynvml.NVML_TOPOLOGY_SYSTEM

    def nvmlDeviceGetMigMode(self, handle: tuple[Any, ...]) -> list[int]:
        raise self._error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetNvLinkState(self, handle: tuple[Any, ...], link: int) -> int:
        if link >= 18:
            raise self._error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED if (handle[1], link) in self.nvlinks else 0

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: tuple[Any, ...], link: int) -> int:
        return self.nvlinks[handle[1], link][0]

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: tuple[Any, ...], link: int) -> Any:
        info = pynvml.nvmlPciInfo_t()
        info.busId = self.nvlinks[handle[1], link][1].encode()
        return info

    def nvmlDeviceGetTopologyCommonAncestor(self, a: tuple[Any, ...], b: tuple[Any, ...]) -> int:
        return int(self.ancestors.get((a[1], b[1]), pynvml.NVML_TOPOLOGY_SYSTEM))

    def nvmlDeviceGetCpuAffinity(self, handle: tuple[Any, ...], words: int) -> list[int]:
        mask = [0xFFFF, 0] if handle[1] < 2 else [0xFFFF0000, 0xFFFF]  # 0-15 | 16-31,64-79
        return mask + [0] * (words - 2)

    def nvmlDeviceGetMemoryAffinity(
        self, handle: tuple[Any, ...], words: int, scope: int
    ) -> list[int]:
        assert scope == pynvml.NVML_AFFINITY_SCOPE_NODE
        if handle[1] == 3:
            raise self._error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [1 if handle[1] < 2 else 2] + [0] * (words - 1)


def test_nvml_topology_in_the_matrix_words() -> None:
    with Nvml(FakeTopologyNvml()) as nvml:
        topology = read_topology(nvml.lib)
    assert topology.links == (
        GpuPairLink(src_gpu=0, dst_gpu=1, link_type="NV4", nvlinks=4),
        GpuPairLink(src_gpu=0, dst_gpu=2, link_type="SYS", nvlinks=0),
        GpuPairLink(src_gpu=0, dst_gpu=3, link_type="SYS", nvlinks=0),
        GpuPairLink(src_gpu=1, dst_gpu=2, link_type="SYS", nvlinks=0),
        GpuPairLink(src_gpu=1, dst_gpu=3, link_type="SYS", nvlinks=0),
        GpuPairLink(src_gpu=2, dst_gpu=3, link_type="NV17", nvlinks=17),  # the fewer switch links
    )
    assert [(g.gpu, g.numa_node, g.cpu_affinity, g.pci_bus_id) for g in topology.gpus] == [
        (0, 0, "0-15", "0000:18:00.0"),
        (1, 0, "0-15", "0000:2a:00.0"),
        (2, 1, "16-31,64-79", "0000:9a:00.0"),
        (3, None, "16-31,64-79", "0000:ab:00.0"),
    ]
    assert topology.gpus[2].gpu_uuid == "GPU-00000002-aaaa-bbbb-cccc-ddddeeeeffff"


def test_pcie_levels_map_to_the_matrix_codes() -> None:
    fake = FakeTopologyNvml()
    fake.nvlinks.clear()
    fake.ancestors = {
        (0, 1): pynvml.NVML_TOPOLOGY_INTERNAL,
        (0, 2): pynvml.NVML_TOPOLOGY_MULTIPLE,
        (0, 3): pynvml.NVML_TOPOLOGY_HOSTBRIDGE,
        (1, 2): pynvml.NVML_TOPOLOGY_NODE,
        (1, 3): pynvml.NVML_TOPOLOGY_SINGLE,
        (2, 3): 99,  # a level this code does not know
    }
    codes = [x.link_type for x in read_topology(fake).links]
    assert codes == ["PIX", "PXB", "PHB", "NODE", "PIX", "N/A"]


def test_cpu_masks_read_as_the_matrix_writes_them() -> None:
    assert cpu_list([(1 << 48) - 1, 0xFFFFFFFF00000000, 0xFFFF]) == "0-47,96-143"
    assert cpu_list([0b1011]) == "0-1,3"
    assert cpu_list([0, 0]) == ""


def test_published_at_start_and_on_change_only() -> None:
    fake = FakeTopologyNvml()
    command = TopoSettings(cluster="c1", node="n1", interval_seconds=0.001)
    source = TopologySource(NvmlReader(Nvml(fake).open()), command, clock=lambda: T0)

    async def polls(n: int) -> list[list[GpuTopologyEvent]]:
        out = []
        for _ in range(n):
            batch = await source.next_batch()
            assert batch is not None
            out.append([e for e in batch.events if isinstance(e, GpuTopologyEvent)])
        return out

    first, unchanged = asyncio.run(polls(2))
    assert len(first) == 1
    assert unchanged == [], "the same snapshot is not published again"
    assert first[0].source == "nvml"
    for link in range(2):  # two of the bridge's links go down
        del fake.nvlinks[0, link]
        del fake.nvlinks[1, link]
    (changed,) = asyncio.run(polls(1))
    assert (changed[0].links[0].link_type, changed[0].links[0].nvlinks) == ("NV2", 2)
    assert changed[0].id != first[0].id
    assert source.published == 2


def _fake_smi(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_without_nvml_nvidia_smi_is_run_and_parsed(tmp_path: Path) -> None:
    sample = SAMPLES / "a100_pcie_nv12_pairs.txt"
    smi = _fake_smi(tmp_path, f'[ "$1 $2" = "topo -m" ] && exec cat "{sample}"; exit 3')
    command = TopoSettings(cluster="c1", node="n1", once=True, print_only=True, nvidia_smi=str(smi))
    out, err = io.BytesIO(), io.StringIO()
    no_driver = FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    assert (
        connect_topo(command, _no_kafka, out, err, open_nvml=lambda: open_nvml(no_driver)) == 0
    ), err.getvalue()
    (event,) = [decode_event(line) for line in out.getvalue().splitlines()]
    assert isinstance(event, GpuTopologyEvent)
    assert event.source == "nvidia-smi"
    assert [(x.src_gpu, x.dst_gpu) for x in event.links if x.nvlinks == 12] == [
        (0, 1),
        (2, 3),
        (4, 5),
        (6, 7),
    ]
    assert event.gpus[4] == GpuNumaAffinity(gpu=4, numa_node=1, cpu_affinity="")
    assert "reading the GPU topology from nvidia-smi" in err.getvalue()


def test_a_failing_or_hung_nvidia_smi_is_a_dead_letter_and_the_poll_goes_on(tmp_path: Path) -> None:
    failing = _fake_smi(
        tmp_path,
        'echo "NVIDIA-SMI has failed because it could not communicate with the driver"; exit 9',
    )
    source = TopologySource(SmiReader(str(failing), 5.0), TopoSettings(cluster="c", node="n"))
    batch = asyncio.run(source.next_batch())
    assert batch is not None
    assert batch.events == []
    (dead,) = batch.dead
    assert isinstance(dead, DeadLine)
    assert dead.error.reason.startswith(f"{failing} topo -mp exited 9: NVIDIA-SMI has failed")
    hung = tmp_path / "hung"
    hung.mkdir()
    slow = _fake_smi(hung, "exec sleep 30")
    reader = SmiReader(str(slow), 0.2)
    result = asyncio.run(reader.read())
    assert not isinstance(result, Topology)
    assert "did not answer in 0.2s" in result.reason
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    text = _fake_smi(garbage, "echo 'No devices were found'")
    source = TopologySource(SmiReader(str(text), 5.0), TopoSettings(cluster="c", node="n"))
    batch = asyncio.run(source.next_batch())
    assert batch is not None
    (dead,) = batch.dead
    assert isinstance(dead, DeadLine)
    assert dead.raw == b"No devices were found\n", "the output is kept as evidence"
    assert "no topology matrix header" in dead.error.reason


def test_neither_nvml_nor_nvidia_smi_is_one_line(tmp_path: Path) -> None:
    command = TopoSettings(cluster="c", node="n", nvidia_smi=str(tmp_path / "absent"))
    with pytest.raises(Unavailable, match=r"^NVML: driver not found .* and no .*absent to run"):
        open_reader(
            command, lambda: open_nvml(FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
        )
    err = io.StringIO()
    lib = FakeNvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    assert (
        connect_topo(command, _no_kafka, io.BytesIO(), err, open_nvml=lambda: open_nvml(lib)) == 1
    )
    assert err.getvalue().count("\n") == 1
    assert err.getvalue().startswith("gputriage: error: NVML: driver not found")


def _no_kafka() -> Any:
    raise AssertionError("Kafka is not needed here")


def test_the_real_cli_publishes_the_topology_to_the_broker(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """``connect topo`` as the DaemonSet runs it (no NVML here: the fake nvidia-smi prints a
    real HGX H100 sample) publishes one gpu_topology.v1 on gputriage.raw.topology."""
    kafka.create_topics()
    sample = SAMPLES / "h100_nv18_nics.txt"
    smi = _fake_smi(tmp_path, f'exec cat "{sample}"')
    proc = gputriage(
        "connect",
        "topo",
        "--cluster",
        "c1",
        "--node",
        "n1",
        "--nvidia-smi",
        str(smi),
        "--once",
        env=kafka.env,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    topic = kafka.layout.raw["topology"].name
    assert topic.endswith("raw.topology")
    (record,) = asyncio.run(consume_events(kafka.bootstrap, [topic], 1))
    event = decode_event(record.value)
    assert isinstance(event, GpuTopologyEvent)
    assert (event.cluster, event.node, event.source) == ("c1", "n1", "nvidia-smi")
    assert record.key == b"c1/n1"
    assert len(event.links) == 28
    assert {x.link_type for x in event.links} == {"NV18"}
    assert [g.numa_node for g in event.gpus] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_the_agent_serves_health_and_publishes_again_only_when_the_topology_changes(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """The DaemonSet's form: polling, /healthz on its metrics port, a second record only
    once nvidia-smi prints another topology (an NVLink bridge lost), a clean SIGTERM."""
    kafka.create_topics()
    current = tmp_path / "current.txt"
    current.write_text((SAMPLES / "a100_pcie_nv12_pairs.txt").read_text())
    smi = _fake_smi(tmp_path, f'exec cat "{current}"')
    stderr = tmp_path / "stderr"
    args = ["connect", "topo", "--cluster", "c1", "--node", "n1", "--nvidia-smi", str(smi)]
    with stderr.open("wb") as err:
        agent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gputriage",
                *args,
                "--interval-seconds",
                "1",
                "--metrics-port",
                "0",
            ],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=clean_env(kafka.env),
        )
    try:
        line = wait_until(
            lambda: re.search(r"metrics on http://[0-9.]+:(\d+)/metrics", stderr.read_text()),
            timeout=30,
            what="the metrics line",
        )
        assert line is not None
        port = line[1]
        assert http_get(f"http://127.0.0.1:{port}/healthz")[0] == 200
        topic = kafka.layout.raw["topology"].name
        (first,) = asyncio.run(consume_events(kafka.bootstrap, [topic], 1, timeout=30))
        bridged = decode_event(first.value)
        assert isinstance(bridged, GpuTopologyEvent)
        assert next(x for x in bridged.links if (x.src_gpu, x.dst_gpu) == (6, 7)).nvlinks == 12
        current.write_text(current.read_text().replace("NV12", "NODE"))
        records = asyncio.run(consume_events(kafka.bootstrap, [topic], 2, timeout=30))
        lost = decode_event(records[1].value)
        assert isinstance(lost, GpuTopologyEvent)
        assert {x.link_type for x in lost.links} == {"NODE"}
        assert lost.id != bridged.id
    finally:
        agent.send_signal(signal.SIGTERM)
        code = agent.wait(timeout=30)
    assert code == 0, stderr.read_text()[-2000:]
    records = asyncio.run(consume_events(kafka.bootstrap, [topic], 2, timeout=10))
    assert len(records) == 2, "an unchanged topology was not published again"
