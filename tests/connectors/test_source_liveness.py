"""Each node agent's source says its family and when it last read its input successfully.

What the heartbeats carry (:func:`connectors.source.liveness`): a source whose input fails
while it stays alive (a kubelet that refuses, NVML) must not look heard; a kernel-log
reader has no ``read_at`` (blocked on a quiet node, it is reading).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from connectors.backoff import Backoff
from connectors.nvml.devices import Nvml
from connectors.nvml.run import NvmlSource
from connectors.nvml.settings import NvmlSettings
from connectors.podresources._proto import api_pb2
from connectors.podresources.client import PollFailed
from connectors.podresources.run import PodResourcesSource
from connectors.podresources.settings import PodResourcesSettings
from connectors.source import Batch, liveness
from connectors.xid.journal import JournalReader
from connectors.xid.run import KmsgMetrics, XidSource
from connectors.xid.settings import KmsgSettings
from connectors.xid.textlog import TextLogReader
from tests.connectors.nvml.test_nvml import FakeNvml
from tests.connectors.podresources.kubelet import list_response
from tests.connectors.podresources.test_source import GPU_B, NVML

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


class Failing:
    """A kubelet that answers the first ``up`` polls, then refuses every one."""

    def __init__(self, up: int) -> None:
        self.up = up
        self.polls = 0

    async def list(self) -> api_pb2.ListPodResourcesResponse:
        self.polls += 1
        if self.polls > self.up:
            raise PollFailed("unreachable", "connection refused")
        return list_response({"ml/train": {"nvidia.com/gpu": [GPU_B]}})

    async def allocatable(self) -> api_pb2.AllocatableResourcesResponse | None:
        return None


@pytest.mark.asyncio
async def test_pod_resources_is_heard_at_its_last_answered_poll_not_after() -> None:
    now = [T0]
    settings = PodResourcesSettings(cluster="c1", node="n1", socket="unused", interval_seconds=0)
    source = PodResourcesSource(
        settings,
        Failing(up=1),
        NVML,
        backoff=Backoff(initial_seconds=0.0, max_seconds=0.0),
        clock=lambda: now[0],
    )
    assert liveness(source) == ("", None), "never answered: progress only"
    first = await source.next_batch()
    assert first is not None
    assert first.events
    assert liveness(source) == ("pod-resources", T0)
    for minutes in (1, 2, 3):
        now[0] = T0 + timedelta(minutes=minutes)
        assert await source.next_batch() == Batch(), "a refused poll is an idle batch"
    assert source.failures == 3
    assert liveness(source) == ("pod-resources", T0)


@pytest.mark.asyncio
async def test_nvml_is_heard_whenever_it_answers_a_wait() -> None:
    fake = FakeNvml()
    settings = NvmlSettings(cluster="c1", node="n1")
    with Nvml(fake) as nvml:
        source = NvmlSource(nvml, settings)
        assert liveness(source) == ("", None)
        before = datetime.now(UTC)
        await source.next_batch()  # the GPU map
        mapped = source.read_at()
        assert mapped is not None
        assert mapped >= before
        assert await source.next_batch() == Batch()  # a wait that timed out: NVML answered
        waited = source.read_at()
        assert waited is not None
        assert waited >= mapped
        assert liveness(source) == ("nvml", waited)


def test_the_kernel_log_readers_are_heard_at_their_heartbeats_time(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    text = TextLogReader(path=log, node="n1", cluster="c1", state_path=tmp_path / "text.json")
    journal = JournalReader(node="n1", cluster="c1", state_path=tmp_path / "j.json", boot_id="b")
    families = {}
    for reader in (text, journal):
        source = XidSource(
            reader,
            settings=KmsgSettings(cluster="c1", node="n1"),
            stop=asyncio.Event(),
            metrics=KmsgMetrics(),
        )
        families[reader.name.split(":")[0]] = liveness(source)
    text.close()
    assert families == {"file": ("kmsg", None), "journal": ("journal", None)}
