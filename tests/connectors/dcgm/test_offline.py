"""``gputriage ingest dcgm``: saved scrapes in, typed events out, through the real CLI."""

from __future__ import annotations

import asyncio
import gzip
import os
import shutil
import signal
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from schemas.codec import decode_event
from schemas.events import GpuBindingEvent, Tick, XidEvent
from schemas.keys import is_copy
from tests import paths
from tests.cli_helpers import CONSOLE_SCRIPT, clean_env, gputriage
from tests.connectors.dcgm.test_scrape import Exporter, serving
from tests.kafka_helpers import KafkaTestEnv, consume_events, consume_until, eventually

DATA = paths.DATA / "dcgm"
T0 = 1_764_496_800  # 2025-11-30T10:00:00Z


def scrapes(tmp_path: Path) -> list[str]:
    """The burst scenario's scrapes, 15 s apart by modification time (the event time)."""
    paths = []
    for n in range(1, 5):
        path = tmp_path / f"scrape-{n}.prom"
        shutil.copy(DATA / "burst" / f"{n:02d}.prom", path)
        os.utime(path, (T0 + 15 * n, T0 + 15 * n))
        paths.append(str(path))
    return paths


def args(paths: list[str]) -> list[str]:
    return [arg for path in paths for arg in ("--file", path)]


def test_successive_scrapes_print_xids_and_bindings(tmp_path: Path) -> None:
    paths = scrapes(tmp_path)
    proc = gputriage("ingest", "dcgm", "--node", "gpu-node-1", "--cluster", "c1", *args(paths))
    assert proc.returncode == 0, proc.stderr
    events = [decode_event(line) for line in proc.stdout.splitlines()]
    kinds = [
        (type(e).__name__, getattr(e, "code", None), len(getattr(e, "pods", ()))) for e in events
    ]
    assert kinds == [
        ("GpuBindingEvent", None, 1),  # scrape 1: the pod holds the GPU (its XIDs: a baseline)
        ("XidEvent", 79, 0),  # scrape 2: the count went 1 -> 4 under a gauge stuck at 79
        ("XidEvent", 79, 0),
        ("XidEvent", 79, 0),
        ("GpuBindingEvent", None, 0),  # scrape 3: the pod is gone
        ("GpuBindingEvent", None, 1),  # scrape 4: another pod
    ]
    assert {(e.cluster, getattr(e, "node", "")) for e in events} == {("c1", "gpu-node-1")}
    xid = events[1]
    assert isinstance(xid, XidEvent)
    assert xid.time == datetime.fromtimestamp(T0 + 30, UTC)  # scrape 2's mtime
    assert b"2 non-zero XID value(s) in a GPU's first scrape not reported" in proc.stderr
    # The same files give the same events, ids included.
    again = gputriage("ingest", "dcgm", "--node", "gpu-node-1", "--cluster", "c1", *args(paths))
    assert again.stdout == proc.stdout


def test_a_bad_file_is_reported_and_skipped(tmp_path: Path) -> None:
    paths = scrapes(tmp_path)
    bad = tmp_path / "error-page.html"
    bad.write_text("<html><body>503 Service Unavailable</body></html>\n")
    gz = tmp_path / "scrape-1.prom.gz"
    gz.write_bytes(gzip.compress(Path(paths[0]).read_bytes()))
    proc = gputriage("ingest", "dcgm", "--node", "n1", *args([str(gz), str(bad), paths[1]]))
    assert proc.returncode == 1
    lines = proc.stderr.decode().splitlines()
    assert lines[0].startswith(f"{bad}: invalid Prometheus text exposition")
    assert lines[-1] == "gputriage: 1 bad scrape file of 3 skipped"
    events = [decode_event(line) for line in proc.stdout.splitlines()]
    # The gzip scrape was read, the bad one skipped, the third diffed against the first.
    assert [type(e) for e in events] == [GpuBindingEvent, XidEvent, XidEvent, XidEvent]


def test_a_corrupt_gzip_file_is_reported_not_a_traceback(tmp_path: Path) -> None:
    corrupt = tmp_path / "scrape.prom.gz"
    corrupt.write_bytes(gzip.compress(b"DCGM_FI_DEV_XID_ERRORS 0\n")[:10] + b"garbage-bytes")
    proc = gputriage("ingest", "dcgm", "--node", "n1", "--file", str(corrupt))
    stderr = proc.stderr.decode()
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr
    assert stderr.startswith(f"{corrupt}: cannot read: ")


def test_usage_errors_are_one_line() -> None:
    proc = gputriage("ingest", "dcgm", "--file", str(DATA / "a30_mig.prom"))
    assert proc.returncode == 2
    assert proc.stderr.decode().count("\n") == 1
    assert "--node" in proc.stderr.decode()
    proc = gputriage("connect", "dcgm", "--url", "localhost:9400", "--node", "n", "--cluster", "c")
    assert proc.returncode == 2
    assert proc.stderr.decode().count("\n") == 1
    assert "is not an http(s):// URL" in proc.stderr.decode()


async def _connect_dcgm(url: str, interval: str, env: dict[str, str]) -> asyncio.subprocess.Process:
    """``gputriage connect dcgm`` for gpu-node-1 of c1 against ``url``, stderr piped."""
    return await asyncio.create_subprocess_exec(
        str(CONSOLE_SCRIPT),
        "connect",
        "dcgm",
        "--url",
        url,
        "--node",
        "gpu-node-1",
        "--cluster",
        "c1",
        "--interval-seconds",
        interval,
        "--metrics-port",
        "0",
        env=env,
        stderr=asyncio.subprocess.PIPE,
    )


@pytest.mark.asyncio
async def test_connect_dcgm_publishes_until_sigterm(kafka: KafkaTestEnv) -> None:
    """The real command against a local exporter and the embedded broker."""
    exporter = Exporter()
    exporter.queue = [(500, "warming up", {})]  # survived: retried after a backoff
    async with serving(exporter) as url:
        proc = await _connect_dcgm(url, "0.1", clean_env(kafka.env))
        # Ends early if the command died (its stderr then says why).
        scraped = lambda: exporter.hits >= 3 or proc.returncode is not None  # noqa: E731
        await eventually(scraped, timeout=30, what="three scrapes")
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), 10)
        status = await proc.wait()
    assert status == 0, stderr
    topic = kafka.layout.raw_topic(GpuBindingEvent)
    # The binding, and its copy for the cluster key (schemas.keys.Router).
    records = await consume_events(kafka.bootstrap, [topic], 2)
    copy, binding = sorted((decode_event(r.value) for r in records), key=lambda e: not is_copy(e))
    assert isinstance(binding, GpuBindingEvent)
    # Slimmed to what the cluster key reads: the same record otherwise.
    same = ("id", "time", "node", "gpu_uuid", "pci_bus_id", "gpu_instance", "pods", "source")
    assert is_copy(copy)
    assert [getattr(copy, f) for f in same] == [getattr(binding, f) for f in same]
    assert (binding.node, binding.gpu_uuid) == (
        "gpu-node-1",
        "GPU-a8394b51-c086-568a-9f1a-c1e1c934c44c",
    )
    assert b"HTTP 500" in stderr  # the failed scrape was logged


@pytest.mark.asyncio
async def test_the_heartbeat_interval_comes_from_the_settings(kafka: KafkaTestEnv) -> None:
    """``connect.dcgm.heartbeat_seconds`` reaches the publish loop: after one scrape and
    with a long interval, the connector only heartbeats, 1.5 s apart (the default 0.5 s
    would put them ~0.5 s apart).

    Measured on the records' own timestamps (set when each is sent), from the second
    heartbeat on: the first one is the "caught up" beat that follows a publication at
    once. A send delayed by load shortens the gap after it and lengthens the one before,
    so the mean over several gaps is the robust figure, not the smallest gap."""
    beat = 1.5
    await kafka.acreate_topics()
    exporter = Exporter()
    async with serving(exporter) as url:
        env = clean_env({**kafka.env, "GPUTRIAGE_CONNECT__DCGM__HEARTBEAT_SECONDS": str(beat)})
        proc = await _connect_dcgm(url, "3600", env)
        topic = kafka.layout.raw_topic(GpuBindingEvent)

        def ticks(records: list[Any]) -> dict[int, list[int]]:
            by_partition: dict[int, list[int]] = {}
            for record in records:
                if isinstance(decode_event(record.value), Tick):
                    by_partition.setdefault(record.partition, []).append(record.timestamp)
            return by_partition

        try:
            records = await consume_until(
                kafka.bootstrap,
                [topic],
                lambda got: (
                    proc.returncode is not None or any(len(t) >= 5 for t in ticks(got).values())
                ),
                timeout=30,
                what="five heartbeats on one partition",
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(proc.communicate(), 10)
    assert proc.returncode == 0, stderr
    stamps = max(ticks(records).values(), key=len)[1:]
    gaps = [(b - a) / 1000 for a, b in pairwise(stamps)]
    assert sum(gaps) / len(gaps) >= beat * 0.8, gaps


def test_ingest_prints_mig_instances_as_parent_and_instance_id() -> None:
    """The MIG scenario's first scrape (real labels of NVIDIA/dcgm-exporter#317): one binding
    per instance, on the wire with the parent's uuid and index and the instance id."""
    proc = gputriage(
        "ingest", "dcgm", "--node", "n1", "--cluster", "c1", "--file", str(DATA / "mig" / "01.prom")
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2
    parent = b'"gpu_uuid":"GPU-265c9814-6156-355b-e589-ff2064894f16","pci_bus_id":"","gpu_index":0,'
    for line, instance, pod in zip(lines, (3, 4), ("a-0", "b-0"), strict=True):
        assert parent in line
        assert b'"mig_profile":"1g.6gb"' in line
        assert f'"name":"{pod}"'.encode() in line
        assert f'"gpu_instance":{instance},"mig_uuid":"",'.encode() in line
