"""A DRA node pool beside the device-plugin fleet: a mixed cluster, its faults and noise.

Its nodes advertise no ``nvidia.com/gpu`` (absent, or 0/0): their GPUs are the devices of
one ResourceSlice each, held only through ResourceClaims. It runs on its own random
stream (the fleet's bytes do not depend on it); its records join the stream by time. Each
node lives one timeline of churn (claims allocated and released, dcgm scrapes, status)
with at most one story at a time: a NoExecute DeviceTaintRule and its eviction, a fatal
XID whose pod fails, a device gone from its slice past 5 min, the driver's NoSchedule
taint on an idle GPU, or a DRA-plugin restart (noise). Claims that cannot be allocated
pend while the pool's group hits its quota. Truth is the domain's rule on DRA nodes, not
today's core; the cluster-scoped types are counted by the fleet's own ClusterTruth, so both
pools share one rule. Fault names start with :data:`DRA_FAULT_PREFIX` (the score reads it).

Traps: never draw from the fleet's rng here; stories never overlap on a node (``_plan``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from random import Random
from typing import Final

from gputriage.demo.events import GPU, kube_event, termination, xid_event
from gputriage.simulate.autoscaler import (
    BACKOFF_INITIAL,
    BACKOFF_MAX,
    QUOTA,
    SCAN_INTERVAL,
    derived,
    go_time,
    group_name,
    klog_records,
)
from gputriage.simulate.catalogue import (
    ALNUM,
    CUDA_LOST,
    NODE_LAYOUTS,
    PRESSURE,
    PRODUCTS,
    READY,
    SCHEDULED,
    TEMPLATES,
    XID_TEXT,
)
from gputriage.simulate.dra_records import (
    DRIVER,
    RV,
    DraGpu,
    DraNode,
    DraPod,
    claim_event,
    dcgm_binding,
    dra_binding,
    number,
    pod_event,
    product_name,
    slice_event,
)
from gputriage.simulate.model import Cluster
from gputriage.simulate.spec import StreamSpec
from gputriage.simulate.truth import TruthRecorder
from schemas.codec import AnyEvent
from schemas.events import (
    AutoscalerEvent,
    DeviceTaint,
    Event,
    KubeEvent,
    NodeEvent,
    PodCondition,
    Termination,
)

GPU_PRESENT: Final = "nvidia.com/gpu.present"
"""The GPU operator's label of a node with an NVIDIA GPU, whatever advertises it."""
DRA_FAULT_PREFIX: Final = "dra_"
"""Every fault of the DRA pool is named ``dra_<story>``."""
DEGRADED_AFTER: Final = timedelta(minutes=5)
"""gpu_degraded: a device gone from its node's slice this long (the domain's default)."""
SCRAPE_INTERVAL: Final = 30.0
"""dcgm-exporter's scrape interval, as on the device-plugin nodes."""
DRIVER_XID_KEY: Final = "gpu.nvidia.com/xid"
"""The taint NVIDIA's kubelet plugin puts on a device after an XID (value: the XID in
decimal, effect NoSchedule; tests/data/dra/messages.md, 3)."""
RULE_TAINT_KEY: Final = "example.com/gpu-fault"
"""A DeviceTaintRule's key is the operator's choice (this one is the fixture's)."""
EVICTION_REASON: Final = "DeviceTaintManagerEviction"
EVICTION_MESSAGE: Final = "Marking for deletion"
DISRUPTION: Final = PodCondition(
    status="True",
    reason="DeletionByDeviceTaintManager",
    message="Device Taint manager: deleting due to NoExecute taint",
)
"""What the device taint eviction controller writes (tests/data/dra/messages.md, 2)."""
EVICTION_SOURCE: Final = "device-taint-eviction-controller"
"""The controller's name in kube-controller-manager."""
CANNOT_ALLOCATE: Final = "cannot allocate all claims"
"""The scheduler's DynamicResources filter (tests/data/dra/messages.md, 1)."""
NODE_STORIES: Final = (
    "taint_eviction",
    "fatal_xid",
    "device_gone",
    "driver_taint",
    "plugin_restart",
)
"""The per-node stories of one round, in order; the last is noise."""
NOISE_STORIES: Final = ("plugin_restart", "plugin_restart")
"""The per-node stories of a round with no faults (``fault_rate`` 0)."""
ROUND_HOURS: Final = 2.0
"""One round of stories per this much stream time (at least one round)."""


def unschedulable_message(total: int) -> str:
    """``PodScheduled``'s message when no node can allocate the pod's claims: the
    scheduler's ``0/%v nodes are available`` with each node's reason counted."""
    return (
        f"0/{total} nodes are available: {total} {CANNOT_ALLOCATE}. preemption: 0/{total} "
        f"nodes are available: {total} No preemption victims found for incoming pod."
    )


class DraPool:
    """The pool of ``spec.dra_nodes`` nodes in the first cluster; read :attr:`events`."""

    def __init__(self, spec: StreamSpec, cluster: Cluster, truth: TruthRecorder) -> None:
        self.spec = spec
        self.rng = Random(f"dra-pool/{spec.seed}")
        self.cluster = cluster
        self.truth = truth
        self.seconds = spec.hours * 3600.0
        self._records: list[tuple[float, int, AnyEvent]] = []
        self._seq = 0
        self._names = {n.name for n in cluster.nodes}
        self.nodes = [self._node(i) for i in range(spec.dra_nodes)]
        self.total_nodes = len(cluster.nodes) + len(self.nodes)
        """The scheduler's ``N`` in ``0/N nodes are available``: the whole cluster."""
        itype = PRODUCTS[0].instance_type
        self.group = group_name(cluster.name, f"{itype}-dra")
        self.group_size = len(self.nodes)
        self.stories: list[str] = []
        """The stories told, in order (``fault`` names; noise included)."""
        for node in self.nodes:
            self._listing(node)
        self._tell()
        self.events: list[AnyEvent] = number(self._records, 100_000_000)
        """The pool's records in time order, numbered (:func:`number`)."""

    # ---------------------------------------------------------------- helpers

    def _at(self, t: float) -> datetime:
        return self.spec.start + timedelta(seconds=max(t, 0.0))

    def _emit(self, t: float, event: AnyEvent) -> AnyEvent:
        self._seq += 1
        self._records.append((t, self._seq, event))
        return event

    def _uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def _suffix(self, k: int = 5) -> str:
        return "".join(self.rng.choices(ALNUM, k=k))

    def _next_scrape(self, node: DraNode, t: float) -> float:
        """dcgm-exporter's next scrape of ``node`` strictly after ``t`` (a fixed phase)."""
        phase = int(node.uid[:8], 16) % 30_000 / 1000.0
        return t + SCRAPE_INTERVAL - (t - phase) % SCRAPE_INTERVAL

    # ---------------------------------------------------------------- the pool

    def _node(self, i: int) -> DraNode:
        rng = self.rng
        product = PRODUCTS[i % len(PRODUCTS)]
        while True:
            a, b, c = rng.randrange(256), rng.randrange(256), rng.randrange(1, 255)
            name = f"ip-10-{a}-{b}-{c}.{self.cluster.domain}"
            if name not in self._names:
                self._names.add(name)
                break
        labels = {
            "nvidia.com/gpu.product": product.name,
            "nvidia.com/gpu.count": str(len(product.bus_ids)),
            "nvidia.com/gpu.memory": product.memory,
            "node.kubernetes.io/instance-type": product.instance_type,
            "topology.kubernetes.io/zone": f"{self.cluster.region}{rng.choice('abcd')}",
            GPU_PRESENT: "true",
        }
        node = DraNode(
            cluster=self.cluster.name,
            name=name,
            uid=self._uuid(),
            product=product_name(product.name),
            labels=labels,
            zero=i % 3 == 2,
            dcgm_maps_claims=i % 2 == 0,
            slice_uid=self._uuid(),
            slice_name=f"{name}-gpu.nvidia.com-{self._suffix().lower()}",
        )
        node.gpus = [DraGpu(k, f"GPU-{self._uuid()}", bus) for k, bus in enumerate(product.bus_ids)]
        return node

    def _node_event(self, node: DraNode, t: float, op: str = "modified") -> NodeEvent:
        resources = {GPU: 0} if node.zero else {}
        return NodeEvent(
            id=f"k8s:{node.uid}:{RV}",
            cluster=node.cluster,
            time=self._at(t),
            node=node.name,
            op="added" if op == "added" else "modified",
            capacity=resources,
            allocatable=resources,
            conditions=(READY, *PRESSURE),
            labels=node.labels,
        )

    def _listing(self, node: DraNode) -> None:
        """What the connectors list at the start: the node, its slice, its pods running on
        their claims, the claims, the DRA bindings and dcgm-exporter's bindings."""
        rng = self.rng
        self._emit(0.0, self._node_event(node, 0.0, "added"))
        self._emit(0.0, slice_event(node, self._at(0.0), op="added"))
        layout = rng.choices([lay for _, lay in NODE_LAYOUTS], [w for w, _ in NODE_LAYOUTS])[0]
        first = 0
        for size in layout:
            if rng.random() < 0.25:  # some GPUs idle: room for churn
                first += size
                continue
            gpus = tuple(node.gpus[first : first + size])
            first += size
            created = -rng.uniform(600.0, 86400.0)
            pod = self._new_pod(size, created)
            self._hold(pod, node, gpus, rng.uniform(900.0, 4 * 3600.0))
            pod.phase = "Running"
            pod.scheduled = SCHEDULED
            self._emit(0.0, claim_event(pod, self._at(0.0), allocated=True, op="added"))
            for gpu in gpus:
                self._emit(0.0, dra_binding(node, gpu, pod, pod, self._at(0.0)))
            self._emit(0.0, pod_event(pod, self._at(0.0), op="added", state="running"))
        for gpu in node.gpus:
            self._emit(0.0, dcgm_binding(node, gpu, self._at(0.0)))

    def _new_pod(self, size: int, created: float, sibling: DraPod | None = None) -> DraPod:
        """A new pod of ``size`` GPUs; with ``sibling``, another of its owner's."""
        rng = self.rng
        template = rng.choice(TEMPLATES[size])
        owner = f"{template.base}-{self._suffix()}"
        if sibling is not None:
            template = next(t for t in TEMPLATES[size] if t.namespace == sibling.namespace)
            owner = sibling.owner
        name = f"{owner}-{self._suffix()}"
        return DraPod(
            cluster=self.cluster.name,
            namespace=template.namespace,
            name=name,
            uid=self._uuid(),
            owner_kind=template.kind,
            owner=owner,
            containers=template.containers,
            gpus=size,
            created=self._at(0.0) + timedelta(seconds=created),
            claim=f"{name}-gpu-{self._suffix()}",
            claim_uid=self._uuid(),
        )

    def _hold(self, pod: DraPod, node: DraNode, gpus: tuple[DraGpu, ...], life: float) -> None:
        pod.node = node
        pod.held = gpus
        pod.ends_at = life
        for gpu in gpus:
            gpu.pod = pod

    # ---------------------------------------------------------------- pod life

    def _start(self, node: DraNode, t: float, gpus: tuple[DraGpu, ...]) -> DraPod:
        """A pod with a claim for ``gpus``: created, its claim made and allocated on
        ``gpus`` and reserved for it (the DRA bindings), scheduled, running, scraped."""
        rng = self.rng
        pod = self._new_pod(len(gpus), t)
        self._emit(t, pod_event(pod, self._at(t), op="added"))
        self._emit(t + 0.05, claim_event(pod, self._at(t + 0.05), allocated=False, op="added"))
        t += rng.uniform(0.2, 1.5)
        self._hold(pod, node, gpus, t + rng.uniform(900.0, 3 * 3600.0))
        self._emit(t, claim_event(pod, self._at(t), allocated=True))
        for gpu in gpus:
            self._emit(t, dra_binding(node, gpu, pod, pod, self._at(t)))
        pod.scheduled = SCHEDULED
        self._emit(
            t + 0.1, pod_event(pod, self._at(t + 0.1), state="waiting", reason="ContainerCreating")
        )
        t += rng.uniform(5.0, 30.0)
        pod.phase = "Running"
        self._emit(t, pod_event(pod, self._at(t), state="running"))
        self._scrape(node, t, gpus)
        return pod

    def _scrape(self, node: DraNode, t: float, gpus: tuple[DraGpu, ...]) -> None:
        """dcgm-exporter's next scrape reports ``gpus`` as they are now."""
        at = self._next_scrape(node, t)
        for gpu in gpus:
            self._emit(at, dcgm_binding(node, gpu, self._at(at)))

    def _release(self, pod: DraPod, t: float) -> float:
        """The claim controller takes the finished pod out of ``reservedFor`` and the
        claim is deallocated (the DRA unbinds), then deleted once the pod is; returns
        the time the pod was deleted."""
        rng = self.rng
        node = pod.node
        assert node is not None
        t += rng.uniform(0.5, 3.0)
        gpus = pod.held
        for gpu in gpus:
            gpu.pod = None
        self._emit(t, claim_event(pod, self._at(t), allocated=False))
        for gpu in gpus:
            self._emit(t, dra_binding(node, gpu, None, pod, self._at(t)))
        self._scrape(node, t, gpus)
        t += rng.uniform(1.0, 60.0)
        pod.deleting = pod.deleting or self._at(t)
        self._emit(t, pod_event(pod, self._at(t), op="deleted", state="terminated"))
        self._emit(t + 0.2, claim_event(pod, self._at(t + 0.2), allocated=False, op="deleted"))
        pod.held = ()
        return t

    def _finish(self, pod: DraPod, t: float) -> float:
        """A pod that ends normally: a Job's completes, another's is scaled down."""
        done = termination(self._at(t), "Completed", 0)
        if pod.owner_kind == "Job":
            pod.phase = "Succeeded"
        else:
            pod.deleting = self._at(t)
            self._emit(t, pod_event(pod, self._at(t), state="running"))
            t += self.rng.uniform(1.0, 20.0)
            pod.phase = "Succeeded"
        self._emit(
            t, pod_event(pod, self._at(t), state="terminated", reason="Completed", terminated=done)
        )
        return self._release(pod, t)

    # ---------------------------------------------------------------- churn

    def _churn(self, node: DraNode, t: float, until: float) -> None:
        """Pods come and go on ``node`` from ``t`` to ``until``; node status now and then."""
        rng = self.rng
        for gpu in node.gpus:  # a pod due during a story ends after it
            if gpu.pod is not None and gpu.pod.ends_at < t:
                gpu.pod.ends_at = t + rng.uniform(1.0, 60.0)
        arrival = t + rng.expovariate(1 / 1500.0)
        status = t + rng.uniform(600.0, 1800.0)
        while True:
            running = {
                g.pod.uid: g.pod
                for g in node.gpus
                if g.pod is not None and g.pod.phase == "Running"
            }
            ending = min(running.values(), key=lambda p: (p.ends_at, p.uid), default=None)
            end_at = ending.ends_at if ending is not None else float("inf")
            t = min(arrival, status, end_at)
            if t >= until:
                return
            if t == status:
                self._emit(t, self._node_event(node, t))
                status = t + rng.uniform(600.0, 1800.0)
            elif t == end_at and ending is not None:
                self._finish(ending, t)
            else:
                arrival = t + rng.expovariate(1 / 1500.0)
                free = node.free()
                size = rng.choice((1, 2, 4))
                if len(free) >= size:
                    self._start(node, t, tuple(free[:size]))

    # ---------------------------------------------------------------- the stories

    def _tell(self) -> None:
        """Place the rounds' stories on nodes, then run each node's timeline."""
        rng = self.rng
        rounds = max(1, round(self.spec.hours / ROUND_HOURS))
        span = self.seconds / rounds
        faults = self.spec.fault_rate > 0
        plan = self._plan(rounds, span, NODE_STORIES if faults else NOISE_STORIES)
        for node in self.nodes:
            t = 0.0
            for start, story in sorted(plan.get(node.name, [])):
                self._churn(node, t, start)
                t = self._story(story)(node, start)
            self._churn(node, t, self.seconds)
        if faults:
            for k in range(rounds):
                self._pending_claims(k * span + rng.uniform(0.1, 0.3) * span)

    def _plan(
        self, rounds: int, span: float, stories: tuple[str, ...]
    ) -> dict[str, list[tuple[float, str]]]:
        """Each round's ``stories`` at random times, each on a node no other story holds
        then (one that finds none is left out)."""
        rng = self.rng
        plan: dict[str, list[tuple[float, str]]] = {}
        busy: dict[str, float] = {}
        for k in range(rounds):
            for story in stories:
                low, high = k * span + 300.0, (k + 1) * span - 2700.0
                if high <= low:
                    high = low + 60.0
                start = rng.uniform(low, high)
                free = [n for n in self.nodes if busy.get(n.name, 0.0) <= start]
                if not free:
                    continue
                node = free[rng.randrange(len(free))]
                busy[node.name] = start + 2700.0
                plan.setdefault(node.name, []).append((start, story))
        return plan

    def _story(self, name: str) -> Callable[[DraNode, float], float]:
        stories: dict[str, Callable[[DraNode, float], float]] = {
            "taint_eviction": self._taint_eviction,
            "fatal_xid": self._fatal_xid,
            "device_gone": self._device_gone,
            "driver_taint": self._driver_taint,
            "plugin_restart": self._plugin_restart,
        }
        self.stories.append(f"{DRA_FAULT_PREFIX}{name}")
        return stories[name]

    def _victim(self, node: DraNode, t: float) -> tuple[DraPod, DraGpu, float]:
        """A running pod on ``node`` and one of its GPUs; one is started if none runs."""
        for gpu in node.gpus:
            if gpu.pod is not None and gpu.pod.phase == "Running":
                return gpu.pod, gpu, t
        free = node.free()
        if not free:  # every GPU away or broken: end nothing, use the first present one
            free = [g for g in node.gpus if not g.gone]
        pod = self._start(node, t, (free[0],))
        return pod, free[0], t + 120.0

    def _idle(self, node: DraNode, t: float) -> tuple[DraGpu | None, float]:
        """An idle GPU of ``node`` and when the story may use it: a running pod completes
        first if every GPU is held (None: none can be had)."""
        free = node.free()
        if not free:
            running = sorted(
                {g.pod.uid: g.pod for g in node.gpus if g.pod is not None}.values(),
                key=lambda p: (p.ends_at, p.uid),
            )
            live = [p for p in running if p.phase == "Running"]
            if not live:
                return None, t
            t = self._finish(live[0], t) + 60.0
            free = node.free()
            if not free:
                return None, t
        return free[self.rng.randrange(len(free))], t

    def _owner(self, pod: DraPod) -> str:
        return f"{pod.owner_kind}/{pod.owner}"

    def _taint_eviction(self, node: DraNode, t: float) -> float:
        """A DeviceTaintRule taints a GPU NoExecute; the device taint eviction controller
        evicts the pod holding it; the rule is deleted after the GPU is dealt with."""
        rng = self.rng
        pod, gpu, t = self._victim(node, t)
        fault = self.truth.fault_id(f"{DRA_FAULT_PREFIX}taint_eviction")
        rule = f"evict-{node.name.split('.', 1)[0]}-{gpu.device}"
        gpu.taint = DeviceTaint(
            key=RULE_TAINT_KEY,
            value="unhealthy",
            effect="NoExecute",
            time_added=self._at(t),
            rule=rule,
        )
        tainted = self._emit(t, slice_event(node, self._at(t)))
        t += rng.uniform(0.2, 2.0)
        self._emit(t, self._pod_event_kube(pod, t))
        pod.disruption = DISRUPTION
        pod.deleting = self._at(t + 0.05)
        self._emit(t + 0.05, pod_event(pod, self._at(t + 0.05), state="running"))
        t += rng.uniform(1.0, 30.0)
        self._pod_fails(fault, pod, gpu, t, termination(self._at(t), "Error", 143), tainted)
        t += rng.uniform(1200.0, 2400.0)
        gpu.taint = None
        self._emit(t, slice_event(node, self._at(t)))
        return t

    def _pod_fails(
        self, fault: str, pod: DraPod, gpu: DraGpu, t: float, ended: Termination, cause: Event
    ) -> None:
        """The pod on the faulty GPU ends (``ended``) at ``t``: the eviction chain's page,
        from ``cause`` to this failure, then its claim is released."""
        node = pod.node
        assert node is not None
        pod.phase = "Failed"
        failed = self._emit(
            t, pod_event(pod, self._at(t), state="terminated", reason="Error", terminated=ended)
        )
        self.truth.expect(
            fault_id=fault,
            kind="device_unhealthy_eviction",
            cluster=node.cluster,
            start=cause.time,
            first=cause.time,
            last=failed.time,
            node=node.name,
            gpus=(gpu.uuid,),
            pods=(pod.key,),
            owner=self._owner(pod),
            severity="page",
        )
        self._release(pod, t)

    def _pod_event_kube(self, pod: DraPod, t: float) -> KubeEvent:
        node = pod.node
        return kube_event(
            id=f"k8s:{self._uuid()}:{RV}",
            cluster=pod.cluster,
            time=self._at(t),
            node=node.name if node is not None else "",
            reason=EVICTION_REASON,
            message=EVICTION_MESSAGE,
            warning=False,
            kind="Pod",
            name=pod.name,
            namespace=pod.namespace,
            uid=pod.uid,
            source=EVICTION_SOURCE,
        )

    def _fatal_xid(self, node: DraNode, t: float) -> float:
        """XID 79 on a GPU of a DRA node (the kernel log knows its bus alone); the pod
        whose claim holds it fails; the GPU takes no new claim until it is reset."""
        rng = self.rng
        pod, gpu, t = self._victim(node, t)
        fault = self.truth.fault_id(f"{DRA_FAULT_PREFIX}fatal_xid")
        gpu.broken = True
        xid = self._emit(
            t,
            xid_event(
                id=f"kmsg/{node.uid}/{self._suffix(8)}",
                cluster=node.cluster,
                time=self._at(t),
                node=node.name,
                code=79,
                bus=gpu.bus,
                message=XID_TEXT[79],
            ),
        )
        t += rng.uniform(1.0, 20.0)
        self._pod_fails(fault, pod, gpu, t, termination(self._at(t), "Error", 1, CUDA_LOST), xid)
        t += rng.uniform(1200.0, 2400.0)
        gpu.broken = False  # reset: no record (the slice did not change)
        return t

    def _device_gone(self, node: DraNode, t: float) -> float:
        """An idle GPU drops out of the node's slice for 10 to 25 minutes."""
        rng = self.rng
        gpu, t = self._idle(node, t)
        if gpu is None:
            return t
        fault = self.truth.fault_id(f"{DRA_FAULT_PREFIX}device_gone")
        gpu.gone = True
        node.generation += 1
        gone = self._emit(t, slice_event(node, self._at(t)))
        pending = self.truth.expect(
            fault_id=fault,
            kind="gpu_degraded",
            cluster=node.cluster,
            start=gone.time,
            first=gone.time,
            last=gone.time,
            due=gone.time + DEGRADED_AFTER,
            node=node.name,
            gpus=(gpu.uuid,),
            severity="ticket",
        )
        t += rng.uniform(600.0, 1500.0)
        gpu.gone = False
        node.generation += 1
        back = self._emit(t, slice_event(node, self._at(t)))
        self.truth.ends(f"{fault}/gpu_degraded", back.time)
        pending.confirm()
        return t

    def _driver_taint(self, node: DraNode, t: float) -> float:
        """NVIDIA's plugin (its device health check on) taints an idle GPU NoSchedule after
        a fatal XID: no pod to evict, the GPU is unusable until the taint goes (a reset,
        10 to 30 minutes later): a ticket."""
        rng = self.rng
        gpu, t = self._idle(node, t)
        if gpu is None:
            return t
        fault = self.truth.fault_id(f"{DRA_FAULT_PREFIX}driver_taint")
        self._emit(
            t,
            xid_event(
                id=f"kmsg/{node.uid}/{self._suffix(8)}",
                cluster=node.cluster,
                time=self._at(t),
                node=node.name,
                code=79,
                bus=gpu.bus,
                message=XID_TEXT[79],
            ),
        )
        xid_at = self._at(t)
        t += rng.uniform(0.5, 3.0)
        gpu.taint = DeviceTaint(
            key=DRIVER_XID_KEY, value="79", effect="NoSchedule", time_added=self._at(t)
        )
        tainted = self._emit(t, slice_event(node, self._at(t)))
        pending = self.truth.expect(
            fault_id=fault,
            kind="gpu_degraded",
            cluster=node.cluster,
            start=xid_at,
            first=xid_at,
            last=tainted.time,
            due=xid_at + DEGRADED_AFTER,
            node=node.name,
            gpus=(gpu.uuid,),
            severity="ticket",
        )
        t += rng.uniform(600.0, 1800.0)
        gpu.taint = None
        back = self._emit(t, slice_event(node, self._at(t)))
        self.truth.ends(f"{fault}/gpu_degraded", back.time)
        pending.confirm()
        return t

    def _plugin_restart(self, node: DraNode, t: float) -> float:
        """Noise: the DRA kubelet plugin restarts (an upgrade): its slice is deleted and
        republished under a new name within two minutes; claims and pods are untouched."""
        rng = self.rng
        self._emit(t, slice_event(node, self._at(t), op="deleted"))
        t += rng.uniform(20.0, 110.0)
        node.slice_uid = self._uuid()
        node.slice_name = f"{node.name}-gpu.nvidia.com-{self._suffix().lower()}"
        node.generation += 1
        self._emit(t, slice_event(node, self._at(t), op="added"))
        return t + 60.0

    # ---------------------------------------------------------------- pending claims

    def _pending_claims(self, t: float) -> None:
        """An 8-GPU Job whose claims no node can allocate, while the pool's node group
        cannot grow (the vCPU quota); its owner deletes it after the third refusal."""
        rng = self.rng
        cluster = self.cluster
        fault = self.truth.fault_id(f"{DRA_FAULT_PREFIX}pending_claims")
        self.stories.append(f"{DRA_FAULT_PREFIX}pending_claims")
        self.truth.cluster.claim(
            cluster=cluster.name, group=self.group, fault=fault, at=self._at(t)
        )
        message = unschedulable_message(self.total_nodes)
        first = self._new_pod(8, t)
        pods = [first]
        for _ in range(rng.choice((0, 1))):
            pods.append(self._new_pod(8, t, first))
        for pod in pods:
            pod.scheduled = PodCondition(status="False", reason="Unschedulable", message=message)
            event = self._emit(
                t,
                pod_event(
                    pod, self._at(t), op="added", state="waiting", reason="ContainerCreating"
                ),
            )
            self._emit(t + 0.05, claim_event(pod, self._at(t + 0.05), allocated=False, op="added"))
            self.truth.cluster.pending(
                cluster=cluster.name,
                pod=pod.key,
                owner=f"{pod.owner_kind}/{pod.namespace}/{pod.owner}",
                owner_label=self._owner(pod),
                created=pod.created,
                at=event.time,
                unschedulable=True,
                resource=DRIVER,
            )
            self._emit(t + 0.1, self._scheduler_event(pod, t + 0.1, message))
        t += rng.uniform(1.0, SCAN_INTERVAL)
        backoff = BACKOFF_INITIAL
        for attempt in range(3):
            t = self._attempt(pods, t, first=attempt == 0)
            t += rng.uniform(5.0, 60.0)
            t = self._failure(t, backoff)
            if attempt < 2:
                t = self._backoff(pods, t, backoff, message)
                backoff = min(backoff * 2, BACKOFF_MAX)
        t += rng.uniform(60.0, 600.0)
        for pod in pods:
            pod.deleting = self._at(t)
            gone = self._emit(t, pod_event(pod, self._at(t), op="deleted", state="waiting"))
            self._emit(t + 0.2, claim_event(pod, self._at(t + 0.2), allocated=False, op="deleted"))
            self.truth.cluster.left(cluster=cluster.name, pod=pod.key, at=gone.time)
            t += 0.3

    def _scheduler_event(self, pod: DraPod, t: float, message: str) -> KubeEvent:
        return kube_event(
            id=f"k8s:{self._uuid()}:{RV}",
            cluster=pod.cluster,
            time=self._at(t),
            node="",
            reason="FailedScheduling",
            message=message,
            warning=True,
            kind="Pod",
            name=pod.name,
            namespace=pod.namespace,
            uid=pod.uid,
            source="default-scheduler",
        )

    def _autoscaler(self, t: float, records: tuple[AutoscalerEvent, ...]) -> None:
        for record in records:
            self.truth.cluster.autoscaler(record)
            self._emit(t, record)

    def _ca(self, t: float, where: str, message: str, severity: str = "I") -> None:
        self._autoscaler(t, klog_records(self.cluster, self._at(t), where, message, severity))

    def _ca_event(self, pod: DraPod, t: float, reason: str, message: str) -> None:
        event = kube_event(
            id=f"k8s:{self._uuid()}:{RV}",
            cluster=pod.cluster,
            time=self._at(t),
            node="",
            reason=reason,
            message=message,
            warning=False,
            kind="Pod",
            name=pod.name,
            namespace=pod.namespace,
            uid=pod.uid,
            source="cluster-autoscaler",
        )
        self._emit(t, event)
        self._autoscaler(t, derived(event))

    def _attempt(self, pods: list[DraPod], t: float, *, first: bool) -> float:
        for pod in pods:
            self._ca(t, "klogx.go:87", f"Pod {pod.key} is unschedulable")
        size, top = self.group_size, max(self.group_size * 2, 16)
        target = min(size + len(pods), top)
        plan = f"[{{{self.group} {size}->{target} (max: {top})}}]"
        self._ca(t, "orchestrator.go:185", f"Final scale-up plan: {plan}")
        self._ca(t, "executor.go:147", f"Scale-up: setting group {self.group} size to {target}")
        if first:
            for pod in pods:
                self._ca_event(pod, t + 0.01, "TriggeredScaleUp", f"pod triggered scale-up: {plan}")
        return t + 0.05

    def _failure(self, t: float, backoff: float) -> float:
        description = QUOTA[1].format(limit=self.rng.choice((768, 1152, 2304)))
        self._ca(
            t,
            "auto_scaling_groups.go:555",
            f"ASG {self.group} scaling failed with description: {description}",
            "W",
        )
        until = self._at(t + backoff)
        self._ca(
            t + 0.01,
            "clusterstate.go:223",
            f"Disabling scale-up for node group {self.group} until {go_time(until)}",
            "W",
        )
        return t + 0.02

    def _backoff(self, pods: list[DraPod], t: float, backoff: float, message: str) -> float:
        """The backoff's scans (one line a minute here), the pods told why once."""
        waited = 0.0
        told = False
        while waited < backoff:
            step = 60.0 + self.rng.uniform(-0.2, 0.2)
            t += step
            waited += step
            self._ca(
                t,
                "orchestrator.go:511",
                f"Node group {self.group} is not ready for scaleup - backoff",
                "W",
            )
            if not told:
                told = True
                for pod in pods:
                    self._ca_event(
                        pod,
                        t + 0.01,
                        "NotTriggerScaleUp",
                        "pod didn't trigger scale-up: 1 in backoff after failed scale-up",
                    )
                    self._emit(t + 0.02, self._scheduler_event(pod, t + 0.02, message))
        return t + SCAN_INTERVAL
