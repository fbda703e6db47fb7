"""Background traffic and noise: routine updates, pod lifecycles, healthy failures.

Nothing here is a fault: none of it may raise an incident, and none writes truth
(except that every restart is *reported* to the truth recorder, which counts them:
healthy restarts that happen to bunch up into a crash loop are one, by the rule).
The pod lifecycles (pending, scheduled, deleted, replaced) are shared with the
faults in :mod:`gputriage.simulate.faults`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import msgspec

from gputriage.demo.events import GPU, container, termination
from gputriage.simulate.catalogue import APP_ERRORS, INFO_CODES, SCHEDULED
from gputriage.simulate.fleet import Fleet
from gputriage.simulate.model import Node, Pod
from gputriage.simulate.spec import Step
from schemas.codec import AnyEvent
from schemas.events import NodeEvent, PodCondition, PodEvent, Termination


class Noise(Fleet):
    """The fleet's background: everything a healthy cluster does."""

    def _restarted(
        self, pod: Pod, event: PodEvent, term: Termination, fault: str = "", *, held: bool = False
    ) -> None:
        """Tell the truth recorder a container of ``pod`` restarted after ``term``;
        ``held``: a device chain holds the pod (:mod:`gputriage.simulate.casualty`)."""
        template = pod.workload.template
        self.truth.restart(
            cluster=pod.cluster.name,
            node=event.node,
            pod=f"{template.namespace}/{pod.name}",
            owner=f"{template.kind}/{pod.workload.owner}",
            # The crash happened at its finishedAt, seconds before the kubelet reports
            # it: the fault's start, and what "> 3 restarts in 15 min" counts.
            time=term.finished_at if term.finished_at is not None else event.time,
            exit_code=term.exit_code,
            oom_killed=term.reason == "OOMKilled",
            fault=fault,
            held=held,
        )

    # ---------------------------------------------------------------- routine draws

    def _routine_pod(self) -> AnyEvent:
        pod = self._pick_pod(running=False)
        if pod is None:  # pragma: no cover - only with an empty fleet
            return self._routine_node()
        return self._pod_event(pod)

    def _routine_node(self) -> AnyEvent:
        node = self.nodes[self.rng.randrange(len(self.nodes))]
        return self._node_event(node)

    def _routine_binding(self) -> AnyEvent:
        node = self.nodes[self.rng.randrange(len(self.nodes))]
        return self._binding_event(node, node.gpus[self.rng.randrange(len(node.gpus))])

    def _restart(self) -> AnyEvent | None:
        """One ordinary application crash and restart."""
        pod = self._pick_pod()
        if pod is None:
            return None
        rng = self.rng
        # Four draws from the rng, in the order the bytes depend on: code, offset,
        # the time's jitter, message.
        code = rng.choice((1, 1, 1, 2, 134, 139))
        finished = self._time(-rng.uniform(1.0, 10.0))
        term = termination(finished, "Error", code, rng.choice(APP_ERRORS))
        pod.restarts += 1
        pod.set_main("running", last=term)
        event = self._pod_event(pod)
        self._restarted(pod, event, term)
        return event

    def _info_xid(self) -> AnyEvent | None:
        node = self._pick_node(healthy=False)
        if node is None:
            return None
        gpu = node.gpus[self.rng.randrange(len(node.gpus))]
        return self._xid_event(node, gpu, self.rng.choice(INFO_CODES))

    # ---------------------------------------------------------------- what a healthy
    # cluster's connectors also deliver: none of it may raise anything

    def _duplicate(self) -> AnyEvent:
        """At-least-once delivery: a producer retried a batch, so one record arrives twice
        in a row (same id: the core drops the copy)."""
        event = self._routine_pod()
        self._follow.append(event)
        return event

    def _late(self) -> AnyEvent:
        """A record that arrives a little after newer ones (another partition, a slow
        producer): less than the core's 0.5 s grace (``streams/core/config.py``)."""
        event = self._routine_pod()
        earlier = event.time - timedelta(seconds=self.rng.uniform(0.1, 0.4))
        return msgspec.structs.replace(event, time=earlier)

    def _relist(self) -> AnyEvent | None:
        """A watch that expired (410 Gone) or a restarted k8s connector lists again: the
        node and its pods come again as they last were, same ids and their own older times
        (docs/connectors.md: an unchanged object gives exactly the same event): stale
        copies."""
        node = self.nodes[self.rng.randrange(len(self.nodes))]
        again = [node.last]
        for gpu in node.gpus:
            pod = gpu.pod
            if pod is not None and pod.last is not None and pod.last not in again:
                again.append(pod.last)
        events = [e for e in again if isinstance(e, (PodEvent, NodeEvent))]
        if not events:
            return None
        self._follow.extend(events[1:])
        return events[0]

    def _plugin_blip(self) -> Step:
        """The NVIDIA device plugin restarts (an upgrade, a kubelet restart) and registers
        its GPUs again: allocatable 8 -> 0 -> 8 within seconds. No fault: such a drop
        does not arm the eviction chain."""
        node = self._pick_node()
        if node is None:
            return
        node.busy = True
        node.allocatable = 0
        yield self._node_event(node)
        yield self.rng.uniform(2.0, 10.0)
        node.allocatable = node.capacity
        yield self._node_event(node)
        node.busy = False

    def _cpu_pod(self, node: Node | None = None, *, crashed: bool = False) -> AnyEvent:
        """The node's node-exporter (a DaemonSet pod with no GPU): what the k8s connector
        publishes only with ``--keep-all``; a CPU pod's crash is never a GPU incident."""
        node = node or self.nodes[self.rng.randrange(len(self.nodes))]
        cluster = node.cluster
        cluster.rv += 1
        last = None
        if crashed:
            node.cpu_restarts += 1
            last = termination(self._time(-1.0), "Error", 2, "panic: runtime error: ")
        uid = f"{node.uid[:24]}cpu0{node.uid[28:]}"
        return PodEvent(
            id=f"k8s:{uid}:{cluster.rv}",
            cluster=cluster.name,
            time=self._time(),
            node=node.name,
            namespace="monitoring",
            name=f"node-exporter-{node.uid[:5]}",
            uid=uid,
            phase="Running",
            owner_kind="DaemonSet",
            owner_name="node-exporter",
            containers=(
                container("node-exporter", restarts=node.cpu_restarts, state="running", last=last),
            ),
            scheduled=SCHEDULED,
            created_at=self.spec.start - timedelta(days=3),
            resource_version=cluster.rv,
        )

    def _cpu_crash_loop(self) -> Step:
        """A CPU pod crash-looping on a GPU node: five exits in ten minutes, no GPU."""
        node = self.nodes[self.rng.randrange(len(self.nodes))]
        for _ in range(5):
            yield self._cpu_pod(node, crashed=True)
            yield self.rng.uniform(60.0, 150.0)

    # ---------------------------------------------------------------- pod lifecycles

    def _unbind(self, pod: Pod) -> Step:
        """The pod's GPUs are free; the next dcgm scrape says so (one binding per GPU)."""
        node = pod.node
        if node is None:
            return
        freed = [node.gpus[k] for k in pod.gpus if node.gpus[k].pod is pod]
        for gpu in freed:
            gpu.pod = None
        if freed:
            yield self._to_scrape(node)
        # A GPU taken again before the scrape is reported with its new pod, by _schedule.
        yield from self._scrape(node, [gpu for gpu in freed if gpu.pod is None])

    def _add_pending(self, pod: Pod, *, unschedulable: bool) -> Step:
        """A new pod, not yet on a node."""
        pod.set_main("waiting", "ContainerCreating", keep_last=False)
        if unschedulable:
            total = len(pod.cluster.nodes)
            message = (
                f"0/{total} nodes are available: {total} Insufficient {GPU}. preemption: "
                f"0/{total} nodes are available: {total} No preemption victims found "
                "for incoming pod."
            )
            pod.scheduled = PodCondition(status="False", reason="Unschedulable", message=message)
            yield self._pending_event(pod, unschedulable=True)
            yield self._pod_kube_event(
                pod, "FailedScheduling", message, warning=True, source="default-scheduler"
            )
        else:
            yield self._pending_event(pod, unschedulable=False)

    def _pending_event(self, pod: Pod, *, unschedulable: bool) -> PodEvent:
        """A pending pod's ``added`` record, told to the truth recorder (a pod that pends
        long enough while the autoscaler fails is starved, whichever story it is in)."""
        event = self._pod_event(pod, "added")
        template = pod.workload.template
        self.truth.cluster.pending(
            cluster=pod.cluster.name,
            pod=f"{template.namespace}/{pod.name}",
            owner=f"{template.kind}/{template.namespace}/{pod.workload.owner}",
            owner_label=f"{template.kind}/{pod.workload.owner}",
            created=pod.created_at,
            at=event.time,
            unschedulable=unschedulable,
            resource=GPU,
        )
        return event

    def _left(self, pod: Pod, event: PodEvent) -> PodEvent:
        """Tell the truth recorder a pod stopped pending (scheduled, or being deleted)."""
        self.truth.cluster.left(
            cluster=pod.cluster.name,
            pod=f"{pod.workload.template.namespace}/{pod.name}",
            at=event.time,
        )
        return event

    def _schedule(self, pod: Pod, node: Node, gpus: tuple[int, ...]) -> Step:
        """Bind a pending pod to ``gpus`` on ``node`` and start it, once the node is Ready.

        The node lifecycle controller taints a NotReady node ``node.kubernetes.io/
        not-ready`` / ``unreachable`` with ``NoSchedule`` (TaintNodesByCondition;
        kubernetes.io, "Taints and Tolerations", taint-based evictions), and the scheduler
        places no pod there until it is Ready again: the pod stays pending. Placed on it,
        a rollout's replacement started on a node that was NotReady, and the taint
        eviction then evicted a pod the NotReady's truth never named (seen in a simulated fleet)."""
        rng = self.rng
        while node.ready != "True":
            yield 15.0
        yield rng.uniform(0.2, 3.0)
        self._place(pod, node, gpus)
        yield self._left(pod, self._pod_event(pod))
        namespace = pod.workload.template.namespace
        yield self._pod_kube_event(
            pod,
            "Scheduled",
            f"Successfully assigned {namespace}/{pod.name} to {node.name}",
            source="default-scheduler",
        )
        yield rng.uniform(2.0, 40.0)
        image = pod.workload.template.image
        yield self._pod_kube_event(
            pod, "Pulled", f'Container image "{image}" already present on machine'
        )
        yield self._pod_kube_event(pod, "Created", f"Created container {pod.main}")
        yield self._pod_kube_event(pod, "Started", f"Started container {pod.main}")
        pod.phase = "Running"
        pod.set_main("running")
        yield self._pod_event(pod)
        yield self._to_scrape(node)  # dcgm-exporter sees the pod at its next scrape
        yield from self._scrape(node, [node.gpus[k] for k in gpus if node.gpus[k].pod is pod])

    def _delete(self, pod: Pod) -> Step:
        """Graceful deletion: a ``deleted_at`` update, then the ``deleted`` event."""
        deleted = pod.deleting = pod.deleting or self._time()
        yield self._left(pod, self._pod_event(pod, deleted=deleted))
        yield self.rng.uniform(0.5, 5.0)
        yield self._pod_event(pod, "deleted", deleted=deleted)
        self._forget(pod)

    def _replacement(self, old: Pod) -> Pod:
        """The pod a controller creates for ``old``: same owner unless a Job completed."""
        workload = old.workload
        if workload.template.kind == "Job" and old.phase == "Succeeded":
            workload = self._workload(workload.gpus)
        return self._new_pod(old.cluster, workload.gpus, self._time(), workload)

    def _fail_and_replace(
        self,
        pod: Pod,
        *,
        phase: str,
        reason: str,
        terminated: Termination | None,
        message: str = "",
        wait_for: Callable[[], bool] | None = None,
    ) -> Step:
        """The pod ends; its GPUs are released; a controller creates a replacement
        which lands on the same GPUs (once ``wait_for`` says they are back); the old
        pod object is deleted some time later."""
        rng = self.rng
        node = pod.node
        gpus = pod.gpus
        pod.phase = phase
        pod.reason = reason
        pod.message = message
        if terminated is None:
            terminated = termination(self._time(-0.5), "Error", 1)
        pod.set_main("terminated", terminated.reason, terminated=terminated)
        yield self._pod_event(pod)
        yield rng.uniform(0.5, 3.0)
        yield from self._unbind(pod)
        if node is None:
            return
        yield rng.uniform(0.5, 5.0)
        new = self._replacement(pod)
        new.busy = True
        blocked = wait_for is not None and not wait_for()
        yield from self._add_pending(new, unschedulable=blocked)
        while wait_for is not None and not wait_for():
            yield 15.0
        yield from self._schedule(new, node, gpus)
        new.busy = False
        yield rng.uniform(20.0, 300.0)
        yield from self._delete(pod)

    def _eviction(self) -> Step:
        """Node-pressure eviction (no GPU fault): Evicted event, pod Failed/Evicted, replacement."""
        pod = self._pick_pod()
        if pod is None:
            return
        rng = self.rng
        pod.busy = True
        message = (
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: "
            f"{rng.randrange(20_000, 100_000)}Ki. Container {pod.main} was using "
            f"{rng.randrange(10**8, 10**9)}Ki, request is 0, has larger consumption of memory. "
        )
        yield self._pod_kube_event(pod, "Evicted", message, warning=True)
        yield rng.uniform(0.2, 2.0)
        term = termination(self._time(-0.2), "Error", 137)
        yield from self._fail_and_replace(
            pod, phase="Failed", reason="Evicted", terminated=term, message=message
        )

    def _completion(self) -> Step:
        """Pod churn: a Job pod succeeds (or a ReplicaSet pod is rolled) and is replaced."""
        pod = self._pick_pod()
        if pod is None:
            return
        pod.busy = True
        if pod.workload.template.kind == "Job":
            term = termination(self._time(-1.0), "Completed", 0)
            yield from self._fail_and_replace(pod, phase="Succeeded", reason="", terminated=term)
            return
        yield from self._roll(pod)

    def _roll(self, pod: Pod) -> Step:
        """The pod is deleted gracefully (a rollout, or an operator or controller giving
        up on it), then a new pod of the same workload starts on its GPUs.

        The deletion sets ``deletionTimestamp``; the kubelet SIGTERMs the container (exit
        143) and the object goes. A pod of a ``restartPolicy`` Always/OnFailure owner
        never ends in phase Failed on its own exits (the kubelet restarts it), so this
        is also how a crash loop ends when someone gives up on it: the Job controller
        at ``backoffLimit`` deletes the running pod; a Deployment's is deleted by a
        rollback (kubernetes.io: Jobs, "Pod backoff failure policy").
        """
        rng = self.rng
        node, gpus = pod.node, pod.gpus
        deleted = pod.deleting = self._time()
        yield self._pod_event(pod, deleted=deleted)
        yield rng.uniform(1.0, 30.0)
        term = termination(self._time(-0.1), "Error", 143)
        pod.set_main("terminated", "Error", terminated=term)
        yield self._pod_event(pod, deleted=deleted)
        yield from self._unbind(pod)
        yield self._pod_event(pod, "deleted", deleted=deleted)
        self._forget(pod)
        if node is None:
            return
        new = self._new_pod(pod.cluster, pod.workload.gpus, self._time(), pod.workload)
        new.busy = True
        # Sometimes the scheduler tries before the old pod's GPUs are free again: the
        # new pod is unschedulable for a few minutes, then placed (no fault).
        waits = rng.random() < 0.3
        yield from self._add_pending(new, unschedulable=waits)
        if waits:
            yield rng.uniform(20.0, 240.0)
        yield from self._schedule(new, node, gpus)
        new.busy = False
