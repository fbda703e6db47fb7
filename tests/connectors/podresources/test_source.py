"""The pod-resources source against a real gRPC server of the kubelet's API on a Unix socket.

The server (:mod:`tests.connectors.podresources.kubelet`) is the generated servicer under
grpc.aio, so the client's channel, the proto's wire format and the status codes are the real
ones; only its answers are the test's, and they change between polls as a kubelet's would.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from connectors.backoff import Backoff
from connectors.podresources._proto import api_pb2
from connectors.podresources.client import Client, PollFailed
from connectors.podresources.devices import GpuInfo, GpuMap
from connectors.podresources.run import PodResourcesMetrics, PodResourcesSource
from connectors.podresources.settings import PodResourcesSettings
from connectors.source import Batch
from schemas.events import GpuBindingEvent
from tests.connectors.podresources.kubelet import list_response, serving, target_of

GPU_A = "GPU-8f2c1d90-3e5a-4b17-9c2e-5da9abb51763"
GPU_B = "GPU-0b7e3c55-1d2f-4a8b-9c6d-000000000003"
A30 = "GPU-265c9814-6156-355b-e589-ff2064894f16"
MIG3 = "MIG-0b1c2d3e-4f50-5617-8293-a4b5c6d7e8f9"
NVML = GpuMap.of(
    [
        GpuInfo(uuid=GPU_A, pci_bus_id="0000:18:00.0", index=0),
        GpuInfo(uuid=GPU_B, pci_bus_id="0000:2a:00.0", index=1),
        GpuInfo(uuid=A30, pci_bus_id="0000:41:00.0", index=2),
        GpuInfo(uuid=A30, pci_bus_id="0000:41:00.0", index=2, gpu_instance=3, mig_uuid=MIG3),
    ]
)


NO_BACKOFF = Backoff(initial_seconds=0.0, max_seconds=0.0)


def command(target: str) -> PodResourcesSettings:
    return PodResourcesSettings(
        cluster="c1",
        node="n1",
        socket=target,
        interval_seconds=0.0,  # every next_batch polls: the test decides when
        timeout_seconds=2.0,
    )


def pods_of(batch: Batch | None) -> dict[tuple[str, int | None], tuple[tuple[str, ...], bool]]:
    assert batch is not None
    out = {}
    for e in batch.events:
        assert isinstance(e, GpuBindingEvent)
        out[(e.gpu_uuid, e.gpu_instance)] = (tuple(p.name for p in e.pods), e.shared)
    return out


@pytest.mark.asyncio
async def test_the_bindings_follow_the_kubelets_allocations(tmp_path: Path) -> None:
    async with serving(tmp_path) as (kubelet, target):
        kubelet.devices = {
            "nvidia.com/gpu": [f"{GPU_A}::{n}" for n in range(4)] + [GPU_B],
            "nvidia.com/mig-1g.6gb": [MIG3],
        }
        kubelet.pods = {
            "ml/nb-a": {"nvidia.com/gpu": [f"{GPU_A}::0"]},
            "ml/nb-b": {"nvidia.com/gpu": [f"{GPU_A}::2"]},
            "ml/train": {"nvidia.com/gpu": [GPU_B]},
        }
        client = Client(target, timeout_seconds=2.0)
        metrics = PodResourcesMetrics()
        source = PodResourcesSource(command(target), client, NVML, metrics, backoff=NO_BACKOFF)
        try:
            first = await source.next_batch()
            assert pods_of(first) == {
                (GPU_A, None): (("nb-a", "nb-b"), True),
                (GPU_B, None): (("train",), False),
                (A30, 3): ((), False),  # allocatable, held by nobody: bound empty
            }
            assert first is not None
            (mig,) = [e for e in first.events if isinstance(e, GpuBindingEvent) and e.gpu_instance]
            assert (mig.pci_bus_id, mig.mig_uuid, mig.mig_profile) == (
                "0000:41:00.0",
                MIG3,
                "1g.6gb",
            )

            kubelet.pods = {  # nb-b and train end; serve gets the MIG instance, eval GPU B
                "ml/nb-a": {"nvidia.com/gpu": [f"{GPU_A}::0"]},
                "ml/serve": {"nvidia.com/mig-1g.6gb": [MIG3]},
                "ml/eval": {"nvidia.com/gpu": [GPU_B]},
            }
            assert pods_of(await source.next_batch()) == {
                (GPU_A, None): (("nb-a",), True),
                (GPU_B, None): (("eval",), False),
                (A30, 3): (("serve",), False),
            }
            # Nothing changed: nothing sent, and an idle batch, so the publish loop claims
            # the clock as this source's progress (a dropped batch would claim nothing).
            assert (await source.next_batch()) == Batch()

            kubelet.pods = {"ml/nb-a": {"nvidia.com/gpu": [f"{GPU_A}::0"]}}
            assert pods_of(await source.next_batch()) == {
                (GPU_B, None): ((), False),
                (A30, 3): ((), False),
            }, "GPUs that lost their pods are unbound"
            assert metrics.polls.labels("ok")._value.get() == 4
            assert metrics.kubelet.state.ok
        finally:
            await client.close()


@pytest.mark.asyncio
async def test_an_unreachable_kubelet_is_a_value_retried_until_it_answers(tmp_path: Path) -> None:
    """No socket yet (the kubelet restarting): an idle batch, a failing condition, a count,
    and the backoff; once the kubelet listens on the socket, the next polls get through."""
    target = target_of(tmp_path)
    client = Client(target, timeout_seconds=1.0)
    metrics = PodResourcesMetrics()
    retry = Backoff(initial_seconds=0.05, max_seconds=0.2)
    source = PodResourcesSource(
        command(target), client, GpuMap(), metrics, backoff=retry, draw=lambda: 1.0
    )
    try:
        batch = await source.next_batch()
        assert batch == Batch(), "no records, no crash"
        assert source.failures == 1
        assert metrics.polls.labels("unreachable")._value.get() == 1
        assert not metrics.kubelet.state.ok
        assert "unreachable" in metrics.kubelet.state.detail
        assert source._delay() == 0.05, "the backoff, not the interval"
        async with serving(tmp_path) as (kubelet, served):
            assert served == target
            kubelet.pods = {"ml/train": {"nvidia.com/gpu": [GPU_B]}}
            deadline = time.monotonic() + 15
            while (batch := await source.next_batch()) is not None and not batch.events:
                assert time.monotonic() < deadline, "the kubelet never got through"
            assert pods_of(batch) == {(GPU_B, None): (("train",), False)}
            assert source.failures == 0
            assert metrics.kubelet.state.ok
    finally:
        await client.close()


class Restarting:
    """A kubelet that refuses the first ``down`` polls, then answers; notes when (the loop's
    clock) each poll came. In-process, no socket: under looptime nothing is on its way
    while the clock jumps."""

    def __init__(self, down: int) -> None:
        self.down = down
        self.polled_at: list[float] = []

    async def list(self) -> api_pb2.ListPodResourcesResponse:
        self.polled_at.append(asyncio.get_running_loop().time())
        if len(self.polled_at) <= self.down:
            raise PollFailed("unreachable", "connection refused")
        return list_response({"ml/train": {"nvidia.com/gpu": [GPU_B]}})

    async def allocatable(self) -> api_pb2.AllocatableResourcesResponse | None:
        return None


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_the_backoff_after_failed_polls_passes_on_the_loops_clock() -> None:
    """Four refused polls, then an answer: the polls come after the backoff's delays
    (1, 2, 4, 8 s with the draw at its top) of the loop's fake clock, in a few dozen
    reads of the source (an idle batch per second between them), and none sooner."""
    kubelet = Restarting(down=4)
    retry = Backoff(initial_seconds=1.0, max_seconds=60.0)
    source = PodResourcesSource(command("unused"), kubelet, NVML, backoff=retry, draw=lambda: 1.0)
    started = asyncio.get_running_loop().time()
    reads = 0
    while (batch := await source.next_batch()) is not None and not batch.events:
        reads += 1
        assert reads < 40, f"no answer after {reads} reads, polls at {kubelet.polled_at}"
    assert pods_of(batch) == {(GPU_B, None): (("train",), False)}
    since = [round(at - started, 3) for at in kubelet.polled_at]
    assert since == [0.0, 1.0, 3.0, 7.0, 15.0], "each poll after its backoff"
    assert source.failures == 0


@pytest.mark.asyncio
async def test_a_kubelet_without_get_allocatable_is_listed_only(tmp_path: Path) -> None:
    async with serving(tmp_path) as (kubelet, target):
        kubelet.allocatable_implemented = False
        kubelet.devices = {"nvidia.com/gpu": [GPU_A]}  # never asked for
        kubelet.pods = {"ml/train": {"nvidia.com/gpu": [GPU_B]}}
        client = Client(target, timeout_seconds=2.0)
        source = PodResourcesSource(command(target), client, GpuMap(), backoff=NO_BACKOFF)
        try:
            assert pods_of(await source.next_batch()) == {(GPU_B, None): (("train",), False)}
            assert not source._allocatable, "it stops asking"
            kubelet.pods = {}
            assert pods_of(await source.next_batch()) == {(GPU_B, None): ((), False)}
        finally:
            await client.close()
