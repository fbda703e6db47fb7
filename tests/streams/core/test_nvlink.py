"""``multi_gpu_pod_without_nvlink``: a running pod whose GPUs are not NVLink-connected.

The rule joins three sources on one node: the topology snapshot (``gpu_topology.v1``,
pairs by NVML index), the bindings (which pod holds which GPU) and the pod (Running,
its GPU request). These tests build real node timelines: an HGX board (every pair
NV18, reference §4.1), a PCIe-only box (PIX / NODE / SYS), a DGX-1-like partial mesh.
"""

from __future__ import annotations

import itertools

import msgspec
import pytest

from gputriage.demo.events import hgx_links, pcie_links
from schemas.codec import AnyEvent
from schemas.incidents import Incident
from schemas.keys import key_of
from streams.core import Correlator
from streams.core.rules.nvlink import islands_of
from streams.core.snapshot import decode_state, encode_state
from streams.core.state import NodeState
from tests.core_helpers import config, of_type, run
from tests.factories import Cluster

KIND = "multi_gpu_pod_without_nvlink"
NODE = "gpu-node-01"


def uuid(i: int) -> str:
    return f"GPU-00000000-0000-4000-8000-{i:012d}"


def bus(i: int) -> str:
    return f"0000:{0x18 + 0x10 * i:02x}:00.0"


def placed(
    c: Cluster,
    links: dict[tuple[int, int], str],
    gpus: list[int],
    *,
    topology_at: float = 0,
    pod_at: float = 10,
    bind_at: float = 11,
    name: str = "train-0",
    numa: tuple[int | None, ...] = (),
) -> None:
    """A node with ``links``, a pod requesting ``len(gpus)`` GPUs, bound to ``gpus`` by
    uuid and bus id (dcgm-exporter), the topology knowing indices only (nvidia-smi)."""
    c.node(NODE, 0)
    c.topology(NODE, topology_at, links, numa=numa)
    c.pod(NODE, name, pod_at, gpus=len(gpus))
    for i in gpus:
        c.bind(NODE, bind_at, uuid(i), bus(i), [name], index=i)


def ordered(c: Cluster) -> list[AnyEvent]:
    return sorted(c.events, key=lambda e: e.time)


def test_two_gpus_on_an_nvlink_pair_give_nothing() -> None:
    c = Cluster()
    placed(c, hgx_links(8), [0, 1])
    assert of_type(run(ordered(c)), KIND) == []


def test_two_gpus_on_a_sys_pair_give_one_ticket_naming_pod_gpus_and_link() -> None:
    c = Cluster()
    placed(c, pcie_links(8), [0, 4])
    [inc] = of_type(run(ordered(c)), KIND)
    assert inc.status == "open"
    assert inc.severity == "ticket"
    assert [(p.namespace, p.name, p.owner_kind, p.owner_name) for p in inc.pods] == [
        ("ns", "train-0", "Job", "job")
    ]
    assert [(g.uuid, g.pci_bus_id, g.index) for g in inc.gpus] == [
        (uuid(0), bus(0), 0),
        (uuid(4), bus(4), 4),
    ]
    assert inc.attributes["links"] == "GPU0-GPU4:SYS"
    assert "GPU0-GPU4 SYS" in inc.summary
    assert "ns/train-0" in inc.summary
    assert "no NVLink" in inc.action
    assert [e.schema for e in inc.evidence] == ["gpu_topology.v1"]


def test_a_pix_pair_is_not_nvlink_either() -> None:
    c = Cluster()
    placed(c, pcie_links(8), [0, 1])
    [inc] = of_type(run(ordered(c)), KIND)
    assert inc.attributes["links"] == "GPU0-GPU1:PIX"


def test_an_eight_gpu_pod_on_an_hgx_board_gives_nothing() -> None:
    c = Cluster()
    placed(c, hgx_links(8), list(range(8)), numa=(0, 0, 0, 0, 1, 1, 1, 1))
    assert of_type(run(ordered(c)), KIND) == []


def test_an_eight_gpu_pod_on_a_pcie_box_names_every_slow_pair() -> None:
    c = Cluster()
    placed(c, pcie_links(8), list(range(8)))
    [inc] = of_type(run(ordered(c)), KIND)
    assert len(inc.gpus) == 8
    assert inc.attributes["links"].count(":") == 28
    assert "and 25 more pairs" in inc.summary


def dgx1_links() -> dict[tuple[int, int], str]:
    """The DGX-1 (V100) hybrid cube-mesh: each GPU NVLinked to four others, the rest
    ``SYS`` (its published ``nvidia-smi topo -m``)."""
    nv = {
        (0, 1): "NV1",
        (0, 2): "NV1",
        (0, 3): "NV2",
        (0, 4): "NV2",
        (1, 2): "NV2",
        (1, 3): "NV1",
        (1, 5): "NV2",
        (2, 3): "NV2",
        (2, 6): "NV1",
        (3, 7): "NV1",
        (4, 5): "NV1",
        (4, 6): "NV1",
        (4, 7): "NV2",
        (5, 6): "NV2",
        (5, 7): "NV1",
        (6, 7): "NV2",
    }
    return {pair: nv.get(pair, "SYS") for pair in itertools.combinations(range(8), 2)}


def test_a_partial_mesh_judges_the_pods_own_gpus_not_every_pair() -> None:
    """All 8 GPUs of a DGX-1 are NVLink-connected through the mesh (NCCL rings run on it);
    GPU0 and GPU5 alone are not: nothing links them but PCIe."""
    whole = Cluster()
    placed(whole, dgx1_links(), list(range(8)))
    assert of_type(run(ordered(whole)), KIND) == []
    pair = Cluster()
    placed(pair, dgx1_links(), [0, 5])
    [inc] = of_type(run(ordered(pair)), KIND)
    assert inc.attributes["links"] == "GPU0-GPU5:SYS"
    assert inc.attributes["nvlink_islands"] == "0-1-2-3-4-5-6-7"


def test_it_resolves_when_the_pod_ends() -> None:
    for end in ("Succeeded", "deleted"):
        c = Cluster()
        placed(c, pcie_links(8), [0, 4])
        if end == "deleted":
            c.pod(NODE, "train-0", 100, op="deleted", phase="Running", gpus=2)
        else:
            c.pod(NODE, "train-0", 100, phase=end, gpus=2)
        [inc] = of_type(run(ordered(c)), KIND)
        assert inc.status == "resolved", end
        assert inc.resolved_at is not None
        assert inc.resolved_at.timestamp() > 0


def test_it_resolves_when_a_new_topology_shows_the_gpus_connected() -> None:
    c = Cluster()
    placed(c, pcie_links(8), [0, 4])
    c.topology(NODE, 50, hgx_links(8))
    [inc] = of_type(run(ordered(c)), KIND)
    assert inc.status == "resolved"
    assert inc.attributes["resolution"] == "the topology shows its GPUs NVLink-connected"


def test_it_waits_until_the_bindings_cover_the_request() -> None:
    """A 4-GPU pod: after three bindings (SYS pairs among them) nothing yet; the fourth
    opens it, naming all four."""
    c = Cluster()
    c.node(NODE, 0)
    c.topology(NODE, 0, pcie_links(8))
    c.pod(NODE, "train-0", 10, gpus=4)
    correlator = Correlator(config())
    out: list[Incident] = []
    for n, i in enumerate((0, 4, 5, 6)):
        c.bind(NODE, 11 + n, uuid(i), bus(i), ["train-0"], index=i)
    for ev in c.events[:6]:
        out.extend(correlator.ingest(ev))
    out.extend(correlator.advance(c.events[5].time.timestamp() + 1))
    assert of_type(out, KIND) == []
    out.extend(correlator.ingest(c.events[6]))
    out.extend(correlator.flush())
    [inc] = of_type(out, KIND)
    assert [g.index for g in inc.gpus] == [0, 4, 5, 6]


@pytest.mark.parametrize("topology_at", [0, 10.5, 12, 600])
def test_the_topology_before_or_after_the_pod_and_bindings_gives_the_same_incident(
    topology_at: float,
) -> None:
    def incident(at: float) -> Incident:
        c = Cluster()
        placed(c, pcie_links(8), [2, 5], topology_at=at)
        [inc] = of_type(run(ordered(c)), KIND)
        return inc

    first, other = incident(0), incident(topology_at)
    assert other.id == first.id
    assert (other.gpus, other.pods, other.attributes) == (first.gpus, first.pods, first.attributes)
    assert other.summary == first.summary


def test_bindings_before_the_pod_give_the_same_incident() -> None:
    c = Cluster()
    placed(c, pcie_links(8), [2, 5])
    early = Cluster()
    placed(early, pcie_links(8), [2, 5], pod_at=12, bind_at=10)
    # bindings before the pod is known: the core keeps the GPU's pods by key
    assert [i.id for i in of_type(run(ordered(early)), KIND)] == [
        i.id for i in of_type(run(ordered(c)), KIND)
    ]


def test_a_same_named_successor_is_a_new_incident() -> None:
    c = Cluster()
    placed(c, pcie_links(8), [0, 4])
    c.pod(NODE, "train-0", 100, op="deleted", gpus=2)
    c.pod(NODE, "train-0", 200, gpus=2, uid="uid-train-0-b")
    for i in (0, 4):
        c.bind(NODE, 201, uuid(i), bus(i), ["train-0"], index=i)
    incs = of_type(run(ordered(c)), KIND)
    assert len({i.id for i in incs}) == 2
    assert sorted(i.status for i in incs) == ["open", "resolved"]


def test_mig_instances_and_replicas_of_one_gpu_ask_no_link_question() -> None:
    mig = Cluster()
    mig.node(NODE, 0)
    mig.topology(NODE, 0, pcie_links(8))
    mig.pod(NODE, "infer", 10, gpus=2)
    for instance in (1, 2):
        ev = mig.bind(NODE, 11, uuid(0), bus(0), ["infer"], index=0)
        mig.events[-1] = msgspec.structs.replace(ev, gpu_instance=instance)
    assert of_type(run(ordered(mig)), KIND) == []

    sliced = Cluster()
    labels = {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "4"}
    sliced.node(NODE, 0, labels=labels)
    sliced.topology(NODE, 0, pcie_links(8))
    sliced.pod(NODE, "infer", 10, gpus=2)
    sliced.bind(NODE, 11, uuid(3), bus(3), ["infer", "other"], index=3)
    assert of_type(run(ordered(sliced)), KIND) == []
    # replicas of two GPUs on a time-sliced node: two GPUs, and their link
    sliced.bind(NODE, 12, uuid(7), bus(7), ["infer"], index=7)
    [inc] = of_type(run(ordered(sliced)), KIND)
    assert inc.attributes["links"] == "GPU3-GPU7:SYS"


def test_the_numa_check_is_configurable() -> None:
    """Two GPUs NVLink-connected across the sockets of an HGX board: nothing by
    default; a ticket naming the NUMA nodes with ``nvlink_cross_numa``."""
    c = Cluster()
    placed(c, hgx_links(8), [3, 4], numa=(0, 0, 0, 0, 1, 1, 1, 1))
    assert of_type(run(ordered(c)), KIND) == []
    [inc] = of_type(run(ordered(c), config(nvlink_cross_numa=True)), KIND)
    assert "different NUMA nodes" in inc.summary
    assert inc.attributes["numa"] == "GPU3:0,GPU4:1"


def test_severity_is_configurable() -> None:
    c = Cluster()
    placed(c, pcie_links(8), [0, 4])
    [inc] = of_type(run(ordered(c), config(severity={KIND: "page"})), KIND)
    assert inc.severity == "page"


def test_gpus_are_joined_to_the_topology_by_bus_id_before_index() -> None:
    """NVML's topology names bus ids: a binding with a stale index is placed by its bus
    id. Here the binding says index 1, the topology says that bus id is GPU4: the pair is
    GPU0-GPU4 (SYS), not GPU0-GPU1 (PIX)."""
    c = Cluster()
    c.node(NODE, 0)
    c.topology(NODE, 0, pcie_links(8), buses=tuple(bus(i) for i in range(8)))
    c.pod(NODE, "train-0", 10, gpus=2)
    c.bind(NODE, 11, uuid(0), bus(0), ["train-0"], index=0)
    c.bind(NODE, 11, uuid(4), bus(4), ["train-0"], index=1)
    [inc] = of_type(run(ordered(c)), KIND)
    assert inc.attributes["links"] == "GPU0-GPU4:SYS"


def test_nodes_of_one_board_share_their_topology_strings() -> None:
    """The state's topology is three interned strings: 1,000 HGX nodes hold one copy."""
    c = Cluster()
    for n in ("a", "b"):
        c.node(n, 0)
        c.topology(n, 1, hgx_links(8), numa=(0, 0, 0, 0, 1, 1, 1, 1))
    correlator = Correlator(config())
    for ev in c.events:
        correlator.ingest(ev)
    correlator.flush()
    a, b = (correlator.keys[key_of("c1", n)] for n in ("a", "b"))
    assert isinstance(a, NodeState)
    assert isinstance(b, NodeState)
    assert a.topology is not None
    assert b.topology is not None
    assert a.topology.links is b.topology.links
    assert a.topology.islands == "0-1-2-3-4-5-6-7"


def test_the_node_state_keeps_the_nvlink_islands_and_an_old_snapshot_restores() -> None:
    c = Cluster()
    c.node(NODE, 0)
    c.topology(NODE, 1, {**pcie_links(4, per_socket=2), (0, 1): "NV4", (2, 3): "NV4"})
    c.pod(NODE, "train-0", 2, gpus=2)
    for i in (1, 2):
        c.bind(NODE, 3, uuid(i), bus(i), ["train-0"], index=i)
    correlator = Correlator(config())
    for ev in c.events:
        correlator.ingest(ev)
    correlator.flush()
    state = correlator.keys[key_of("c1", NODE)]
    assert isinstance(state, NodeState)
    assert state.topology is not None
    assert state.topology.islands == "0-1 2-3"
    assert islands_of(state.topology) == ((0, 1), (2, 3))
    assert [k for k, t in state.pods.items() if t.multi] == ["ns/train-0"]
    assert state.multi_gpu is None
    assert len(state.incidents) == 1  # GPU1-GPU2 is a SYS pair across the two islands
    restored = decode_state(encode_state(state))
    assert restored == state
    # A snapshot written before these fields existed: the same state without them.
    fields = msgspec.to_builtins(state, builtin_types=(bytes,))
    for pod in fields["pods"].values():
        del pod["multi"]
    old = msgspec.msgpack.encode(
        {k: v for k, v in fields.items() if k not in ("topology", "multi_gpu")}
    )
    back = decode_state(old)
    assert isinstance(back, NodeState)
    assert back.topology is None
    assert back.multi_gpu is None
    assert [t.multi for t in back.pods.values()] == [0]


def test_a_snapshot_of_the_previous_release_keeps_its_multi_gpu_pods() -> None:
    """The previous release kept multi-GPU pods in ``NodeState.multi_gpu`` (by pod key),
    not on the track: restored, its pod is still judged when the topology comes, and its
    next update moves the entry onto the track (the same int: the same incident id)."""
    c = Cluster()
    c.node(NODE, 0)
    c.pod(NODE, "train-0", 1, gpus=2)
    for i in (1, 2):
        c.bind(NODE, 2, uuid(i), bus(i), ["train-0"], index=i)
    topology = {**pcie_links(4, per_socket=2), (0, 1): "NV4", (2, 3): "NV4"}
    c.topology(NODE, 3, topology)
    expected = of_type(run(c.events), "multi_gpu_pod_without_nvlink")
    assert len(expected) == 1
    correlator = Correlator(config())
    for ev in c.events[:-1]:  # everything before the topology
        correlator.ingest(ev)
    correlator.flush()
    state = correlator.keys[key_of("c1", NODE)]
    assert isinstance(state, NodeState)
    fields = msgspec.to_builtins(state, builtin_types=(bytes,))
    entry = fields["pods"]["ns/train-0"].pop("multi")
    fields["multi_gpu"] = {"ns/train-0": entry}  # the previous release's shape
    old = decode_state(msgspec.msgpack.encode(fields))
    assert isinstance(old, NodeState)
    assert old.pods["ns/train-0"].multi == 0
    restored = Correlator(config())
    restored.restore(old)
    got = list(restored.ingest(c.events[-1])) + restored.flush()
    found = of_type(got, "multi_gpu_pod_without_nvlink")
    assert [(i.id, i.status, i.pods) for i in found] == [(i.id, i.status, i.pods) for i in expected]
    c.pod(NODE, "train-0", 4, gpus=2, restarts=1)  # not routine: the full path
    restored.ingest(c.events[-1])
    restored.flush()
    assert old.multi_gpu is None
    assert old.pods["ns/train-0"].multi == entry
