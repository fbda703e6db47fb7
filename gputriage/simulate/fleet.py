"""The simulated fleet, its record builders and the event loop.

Background draws, one per time slot: a routine update or the start of a scenario (a
generator of events and delays), whose events are emitted at their own due times so a
story keeps its timings however many run at once; records of one moment follow each other
(:meth:`Fleet._burst`). The builders of :mod:`gputriage.demo.events` make most records;
the three hot ones (pod, node, binding updates, ~96 % of the stream) are built here from
the struct, since the shared builders cost too much at this volume: keep them in step by
hand.

Traps, all about the bytes being a function of the seed: keep every rng draw in its order;
keep ids and the start time (part of cached file names); never draw to write ground truth;
bump :data:`gputriage.simulate.spec.GENERATOR_VERSION` if the bytes change.
docs/replay.md, design notes: the simulated fleet.
"""

from __future__ import annotations

import bisect
import heapq
import uuid
from collections import Counter, deque
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from random import Random

from gputriage.demo.events import (
    GPU,
    device_name,
    gpu_request,
    hgx_links,
    kube_event,
    pcie_links,
    termination,
    topology_event,
    xid_event,
)
from gputriage.simulate.autoscaler import node_groups
from gputriage.simulate.catalogue import (
    ALNUM,
    APP_CODES,
    CLUSTERS,
    NODE_LAYOUTS,
    NOT_READY,
    NOT_READY_TAINTS,
    PCIE_PRODUCT,
    PCIE_SHARE,
    PRESSURE,
    PRODUCTS,
    READY,
    SCHEDULED,
    TAINTS,
    TEMPLATES,
    XID_TEXT,
)
from gputriage.simulate.model import Cluster, Gpu, Node, Pod, Workload
from gputriage.simulate.nvlink_truth import NvlinkTruth
from gputriage.simulate.spec import Step, StreamSpec
from gputriage.simulate.truth import TruthRecorder
from schemas.codec import AnyEvent
from schemas.events import (
    GpuBindingEvent,
    KubeEvent,
    NodeEvent,
    PodEvent,
    PodRef,
    XidEvent,
)
from schemas.jsonschema import wire_tag

SCRAPE_INTERVAL = 30.0
"""dcgm-exporter's collection interval and the usual scrape interval, 30 s: NVIDIA's
Prometheus example (https://docs.nvidia.com/datacenter/dcgm/latest/learn/
getting-started-for-system-administrators/configure-prometheus-for-dcgm-exporter.html,
``scrape_interval: 30s``) and the exporter's default ``--collect-interval`` of 30000 ms."""


class Fleet:
    """The fleet, the record builders and the event loop; the scenarios are subclasses'
    (:mod:`gputriage.simulate.noise`, :mod:`gputriage.simulate.faults`)."""

    def __init__(self, spec: StreamSpec) -> None:
        if spec.events < 1 or spec.nodes < 1 or spec.clusters < 1:
            raise ValueError("events, nodes and clusters must be positive")
        if spec.clusters > len(CLUSTERS):
            raise ValueError(f"at most {len(CLUSTERS)} clusters")
        self.spec = spec
        self.rng = Random(spec.seed)
        self.now = 0.0
        self.counts: Counter[str] = Counter()
        self._heap: list[tuple[float, int, Step]] = []
        self._follow: deque[AnyEvent] = deque()
        """Records that follow the one just emitted, at the same moment (what a connector
        publishes right after a record, e.g. an Event's derived autoscaler record, a
        scrape's other bindings): emitted right after it, in no slot of their own, so
        no other event comes in between. With ``spec.exact_count`` they count towards
        ``spec.events`` (the stream then ends a few slots early); without, the stream
        covers all of ``hours`` and holds a few more than ``spec.events`` records."""
        self._seq = 0
        self._names: set[str] = set()
        self._workloads: dict[int, Workload] = {}
        # Shared by every record that carries them (never mutated): one dict per
        # count instead of one per record. Nodes keep {GPU: 0}; pods never ask for 0.
        self._requests = {n: gpu_request(n) for n in (1, 2, 4, 8)}
        self._allocatable = {n: {GPU: n} for n in range(9)}
        self.clusters: list[Cluster] = [
            Cluster(name, region, domain, self.rng.randrange(10_000_000, 90_000_000))
            for name, region, domain in CLUSTERS[: spec.clusters]
        ]
        self.nodes: list[Node] = []
        self._build()
        types = sorted({p.instance_type for p in PRODUCTS})
        for cluster in self.clusters:
            cluster.groups = node_groups(cluster, types)
        self.truth = TruthRecorder(spec)
        self.nvlink_truth = NvlinkTruth(self.truth)
        total = 0.0
        self._cumulative: list[float] = []
        self._draws: list[Callable[[], AnyEvent | None]] = []
        for weight, draw in self._weights():
            total += weight
            self._cumulative.append(total)
            self._draws.append(draw)
        self._total_weight = total
        self._storm_cumulative: list[float] = []
        self._storm_draws: list[Callable[[], AnyEvent | None]] = []
        total = 0.0
        for weight, draw in self._storm_weights():
            total += weight
            self._storm_cumulative.append(total)
            self._storm_draws.append(draw)
        self._storm_total = total

    def _weights(self) -> list[tuple[float, Callable[[], AnyEvent | None]]]:
        """The background draws and their weights, in a fixed order (the bytes depend on it)."""
        raise NotImplementedError

    def _storm_weights(self) -> list[tuple[float, Callable[[], AnyEvent | None]]]:
        """The healthy churn a storm multiplies (no fault: a storm must raise nothing)."""
        raise NotImplementedError

    def _routine_pod(self) -> AnyEvent:
        raise NotImplementedError

    # ---------------------------------------------------------------- ids and names

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _suffix(self, k: int = 5) -> str:
        return "".join(self.rng.choices(ALNUM, k=k))

    def _unique(self, make: Callable[[], str]) -> str:
        while True:
            name = make()
            if name not in self._names:
                self._names.add(name)
                return name

    def _time(self, offset: float = 0.0) -> datetime:
        jitter = self.spec.jitter
        delta = self.now + offset + (self.rng.uniform(-jitter, jitter) if jitter else 0.0)
        return self.spec.start + timedelta(seconds=max(delta, 0.0))

    # ---------------------------------------------------------------- the fleet

    def _build(self) -> None:
        rng = self.rng
        layouts = [layout for _, layout in NODE_LAYOUTS]
        layout_weights = [w for w, _ in NODE_LAYOUTS]
        for i in range(self.spec.nodes):
            cluster = self.clusters[i % len(self.clusters)]
            zone = f"{cluster.region}{rng.choice('abcd')}"
            product = PRODUCTS[rng.randrange(len(PRODUCTS))]

            def node_name(cluster: Cluster = cluster) -> str:
                a, b, c = rng.randrange(256), rng.randrange(256), rng.randrange(1, 255)
                return f"ip-10-{a}-{b}-{c}.{cluster.domain}"

            node = Node(cluster, self._unique(node_name), self._uuid(), self._uuid())
            node.kmsg_seq = rng.randrange(1000, 200_000)
            # Only where the topology is told (the snapshot): else the bytes are v4's.
            share = PCIE_SHARE * self.spec.rate("multi_gpu_no_nvlink")
            node.pcie = self.spec.snapshot and int(node.uid[9:13], 16) < share * 0x10000
            if node.pcie:
                product = PCIE_PRODUCT
            node.labels = {
                "nvidia.com/gpu.product": product.name,
                "nvidia.com/gpu.count": "8",
                "nvidia.com/gpu.memory": product.memory,
                "nvidia.com/mig.config": "all-disabled",
                "nvidia.com/gpu.sharing-strategy": "none",
                "node.kubernetes.io/instance-type": product.instance_type,
                "topology.kubernetes.io/zone": zone,
            }
            node.gpus = [
                Gpu(k, f"GPU-{self._uuid()}", bus) for k, bus in enumerate(product.bus_ids)
            ]
            cluster.nodes.append(node)
            self.nodes.append(node)
            layout = rng.choices(layouts, layout_weights)[0]
            first = 0
            for size in layout:
                gpus = tuple(range(first, first + size))
                first += size
                created = self.spec.start - timedelta(seconds=rng.uniform(60, 6 * 86400))
                pod = self._new_pod(cluster, size, created)
                self._place(pod, node, gpus)
                pod.phase = "Running"
                if rng.random() < 0.05:
                    pod.restarts = rng.randint(1, 4)
                    finished = self.spec.start - timedelta(seconds=rng.uniform(60, 86400))
                    last = termination(finished)
                    pod.set_main("running", last=last)
                else:
                    pod.set_main("running")

    def _workload(self, gpus: int) -> Workload:
        current = self._workloads.get(gpus)
        if current is not None and current.left > 0:
            current.left -= 1
            return current
        rng = self.rng
        template = rng.choice(TEMPLATES[gpus])
        if template.kind == "Job":
            owner = self._unique(lambda: f"{template.base}-{self._suffix()}")
            replicas = rng.choice((1, 1, 2, 4, 8, 16))
        elif template.kind == "ReplicaSet":
            owner = self._unique(lambda: f"{template.base}-{self._suffix(10)}")
            replicas = rng.randint(2, 24)
        else:
            owner = self._unique(lambda: f"{template.base}-{self._suffix()}")
            replicas = rng.randint(4, 32)
        workload = Workload(template, owner, gpus, replicas - 1)
        self._workloads[gpus] = workload
        return workload

    def _new_pod(
        self,
        cluster: Cluster,
        gpus: int,
        created: datetime,
        workload: Workload | None = None,
    ) -> Pod:
        workload = workload or self._workload(gpus)
        if workload.template.kind == "RayCluster":
            name = self._unique(lambda: f"{workload.owner}-worker-gpu-{self._suffix()}")
        else:
            name = self._unique(lambda: f"{workload.owner}-{self._suffix()}")
        pod = Pod(cluster, workload, name, self._uuid(), created)
        pod.pid = self.rng.randrange(1000, 4_000_000)
        pod.pool_index = len(cluster.pods)
        cluster.pods.append(pod)
        return pod

    def _place(self, pod: Pod, node: Node, gpus: tuple[int, ...]) -> None:
        pod.node = node
        pod.gpus = gpus
        pod.scheduled = SCHEDULED
        for k in gpus:
            node.gpus[k].pod = pod

    def _forget(self, pod: Pod) -> None:
        """Drop a deleted pod from its cluster's pool (swap-remove)."""
        pool = pod.cluster.pods
        i = pod.pool_index
        if i < 0:
            return
        last = pool.pop()
        if last is not pod:
            pool[i] = last
            last.pool_index = i
        pod.pool_index = -1

    # ---------------------------------------------------------------- record builders
    # Pod, node and binding records are built directly (the hot path, see the module
    # docstring); keep them in step with gputriage.demo.events by hand.

    def _pod_event(
        self, pod: Pod, op: str = "modified", deleted: datetime | None = None
    ) -> PodEvent:
        cluster = pod.cluster
        cluster.rv += 1
        workload = pod.workload
        requests = self._requests[workload.gpus]
        pod.last = event = PodEvent(
            id=f"k8s:{pod.uid}:{cluster.rv}",  # the connector's id: resourceVersion
            cluster=cluster.name,
            time=self._time(),
            node=pod.node.name if pod.node is not None else "",
            op="added" if op == "added" else "deleted" if op == "deleted" else "modified",
            namespace=workload.template.namespace,
            name=pod.name,
            uid=pod.uid,
            phase=pod.phase,
            reason=pod.reason,
            message=pod.message,
            gpu_requests=requests,
            gpu_limits=requests,
            owner_kind=workload.template.kind,
            owner_name=workload.owner,
            containers=pod.containers,
            scheduled=pod.scheduled,
            created_at=pod.created_at,
            # Kubernetes never clears a deletionTimestamp: a story that updates a pod
            # another is deleting must not send it without one (the core took such a
            # record, stamped just after the delete, for the pod running again).
            deleted_at=deleted if deleted is not None else pod.deleting,
            resource_version=cluster.rv,
        )
        if pod.node is not None and pod.node.pcie:
            self.nvlink_truth.pod_record(pod, event.time)
        return event

    def _node_event(self, node: Node) -> NodeEvent:
        cluster = node.cluster
        cluster.rv += 1
        ready = READY if node.ready == "True" else NOT_READY[node.ready]
        node.last = event = NodeEvent(
            id=f"k8s:{node.uid}:{cluster.rv}",
            cluster=cluster.name,
            time=self._time(),
            node=node.name,
            capacity=self._allocatable[node.capacity],
            allocatable=self._allocatable[node.allocatable],
            conditions=(ready, *PRESSURE),
            labels=node.labels,
            taints=TAINTS if node.ready == "True" else NOT_READY_TAINTS[node.ready],
            resource_version=cluster.rv,
        )
        return event

    def _binding_event(self, node: Node, gpu: Gpu, at: datetime | None = None) -> GpuBindingEvent:
        node.binding_seq += 1
        pod = gpu.pod
        pods = (
            (PodRef(namespace=pod.workload.template.namespace, name=pod.name, container=pod.main),)
            if pod is not None and not node.blind
            else ()
        )
        gpu.reported = pod if pods else None
        time = self._time() if at is None else at
        node.bound_at = time if node.bound_at is None else max(node.bound_at, time)
        if node.pcie:
            self.nvlink_truth.binding(node, gpu.reported, time)
        return GpuBindingEvent(
            id=f"dcgm/{node.uid}/{gpu.index}/{node.binding_seq}",
            cluster=node.cluster.name,
            time=time,
            node=node.name,
            gpu_uuid=gpu.uuid,
            pci_bus_id=gpu.bus_id,
            gpu_index=gpu.index,
            device=device_name(gpu.index),
            pods=pods,
        )

    def _kube_event(
        self,
        cluster: Cluster,
        node: str,
        reason: str,
        message: str,
        *,
        kind: str,
        name: str,
        namespace: str = "",
        uid: str = "",
        warning: bool = False,
        source: str = "kubelet",
        count: int = 1,
    ) -> KubeEvent:
        cluster.rv += 1
        # The id before the time: both draw from the rng, in this order.
        return kube_event(
            id=f"k8s:{self._uuid()}:{cluster.rv}",
            cluster=cluster.name,
            time=self._time(),
            node=node,
            reason=reason,
            message=message,
            warning=warning,
            kind=kind,
            name=name,
            namespace=namespace,
            uid=uid,
            source=source,
            count=count,
        )

    def _pod_kube_event(
        self,
        pod: Pod,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        source: str = "kubelet",
        count: int = 1,
    ) -> KubeEvent:
        node = pod.node.name if pod.node is not None else ""
        return self._kube_event(
            pod.cluster,
            node,
            reason,
            message,
            kind="Pod",
            name=pod.name,
            namespace=pod.workload.template.namespace,
            uid=pod.uid,
            warning=warning,
            source=source,
            count=count,
        )

    def _node_kube_event(
        self,
        node: Node,
        reason: str,
        message: str,
        *,
        warning: bool = False,
        source: str = "kubelet",
    ) -> KubeEvent:
        return self._kube_event(
            node.cluster,
            node.name,
            reason,
            message,
            kind="Node",
            name=node.name,
            uid=node.uid,
            warning=warning,
            source=source,
        )

    def _xid_event(
        self,
        node: Node,
        gpu: Gpu,
        code: int,
        *,
        source: str = "kmsg",
        caused_by: int | None = None,
    ) -> XidEvent:
        pod = gpu.pod
        with_pid = code in {13, 31, 43, 45} and pod is not None
        if source == "kmsg":
            node.kmsg_seq += self.rng.randint(1, 40)
            event_id = f"kmsg/{node.boot_id}/{node.kmsg_seq}"
        else:
            node.binding_seq += 1
            event_id = f"{source}/{node.uid}/{gpu.index}/{node.binding_seq}"
        event = xid_event(
            id=event_id,
            cluster=node.cluster.name,
            time=self._time(),
            node=node.name,
            code=code,
            bus=gpu.bus_id,
            uuid=gpu.uuid,
            index=gpu.index,
            pid=pod.pid if with_pid and pod is not None else None,
            process="python3" if with_pid else "",
            message=XID_TEXT.get(code, ""),
            source=source,
            caused_by=caused_by,
        )
        self.truth.xid(cluster=node.cluster.name, node=node.name, time=event.time)
        if code in APP_CODES:  # the workload's codes (13/31/43): gpu_app_fault's lines
            self.truth.app_line(gpu.uuid, event.time)
        return event

    def _to_scrape(self, node: Node) -> float:
        """Seconds from now to the node's next dcgm-exporter scrape (strictly after now).

        The dcgm connector polls each node's exporter every :data:`SCRAPE_INTERVAL`
        seconds and emits what changed (a binding, an XID count that grew), so a GPU's
        change reaches the stream at the next scrape, not when it happened. Each node
        has its own phase on that grid, derived from its uid (no rng draw)."""
        phase = int(node.uid[:8], 16) % 30_000 / 1000.0
        since = (self.now - phase) % SCRAPE_INTERVAL
        return SCRAPE_INTERVAL - since

    # ---------------------------------------------------------------- picking

    def _cluster(self) -> Cluster:
        return self.clusters[self.rng.randrange(len(self.clusters))]

    def _pick_pod(self, *, running: bool = True) -> Pod | None:
        """A random pod; with ``running``, one that runs on a node and is in no scenario."""
        rng = self.rng
        for _ in range(8):
            pods = self._cluster().pods
            if not pods:
                continue
            pod = pods[rng.randrange(len(pods))]
            if not running:
                return pod
            if not pod.busy and pod.phase == "Running" and pod.node is not None:
                return pod
        return None

    def _pick_node(self, *, healthy: bool = True) -> Node | None:
        rng = self.rng
        for _ in range(8):
            node = self.nodes[rng.randrange(len(self.nodes))]
            if not healthy:
                return node
            if not node.busy and node.ready == "True" and node.allocatable == node.capacity:
                return node
        return None

    # ---------------------------------------------------------------- the event loop

    def events(self) -> Iterator[AnyEvent]:
        """The stream, one typed event per slot, in increasing slot time."""
        spec = self.spec
        step = spec.hours * 3600.0 / spec.events
        heap = self._heap
        rng = self.rng
        cumulative = self._cumulative
        draws = self._draws
        total = self._total_weight
        counts = self.counts
        if spec.snapshot:
            for listed in self._snapshot():
                counts[wire_tag(type(listed))] += 1
                yield listed
        follow = self._follow
        left = spec.events if spec.exact_count else -1
        storm_from, storm_to = spec.storm_window() if spec.storm > 1.0 else (-1.0, -1.0)
        storm_cumulative, storm_draws = self._storm_cumulative, self._storm_draws
        for i in range(spec.events):
            slot = i * step
            ticks = 1
            if storm_from <= slot < storm_to:  # more draws in this slot, each its own time
                more = spec.storm - 1.0
                ticks += int(more) + (1 if rng.random() < more - int(more) else 0)
            for k in range(ticks):
                at = slot + k * step / ticks
                event: AnyEvent | None
                # The stories' events at their own times, before the tick's draw.
                while heap and heap[0][0] <= at and left != 0:
                    due, _, scenario = heapq.heappop(heap)
                    self.now = due
                    event = self._advance(scenario)
                    if event is None:
                        continue
                    counts[wire_tag(type(event))] += 1
                    yield event
                    left -= 1
                    while follow and left != 0:
                        event = follow.popleft()
                        counts[wire_tag(type(event))] += 1
                        yield event
                        left -= 1
                if left == 0:
                    break
                self.now = at
                if k == 0:
                    draw = draws[bisect.bisect_right(cumulative, rng.random() * total)]
                else:
                    pick = rng.random() * self._storm_total
                    draw = storm_draws[bisect.bisect_right(storm_cumulative, pick)]
                event = draw() or self._routine_pod()
                counts[wire_tag(type(event))] += 1
                yield event
                left -= 1
                while follow and left != 0:  # the rest of the moment, in no slot of its own
                    event = follow.popleft()
                    counts[wire_tag(type(event))] += 1
                    yield event
                    left -= 1
                if left == 0:
                    break
            if left == 0:
                break
        self.truth.finish(self.spec.start + timedelta(seconds=self.now))

    def _snapshot(self) -> Iterator[AnyEvent]:
        """The connectors' initial lists at time 0: nodes, their pods, their GPU bindings,
        and each node agent's topology (NVML: uuids and bus ids too): an HGX board, every
        pair NV18, or a PCIe-only box (PIX under one switch, NODE within a socket, SYS
        across the two)."""
        for node in self.nodes:
            yield self._node_event(node)
            yield self._topology_event(node)
            for pod in dict.fromkeys(g.pod for g in node.gpus if g.pod is not None):
                if pod is not None:
                    yield self._pod_event(pod, "added")
            for gpu in node.gpus:
                yield self._binding_event(node, gpu)

    def _topology_event(self, node: Node) -> AnyEvent:
        """The node agent's topology at its start. No jitter: a draw from the rng here
        would change every record after it (the stream must stay the same without)."""
        count = len(node.gpus)
        return topology_event(
            id=f"topo/{node.uid}/1",
            cluster=node.cluster.name,
            time=self.spec.start + timedelta(seconds=self.now),
            node=node.name,
            links=pcie_links(count, count // 2) if node.pcie else hgx_links(count),
            numa=tuple(0 if g.index < count // 2 else 1 for g in node.gpus),
            uuids=tuple(g.uuid for g in node.gpus),
            buses=tuple(g.bus_id for g in node.gpus),
            source="nvml",
        )

    def _push(self, due: float, scenario: Step) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, scenario))

    def _advance(self, scenario: Step) -> AnyEvent | None:
        """Run a scenario to its next event (emitted now) or delay (rescheduled)."""
        for item in scenario:
            if isinstance(item, float):
                self._push(self.now + item, scenario)
                return None
            self._push(self.now, scenario)
            return item
        return None

    def _burst(self, events: list[AnyEvent]) -> Step:
        """Events one source publishes at one moment (a scrape's bindings, a controller's
        evictions): the first now, the rest right after it (:attr:`_follow`)."""
        if events:
            self._follow.extend(events[1:])
            yield events[0]

    def _scrape(self, node: Node, gpus: list[Gpu]) -> Step:
        """The bindings a dcgm scrape of ``node`` reports for ``gpus``, stamped with the
        scrape's one observation time (as the connector does)."""
        at = self._time()
        yield from self._burst([self._binding_event(node, gpu, at) for gpu in gpus])

    def _start(self, scenario: Step) -> AnyEvent | None:
        return self._advance(scenario)
