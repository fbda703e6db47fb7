"""A GPU node's pool label is kept (the fleet view groups GPUs and incidents by pool).

The labels are :data:`schemas.wellknown.POOL_LABELS` (Karpenter's NodePool, EKS, GKE, AKS,
eksctl). The router copies a node to the cluster key when its view changes; a pool label
is not in that view, so a pool change alone copies nothing.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from connectors.k8s.slim import GPU_LABELS, slim_object
from schemas.events import NodeEvent
from schemas.keys import Router
from schemas.wellknown import POOL_LABELS
from tests import paths

EKS_NODE = paths.DATA / "writeback" / "node_eks_accelerated_hardware_false.json"


def slimmed(obj: dict[str, Any]) -> NodeEvent:
    # The write-back file leaves resourceVersion out (its readers need none); ids do.
    obj["metadata"].setdefault("resourceVersion", "101")
    event = slim_object(obj, cluster="c1")
    assert isinstance(event, NodeEvent)
    return event


def test_every_pool_label_is_kept_on_a_node() -> None:
    assert set(POOL_LABELS) <= set(GPU_LABELS)
    obj = json.loads(EKS_NODE.read_text())
    assert slimmed(obj).labels["karpenter.sh/nodepool"] == "gpu-p5"
    for label in POOL_LABELS:
        obj["metadata"]["labels"] = {"nvidia.com/gpu.present": "true", label: "pool-a"}
        assert slimmed(obj).labels[label] == "pool-a"
    assert "karpenter.sh/capacity-type" not in slimmed(obj).labels, "only the pool's own"


def test_a_pool_label_change_alone_is_not_copied_to_the_cluster_key() -> None:
    obj = json.loads(EKS_NODE.read_text())
    obj["status"]["capacity"] = {"nvidia.com/gpu": "8"}  # a GPU node, as the router tells them
    first = slimmed(obj)
    router = Router()
    assert len(router.route(first)) == 2, "a node's first record is copied"
    moved = msgspec.structs.replace(
        first, id=first.id + "-2", labels={**first.labels, "karpenter.sh/nodepool": "gpu-p5e"}
    )
    assert router.route(moved) == (moved,)
