"""The simulator's ``multi_gpu_no_nvlink`` fault: PCIe-only nodes and their truth.

Some nodes of a stream that opens with the connectors' snapshot are PCIe-only boxes; the
snapshot tells every node's topology (HGX: every pair NV18; PCIe: PIX / NODE / SYS); every
multi-GPU pod that runs on a PCIe-only node, bound on all its GPUs, is one expected
``multi_gpu_pod_without_nvlink``. Replayed through the core, the truth and the incidents
are the same pods.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

from gputriage.simulate import Simulation, StreamSpec
from schemas.events import GpuTopologyEvent, NodeEvent, PodEvent
from streams.config import default_core_config
from streams.core import Correlator
from tests.core_helpers import route_all

KIND = "multi_gpu_pod_without_nvlink"


def _spec(**rest: object) -> StreamSpec:
    return StreamSpec.for_duration(seconds=2 * 3600.0, nodes=40, seed=4, **rest)


def test_the_snapshot_tells_each_nodes_topology_and_some_are_pcie_only() -> None:
    sim = Simulation(_spec())
    events = list(sim.events())
    topologies = [e for e in events if isinstance(e, GpuTopologyEvent)]
    products = {
        e.node: e.labels["nvidia.com/gpu.product"] for e in events if isinstance(e, NodeEvent)
    }
    assert sorted(t.node for t in topologies) == sorted(products)
    kinds = Counter(
        "pcie" if all(link.nvlinks == 0 for link in t.links) else "hgx" for t in topologies
    )
    assert kinds["pcie"] >= 1
    assert kinds["hgx"] > kinds["pcie"], "most nodes are HGX boards"
    for t in topologies:
        assert len(t.links) == 28
        assert all(g.gpu_uuid and g.pci_bus_id for g in t.gpus)
        codes = {link.link_type for link in t.links}
        if products[t.node] == "NVIDIA-L40S":
            assert codes == {"PIX", "NODE", "SYS"}
        else:
            assert codes == {"NV18"}
    first_pod = next(i for i, e in enumerate(events) if isinstance(e, PodEvent))
    first_topology = next(i for i, e in enumerate(events) if isinstance(e, GpuTopologyEvent))
    assert first_topology < first_pod


def test_every_multi_gpu_pod_on_a_pcie_node_is_expected_and_the_core_agrees() -> None:
    sim = Simulation(_spec())
    events = list(sim.events())
    expected = [t for t in sim.truth if t.type == KIND]
    assert len(expected) >= 3
    correlator = Correlator(default_core_config())
    revisions = [inc for copy in route_all(events) for inc in correlator.ingest(copy)]
    revisions += correlator.flush()
    opened = {inc.id: inc for inc in reversed(revisions) if inc.type == KIND}  # the first
    seen = {f"{i.pods[0].namespace}/{i.pods[0].name}": i.first_seen for i in opened.values()}
    assert len(seen) == len(opened), "one incident per pod"
    assert sorted(seen) == sorted(t.pods[0] for t in expected)
    for truth in expected:
        assert truth.not_before <= seen[truth.pods[0]] <= truth.not_after
        assert truth.not_after - truth.not_before < timedelta(minutes=2)


def test_no_pcie_node_without_the_snapshot_or_at_rate_zero() -> None:
    """The benchmarks' stream (no snapshot) keeps its bytes; noise only has no fault."""
    bench = Simulation(StreamSpec(events=3000, nodes=30))
    assert not any(isinstance(e, GpuTopologyEvent) for e in bench.events())
    quiet = Simulation(_spec(fault_rate=0.0))
    nodes = [e for e in quiet.events() if isinstance(e, NodeEvent)]
    assert nodes
    assert all(e.labels["nvidia.com/gpu.product"] != "NVIDIA-L40S" for e in nodes)
    assert [t for t in quiet.truth if t.type == KIND] == []
