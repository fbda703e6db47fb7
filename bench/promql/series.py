"""An event stream as the incumbents would have scraped it: kube-state-metrics and dcgm-exporter
series, sampled every 30 s, written as OpenMetrics text for ``promtool`` to backfill.

The incumbent stack sees only what two exporters expose at the instant Prometheus scrapes them, so
this module replays the stream into the state each exporter holds (the API objects; the GPUs, their
pods and the last XID) and writes it at every scrape instant: what happens and is undone between two
scrapes is lost, as in production. Metric and label names are kube-state-metrics' and
dcgm-exporter's own.

Traps: ``kube_pod_status_phase`` is 0 (not absent) for the other phases; a restarted container's
terminated-reason series is gone by the next scrape; ``DCGM_FI_DEV_XID_ERRORS`` is a last-value
gauge that never resets; empty labels are omitted, as Prometheus drops them; text has no stale
markers, so the lookback is just over one interval; cluster-scoped copies are skipped; MIG instances
fold into their parent. Each series, with its source: bench/README.md, design notes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final, TextIO

from schemas.events import (
    ContainerStatus,
    Event,
    GpuBindingEvent,
    NodeEvent,
    PodEvent,
    XidEvent,
)

SCRAPE_SECONDS: Final = 30.0
"""Prometheus' scrape interval for both exporters (the kube-prometheus-stack default)."""
LOOKBACK_SECONDS: Final = 45.0
"""``--query.lookback-delta`` for the server: 1.5 scrapes (see the module's traps)."""
TAIL_SECONDS: Final = 15 * 60.0
"""How long the exporters keep being scraped after the last event, so a ``for:`` can elapse."""

PHASES: Final = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
POD_REASONS: Final = ("NodeLost", "Evicted", "UnexpectedAdmissionError")
"""kube-state-metrics' ``podStatusReasons`` (``internal/store/pod.go``; newer releases add more)."""
CONDITION_STATUSES: Final = ("true", "false", "unknown")
KSM_LABELS: Final = (("job", "kube-state-metrics"), ("instance", "kube-state-metrics:8080"))
DEFAULT_MODEL: Final = "NVIDIA H100 80GB HBM3"

Labels = tuple[tuple[str, str], ...]
"""A series' labels, sorted by name, empty values left out."""


@dataclass(frozen=True)
class Family:
    """One metric family: OpenMetrics name, type and help (a counter's samples end ``_total``)."""

    name: str
    type: str
    help: str

    @property
    def sample_name(self) -> str:
        return f"{self.name}_total" if self.type == "counter" else self.name


Sample = tuple[Family, Labels, float]
"""One series' value at a scrape."""


def _f(name: str, help: str, type: str = "gauge") -> Family:
    return Family(name, type, help)


POD_PHASE = _f("kube_pod_status_phase", "The pods current phase.")
POD_CREATED = _f("kube_pod_created", "Unix creation timestamp")
POD_INFO = _f("kube_pod_info", "Information about pod.")
POD_OWNER = _f("kube_pod_owner", "Information about the Pod's owner.")
POD_REASON = _f("kube_pod_status_reason", "The pod status reasons")
REQUESTS = _f(
    "kube_pod_container_resource_requests",
    "The number of requested request resource by a container.",
)
RESTARTS = _f(
    "kube_pod_container_status_restarts",
    "The number of container restarts per container.",
    "counter",
)
TERMINATED = _f(
    "kube_pod_container_status_terminated_reason",
    "Describes the reason the container is currently in terminated state.",
)
LAST_TERMINATED = _f(
    "kube_pod_container_status_last_terminated_reason",
    "Describes the last reason the container was in terminated state.",
)
CAPACITY = _f("kube_node_status_capacity", "The capacity for different resources of a node.")
ALLOCATABLE = _f(
    "kube_node_status_allocatable",
    "The allocatable for different resources of a node that are available for scheduling.",
)
CONDITION = _f("kube_node_status_condition", "The condition of a cluster node.")
XID = _f("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.")
TEMP = _f("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).")
FAMILIES: Final = (
    POD_PHASE,
    POD_CREATED,
    POD_INFO,
    POD_OWNER,
    POD_REASON,
    REQUESTS,
    RESTARTS,
    TERMINATED,
    LAST_TERMINATED,
    CAPACITY,
    ALLOCATABLE,
    CONDITION,
    XID,
    TEMP,
)

_NOT_LABEL = re.compile(r"[^a-zA-Z0-9_]")


def resource_label(resource: str) -> str:
    """kube-state-metrics' spelling of a resource name: ``nvidia.com/gpu`` -> ``nvidia_com_gpu``."""
    return _NOT_LABEL.sub("_", resource)


def nvml_bus_id(canonical: str) -> str:
    """NVML's spelling of a canonical bus id: ``0000:9b:00.0`` -> ``00000000:9B:00.0``."""
    if not canonical:
        return ""
    domain, rest = canonical.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"


def labels(**values: str) -> Labels:
    """Sorted labels, the empty ones left out (as Prometheus stores them)."""
    return tuple(sorted((k, v) for k, v in values.items() if v))


@dataclass
class _Pod:
    event: PodEvent
    created: float


@dataclass
class _Gpu:
    node: str
    uuid: str
    bus: str
    index: int | None
    pod: tuple[str, str, str] = ("", "", "")
    """(namespace, name, container) dcgm-exporter puts on the GPU's series."""
    last_xid: int = 0
    number: int = 0
    """The ``gpu`` label when the index is unknown: the order it was first seen on its node."""
    version: int = 0
    """Bumped on every change: its samples are rebuilt then."""


@dataclass
class ExporterState:
    """What kube-state-metrics and dcgm-exporter hold at one instant."""

    pods: dict[tuple[str, str], _Pod] = field(default_factory=dict)
    nodes: dict[str, NodeEvent] = field(default_factory=dict)
    gpus: dict[tuple[str, str], _Gpu] = field(default_factory=dict)
    """By (node, GPU key): the uuid, else ``bus:<id>``, else ``index:<n>``."""
    xids_seen: int = 0
    """XID records applied (each occurrence, all sources)."""
    _by_node: dict[str, list[_Gpu]] = field(default_factory=dict)
    _cache: dict[tuple[str, ...], tuple[object, list[Sample]]] = field(default_factory=dict)
    _tokens: dict[tuple[str, str], tuple[int, NodeEvent | None]] = field(default_factory=dict)
    keep: Callable[[Family, Labels], bool] | None = None
    """Which series to expose (None: all); :mod:`bench.promql.selection` says why fewer."""

    def apply(self, event: Event) -> None:
        """Apply one event; a ``scope="cluster"`` copy is the same object again: ignored."""
        if isinstance(event, PodEvent) and event.scope == "node":
            self._pod(event)
        elif isinstance(event, NodeEvent) and event.scope == "node":
            if event.op == "deleted":
                # Its dcgm-exporter went with it: its GPUs' series end too.
                self.nodes.pop(event.node, None)
                if self._by_node.pop(event.node, None):
                    self.gpus = {k: g for k, g in self.gpus.items() if k[0] != event.node}
            else:
                self.nodes[event.node] = event
        elif isinstance(event, GpuBindingEvent) and event.scope == "node":
            self._binding(event)
        elif isinstance(event, XidEvent):
            self.xids_seen += 1
            gpu = self._gpu(event.node, event.gpu_uuid, event.pci_bus_id, event.gpu_index)
            gpu.last_xid = event.code
            gpu.version += 1

    def _pod(self, event: PodEvent) -> None:
        key = (event.namespace, event.name)
        if event.op == "deleted":
            self.pods.pop(key, None)
            return
        old = self.pods.get(key)
        if event.created_at is not None:
            created = event.created_at.timestamp()
        elif old is not None and old.event.uid == event.uid:
            created = old.created
        else:
            created = event.time.timestamp()
        self.pods[key] = _Pod(event, created)

    def _find(self, node: str, uuid: str, bus: str, index: int | None) -> _Gpu | None:
        for gpu in self._by_node.get(node, ()):
            if (uuid and gpu.uuid == uuid) or (bus and gpu.bus == bus):
                return gpu
            if not uuid and not bus and index is not None and gpu.index == index:
                return gpu
        return None

    def _gpu(self, node: str, uuid: str, bus: str, index: int | None) -> _Gpu:
        gpu = self._find(node, uuid, bus, index)
        if gpu is None:
            on_node = self._by_node.setdefault(node, [])
            gpu = _Gpu(node, uuid, bus, index, number=len(on_node))
            key = uuid or (f"bus:{bus}" if bus else f"index:{index}")
            self.gpus[(node, key)] = gpu
            on_node.append(gpu)
        gpu.uuid = gpu.uuid or uuid
        gpu.bus = gpu.bus or bus
        gpu.index = gpu.index if gpu.index is not None else index
        gpu.version += 1
        return gpu

    def _binding(self, event: GpuBindingEvent) -> None:
        gpu = self._gpu(event.node, event.gpu_uuid, event.pci_bus_id, event.gpu_index)
        if event.pods_known:
            first = event.pods[0] if event.pods else None
            gpu.pod = (first.namespace, first.name, first.container) if first else ("", "", "")
            gpu.version += 1

    def samples(self) -> Iterator[Sample]:
        """Every series both exporters would expose now, with its value."""
        for built in self.sample_lists():
            yield from built

    def sample_lists(self) -> Iterator[list[Sample]]:
        """:meth:`samples` by object: one list per pod, node and GPU. A list is built once
        per version of its object (most scrapes repeat the last one's), so the same list
        comes back until the object changes; it is forgotten once the object is gone."""
        cache: dict[tuple[str, ...], tuple[object, list[Sample]]] = {}
        keep = self.keep

        def cached(key: tuple[str, ...], token: object, make: Iterable[Sample]) -> list[Sample]:
            hit = self._cache.get(key)
            if hit is not None and hit[0] is token:
                built = hit[1]
            elif keep is None:
                built = list(make)
            else:
                built = [sample for sample in make if keep(sample[0], sample[1])]
            cache[key] = (token, built)
            return built

        for key, pod in self.pods.items():
            yield cached(("pod", *key), pod, _pod_samples(pod))
        for name, node_event in self.nodes.items():
            yield cached(("node", name), node_event, _node_samples(node_event))
        for (node_name, gpu_key), gpu in self.gpus.items():
            node = self.nodes.get(node_name)
            # A new token whenever the GPU or its node's object changes.
            token = self._tokens.get((node_name, gpu_key))
            if token is None or token[0] != gpu.version or token[1] is not node:
                token = (gpu.version, node)
                self._tokens[(node_name, gpu_key)] = token
            yield cached(("gpu", node_name, gpu_key), token, _gpu_samples(gpu, node))
        self._cache = cache


def _pod_samples(pod: _Pod) -> Iterator[Sample]:
    e = pod.event
    ids = {"namespace": e.namespace, "pod": e.name, "uid": e.uid, **dict(KSM_LABELS)}
    for phase in PHASES:
        yield POD_PHASE, labels(**ids, phase=phase), float(e.phase == phase)
    yield POD_CREATED, labels(**ids), pod.created
    yield (
        POD_INFO,
        labels(**ids, node=e.node, created_by_kind=e.owner_kind, created_by_name=e.owner_name),
        1.0,
    )
    if e.owner_kind:
        owner = {"owner_kind": e.owner_kind, "owner_name": e.owner_name}
        yield POD_OWNER, labels(**ids, **owner, owner_is_controller="true"), 1.0
    for reason in POD_REASONS:
        yield POD_REASON, labels(**ids, reason=reason), float(e.reason == reason)
    first = e.containers[0].name if e.containers else "main"
    for resource, count in e.gpu_requests.items():
        yield (
            REQUESTS,
            labels(
                **ids,
                container=first,
                node=e.node,
                resource=resource_label(resource),
                unit="integer",
            ),
            float(count),
        )
    for status in e.containers:
        yield from _container_samples(ids, status)


def _container_samples(ids: dict[str, str], status: ContainerStatus) -> Iterator[Sample]:
    yield RESTARTS, labels(**ids, container=status.name), float(status.restart_count)
    if status.terminated is not None and status.terminated.reason:
        reason = status.terminated.reason
        yield TERMINATED, labels(**ids, container=status.name, reason=reason), 1.0
    if status.last_terminated is not None and status.last_terminated.reason:
        reason = status.last_terminated.reason
        yield LAST_TERMINATED, labels(**ids, container=status.name, reason=reason), 1.0


def _node_samples(node: NodeEvent) -> Iterator[Sample]:
    ksm = dict(KSM_LABELS)
    for family, resources in ((CAPACITY, node.capacity), (ALLOCATABLE, node.allocatable)):
        for resource, count in resources.items():
            resource_labels = labels(
                **ksm, node=node.node, resource=resource_label(resource), unit="integer"
            )
            yield family, resource_labels, float(count)
    for condition in node.conditions:
        for status in CONDITION_STATUSES:
            yield (
                CONDITION,
                labels(**ksm, node=node.node, condition=condition.type, status=status),
                float(condition.status.lower() == status),
            )


def _gpu_samples(gpu: _Gpu, node: NodeEvent | None) -> Iterator[Sample]:
    # The exporter always knows NVML's index; a GPU whose index no event gave is numbered.
    index = gpu.index if gpu.index is not None else gpu.number
    model = (node.labels.get("nvidia.com/gpu.product", "") if node else "") or DEFAULT_MODEL
    namespace, pod, container = gpu.pod
    gpu_labels = labels(
        job="dcgm-exporter",
        instance=f"{gpu.node}:9400",
        gpu=str(index),
        UUID=gpu.uuid,
        pci_bus_id=nvml_bus_id(gpu.bus),
        device=f"nvidia{index}",
        modelName=model.replace("-", " "),
        Hostname=gpu.node,
        namespace=namespace,
        pod=pod,
        container=container,
    )
    yield XID, gpu_labels, float(gpu.last_xid)
    yield TEMP, gpu_labels, 40.0


@dataclass
class Scraped:
    """The sampled series of one stream: by family, by labels, ``(unix seconds, value)``."""

    series: dict[Family, dict[Labels, list[tuple[float, float]]]]
    first: float
    """First scrape instant (Unix seconds, a multiple of the scrape interval)."""
    last: float
    """Last scrape instant."""
    last_event: float
    """Event time of the last event."""
    xids: int
    """XID records in the stream (every occurrence, every source)."""
    xids_visible: int
    """How many times a scrape saw a GPU's gauge change to a non-zero code."""

    def sample_count(self) -> int:
        return sum(len(points) for fam in self.series.values() for points in fam.values())


def scrape(
    events: Iterable[Event],
    *,
    cluster: str = "",
    interval: float = SCRAPE_SECONDS,
    tail: float = TAIL_SECONDS,
    keep: Callable[[Family, Labels], bool] | None = None,
) -> Scraped:
    """Replay ``events`` (any order: sorted here, stably) and sample the exporters every
    ``interval`` seconds, from the first event's interval to ``tail`` after the last event.

    ``cluster`` keeps that cluster's events only (empty: every event; the caller makes sure
    the stream holds one). A scrape at instant ``t`` sees every event with time ``<= t``.
    ``keep`` chooses the series to store (None: every series the exporters expose; a
    :meth:`bench.promql.selection.Selection.wants` stores only those a rule can read). Trap:
    ``xids_visible`` counts the XID gauge's stored series, so it is 0 if ``keep`` drops them.
    """
    ordered = sorted((e for e in events if not cluster or e.cluster == cluster), key=_event_time)
    if not ordered:
        raise ValueError("no events to scrape" + (f" in cluster {cluster!r}" if cluster else ""))
    state = ExporterState(keep=keep)
    series: dict[Family, dict[Labels, list[tuple[float, float]]]] = {f: {} for f in FAMILIES}
    first = math.floor(ordered[0].time.timestamp() / interval) * interval
    last_event = ordered[-1].time.timestamp()
    last = math.ceil((last_event + tail) / interval) * interval
    position = 0
    visible = 0
    shown: dict[Labels, float] = {}
    # Each sample list's series lists, resolved once per list (the list is kept alive
    # beside them, so its id is not reused while the entry exists).
    bound: dict[int, tuple[list[Sample], list[list[tuple[float, float]]]]] = {}
    instant = first
    while instant <= last:
        while position < len(ordered) and ordered[position].time.timestamp() <= instant:
            state.apply(ordered[position])
            position += 1
        seen: dict[int, tuple[list[Sample], list[list[tuple[float, float]]]]] = {}
        for built in state.sample_lists():
            entry = bound.get(id(built))
            if entry is None or entry[0] is not built:
                targets = [series[fam].setdefault(lab, []) for fam, lab, _ in built]
                entry = (built, targets)
            seen[id(built)] = entry
            for (family, sample_labels, value), target in zip(built, entry[1], strict=True):
                target.append((instant, value))
                if family is XID:
                    identity = tuple(kv for kv in sample_labels if kv[0] in _GPU_IDENTITY)
                    if value and shown.get(identity) != value:
                        visible += 1
                    shown[identity] = value
        bound = seen
        instant += interval
    return Scraped(
        series={f: s for f, s in series.items() if s},
        first=first,
        last=last,
        last_event=last_event,
        xids=state.xids_seen,
        xids_visible=visible,
    )


_GPU_IDENTITY: Final = ("Hostname", "UUID", "gpu")


def _event_time(event: Event) -> datetime:
    return event.time


def escape(value: str) -> str:
    """A label value quoted for the text formats (backslash, double quote, newline)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(int(value)) if value.is_integer() else repr(value)


def write_openmetrics(scraped: Scraped, out: TextIO) -> int:
    """Write ``scraped`` as OpenMetrics text (families contiguous, each series in time order,
    timestamps in seconds, ``# EOF`` last): what ``promtool tsdb create-blocks-from
    openmetrics`` reads. Returns the number of samples written."""
    written = 0
    for family, by_labels in scraped.series.items():
        out.write(f"# TYPE {family.name} {family.type}\n# HELP {family.name} {family.help}\n")
        for sample_labels, points in by_labels.items():
            body = ",".join(f'{k}="{escape(v)}"' for k, v in sample_labels)
            prefix = f"{family.sample_name}{{{body}}} "
            for instant, value in points:
                out.write(f"{prefix}{_number(value)} {_number(instant)}\n")
            written += len(points)
    out.write("# EOF\n")
    return written
