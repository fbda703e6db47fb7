"""The injected faults, each with the ground truth the domain gives it (docs/detection.md).

Every scenario tells one fault's chain of events with real delays and tells
:class:`gputriage.simulate.truth.TruthRecorder` what incident it must give, by the
domain's rule applied to what it emitted: ``host_oom``, ``crash_loop``, ``app_xid``,
``fatal_xid``, ``flaky_gpu``, ``not_ready``, ``allocatable_drop``, ``exporter_outage`` and
``scale_up`` (:mod:`.scaling`).

Traps: a fault's truth follows what was emitted, not what was meant (a crash loop that never
reaches 4 restarts in 15 min, a NotReady blip under 2 min or an allocatable drop under
5 min gives nothing; a fatal XID with no pod failure is ``gpu_degraded``).
docs/replay.md, design notes: the injected faults (the table of faults and truths).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from gputriage.demo.events import GPU, termination
from gputriage.simulate.casualty import Casualties, Fault
from gputriage.simulate.catalogue import (
    APP_CODES,
    CUDA_FAULT,
    CUDA_LOST,
    CUDA_OOM,
    FATAL_CODES,
    FLAKY_CODES,
)
from gputriage.simulate.model import Gpu, Node, Pod
from gputriage.simulate.scaling import Scaling
from gputriage.simulate.spec import Step, StreamSpec
from gputriage.simulate.truth import Pending
from schemas.codec import AnyEvent
from schemas.events import PodEvent, Termination, XidEvent

DEGRADED_AFTER = timedelta(minutes=5)
"""gpu_degraded: capacity - allocatable > 0 this long; or a fatal XID no chain reported."""
POLL = 1.0
"""Seconds between an exporter outage's looks at what its node's pods hold (no rng)."""
TOLERATION_SECONDS = 300.0
"""DefaultTolerationSeconds: pods tolerate a NoExecute not-ready/unreachable taint this long."""
NOT_READY_GRACE = timedelta(minutes=2)
"""A NotReady shorter than this with no pod failure does not page: Kubernetes waits it out too."""


def _pod_key(pod: Pod) -> str:
    return f"{pod.workload.template.namespace}/{pod.name}"


def _owner(pod: Pod) -> str:
    return f"{pod.workload.template.kind}/{pod.workload.owner}"


class Simulator(Scaling):
    """Builds the fleet and emits ``spec.events`` typed events in event-time order;
    :attr:`truth` holds the expected incidents once :meth:`events` is exhausted."""

    def __init__(self, spec: StreamSpec) -> None:
        super().__init__(spec)
        self.casualties = Casualties()
        """Recent fatal faults per GPU: which crash the domain calls their casualty."""

    def _weights(self) -> list[tuple[float, Callable[[], AnyEvent | None]]]:
        rate = self.spec.rate
        return [
            (0.540, self._routine_pod),
            (0.130, self._routine_node),
            (0.060, self._routine_binding),
            (0.0120, self._restart),
            (0.0020 * rate("host_oom"), lambda: self._start(self._oom_kill())),
            (0.0006 * rate("crash_loop"), lambda: self._start(self._crash_loop())),
            (0.0008, lambda: self._start(self._eviction())),
            (0.0060, lambda: self._start(self._completion())),
            (0.0018 * rate("app_xid"), lambda: self._start(self._app_xid())),
            (0.0009, self._info_xid),
            (0.0003 * rate("fatal_xid"), lambda: self._start(self._fatal_xid())),
            (0.00002 * rate("flaky_gpu"), lambda: self._start(self._flaky_gpu())),
            (0.0003 * rate("not_ready"), lambda: self._start(self._not_ready())),
            (0.0002 * rate("allocatable_drop"), lambda: self._start(self._allocatable_flap())),
            (0.00008 * rate("scale_up"), lambda: self._start(self._scale_up())),
            (0.0040, self._duplicate),
            (0.0040, self._late),
            (0.0003, self._relist),
            (0.0004, lambda: self._start(self._plugin_blip())),
            (0.0080, self._cpu_pod),
            (0.0002, lambda: self._start(self._cpu_crash_loop())),
            (0.00006 * rate("exporter_outage"), lambda: self._start(self._exporter_outage())),
        ]

    def _storm_weights(self) -> list[tuple[float, Callable[[], AnyEvent | None]]]:
        # No container restarts: ten times the healthy restarts bunch into real crash
        # loops (more than 3 in 15 min on one pod is suspected_cuda_oom by the rule).
        return [
            (0.540, self._routine_pod),
            (0.130, self._routine_node),
            (0.0080, lambda: self._start(self._eviction())),
            (0.0060, lambda: self._start(self._completion())),
            (0.0009, self._info_xid),
            (0.0040, self._duplicate),
            (0.0040, self._late),
            (0.0020, self._relist),
            (0.0010, lambda: self._start(self._plugin_blip())),
        ]

    def _fatal(
        self, node: Node, gpu: Gpu, code: int, fault: str, *, source: str = "kmsg"
    ) -> XidEvent:
        """A fatal XID line, counted by the truth recorder (``xid_repeat`` episodes)."""
        event = self._xid_event(node, gpu, code, source=source)
        self.casualties.fatal(
            fault=fault, cluster=node.cluster.name, node=node.name, gpu=gpu.uuid, time=event.time
        )
        self.truth.fatal_xid(
            cluster=node.cluster.name,
            node=node.name,
            gpu=gpu.uuid,
            code=code,
            time=event.time,
            fault=fault,
        )
        return event

    def _restarted(
        self, pod: Pod, event: PodEvent, term: Termination, fault: str = "", *, held: bool = False
    ) -> None:
        """Every crash, whatever scenario drew it, is judged by the domain's chain rule
        (:mod:`gputriage.simulate.casualty`): one on a GPU a fatal fault just hit is
        that fault's, and the chain then holds the pod."""
        node = pod.node
        if node is not None:
            found = self.casualties.crash(
                pod=_pod_key(pod),
                gpus=[node.gpus[k].uuid for k in pod.gpus],
                time=term.finished_at if term.finished_at is not None else event.time,
                exit_code=term.exit_code,
                oom_killed=term.reason == "OOMKilled",
                message=term.message or "",
                degraded=node.allocatable < node.capacity,
            )
            if found is not None:
                held = True
                if not found.chained:
                    self._chained(found, pod, event)
        super()._restarted(pod, event, term, fault, held=held)

    def _chained(self, found: Fault, pod: Pod, event: PodEvent) -> None:
        """``pod``'s crash made ``found`` a device chain: its ticket, if not yet due (the
        core opens it 5 min after the XID; a casualty after that escalates it, same
        type), becomes a ``device_unhealthy_eviction``. Before its scenario has expected
        the ticket, the scenario expects the chain instead (:attr:`Fault.casualty`)."""
        found.chained = True
        ticket = found.ticket
        if ticket is None:
            found.casualty = (_pod_key(pod), _owner(pod), event.time)
            return
        if ticket.state == "cancelled":
            return
        if self.truth.ended(ticket.incident.id, event.time):
            # The ticket is over (its drop recovered) and the chain's window is not: the
            # core opens the chain's page (seen in a simulated fleet: a crash 61 s after the
            # recovery).
            self._expect_chain(found, _pod_key(pod), _owner(pod), event.time)
            return
        if ticket.state != "open" or event.time >= ticket.due:
            self.truth.escalated(ticket.incident.id, event.time)
            return
        ticket.cancel()
        self._expect_chain(found, _pod_key(pod), _owner(pod), event.time)

    def _expect_chain(self, found: Fault, pod: str, owner: str, last: datetime) -> None:
        self.truth.expect(
            fault_id=found.fault,
            kind="device_unhealthy_eviction",
            cluster=found.cluster,
            start=found.first,
            first=found.first,
            last=last,
            node=found.node,
            gpus=(found.gpu,),
            pods=(pod,),
            owner=owner,
            severity="page",
        )

    # ---------------------------------------------------------------- faults

    def _oom_kill(self) -> Step:
        """Host OOM: the node's OOMKilling event and the container's OOMKilled exit 137."""
        pod = self._pick_pod()
        if pod is None or pod.node is None:
            return
        rng = self.rng
        pod.busy = True
        node = pod.node
        fault = self.truth.fault_id("host_oom")
        rss = rng.randrange(40_000_000, 900_000_000)
        message = (
            f"Memory cgroup out of memory: Killed process {pod.pid} (python3) "
            f"total-vm:{rss + rng.randrange(10**9)}kB, anon-rss:{rss}kB, "
            f"file-rss:{rng.randrange(10**6)}kB, shmem-rss:0kB, UID:1000 "
            f"pgtables:{rss // 500}kB oom_score_adj:{rng.choice((-997, 1000, 999))}"
        )
        kernel_first = rng.random() < 0.7
        times = []
        if kernel_first:
            event = self._node_kube_event(
                node, "OOMKilling", message, warning=True, source="kernel-monitor"
            )
            times.append(event.time)
            yield event
            yield rng.uniform(0.5, 5.0)
        term = termination(self._time(-0.5), "OOMKilled", 137)
        pod.restarts += 1
        pod.set_main("running", last=term)
        update = self._pod_event(pod)
        self._restarted(pod, update, term, fault)
        times.append(update.time)
        if term.finished_at is not None:
            times.append(term.finished_at)
        # The truth before the update is emitted: the container's OOMKilled alone makes
        # the incident, so a stream that ends before the node's event still owes it.
        if not self.truth.still_open("host_oom_kill", (_pod_key(pod),), update.time):
            self.truth.expect(
                fault_id=fault,
                kind="host_oom_kill",
                cluster=node.cluster.name,
                start=min(times),
                first=min(times),
                last=update.time,
                node=node.name,
                pods=(_pod_key(pod),),
                owner=_owner(pod),
                severity="ticket",
            )
        yield update
        if not kernel_first:
            yield rng.uniform(0.5, 5.0)
            yield self._node_kube_event(
                node, "OOMKilling", message, warning=True, source="kernel-monitor"
            )
        pod.busy = False

    def _crash_loop(self) -> Step:
        """A GPU container that keeps crashing (CUDA OOM half the time), with back-off."""
        pod = self._pick_pod()
        if pod is None:
            return
        rng = self.rng
        pod.busy = True
        fault = self.truth.fault_id("crash_loop")
        crashes = rng.randint(2, 8)
        message = CUDA_OOM if rng.random() < 0.5 else ""
        backoff = 10.0
        for k in range(crashes):
            term = termination(self._time(-0.3), "Error", 1, message)
            pod.set_main("waiting", "CrashLoopBackOff", last=term)
            update = self._pod_event(pod)
            self._restarted(pod, update, term, fault)
            yield update
            yield rng.uniform(0.1, 1.0)
            yield self._pod_kube_event(
                pod,
                "BackOff",
                f"Back-off restarting failed container {pod.main} in pod "
                f"{pod.name}_{pod.workload.template.namespace}({pod.uid})",
                warning=True,
                count=k + 1,
            )
            yield backoff
            pod.restarts += 1
            pod.set_main("running")
            yield self._pod_event(pod)
            yield rng.uniform(20.0, 90.0)
            backoff = min(backoff * 2, 300.0)
        if rng.random() < 0.5:
            pod.busy = False
            return
        # Someone gives up on the loop: the pod is deleted and replaced. Not "Failed with
        # exit 1": under restartPolicy Always/OnFailure the kubelet restarts the container
        # instead, so a pod never ends a crash loop in phase Failed, and that extra exit 1
        # was a crash the truth never counted (a 4th crash in 15 min).
        yield from self._roll(pod)

    def _app_xid(self) -> Step:
        """Application XIDs (13/31/43) on a GPU a pod holds; often the pod then restarts."""
        pod = self._pick_pod()
        if pod is None or pod.node is None or not pod.gpus:
            return
        rng = self.rng
        pod.busy = True
        node = pod.node
        fault = self.truth.fault_id("app_xid")
        gpu = node.gpus[rng.choice(pod.gpus)]
        code = rng.choice(APP_CODES)
        first = self._xid_event(node, gpu, code)
        self.casualties.app_xid(gpu.uuid, first.time)
        if not self.truth.still_open("gpu_app_fault", (gpu.uuid,), first.time):
            self.truth.expect(
                fault_id=fault,
                kind="gpu_app_fault",
                cluster=node.cluster.name,
                start=first.time,
                first=first.time,
                last=first.time,
                node=node.name,
                gpus=(gpu.uuid,),
                # The core learns who holds a GPU from dcgm's bindings: a pod it has not
                # reported yet (it started since the last scrape, or the exporter lost
                # the pod mapping) cannot be named, only the GPU.
                pods=(_pod_key(pod),) if gpu.reported is pod else (),
                owner=_owner(pod),
            )
        yield first
        if rng.random() < 0.3:
            self._push(self.now, self._dcgm_xid(node, gpu, code))
        if rng.random() < 0.25:
            yield rng.uniform(0.05, 0.5)
            yield self._xid_event(node, gpu, 45, caused_by=code)
        if rng.random() < 0.15:
            yield rng.uniform(0.1, 0.8)
            yield self._xid_event(node, gpu, code, source="nvml")
        if rng.random() < 0.3:
            yield rng.uniform(2.0, 30.0)
            yield self._xid_event(node, gpu, 43 if code != 43 else 13)
        if rng.random() < 0.6:
            yield rng.uniform(1.0, 8.0)
            text = CUDA_FAULT if code != 43 else CUDA_LOST
            term = termination(self._time(-0.5), "Error", 1, text)
            pod.restarts += 1
            pod.set_main("running", last=term)
            update = self._pod_event(pod)
            self._restarted(pod, update, term)
            yield update
        pod.busy = False

    def _fatal_xid(self) -> Step:
        """A fatal XID, the device plugin's allocatable drop, the GPU's pod failing,
        its replacement pending until the GPU is reset and allocatable recovers."""
        node = self._pick_node()
        if node is None:
            return
        rng = self.rng
        node.busy = True
        fault = self.truth.fault_id("fatal_xid")
        gpu = node.gpus[rng.randrange(len(node.gpus))]
        code = rng.choice(FATAL_CODES)
        first = self._fatal(node, gpu, code, fault)
        yield first
        if rng.random() < 0.5:
            self._push(self.now, self._dcgm_xid(node, gpu, code, fault))
        if rng.random() < 0.2:
            yield rng.uniform(0.1, 0.8)
            yield self._fatal(node, gpu, code, fault, source="nvml")
        if code == 48 and rng.random() < 0.5:
            yield rng.uniform(0.5, 3.0)
            yield self._xid_event(node, gpu, 63)
        if code == 119:
            for _ in range(rng.randint(0, 2)):
                yield rng.uniform(6.0, 40.0)
                yield self._fatal(node, gpu, 119, fault)
        dropped = rng.random() < 0.85
        if dropped:
            yield rng.uniform(3.0, 40.0)
            node.allocatable = node.capacity - 1
            yield self._node_event(node)
        pod = gpu.pod
        replace: Step | None = None
        failed = False
        if pod is not None and not pod.busy and pod.phase == "Running" and rng.random() < 0.9:
            pod.busy = True
            yield rng.uniform(1.0, 30.0)
            how = rng.random()
            if how < 0.3:
                message = "The node had condition: [DeviceFailed]. "
                yield self._pod_kube_event(pod, "Evicted", message, warning=True)
                phase, reason = "Failed", "Evicted"
            elif how < 0.5:
                message = (
                    f"Allocate failed due to requested number of devices unavailable for {GPU}. "
                    f"Requested: {pod.workload.gpus}, Available: {pod.workload.gpus - 1}, "
                    "which is unexpected"
                )
                phase, reason = "Failed", "UnexpectedAdmissionError"
            else:
                message, phase, reason = "", "Failed", ""
            term = termination(self._time(-0.5), "Error", 1, CUDA_LOST)
            replace = self._fail_and_replace(
                pod,
                phase=phase,
                reason=reason,
                terminated=term,
                message=message,
                wait_for=lambda: node.allocatable == node.capacity,
            )
            # The failure itself and the release of the GPUs happen now; the rest
            # (replacement pending, scheduled after the reset, old pod deleted)
            # continues as its own scenario while this one waits for the reset.
            for item in replace:
                if isinstance(item, float):
                    self._push(self.now + item, replace)
                    break
                if not failed:
                    failed = True
                    self.truth.expect(
                        fault_id=fault,
                        kind="device_unhealthy_eviction",
                        cluster=node.cluster.name,
                        start=first.time,
                        first=first.time,
                        last=item.time,
                        node=node.name,
                        gpus=(gpu.uuid,),
                        pods=(_pod_key(pod),),
                        owner=_owner(pod),
                        severity="page",
                    )
                yield item
        known = self.casualties.fault(gpu.uuid)
        if failed and known is not None:
            known.chained = True
        elif known is not None and known.casualty is not None:
            # Another pod on the GPU crashed of it meanwhile (a crash loop's next crash).
            self._expect_chain(known, *known.casualty)
        if not failed and (known is None or known.casualty is None):
            # No pod failed: the GPU still needs a reset (a ticket), opened 5 min after
            # the XID if no chain took it; also the drop's own 5 min when it persists.
            ticket = self.truth.expect(
                fault_id=fault,
                kind="gpu_degraded",
                cluster=node.cluster.name,
                start=first.time,
                first=first.time,
                last=first.time,
                due=first.time + DEGRADED_AFTER,
                node=node.name,
                gpus=(gpu.uuid,),
                severity="ticket",
            )
            if known is not None:
                known.ticket = ticket
        yield rng.uniform(300.0, 2400.0)
        if dropped:
            node.allocatable = node.capacity
            back = self._node_event(node)
            self.truth.ends(f"{fault}/gpu_degraded", back.time)
            yield back
        node.busy = False

    def _dcgm_xid(self, node: Node, gpu: Gpu, code: int, fault: str = "") -> Step:
        """The same XID as the dcgm connector reports it: at the node's next scrape, when
        ``DCGM_EXP_XID_ERRORS_COUNT`` has grown (one line, two sources: one episode)."""
        yield self._to_scrape(node)
        if fault:
            yield self._fatal(node, gpu, code, fault, source="dcgm")
        else:
            yield self._xid_event(node, gpu, code, source="dcgm")

    def _flaky_gpu(self) -> Step:
        """Bad hardware: the same fatal XID again and again over an hour or two."""
        node = self._pick_node()
        if node is None:
            return
        rng = self.rng
        fault = self.truth.fault_id("flaky_gpu")
        gpu = node.gpus[rng.randrange(len(node.gpus))]
        code = rng.choice(FLAKY_CODES)
        for k in range(rng.randint(4, 9)):
            event = self._fatal(node, gpu, code, fault)
            # A GPU that logged this code within the repeat window (another fault's, say
            # a fatal_xid an hour ago) gets no new ticket: the repeat counts it (seen in a
            # simulated fleet).
            recurs = self.truth.recurs(
                cluster=node.cluster.name, node=node.name, gpu=gpu.uuid, code=code, time=event.time
            )
            if k == 0 and not recurs:
                ticket = self.truth.expect(
                    fault_id=fault,
                    kind="gpu_degraded",
                    cluster=node.cluster.name,
                    start=event.time,
                    first=event.time,
                    last=event.time,
                    due=event.time + DEGRADED_AFTER,
                    node=node.name,
                    gpus=(gpu.uuid,),
                    severity="ticket",
                )
                known = self.casualties.fault(gpu.uuid)
                if known is not None:
                    known.ticket = ticket
            yield event
            yield rng.uniform(120.0, 1500.0)

    def _not_ready(self) -> Step:
        """A node goes NotReady and comes back; past the toleration its pods are evicted.

        Timings are Kubernetes' defaults: ``Unknown`` after the node monitor grace period (40 s,
        50 s in recent releases), ``False`` at once when the kubelet reports it; the ``NoExecute``
        taint gives every pod 300 s of toleration, then a ``TaintManagerEviction`` marks them for
        deletion and their controllers create replacements. Trap: on an unreachable node the pods
        stay terminating until the kubelet is back.
        docs/replay.md, design notes: `Simulator._not_ready` (the sources).
        """
        node = self._pick_node()
        if node is None:
            return
        rng = self.rng
        node.busy = True
        fault = self.truth.fault_id("not_ready")
        status = "False" if rng.random() < 0.5 else "Unknown"
        if status == "Unknown":
            # The kubelet's last status is its last word; the controller waits out the
            # grace period before it calls the node Unknown.
            yield self._node_event(node)
            yield rng.uniform(40.0, 50.0)
        node.ready = status
        first = self._node_event(node)
        held = list(
            dict.fromkeys(
                g.pod for g in node.gpus if g.pod is not None and g.pod.phase == "Running"
            )
        )
        running = sorted({_pod_key(pod) for pod in held})
        yield first
        announced = self._node_kube_event(
            node,
            "NodeNotReady",
            f"Node {node.name} status is now: NodeNotReady",
            source="node-controller",
        )
        yield announced
        pending: Pending | None = None
        if running:
            pending = self.truth.expect(
                fault_id=fault,
                kind="gpu_node_not_ready",
                cluster=node.cluster.name,
                start=first.time,
                first=first.time,
                last=announced.time,
                due=first.time + NOT_READY_GRACE,
                node=node.name,
                pods=tuple(running),
                severity="page",
            )
        lasts = rng.uniform(30.0, 110.0) if rng.random() < 0.35 else rng.uniform(130.0, 900.0)
        evicted: list[Pod] = []
        gone: list[Pod] = []
        # The core pages at the grace only if a GPU pod still runs then (one that finished
        # meanwhile lost nothing: a job that Succeeded 16 s into the NotReady).
        grace_at = (first.time + NOT_READY_GRACE - self.spec.start).total_seconds()
        still: list[bool] = []

        def still_running() -> None:
            still.append(any(pod.phase == "Running" and pod.node is node for pod in held))

        self._at(grace_at, still_running)
        if lasts > TOLERATION_SECONDS:
            yield TOLERATION_SECONDS + rng.uniform(0.1, 3.0)
            for gpu in node.gpus:
                pod = gpu.pod
                if (
                    pod is not None
                    and not pod.busy
                    and pod.phase == "Running"
                    and pod not in evicted
                ):
                    pod.busy = True
                    evicted.append(pod)
            burst: list[AnyEvent] = []
            for pod in evicted:  # the taint eviction controller marks them all at once
                namespace = pod.workload.template.namespace
                burst.append(
                    self._pod_kube_event(
                        pod,
                        "TaintManagerEviction",
                        f"Marking for deletion Pod {namespace}/{pod.name}",
                        source="taint-eviction-controller",
                    )
                )
                deleted = pod.deleting = self._time()
                burst.append(self._pod_event(pod, deleted=deleted))
                self._push(self.now + rng.uniform(1.0, 20.0), self._replace_evicted(pod))
                if status == "False":
                    # The kubelet still runs: it stops the marked pod within its grace.
                    later = self.now + rng.uniform(5.0, 30.0)
                    self._push(later, self._finish_evicted(pod, deleted))
                    gone.append(pod)
            yield from self._burst(burst)
            yield max(lasts - TOLERATION_SECONDS, 1.0)
        else:
            yield lasts
        node.ready = "True"
        back = self._node_event(node)
        if pending is not None:
            if evicted or (back.time - first.time > NOT_READY_GRACE and any(still)):
                pending.confirm()
            else:
                pending.cancel()
        yield back
        yield self._node_kube_event(
            node,
            "NodeReady",
            f"Node {node.name} status is now: NodeReady",
            source="node-controller",
        )
        for pod in evicted:
            if pod not in gone:
                # The kubelet is back: it stops the marked pods' containers and they go.
                deleted = pod.deleting or self._time()
                self._push(self.now + rng.uniform(2.0, 30.0), self._finish_evicted(pod, deleted))
        node.busy = False

    def _at(self, at: float, call: Callable[[], None]) -> None:
        """Run ``call`` at ``at`` (simulation seconds; at once if that is past), beside
        the scenario: a probe that emits nothing and draws nothing from the rng, so the
        stream is the same as without it (the scenario's own delays are untouched)."""

        def probe() -> Step:
            call()
            yield from ()

        self._push(max(at, self.now), probe())

    def _exporter_outage(self) -> Step:
        """dcgm-exporter on a node comes back from a restart without the kubelet's
        pod-resources socket (a gpu-operator upgrade; NVIDIA/dcgm-exporter #151, #272,
        #577): every GPU is reported with no pod until someone restarts it. With all 8
        GPUs held, that alone is a disagreement of 8 > 5: ``allocation_mismatch`` once
        it has lasted 5 min. The truth is counted from what the node's pods hold while
        it is blind (:mod:`gputriage.simulate.mismatch_truth`): a pod that ends there
        ends the disagreement, whatever the exporter's state."""
        node = self._pick_node()
        if node is None:
            return
        held = [g for g in node.gpus if g.pod is not None and g.pod.phase == "Running"]
        if len(held) < len(node.gpus):
            return
        rng = self.rng
        node.busy = True
        fault = self.truth.fault_id("exporter_outage")
        yield self._to_scrape(node)
        node.blind = True
        at = self._time()
        if node.bound_at is not None and at <= node.bound_at:
            # This scrape already said what it bound (a pod that started just before):
            # the exporter that comes back blind says so after it, not 20 ms before.
            at = node.bound_at + timedelta(microseconds=1)
        blind = [self._binding_event(node, gpu, at) for gpu in node.gpus]
        track = self.truth.mismatch.blind(cluster=node.cluster.name, node=node.name, fault=fault)
        track.held(at, _held(node))
        yield from self._burst(list(blind))
        left = rng.uniform(120.0, 240.0) if rng.random() < 0.3 else rng.uniform(420.0, 1500.0)
        while left > 0.0:  # what its pods hold, as they end and start (the truth counts it)
            yield min(POLL, left)
            left -= POLL
            track.held(self.spec.start + timedelta(seconds=self.now), _held(node))
        yield self._to_scrape(node)
        node.blind = False
        at = self._time()
        track.back(at)
        yield from self._burst([self._binding_event(node, gpu, at) for gpu in node.gpus])
        node.busy = False

    def _replace_evicted(self, pod: Pod) -> Step:
        """The controller's replacement for a pod marked for deletion: pending until a
        node has room (the evicted pod still holds its GPUs on the NotReady node)."""
        new = self._replacement(pod)
        new.busy = True
        yield from self._add_pending(new, unschedulable=True)
        node = pod.node
        while node is not None and (
            node.ready != "True" or any(node.gpus[k].pod is not None for k in pod.gpus)
        ):
            yield 15.0
        if node is not None:
            yield from self._schedule(new, node, pod.gpus)
        new.busy = False

    def _finish_evicted(self, pod: Pod, deleted: datetime) -> Step:
        term = termination(self._time(-1.0), "Error", 143)
        pod.set_main("terminated", "Error", terminated=term)
        pod.phase = "Failed"
        yield self._pod_event(pod, deleted=deleted)
        yield from self._unbind(pod)
        yield self._pod_event(pod, "deleted", deleted=deleted)
        self._forget(pod)

    def _allocatable_flap(self) -> Step:
        """Silent degradation: allocatable drops by one GPU, with no XID, then recovers."""
        node = self._pick_node()
        if node is None:
            return
        rng = self.rng
        node.busy = True
        fault = self.truth.fault_id("allocatable_drop")
        node.allocatable = node.capacity - 1
        drop = self._node_event(node)
        pending = self.truth.expect(
            fault_id=fault,
            kind="gpu_degraded",
            cluster=node.cluster.name,
            start=drop.time,
            first=drop.time,
            last=drop.time,
            due=drop.time + DEGRADED_AFTER,
            node=node.name,
            severity="ticket",
        )
        yield drop
        yield rng.uniform(60.0, 240.0) if rng.random() < 0.4 else rng.uniform(400.0, 2400.0)
        node.allocatable = node.capacity
        back = self._node_event(node)
        self.truth.ends(f"{fault}/gpu_degraded", back.time)
        if back.time - drop.time > DEGRADED_AFTER:
            pending.confirm()
        else:
            pending.cancel()
        yield back
        node.busy = False


def _held(node: Node) -> int:
    """GPUs held by running pods on ``node`` (Kubernetes' count in allocation_mismatch)."""
    return sum(1 for g in node.gpus if g.pod is not None and g.pod.phase == "Running")
