"""Cluster-scoped faults: a GPU node group the autoscaler cannot grow.

``scale_up`` tells one story: a Job of 8-GPU pods is created in a full cluster, the
scheduler says ``Insufficient nvidia.com/gpu``, cluster-autoscaler (every 10 s) plans a
scale-up of the matching GPU node group and ties the pods to it (``TriggeredScaleUp``),
the cloud refuses (a vCPU quota, or the zone has no capacity), the group is backed off
(5 min, doubling), the autoscaler tries again after each backoff, and in the end the
Job is deleted by its owner. Its truth is counted by
:mod:`gputriage.simulate.cluster_truth` from the records emitted: one
``scale_up_failure`` for the group (quota: page, capacity: ticket) and, when the pods
have pended 10 min by the third failed attempt, one ``gpu_pods_starved`` for the Job.

Karpenter is not simulated yet (its records parse, see
:func:`gputriage.simulate.autoscaler.karpenter_records`).
"""

from __future__ import annotations

from gputriage.demo.events import GPU
from gputriage.simulate.autoscaler import (
    BACKOFF_INITIAL,
    BACKOFF_MAX,
    CAPACITY,
    QUOTA,
    SCAN_INTERVAL,
    derived,
    go_time,
    klog_records,
)
from gputriage.simulate.catalogue import TEMPLATES
from gputriage.simulate.model import Cluster, NodeGroup, Pod, Workload
from gputriage.simulate.noise import Noise
from gputriage.simulate.spec import Step
from schemas.events import AutoscalerEvent

_QUIET_AFTER = 1800.0 + 120.0
"""A group's next failure story starts only this long after the last one's last failure
(scale_up_failure resolves after 30 min quiet: two stories, two incidents, never one)."""


class Scaling(Noise):
    """The autoscaler's faults (a mixin of :class:`gputriage.simulate.faults.Simulator`)."""

    def _records(self, records: tuple[AutoscalerEvent, ...]) -> Step:
        for record in records:
            self.truth.cluster.autoscaler(record)
            yield record

    def _ca(self, cluster: Cluster, where: str, message: str, severity: str = "I") -> Step:
        """One klog line of the cluster's autoscaler, logged now."""
        yield from self._records(klog_records(cluster, self._time(), where, message, severity))

    def _ca_event(self, pod: Pod, reason: str, message: str, count: int = 1) -> Step:
        """An autoscaler Event on a pod: the k8s record, then the record derived from it."""
        event = self._pod_kube_event(pod, reason, message, source="cluster-autoscaler", count=count)
        for record in derived(event):
            self.truth.cluster.autoscaler(record)
            self._follow.append(record)
        yield event

    def _scale_up(self) -> Step:
        cluster = self._cluster()
        if not cluster.groups:
            return
        rng = self.rng
        group = cluster.groups[rng.randrange(len(cluster.groups))]
        if group.busy or self.now < group.quiet_after:
            return
        group.busy = True
        fault = self.truth.fault_id("scale_up")
        quota = rng.random() < 0.4
        attempts = rng.choice((1, 2, 3, 4, 4))
        template = rng.choice(TEMPLATES[8])
        owner = self._unique(lambda: f"{template.base}-{self._suffix()}")
        workload = Workload(template, owner, 8, 0)
        created = self._time()
        pods = [self._new_pod(cluster, 8, created, workload) for _ in range(rng.choice((1, 2, 4)))]
        self.truth.cluster.claim(cluster=cluster.name, group=group.name, fault=fault, at=created)
        for pod in pods:
            pod.busy = True
            yield from self._add_pending(pod, unschedulable=True)
        yield rng.uniform(0.0, SCAN_INTERVAL)
        backoff = BACKOFF_INITIAL
        for k in range(attempts):
            yield from self._attempt(cluster, group, pods, quota, first=k == 0)
            yield rng.uniform(5.0, 60.0)  # the cloud answers
            yield from self._failure(cluster, group, quota, backoff)
            if k == attempts - 1:
                break
            yield from self._backoff(cluster, group, pods, backoff)
            backoff = min(backoff * 2, BACKOFF_MAX)
        group.quiet_after = self.now + _QUIET_AFTER
        # The owner gives up: the Job (and its pods) are deleted.
        yield rng.uniform(60.0, 900.0)
        for pod in pods:
            yield from self._delete(pod)
        group.busy = False

    def _attempt(
        self, cluster: Cluster, group: NodeGroup, pods: list[Pod], quota: bool, *, first: bool
    ) -> Step:
        """One loop that finds the pods unschedulable and plans the group's scale-up."""
        for pod in pods:
            namespace = pod.workload.template.namespace
            yield from self._ca(
                cluster, "klogx.go:87", f"Pod {namespace}/{pod.name} is unschedulable"
            )
        target = min(group.size + len(pods), group.max_size)
        plan = f"[{{{group.name} {group.size}->{target} (max: {group.max_size})}}]"
        yield from self._ca(cluster, "orchestrator.go:185", f"Final scale-up plan: {plan}")
        yield from self._ca(
            cluster, "executor.go:147", f"Scale-up: setting group {group.name} size to {target}"
        )
        if first:
            for pod in pods:
                yield from self._ca_event(
                    pod, "TriggeredScaleUp", f"pod triggered scale-up: {plan}"
                )

    def _failure(self, cluster: Cluster, group: NodeGroup, quota: bool, backoff: float) -> Step:
        """The cloud's refusal, and the group's backoff."""
        rng = self.rng
        if quota:
            description = QUOTA[1].format(limit=rng.choice((768, 1152, 1344, 2304)))
        else:
            zone = f"{cluster.region}{rng.choice('abcd')}"
            description = CAPACITY[1].format(itype=group.instance_type, zone=zone)
        yield from self._ca(
            cluster,
            "auto_scaling_groups.go:555",
            f"ASG {group.name} scaling failed with description: {description}",
            "W",
        )
        until = self._time(backoff)
        yield from self._ca(
            cluster,
            "clusterstate.go:223",
            f"Disabling scale-up for node group {group.name} until {go_time(until)}",
            "W",
        )

    def _backoff(self, cluster: Cluster, group: NodeGroup, pods: list[Pod], backoff: float) -> Step:
        """The loops of a backoff: each says the group is not ready; the pods are told why
        (an Event the API server aggregates: one record per pod per backoff, its count up)."""
        rng = self.rng
        waited = 0.0
        told = False
        while waited < backoff:
            step = SCAN_INTERVAL + rng.uniform(-0.2, 0.2)
            yield step
            waited += step
            yield from self._ca(
                cluster,
                "orchestrator.go:511",
                f"Node group {group.name} is not ready for scaleup - backoff",
                "W",
            )
            if not told:
                told = True
                for pod in pods:
                    yield from self._ca_event(
                        pod,
                        "NotTriggerScaleUp",
                        "pod didn't trigger scale-up: 1 in backoff after failed scale-up",
                    )
                    yield from self._failed_scheduling(pod, cluster)

    def _failed_scheduling(self, pod: Pod, cluster: Cluster) -> Step:
        total = len(cluster.nodes)
        yield self._pod_kube_event(
            pod,
            "FailedScheduling",
            f"0/{total} nodes are available: {total} Insufficient {GPU}. preemption: 0/{total} "
            f"nodes are available: {total} No preemption victims found for incoming pod.",
            warning=True,
            source="default-scheduler",
        )
