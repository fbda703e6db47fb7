"""Correlation keys: which records must meet in one worker (part of the topic contract).

Every raw record is keyed by its correlation key, and every raw topic has the
same partition count, so all signals about one node hash to the same partition
number of every topic and meet in the worker that owns it (DESIGN §4,
principle 3). Producers (the connectors) and the processor must agree on this
function byte for byte, which is why it lives with the schemas and not in
either of them.

* node-scoped records (pods, nodes, XIDs, GPU bindings, node Events): ``cluster/node``;
* cluster-scoped records (autoscaler decisions, pending pods, and the copies
  :func:`routed` makes): ``cluster``.

**Routing.** The cluster-scoped rules need facts that are node-scoped: a pending
GPU pod has no node (its records go to the cluster key anyway) until it is
scheduled, and from then on its records go to its node's key; the cross-source
GPU count compares running pods' requests with the pods dcgm-exporter binds to
GPUs, node by node. The cluster key may live on another worker than the node's,
so the *producer* sends those records twice: as they are, and a copy with
``scope = "cluster"`` keyed by the cluster (:func:`routed`). The replay does the
same, so live equals replay; a copy that is already in the input (a dump of the
raw topics) is a duplicate the engine drops.

Traps:

* changing this function, or the partition count of a running deployment,
  re-homes keys; it needs a fresh processor state, not a rolling upgrade;
* the copy keeps the original's id and time: the engine tells the two apart by
  the key (``key_node``), never by the id;
* only GPU pods, GPU nodes, pod-aware GPU bindings (not the kubelet's) and NVLink fabric
  XIDs (:data:`FABRIC_XIDS`, rare: Blackwell NVLink faults only) are copied: every copy
  lands on one partition (the cluster's), so what is copied must stay a small share of
  the stream.
"""

from __future__ import annotations

from typing import Final

import msgspec

from schemas.codec import AnyEvent
from schemas.events import GpuBindingEvent, NodeEvent, PodEvent, XidEvent

POD_RESOURCES: Final = "pod-resources"
"""The ``source`` of the kubelet's bindings (:attr:`GpuBindingEvent.source`)."""

FABRIC_XIDS: Final = frozenset(range(144, 150))
"""The NVLink5 XIDs a fault in a multi-node NVLink domain spreads as: 144 (SAW), 145
(RLW), 146 (TLW), 147 (TREX), 148 (NVLPW), 149 (NETIR). NVIDIA's catalog gives each of
them a remote impact (``Remote: PacketLoss``); 150 (MSE) is ``Local: Fatal; Remote:
None``, a fault of its GPU alone, and is not copied. Copied to the cluster key whatever
the node's labels (the producer does not know them): the rule there reads the node's
NVLink domain from the node copies, and ignores a node in none."""


def key_of(cluster: str, node: str = "") -> str:
    """The correlation key of a node (``cluster/node``) or of a cluster (``cluster``)."""
    return f"{cluster}/{node}" if node else cluster


def is_copy(event: AnyEvent) -> bool:
    """Is this the copy :func:`routed` made for the cluster key?"""
    return getattr(event, "scope", "node") == "cluster"


def key_node(event: AnyEvent) -> str:
    """The node part of the event's key: its node, or ``""`` for the cluster key."""
    node: str = getattr(event, "node", "")
    if node and getattr(event, "scope", "node") == "cluster":
        return ""
    return node


def correlation_key(event: AnyEvent) -> str:
    """``cluster/node`` for node-scoped events, ``cluster`` for cluster-scoped ones."""
    return key_of(event.cluster, key_node(event))


def routed(event: AnyEvent) -> tuple[AnyEvent, ...]:
    """The event, and its copy for the cluster key when the cluster-scoped rules need it."""
    if isinstance(event, PodEvent):
        wanted = bool(event.node) and bool(event.gpu_requests or event.gpu_share)
    elif isinstance(event, NodeEvent):
        wanted = bool(event.capacity)
    elif isinstance(event, GpuBindingEvent):
        # The cluster key's only binding reader is allocation_mismatch, which compares the
        # requests with what *DCGM* reports: the kubelet's own bindings (pod-resources) agree
        # with the requests by construction and would hide every DCGM outage it exists for.
        wanted = event.pods_known and event.source != POD_RESOURCES
    elif isinstance(event, XidEvent):
        wanted = event.code in FABRIC_XIDS and not event.sxid
    else:
        return (event,)
    if not wanted or event.scope == "cluster":
        return (event,)
    return (event, msgspec.structs.replace(event, scope="cluster"))
