"""``monitoring_gap``: we are blind on a node, since when, and why
(:mod:`streams.core.rules.watchers`).

Three ways to go blind, each through the real core: a source's heartbeat goes silent (a
node agent's :class:`Tick` with ``node`` and ``source``; ``read_at`` is when it last read
its input, which a dcgm source whose scrapes fail keeps old while its ticks go on), a
monitoring pod crash-loops or is liveness-killed, GPU containers fail to start in a burst.
The kubelet's and the runtime's strings are real (tests/data/writeback/messages.md): the
StartError pod and the liveness Events are read from tests/data/writeback through the k8s
connector's own slimming, then placed on this test's timeline.
"""

from __future__ import annotations

import itertools
import json
import random

import msgspec
import pytest

from connectors.k8s.slim import slim_object
from schemas.codec import AnyEvent, encode
from schemas.events import KubeEvent, PodEvent, Termination, Tick
from schemas.incidents import Evidence, Incident
from schemas.keys import key_of
from streams.core import Correlator, step
from streams.core.state import ClusterState, FailedStart, NodeState, WatchState
from tests.core_helpers import config, feed, final, of_type, run, within_grace
from tests.disruption_streams import CORDON, KARPENTER_V1
from tests.factories import T0, Cluster, at, term
from tests.paths import ROOT

N = "gpu-node-01"
GAP = "monitoring_gap"
MIN = 60.0
HOUR = 3600.0
DATA = ROOT / "tests" / "data" / "writeback"
BURST_MESSAGE = (
    "failed to create containerd task: failed to create shim task: OCI runtime create "
    "failed: runc create failed: unable to start container process: error during container "
    "init: error running prestart hook #0: exit status 1, stdout: , stderr: Auto-detected "
    "mode as 'legacy'\nnvidia-container-cli: initialization error: nvml error: "
    "driver/library version mismatch: unknown"
)
"""NVIDIA/k8s-device-plugin#1431, the newer toolkit's wording (messages.md)."""
SPEC_MESSAGE = (
    "failed to create containerd task: OCI runtime create failed: container_linux.go:349: "
    'starting container process caused "close exec fds: ensure /proc/self/fd is on procfs: '
    'operation not permitted": unknown'
)
"""A StartError that is one workload's own (DataDog/helm-charts CHANGELOG, messages.md)."""


def _fixture(name: str) -> object:
    return json.loads((DATA / name).read_text(encoding="utf-8"))


def _slim(obj: object) -> AnyEvent:
    event = slim_object(obj, "modified", cluster="c1")
    assert not isinstance(event, Exception), event
    return event  # type: ignore[return-value]


class Stream:
    """One scenario's records, written on ``c``: heartbeats, monitoring pods, Events."""

    def __init__(self) -> None:
        self.c = Cluster()
        self.n = 0

    def _next(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n:06d}"

    def beat(self, t: float, source: str = "dcgm", *, read: float | None = None) -> Tick:
        """``source``'s heartbeat at ``t`` (``read``: when it last read its input)."""
        ev = Tick(
            id=self._next("hb"),
            cluster="c1",
            time=at(t),
            node=N,
            source=source,
            read_at=None if read is None else at(read),
        )
        self.c.events.append(ev)
        return ev

    def beats(self, start: float, end: float, source: str = "dcgm", every: float = 10) -> None:
        t = start
        while t <= end:
            self.beat(t, source)
            t += every

    def monitor(
        self,
        name: str,
        t: float,
        role: str = "dcgm-exporter",
        *,
        restarts: int = 0,
        state: str = "running",
        reason: str = "",
        last: Termination | None = None,
        op: str = "modified",
        gpus: int = 0,
    ) -> PodEvent:
        """A monitoring pod (``monitor`` = ``role``) as the k8s connector publishes it."""
        ev = self.c.pod(
            N,
            name,
            t,
            namespace="gpu-operator",
            owner=("DaemonSet", role),
            container=role,
            restarts=restarts,
            last=last,
            op=op,  # type: ignore[arg-type]
        )
        status = msgspec.structs.replace(ev.containers[0], state=state, reason=reason)
        requests = {"nvidia.com/gpu": gpus} if gpus else {}
        ev = msgspec.structs.replace(ev, monitor=role, gpu_requests=requests, containers=(status,))
        self.c.events[-1] = ev
        return ev

    def kubelet(self, t: float, event: KubeEvent, pod: str, namespace: str) -> KubeEvent:
        """A kubelet Event read from the fixtures, placed on this pod at ``t``."""
        ev = msgspec.structs.replace(
            event,
            id=self._next("kev"),
            time=at(t),
            node=N,
            involved=msgspec.structs.replace(event.involved, name=pod, namespace=namespace),
        )
        self.c.events.append(ev)
        return ev

    def running(self, pod: str, t: float) -> PodEvent:
        """A GPU pod whose container runs."""
        ev = self.c.pod(N, pod, t)
        status = msgspec.structs.replace(ev.containers[0], state="running")
        ev = msgspec.structs.replace(ev, containers=(status,))
        self.c.events[-1] = ev
        return ev

    def start_error(
        self,
        pod: str,
        t: float,
        message: str,
        *,
        restarts: int = 0,
        owner: tuple[str, str] = ("Job", "job"),
    ) -> PodEvent:
        """A GPU pod whose container the runtime could not start (exit 128), of ``owner``
        (``("", "")``: a bare pod)."""
        failed = Termination(
            reason="StartError", exit_code=128, finished_at=at(t - 1), message=message
        )
        return self.c.pod(
            N,
            pod,
            t,
            restarts=restarts,
            waiting="CrashLoopBackOff" if restarts else "",
            last=failed if restarts else None,
            current=None if restarts else failed,
            phase="Running" if restarts else "Failed",
            owner=owner,
        )


def _liveness_events() -> dict[str, KubeEvent]:
    """The kubelet's real ``Unhealthy`` (x216) and ``Killing`` (x49) Events of
    NVIDIA/NVSentinel#1748's monitor, and a ``BackOff``, by reason."""
    listed = _fixture("events_gpu_monitor_liveness_killed_corev1.json")
    assert isinstance(listed, dict)
    out: dict[str, KubeEvent] = {}
    for item in listed["items"]:
        ev = _slim(item)
        assert isinstance(ev, KubeEvent)
        out.setdefault(ev.reason, ev)
    return out


def _revisions(events: list[AnyEvent], **core: object) -> list[Incident]:
    return run(sorted(events, key=lambda e: e.time), config(**core))


def _gaps(events: list[AnyEvent], **core: object) -> list[Incident]:
    return of_type(_revisions(events, **core), GAP)


def _opened_between(events: list[AnyEvent], before: float, after: float) -> Incident:
    """Feed ``events`` one by one: no gap is open once the watermark is past ``before``,
    one is by the time it is past ``after`` (seconds after T0). Returns its open."""
    cfg = config()
    correlator = Correlator(cfg)
    opened: list[Incident] = []
    seen_before = False
    for ev in sorted(events, key=lambda e: e.time):
        for inc in feed(correlator, ev):
            if inc.type == GAP and inc.status == "open":
                opened.append(inc)
        if correlator.watermark >= T0.timestamp() + before and not seen_before:
            seen_before = True
            assert not opened, f"opened before {before} s: {opened[0].summary}"
    assert seen_before
    assert correlator.watermark >= T0.timestamp() + after
    assert opened, f"not opened by {after} s"
    return opened[0]


def _watched_node(s: Stream, *, ready: str = "True") -> None:
    s.c.node(N, 0, ready=ready)
    s.c.pod(N, "train-0", 1)


# -- silence -----------------------------------------------------------------------------
def test_a_silent_dcgm_heartbeat_opens_within_its_interval_and_resolves_when_heard() -> None:
    s = Stream()
    _watched_node(s)
    s.beats(0, 600, "dcgm")
    s.beats(0, 3000, "kmsg")  # the node agent lives on: only dcgm is silent
    s.beats(1500, 3000, "dcgm")
    s.c.tick(3200)
    events = s.c.events
    opened = _opened_between(events, 600 + 300 - 1, 600 + 300 + 1)
    assert opened.attributes["source"] == "dcgm"
    assert opened.attributes["reason"] == "silent"
    assert opened.attributes["since"] == at(600).isoformat()
    assert opened.first_seen == at(600)
    assert opened.severity == "ticket"
    assert f"we are blind on {N} since" in opened.summary
    assert "dcgm silent for 5m" in opened.summary
    assert "dcgm-exporter" in opened.action
    [gap] = _gaps(events)
    assert gap.status == "resolved"
    assert gap.resolved_at == at(1500)
    assert gap.attributes["resolution"] == "dcgm heard again"


def test_a_dcgm_source_alive_but_failing_to_scrape_is_silent_by_its_read_time() -> None:
    """The source's ticks go on (its progress, "caught up"), its last good scrape does
    not: ``read_at`` is what counts."""
    s = Stream()
    _watched_node(s)
    for k in range(200):
        t = 10.0 * k
        s.beat(t, "dcgm", read=min(t, 400))
    s.c.tick(2500)
    [gap] = _gaps(s.c.events)
    assert gap.attributes["since"] == at(400).isoformat()
    assert gap.status == "open"


def test_heartbeats_are_kept_to_the_resolution_step() -> None:
    s = Stream()
    _watched_node(s)
    s.beat(0, "dcgm")
    s.beat(607.5, "dcgm")
    correlator = Correlator(config())
    for ev in sorted(s.c.events, key=lambda e: e.time):
        feed(correlator, ev)
    correlator.flush()
    state = correlator.keys[key_of("c1", N)]
    assert isinstance(state, NodeState)
    assert state.heard == (("dcgm", T0.timestamp() + 600),)


def test_a_source_never_heard_on_a_node_gives_nothing() -> None:
    s = Stream()
    _watched_node(s)
    s.beats(0, 4 * HOUR, "kmsg", every=60)
    s.c.tick(4 * HOUR + 60)
    assert _gaps(s.c.events) == []


@pytest.mark.parametrize(
    "how", ["deleted", "karpenter", "cordoned", "not_ready", "not_ready_first"]
)
def test_no_gap_on_a_node_deleted_disrupted_on_purpose_or_not_ready(how: str) -> None:
    """Each node goes silent everywhere after 600 s; what it said of itself first decides."""
    s = Stream()
    _watched_node(s, ready="Unknown" if how == "not_ready_first" else "True")
    s.beats(0, 600, "dcgm")
    s.beats(0, 600, "kmsg")
    if how == "deleted":
        s.c.node(N, 610, op="deleted")
    elif how == "karpenter":
        s.c.node(N, 610, taints=KARPENTER_V1)
    elif how == "cordoned":
        s.c.node(N, 610, taints=CORDON)
    elif how == "not_ready":
        s.c.node(N, 610, ready="Unknown")
    s.c.tick(3 * HOUR)
    assert _gaps(s.c.events) == []


def test_an_open_silence_closes_when_the_node_goes_not_ready_and_waits_after_ready() -> None:
    """A node back from NotReady gives its agents the whole silence again."""
    s = Stream()
    _watched_node(s)
    s.beats(0, 600, "dcgm")
    s.c.node(N, 1200, ready="Unknown")
    s.c.node(N, 2000, ready="True")
    s.c.tick(2000 + 299)
    s.c.tick(2000 + 301 + 1)
    gaps = [i for i in _revisions(s.c.events) if i.type == GAP]
    assert [(g.status, g.first_seen) for g in gaps] == [
        ("open", at(600)),
        ("resolved", at(600)),
        ("open", at(2000)),
    ]
    assert gaps[1].attributes["resolution"] == "node Ready=Unknown"


def test_a_long_silence_alone_is_never_forgotten() -> None:
    """A source silent for 20 days (a Fabric Manager broken unnoticed that long:
    NVIDIA/NVSentinel#889) with its agent's pod still there: the ticket stays open."""
    s = Stream()
    _watched_node(s)
    s.monitor("gputriage-gpu-agents-4kq2n", 0, "node-agent")
    s.beats(0, 600, "nvml")
    s.c.tick(20 * 24 * HOUR)
    [gap] = final(_revisions(s.c.events)).values()
    assert (gap.type, gap.status, gap.attributes["source"]) == (GAP, "open", "nvml")


@pytest.mark.parametrize("removed_at", [650, 1500], ids=["before_due", "while_open"])
def test_a_source_whose_last_reader_pod_is_removed_is_forgotten(removed_at: float) -> None:
    """The node's dcgm-exporter uninstalled (its last pod deleted, none replacing it): dcgm
    is gone on purpose, not silent; an open silence resolves and none opens again."""
    s = Stream()
    _watched_node(s)
    s.monitor("nvidia-dcgm-exporter-7xw9p", 0)
    s.beats(0, 600, "dcgm")
    s.beats(0, 6 * HOUR, "kmsg", every=60)
    s.monitor("nvidia-dcgm-exporter-7xw9p", removed_at, op="deleted")
    s.c.tick(6 * HOUR)
    gaps = [i for i in _revisions(s.c.events) if i.type == GAP]
    if removed_at < 900:
        assert gaps == []
        return
    assert [(g.status, g.attributes["source"]) for g in gaps] == [
        ("open", "dcgm"),
        ("resolved", "dcgm"),
    ]
    assert gaps[-1].resolved_at == at(removed_at)
    assert "removed from the node" in gaps[-1].attributes["resolution"]


def test_a_replaced_reader_pod_with_its_source_still_failing_is_silent_again() -> None:
    """A rollout deletes the exporter's pod before its successor runs: dcgm is forgotten,
    but a dcgm source alive and failing beats on with its old ``read_at``, so the
    silence comes back at once, counted from the last good scrape."""
    s = Stream()
    _watched_node(s)
    s.monitor("nvidia-dcgm-exporter-7xw9p", 0)
    for k in range(200):
        t = 10.0 * k
        s.beat(t, "dcgm", read=min(t, 400))
    s.monitor("nvidia-dcgm-exporter-7xw9p", 650, op="deleted")
    s.monitor("nvidia-dcgm-exporter-q8w2z", 660)
    s.c.tick(2500)
    gaps = _gaps(s.c.events)
    assert gaps[-1].status == "open"
    assert gaps[-1].attributes["since"] == at(400).isoformat()


@pytest.mark.parametrize("journal_from", [700, 1200], ids=["before_due", "while_open"])
def test_the_kernel_log_read_through_journal_instead_of_kmsg_is_no_gap(
    journal_from: float,
) -> None:
    """The node agent moved from /dev/kmsg to the journal: the same kernel lines are read,
    so kmsg's silence blinds nothing; an open one resolves."""
    s = Stream()
    _watched_node(s)
    s.beats(0, 600, "kmsg")
    s.beats(journal_from, 4 * HOUR, "journal", every=60)
    s.c.tick(4 * HOUR)
    gaps = [i for i in _revisions(s.c.events) if i.type == GAP]
    if journal_from < 900:
        assert gaps == []
        return
    assert [(g.status, g.attributes["source"]) for g in gaps] == [
        ("open", "kmsg"),
        ("resolved", "kmsg"),
    ]
    assert gaps[-1].resolved_at == at(journal_from)
    assert gaps[-1].attributes["resolution"] == "the kernel log is read through journal now"


# -- monitoring pods ---------------------------------------------------------------------
def test_a_crash_looping_dcgm_exporter_opens_and_resolves_after_running_again() -> None:
    s = Stream()
    _watched_node(s)
    pod = "nvidia-dcgm-exporter-7xw9p"
    crashed = term(200, "Error", 1)
    s.monitor(pod, 0)
    s.monitor(pod, 210, restarts=1, state="waiting", reason="CrashLoopBackOff", last=crashed)
    s.monitor(pod, 300, restarts=1, last=crashed)
    s.c.tick(300 + 7200 + 1)
    revisions = [i for i in _revisions(s.c.events) if i.type == GAP]
    opened, resolved = revisions[0], revisions[-1]
    assert opened.status == "open"
    assert opened.first_seen == at(210)
    assert opened.attributes == {
        "source": "dcgm-exporter",
        "reason": "crash_loop",
        "since": at(210).isoformat(),
    }
    assert [(p.name, p.role) for p in opened.pods] == [(pod, "restarting")]
    assert "dcgm-exporter pod gpu-operator/" in opened.summary
    assert resolved.status == "resolved"
    assert resolved.resolved_at == at(300 + 7200)


def test_a_monitor_restarted_and_running_in_one_record_recovers_with_no_record_after() -> None:
    """A healthy pod sends no record: the one that shows it restarted and running starts
    the recovery clock, and nothing after it is waited for."""
    s = Stream()
    _watched_node(s)
    pod = "nvidia-dcgm-exporter-7xw9p"
    s.monitor(pod, 0)
    s.monitor(pod, 210, restarts=1, state="waiting", reason="CrashLoopBackOff")
    s.monitor(pod, 250, restarts=2)
    s.c.tick(250 + 7200 + 1)
    [gap] = _gaps(s.c.events)
    assert gap.status == "resolved"
    assert gap.resolved_at == at(250 + 7200)


def test_monitoring_pod_restarts_past_the_threshold_are_a_loop() -> None:
    """No ``CrashLoopBackOff`` caught (the watch saw it running each time): the count."""
    s = Stream()
    _watched_node(s)
    pod = "nvidia-dcgm-exporter-7xw9p"
    s.monitor(pod, 0)
    for k in (1, 2):
        s.monitor(pod, 100 * k, restarts=k, last=term(100 * k - 5))
    assert _gaps(s.c.events) == [], "two restarts are not a loop"
    s.monitor(pod, 300, restarts=3, last=term(295))
    [gap] = _gaps(s.c.events)
    assert gap.attributes["reason"] == "crash_loop"
    assert gap.first_seen == at(300)


def test_a_liveness_killed_device_plugin_opens_and_a_new_running_pod_resolves_it() -> None:
    s = Stream()
    _watched_node(s)
    events = _liveness_events()
    pod = "nvidia-device-plugin-daemonset-5crlk"
    s.monitor(pod, 0, "device-plugin")
    killing = s.kubelet(500, events["Killing"], pod, "gpu-operator")
    assert "failed liveness probe, will be restarted" in killing.message
    s.monitor(pod, 520, "device-plugin", restarts=1, last=term(510, "Error", 137))
    s.monitor(pod, 900, "device-plugin", op="deleted")
    s.monitor("nvidia-device-plugin-daemonset-q8w2z", 960, "device-plugin")
    s.c.tick(2000)
    revisions = [i for i in _revisions(s.c.events) if i.type == GAP]
    assert revisions[0].status == "open"
    assert revisions[0].attributes["reason"] == "liveness_killed"
    assert revisions[0].attributes["source"] == "device-plugin"
    assert "liveness-killed" in revisions[0].summary
    assert revisions[-1].status == "resolved"
    assert revisions[-1].resolved_at == at(960)
    assert "nvidia-device-plugin-daemonset-q8w2z" in revisions[-1].attributes["resolution"]


def test_failed_liveness_probes_counted_to_the_threshold_are_a_kill() -> None:
    """The ``Killing`` Event lost, the ``Unhealthy`` one (count 216) says the same."""
    s = Stream()
    _watched_node(s)
    pod = "gpu-health-monitor-dcgm-4.x-8kq2n"
    s.monitor(pod, 0, "node-agent")
    unhealthy = _liveness_events()["Unhealthy"]
    assert unhealthy.count == 216
    s.kubelet(100, msgspec.structs.replace(unhealthy, count=1), pod, "gpu-operator")
    assert _gaps(s.c.events) == [], "one failed probe kills nothing"
    s.kubelet(200, unhealthy, pod, "gpu-operator")
    [gap] = _gaps(s.c.events)
    assert gap.attributes["reason"] == "liveness_killed"


def test_a_looping_node_agent_is_one_ticket_not_one_per_silent_source() -> None:
    s = Stream()
    _watched_node(s)
    pod = "gputriage-agent-x2x7q"
    s.beats(0, 400, "kmsg")
    s.monitor(pod, 0, "node-agent")
    s.monitor(pod, 420, "node-agent", restarts=1, state="waiting", reason="CrashLoopBackOff")
    s.c.tick(HOUR)
    [gap] = _gaps(s.c.events)
    assert gap.attributes["source"] == "node-agent"


def test_a_monitoring_pod_is_never_a_gpu_pod() -> None:
    """Even one that requests a GPU: not in the node's pods, not placed or pending on the
    cluster key, so no cross-source count sees it."""
    s = Stream()
    s.c.node(N, 0)
    for k in range(8):
        s.monitor(f"exporter-{k}", 1, gpus=1)
    s.c.bind(N, 2, "GPU-00000000", "0000:18:00.0", [])
    pending = s.monitor("exporter-pending", 3, gpus=1)
    s.c.events[-1] = msgspec.structs.replace(pending, node="", phase="Pending")
    s.c.tick(2 * HOUR)
    correlator = Correlator(config())
    out = [i for ev in s.c.events for i in feed(correlator, ev)] + correlator.flush()
    assert out == []
    node = correlator.keys[key_of("c1", N)]
    assert isinstance(node, NodeState)
    assert node.pods == {}
    cluster = correlator.keys["c1"]
    assert isinstance(cluster, ClusterState)
    assert (cluster.placed, cluster.pending) == ({}, {})


# -- GPU containers that cannot start -----------------------------------------------------
def _starterror_pod() -> PodEvent:
    obj = _fixture("pod_gpu_starterror_exit128.json")
    assert isinstance(obj, dict)
    obj["metadata"]["resourceVersion"] = "1000"  # the capture has none; the id needs one
    ev = _slim(obj)
    assert isinstance(ev, PodEvent)
    [status] = ev.containers
    assert status.terminated is not None
    assert (status.terminated.reason, status.terminated.exit_code) == ("StartError", 128)
    return ev


def test_a_starterror_burst_opens_and_a_gpu_container_running_resolves_it() -> None:
    s = Stream()
    _watched_node(s)
    real = _starterror_pod()
    for k, pod in enumerate(("a8xk2fmq7t-n1-0", "a8xk2fmq7t-n1-1", "a8xk2fmq7t-n1-2")):
        t = 100 + 60 * k
        ev = msgspec.structs.replace(
            real,
            id=f"k8s:uid-{pod}:{1000 + k}",
            resource_version=1000 + k,
            name=pod,
            node=N,
            time=at(t),
        )
        s.c.events.append(ev)
    s.running("a8xk2fmq7t-n1-3", 900)  # the next GPU pod starts: the runtime works again
    s.c.tick(2000)
    revisions = [i for i in _revisions(s.c.events) if i.type == GAP]
    opened = revisions[0]
    assert opened.status == "open"
    assert opened.attributes == {
        "source": "container-runtime",
        "reason": "start_error_burst",
        "since": at(100).isoformat(),
    }
    assert len(opened.pods) == 3
    assert all("StartError, exit code 128" in e.text for e in opened.evidence)
    assert "GPU containers fail to start" in opened.summary
    assert revisions[-1].status == "resolved"
    assert revisions[-1].resolved_at == at(900)


def test_one_pod_restarting_on_the_nvidia_hooks_error_is_a_burst_and_goes_quiet() -> None:
    s = Stream()
    _watched_node(s)
    for k in range(1, 4):
        s.start_error("a8xk2fmq7t-n1-0", 100 * k, BURST_MESSAGE, restarts=k)
    s.c.tick(300 + HOUR + 1)
    [gap] = _gaps(s.c.events)
    assert gap.attributes["reason"] == "start_error_burst"
    assert gap.status == "resolved"
    assert gap.resolved_at == at(300 + HOUR)


def test_one_pods_own_broken_start_is_no_burst_and_no_cuda_oom() -> None:
    """A workload whose own spec cannot start (not the NVIDIA stack) restarting: neither
    the node's runtime nor a process that ran out of GPU memory."""
    s = Stream()
    _watched_node(s)
    for k in range(1, 7):
        s.start_error("spec-broken-0", 100 * k, SPEC_MESSAGE, restarts=k)
    s.c.tick(2 * HOUR)
    assert [i.type for i in final(_revisions(s.c.events)).values()] == []


def test_the_replicas_of_one_workload_failing_to_start_are_no_burst() -> None:
    """Three pods of one ReplicaSet share its broken spec: one workload's failure, not
    the node's runtime, however many replicas land there."""
    s = Stream()
    _watched_node(s)
    for k in range(1, 4):
        s.start_error(
            f"serve-7d9f8-{k}", 100 * k, SPEC_MESSAGE, owner=("ReplicaSet", "serve-7d9f8")
        )
    s.c.tick(2 * HOUR)
    assert _gaps(s.c.events) == []


@pytest.mark.parametrize(
    ("owners", "message"),
    [
        ((("Job", "train-a"), ("Job", "train-b"), ("Job", "train-a")), BURST_MESSAGE),
        ((("Job", "train-a"), ("Job", "train-b"), ("Job", "train-a")), SPEC_MESSAGE),
        ((("", ""), ("", ""), ("", "")), SPEC_MESSAGE),
    ],
    ids=["two_owners_nvidia_hook", "two_owners_own_spec", "bare_pods"],
)
def test_two_workloads_failing_to_start_are_the_nodes(
    owners: tuple[tuple[str, str], ...], message: str
) -> None:
    """Two owners (a pod without one is its own) failing to start on one node: the node."""
    s = Stream()
    _watched_node(s)
    for k, owner in enumerate(owners, start=1):
        s.start_error(f"p-{k}", 100 * k, message, owner=owner)
    s.c.tick(HOUR)
    [gap] = _gaps(s.c.events)
    assert gap.attributes["reason"] == "start_error_burst"
    assert gap.first_seen == at(100)


def test_a_snapshot_of_failed_starts_written_before_owners_still_decodes() -> None:
    """A node state written when a failed start was four items (no owner) restores, the
    owner empty: a pod without one counts as its own."""
    from streams.core.snapshot import decode_state, encode_state  # noqa: PLC0415

    line = Evidence(event_id="k8s:uid-p:1", schema="pod.v1", time=at(100), text="StartError")
    now = FailedStart(when=100.0, pod="ml/p-1", gpu=False, line=line, owner="ml/Job/a")
    state = NodeState(cluster="c1", node=N, watch=WatchState(start_errors=(now,)))
    raw = msgspec.msgpack.decode(encode_state(state))
    raw["watch"]["start_errors"] = [item[:4] for item in raw["watch"]["start_errors"]]
    old = decode_state(msgspec.msgpack.encode(raw))
    assert isinstance(old, NodeState)
    assert old.watch is not None
    assert old.watch.start_errors == (msgspec.structs.replace(now, owner=""),)


def test_no_start_error_burst_on_a_cordoned_node() -> None:
    s = Stream()
    s.c.node(N, 0, taints=CORDON)
    for k in range(1, 4):
        s.start_error(f"p-{k}", 100 * k, BURST_MESSAGE)
    s.c.tick(HOUR)
    assert _gaps(s.c.events) == []


# -- the engine's side channel -----------------------------------------------------------
def test_a_heartbeat_never_creates_a_key() -> None:
    s = Stream()
    s.beats(0, 600, "dcgm")
    correlator = Correlator(config())
    for ev in s.c.events:
        feed(correlator, ev)
    assert correlator.flush() == []
    assert correlator.keys == {}


def test_step_on_no_state_with_a_tick_creates_no_state() -> None:
    """The per-key API holds the engine's rule: a tick (a heartbeat, a clock reading)
    creates no key."""
    s = Stream()
    cfg = config()
    heartbeat = s.beat(0, "dcgm")
    clock = s.c.tick(10)
    assert step(None, heartbeat, cfg) == (None, [])
    assert step(None, clock, cfg) == (None, [])


def test_a_heartbeat_never_makes_a_late_real_event_stale() -> None:
    """An XID that arrives behind the watermark, and behind a heartbeat of its node that
    was applied: it still counts as it does with no heartbeat at all (a key's position is
    moved by real events only)."""

    def stream(with_beat: bool) -> list[Incident]:
        s = Stream()
        _watched_node(s)
        s.c.bind(N, 2, "GPU-00000000", "0000:9b:00.0", ["train-0"])
        s.c.tick(100)
        if with_beat:
            s.beat(150, "kmsg")
        s.c.tick(200)
        s.c.xid(N, 120, 79)  # a kernel line that reached the broker late
        s.c.tick(2 * HOUR)
        # In arrival order (the XID is late); the heartbeat's own silence set aside.
        return [i for i in run(s.c.events) if i.type != GAP]

    plain = stream(False)
    assert [i.type for i in final(plain).values()] == ["gpu_degraded"]
    assert stream(True) == plain


def test_a_heartbeat_is_written_down_now_and_then_not_at_every_beat() -> None:
    """A processor writes each changed key's state to its changelog every second: a
    node's beats alone must not rewrite every node of the fleet that often. Its time
    is written often enough that a restored state is well inside the silence."""
    s = Stream()
    _watched_node(s)
    s.c.tick(5)
    correlator = Correlator(config(), track_dirty=True)
    for ev in s.c.events:
        feed(correlator, ev)
    correlator.take_dirty()
    written: list[float] = []
    for k in range(1, 121):
        feed(correlator, s.beat(10.0 * k, "dcgm"))
        feed(correlator, s.c.tick(10.0 * k + 1))
        for key, state in correlator.take_dirty():
            assert isinstance(state, NodeState)
            assert key == key_of("c1", N)
            written.append(dict(state.heard)["dcgm"] - T0.timestamp())
    silence = config().monitoring_silence_seconds
    assert 1 <= len(written) <= 120 / 4
    assert written[-1] >= 1200 - silence / 2, "a restored state is well inside the silence"
    assert all(b - a <= silence / 2 for a, b in itertools.pairwise(written))


def test_any_arrival_order_and_repeated_heartbeats_give_the_same_incidents() -> None:
    s = Stream()
    _watched_node(s)
    s.beats(0, 600, "dcgm")
    s.beats(0, 4000, "kmsg", every=5)
    s.beats(2000, 2600, "dcgm", every=5)
    pod = "nvidia-dcgm-exporter-7xw9p"
    s.monitor(pod, 0)
    s.monitor(pod, 1000, restarts=1, state="waiting", reason="CrashLoopBackOff")
    s.monitor(pod, 1100, restarts=1)
    for k in range(3):
        s.start_error(f"p-{k}", 3000 + 10 * k, BURST_MESSAGE)
    s.c.tick(4000)
    events = sorted(s.c.events, key=lambda e: e.time)
    expected = [encode(i) for i in run(events)]
    assert {i.attributes["reason"] for i in of_type(run(events), GAP)} == {
        "silent",
        "crash_loop",
        "start_error_burst",
    }
    grace = config().grace_seconds
    for seed in range(4):
        rnd = random.Random(seed)
        shuffled = within_grace(events, rnd, grace)
        beats = [e for e in shuffled if isinstance(e, Tick) and e.source]
        again = rnd.sample(beats, len(beats) // 3)
        for copy in again:
            shuffled.insert(shuffled.index(copy) + rnd.randrange(1, 4), copy)
        assert [encode(i) for i in run(shuffled)] == expected, seed


def test_the_state_a_heartbeat_leaves_survives_a_snapshot() -> None:
    """A restart mid-silence opens the gap at the same instant, from the restored state."""
    from streams.core.snapshot import decode_state, encode_state  # noqa: PLC0415

    s = Stream()
    _watched_node(s)
    s.beats(0, 600, "dcgm")
    s.c.tick(700)
    s.c.tick(HOUR)
    events = sorted(s.c.events, key=lambda e: e.time)
    whole = run(events)
    before = Correlator(config())
    cut = len(events) - 1
    out = [i for e in events[:cut] for i in feed(before, e)]
    after = Correlator(config())
    for state in before.keys.values():
        after.restore(decode_state(encode_state(state)))
    out += [i for e in events[cut:] for i in feed(after, e)] + after.flush()
    assert [encode(i) for i in out] == [encode(i) for i in whole]
    assert [i.type for i in whole] == [GAP]
