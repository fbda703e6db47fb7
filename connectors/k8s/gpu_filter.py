"""The GPU-only filter, live (a connector that runs for months) and offline (a file).

Keeps GPU pods (by resource, share or DRA claim), GPU monitoring pods (``monitor`` set by
their labels: a crash-looping dcgm-exporter makes a node blind), GPU nodes, GPU claims, and
the Events that involve them or name a GPU resource, and forgets a pod or node
``forget_after`` after its deletion (remembering every name would leak).

Traps: forget late (Events about a pod keep coming after its DELETED; the API server keeps
them an hour, the default here is two); time is the events' own, so tests are
deterministic; a name re-added before its forget time is live again (a recreated
StatefulSet pod); pods and nodes must be seen before their Events (an Event about an unseen
pod is dropped unless it names a GPU resource); only the kubelet gives an Event's host, so
:meth:`GpuFilter.place` puts a controller's Event about a pod on the pod's node.
In full: docs/connectors.md, design notes: connectors/k8s/gpu_filter.py.
"""

from __future__ import annotations

import heapq
from datetime import datetime, timedelta

import msgspec

from connectors.k8s.dra import ClaimTemplate, TaintRule, is_gpu_claim
from connectors.k8s.slim import DEFAULT_CONFIG, SlimConfig, is_gpu_node, is_gpu_pod
from schemas.events import (
    GpuBindingEvent,
    KubeEvent,
    NodeEvent,
    PodEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
)

FORGET_AFTER = timedelta(hours=2)


class GpuFilter:
    """Keeps GPU pods, GPU nodes and the Events involving them; forgets deleted names later."""

    def __init__(
        self, config: SlimConfig = DEFAULT_CONFIG, forget_after: timedelta = FORGET_AFTER
    ) -> None:
        self._config = config
        self._forget_after = forget_after
        self._names: dict[str, datetime | None] = {}
        """``pod:ns/name`` or ``node:name`` -> when to forget it (None while it exists)."""
        self._pod_nodes: dict[str, str] = {}
        """``pod:ns/name`` -> its node, forgotten with its name (:meth:`place`)."""
        self._due: list[tuple[datetime, str]] = []
        """A heap: event times are not monotonic (listed objects carry their own times)."""
        self._slice_nodes: set[str] = set()
        """Nodes a GPU driver's ResourceSlice names: GPU nodes with no GPU capacity (DRA)
        and perhaps no GPU label, as the router (:class:`schemas.keys.Router`) takes them.
        Trap: a node seen before its slice is kept from its next changed record on (the
        connector lists slices before nodes)."""

    def __len__(self) -> int:
        return len(self._names)

    def _remember(self, key: str, event: PodEvent | NodeEvent) -> None:
        if event.op == "deleted":
            # An object stamped near the end of time (a condition's lastTransitionTime of
            # 9999-12-31, found by the ingest fuzz test) must not overflow: forget never.
            room = datetime.max.replace(tzinfo=event.time.tzinfo) - event.time
            due = event.time + min(self._forget_after, room)
            self._names[key] = due
            heapq.heappush(self._due, (due, key))
        else:
            self._names[key] = None

    def _purge(self, now: datetime) -> None:
        while self._due and self._due[0][0] <= now:
            due, key = heapq.heappop(self._due)
            if self._names.get(key) == due:
                del self._names[key]
                self._pod_nodes.pop(key, None)

    def keep(
        self,
        event: PodEvent
        | NodeEvent
        | KubeEvent
        | ResourceSliceEvent
        | ResourceClaimEvent
        | GpuBindingEvent
        | ClaimTemplate
        | TaintRule,
    ) -> bool:
        """Whether ``event`` belongs in the GPU-only stream (and remember GPU pods/nodes).

        Slices and DRA bindings are GPU drivers' only (the others give none); claims are
        kept when they ask a GPU class or were allocated a GPU driver's device; the DRA
        join's cache records (templates, rules) are never published.
        """
        if isinstance(event, ClaimTemplate | TaintRule):
            return False
        if isinstance(event, ResourceSliceEvent):
            if event.node and event.op != "deleted":
                self._slice_nodes.add(event.node)
            return True
        if isinstance(event, GpuBindingEvent):
            return True
        if isinstance(event, ResourceClaimEvent):
            return is_gpu_claim(event, self._config.gpu_drivers)
        self._purge(event.time)
        if isinstance(event, PodEvent):
            if event.monitor or is_gpu_pod(event):
                key = f"pod:{event.namespace}/{event.name}"
                self._remember(key, event)
                if event.node:
                    self._pod_nodes[key] = event.node
                return True
            return False
        if isinstance(event, NodeEvent):
            dra = event.node in self._slice_nodes
            if event.op == "deleted":
                self._slice_nodes.discard(event.node)
            if is_gpu_node(event) or dra:
                self._remember(f"node:{event.node}", event)
                return True
            return False
        ref = event.involved
        if ref.kind == "Pod" and f"pod:{ref.namespace}/{ref.name}" in self._names:
            return True
        if event.node and f"node:{event.node}" in self._names:
            return True
        config = self._config
        return any(name in event.message for name in config.gpu_resources) or any(
            prefix in event.message for prefix in config.gpu_prefixes
        )

    def place(self, event: KubeEvent) -> KubeEvent:
        """``event`` on the node of the GPU (or monitoring) pod it is about, when its source
        named none.

        Why: an Event's node is its source's host, and only the kubelet gives one. The
        controllers' Events about a pod (the device taint and node taint eviction
        controllers' ``DeviceTaintManagerEviction`` / ``TaintManagerEviction``) would
        otherwise reach the cluster key, not the node whose pods the core follows. Trap: a
        pending pod has no node, so the scheduler's Events about it stay cluster-scoped,
        where the cluster rules read them.
        """
        ref = event.involved
        if event.node or ref.kind != "Pod":
            return event
        node = self._pod_nodes.get(f"pod:{ref.namespace}/{ref.name}")
        return event if node is None else msgspec.structs.replace(event, node=node)
