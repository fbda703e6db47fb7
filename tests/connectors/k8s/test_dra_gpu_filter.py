"""The GPU filter keeps DRA nodes: no ``nvidia.com/gpu`` at all, their GPUs in slices.

Before, a node was a GPU node only by GPU capacity, so a DRA node (the GPU operator's DRA
mode runs no device plugin) never reached the core: its NotReady, its removal and its
pods' node were unknown there.
"""

from __future__ import annotations

import copy
from typing import Any

from connectors.k8s.gpu_filter import GpuFilter
from schemas.events import NodeEvent
from tests.connectors.k8s.test_dra_join import load, slim
from tests.k8s_helpers import node

DRA_NODE = "gpu-a100-node-01"
"""The node of the cited slice (tests/data/dra/resourceslice_gpu_node.json)."""


def dra_node(*, present: bool) -> dict[str, Any]:
    obj = node(DRA_NODE, "700", gpus=0)
    labels = obj["metadata"]["labels"]
    if present:
        labels["nvidia.com/gpu.present"] = "true"
    return obj


def test_a_dra_node_labelled_gpu_present_is_kept() -> None:
    event = slim(dra_node(present=True))
    assert isinstance(event, NodeEvent)
    assert event.capacity == {}
    assert GpuFilter().keep(event)


def test_a_dra_node_nfd_marks_nvidia_is_kept_from_its_first_record() -> None:
    """NFD with NVIDIA's DRA driver and no GPU operator: ``pci-10de.present`` (10de is
    NVIDIA's PCI vendor id; the chart schedules the kubelet plugin on it) is the node's
    one GPU label. It is kept in the record, so the router reads it too."""
    obj = dra_node(present=False)
    obj["metadata"]["labels"]["feature.node.kubernetes.io/pci-10de.present"] = "true"
    event = slim(obj)
    assert isinstance(event, NodeEvent)
    assert event.labels["feature.node.kubernetes.io/pci-10de.present"] == "true"
    assert GpuFilter().keep(event)


def test_a_dra_node_without_the_label_is_kept_once_a_gpu_slice_names_it() -> None:
    gpu_filter = GpuFilter()
    bare = slim(dra_node(present=False))
    assert not gpu_filter.keep(bare), "no capacity, no label, no slice: not a GPU node"
    assert gpu_filter.keep(slim(load("resourceslice_gpu_node")))
    assert gpu_filter.keep(slim(dra_node(present=False)))


def test_a_node_without_gpus_stays_out_and_a_deleted_dra_node_is_forgotten() -> None:
    gpu_filter = GpuFilter()
    other = copy.deepcopy(dra_node(present=False))
    other["metadata"]["name"] = "cpu-node-1"
    gpu_filter.keep(slim(load("resourceslice_gpu_node")))
    assert not gpu_filter.keep(slim(other))
    gone = slim(dra_node(present=False), op="deleted")
    assert gpu_filter.keep(gone), "the deletion of a GPU node is news"
    assert not gpu_filter.keep(slim(dra_node(present=False), minute=1))
