"""The pod rules on a DRA node: a pod holding its GPU only through a claim is a GPU pod.

``host_oom_kill``, ``suspected_cuda_oom`` and ``gpu_node_not_ready`` track GPU pods; before
the claims counted, a claim-only pod (no ``nvidia.com/gpu`` request) was no GPU pod and
none of them saw it.
"""

from __future__ import annotations

from tests.core_helpers import final, run
from tests.factories import term
from tests.streams.core.test_dra_node import MIN, NODE, NS, POD, dra_node


def test_a_claim_pods_oom_kill_is_a_host_oom_kill() -> None:
    c = dra_node()
    c.dra_pod(10 * MIN, last=term(10 * MIN - 5, "OOMKilled", 137))
    c.tick(20 * MIN)
    incidents = final(run(c.events))
    kills = [i for i in incidents.values() if i.type == "host_oom_kill"]
    assert [(i.node, [f"{p.namespace}/{p.name}" for p in i.pods]) for i in kills] == [
        (NODE, [f"{NS}/{POD}"])
    ]


def test_a_claim_pods_crash_loop_is_a_suspected_cuda_oom() -> None:
    c = dra_node()
    for n in range(5):
        t = 10 * MIN + 60 * n
        c.dra_pod(t, last=term(t - 2, "Error", 1, "CUDA out of memory. Tried to allocate"))
    c.tick(30 * MIN)
    types = sorted(i.type for i in final(run(c.events)).values())
    assert types == ["suspected_cuda_oom"]


def test_a_dra_node_not_ready_under_a_claim_pod_pages() -> None:
    c = dra_node()
    c.node(NODE, 10 * MIN, capacity=0, alloc=0, ready="Unknown")
    c.tick(20 * MIN)
    incidents = final(run(c.events))
    pages = [i for i in incidents.values() if i.type == "gpu_node_not_ready"]
    assert [(i.node, i.severity) for i in pages] == [(NODE, "page")]
    assert [f"{p.namespace}/{p.name}" for p in pages[0].pods] == [f"{NS}/{POD}"]
