"""A node update that repeats labels, taints and counts (a node's heartbeat) writes
nothing: the derived fields (sharing, planned disruption, NVLink domain, unallocatable,
Ready, the GPU counts) must still follow every change, made in place or back again.
Asserted on the facts each update states, so the compiled core and the sources are
held to the same answers."""

from __future__ import annotations

from schemas.codec import AnyEvent
from schemas.events import Taint
from schemas.keys import Router
from streams.config import default_core_config
from streams.core import Correlator
from streams.core.state import NodeState
from tests.factories import Cluster

N = "gpu-node-01"


def _node_state(events: list[AnyEvent]) -> NodeState:
    correlator = Correlator(default_core_config())
    router = Router()
    for ev in events:
        for routed in router.route(ev):
            correlator.ingest(routed)
    correlator.flush()
    state = correlator.keys[f"c1/{N}"]
    assert isinstance(state, NodeState)
    return state


CORDON = Taint(key="node.kubernetes.io/unschedulable", value="", effect="NoSchedule")


def test_each_node_update_is_read_again_whatever_came_before() -> None:
    """Labels changed in place, a taint added then removed, counts unchanged then not:
    every derived field follows the latest update, through repeats of each."""
    c = Cluster()
    shared = {"nvidia.com/gpu.sharing-strategy": "time-slicing"}
    clique = {"nvidia.com/gpu.clique": "cluster-a.1"}
    c.node(N, 0)
    c.node(N, 1)
    assert (_node_state(c.events).sharing, _node_state(c.events).clique) == ("", "")
    c.node(N, 2, labels=shared)
    c.node(N, 3, labels=shared)
    assert _node_state(c.events).sharing == "time-slicing"
    c.node(N, 4, labels={"nvidia.com/gpu.replicas": "4"})
    assert _node_state(c.events).sharing == "time-slicing"
    c.node(N, 5, labels={"nvidia.com/gpu.replicas": "1"})
    assert _node_state(c.events).sharing == ""
    c.node(N, 6, labels=clique, taints=(CORDON,))
    c.node(N, 7, labels=clique, taints=(CORDON,))
    state = _node_state(c.events)
    assert state.clique == "cluster-a.1"
    assert "cordoned" in state.disruption
    c.node(N, 8, labels=clique)
    state = _node_state(c.events)
    assert state.disruption == ""
    assert state.clique == "cluster-a.1"
    c.node(N, 9)
    assert _node_state(c.events).clique == ""


def test_counts_and_readiness_repeated_then_changed() -> None:
    c = Cluster()
    c.node(N, 0, capacity=8, alloc=8)
    c.node(N, 1, capacity=8, alloc=8)
    state = _node_state(c.events)
    assert (state.capacity, state.allocatable, state.ready) == (8, 8, "True")
    c.node(N, 2, capacity=8, alloc=7)
    c.node(N, 3, capacity=8, alloc=7, ready="False")
    c.node(N, 4, capacity=8, alloc=7, ready="False")
    state = _node_state(c.events)
    assert (state.capacity, state.allocatable, state.ready) == (8, 7, "False")
    assert state.degraded_since is not None
    c.node(N, 5, capacity=8, alloc=8)
    state = _node_state(c.events)
    assert (state.allocatable, state.ready, state.degraded_since) == (8, "True", None)


def test_mig_single_strategy_is_read_on_every_update() -> None:
    """A node turned to MIG's single strategy in place: the same capacity, new labels."""
    c = Cluster()
    single = {
        "nvidia.com/mig.strategy": "single",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb",
        "nvidia.com/gpu.count": "1",
    }
    c.node(N, 0, capacity=7, alloc=6)
    assert _node_state(c.events).resources is None
    c.node(N, 1, capacity=7, alloc=6, labels=single)
    resources = _node_state(c.events).resources
    assert resources is not None
    assert resources.unallocatable == "1 of 7 MIG 1g.5gb instances of 1 GPU"
    c.node(N, 2, capacity=7, alloc=6)
    resources = _node_state(c.events).resources
    assert resources is not None
    assert resources.unallocatable == ""
