"""``bench.cluster_share --why``: what the router sends the cluster key, and why.

One pod's life, its node's and its GPU's, routed as the producer routes them: each record
that reaches the cluster key is counted under what it told it, read from the records.
"""

from __future__ import annotations

from bench.cluster_share import Composition, measure, report
from tests.factories import Cluster

N = "gpu-node-01"


def test_each_record_on_the_cluster_key_is_counted_under_what_it_told_it() -> None:
    c = Cluster()
    c.node(N, 0, capacity=2, alloc=2)
    c.bind(N, 1, "GPU-a", "0000:18:00.0", [])
    c.pending("train-0", 2, gpus=1)
    c.pending("train-0", 3, gpus=1)  # the scheduler's same word again
    c.pod(N, "train-0", 4, phase="Pending", gpus=1)  # scheduled
    c.pod(N, "train-0", 5, gpus=1)  # running: holds its GPU
    c.pod(N, "train-0", 6, gpus=1)  # an update the cluster key does not hear of
    c.bind(N, 7, "GPU-a", "0000:18:00.0", ["train-0"])
    c.node(N, 8, capacity=2, alloc=2, ready="False")
    c.pod(N, "train-0", 9, gpus=1, phase="Succeeded")
    c.bind(N, 10, "GPU-a", "0000:18:00.0", [])
    composition = Composition()
    result = measure(iter(c.events), 6, composition)
    assert dict(composition.counts) == {
        ("node copy", "first of its node"): 1,
        ("node copy", "ready"): 1,
        ("binding copy", "first of its GPU"): 1,
        ("binding copy", "GPU bound"): 1,
        ("binding copy", "GPU freed"): 1,
        ("pending pod", "first of its pod"): 1,
        ("pending pod", "repeat of what the rules read"): 1,
        ("pod copy", "left pending (scheduled)"): 1,
        ("pod copy", "started holding GPUs"): 1,
        ("pod copy", "stopped holding GPUs (Succeeded)"): 1,
    }
    row = result["designs"]["(a) router"]
    assert row["cluster_key_events"] == sum(composition.counts.values())
    table = composition.table(row["engine_events"])
    assert "pod copy: started holding GPUs" in table
    assert "(a) router" in report(result, "test")
