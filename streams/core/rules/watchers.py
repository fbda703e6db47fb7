"""``monitoring_gap``: we are blind on a node, since when, and why.

Three ways to go blind, one ticket per (node, source): a source a node agent heartbeats
for (``kmsg``, ``journal``, ``dcgm``, ``nvml``, ``pod-resources``) silent past
``monitoring_silence_seconds``; a monitoring pod (dcgm-exporter, device plugin, DRA
plugin, node agent) crash-looping or liveness-killed; GPU containers failing to start
(``StartError``, exit 128: the container runtime or its NVIDIA hook is broken) in a burst.

Heartbeats are a side channel (``streams.core.engine``): they never move the node key's
position and never create a key. Traps: a family never heard gives nothing; silence is
counted from the later of the last beat and the node becoming watchable again (Ready, no
planned disruption), and nothing is said while it is not (``gpu_node_not_ready`` and the
disruption say it); a monitoring pod is never a GPU pod; one pod's own broken spec
failing to start is its own, not the node's. docs/detection.md, design notes.
"""

from __future__ import annotations

import math
from sys import intern
from typing import Final

from schemas.events import ContainerStatus, KubeEvent, NodeEvent, PodEvent, Termination, Tick
from schemas.incidents import Evidence, PodInfo
from streams.core import evidence as text
from streams.core.config import CoreSettings
from streams.core.lifecycle import Step
from streams.core.rules.mismatch import pod_hash
from streams.core.rules.spec import NodeRule
from streams.core.state import NEVER, FailedStart, MonitorPod, NodeState, WatchState
from streams.core.timeconv import to_datetime

KIND: Final = "monitoring_gap"
RUNTIME: Final = "container-runtime"
"""The ``source`` of a StartError burst: the node's container runtime (and its NVIDIA hook)."""
SILENT: Final = "silent"
CRASH_LOOP: Final = "crash_loop"
LIVENESS: Final = "liveness_killed"
START_ERRORS: Final = "start_error_burst"

_MAX_FAMILIES: Final = 8
"""Source families remembered per node at most (five exist): a bound on a label's count."""
_MAX_START_ERRORS: Final = 32
_START_ERROR_REASONS: Final = ("StartError", "ContainerCannotRun")
"""containerd's and Docker's reasons for a container the runtime could not start (exit
code 128; its ``startedAt`` is the epoch): tests/data/writeback/messages.md."""
_GPU_RUNTIME_WORDS: Final = ("nvidia-container", "nvml")
"""Words of the NVIDIA container stack in a StartError message (``nvidia-container-cli:
initialization error: nvml error: driver/library version mismatch``): a GPU start failing,
not one pod's spec (``close exec fds``...), so one pod's burst counts."""
_KILLED: Final = "failed liveness probe"
"""The kubelet's ``Killing`` message: ``Container gadget failed liveness probe, will be
restarted``."""
_PROBE_FAILED: Final = "Liveness probe failed"
_PROBE_FAILURES: Final = 3
"""An ``Unhealthy`` liveness Event counted this often is a kill (the kubelet's default
``failureThreshold``), should the ``Killing`` Event be lost."""
_BACK_OFF: Final = "Back-off restarting failed container"
_COVERS: Final = {
    "dcgm": "dcgm-exporter",
    "kmsg": "node-agent",
    "journal": "node-agent",
    "nvml": "node-agent",
    "pod-resources": "node-agent",
}
"""The monitoring pod a source family is read through: its crash loop already says the
family is blind (one cause, one ticket), so the family's silence is not told again."""
_READERS: Final = {
    "dcgm": ("dcgm-exporter", "node-agent"),
    "kmsg": ("node-agent",),
    "journal": ("node-agent",),
    "nvml": ("node-agent",),
    "pod-resources": ("node-agent",),
}
"""The monitoring roles a source family needs (dcgm: the exporter, and our agent that
scrapes it): the last pod of one deleted from the node, the family is gone on purpose."""
_SUBSTITUTES: Final = {"kmsg": "journal", "journal": "kmsg"}
"""Two readers of the same kernel log: one heard, the other's silence blinds nothing."""
_ACTIONS: Final = {
    "dcgm": "Check dcgm-exporter on {node} (its pod, its logs) and the dcgm connector's "
    "scrape errors: until it answers, DCGM's XIDs and GPU bindings there are not seen.",
    "kmsg": "Check gputriage's node agent on {node} and its read access to /dev/kmsg: "
    "until it reads again, kernel XIDs there are not seen.",
    "journal": "Check gputriage's node agent on {node} and the journal it reads: until it "
    "reads again, kernel XIDs there are not seen.",
    "nvml": "Check the NVML source on {node} (the driver: nvidia-smi there): until it polls "
    "again, NVML's XIDs and bindings there are not seen.",
    "pod-resources": "Check the kubelet's pod-resources socket on {node} and the node agent "
    "reading it: until it answers, which pod holds which GPU there is not known.",
}


# -- when the node can be watched ---------------------------------------------------------
def watchable(state: NodeState) -> bool:
    """Is a gap on this node ours to tell? Ready, and under no planned disruption (a
    cordon included); a deleted node's state is reset, so never Ready."""
    return state.ready == "True" and not state.disruption


def on_node(step: Step, was: bool) -> None:
    """The node object changed (``was``: watchable before it). Leaving the watchable
    state closes every gap (the node's own state says it now); entering it restarts the
    clocks: a node back from a reboot gives its agents time to come back."""
    state = step.state
    now = watchable(state)
    if now == was:
        return
    state.timers_dirty = True
    if now:
        start = _floor(step.now, step.config)
        state.heard = tuple((family, max(heard, start)) for family, heard in state.heard)
        return
    why = f"node under planned disruption: {state.disruption}" if state.disruption else ""
    why = why or f"node Ready={state.ready or 'unknown'}"
    for inc in [i for i in state.incidents.values() if i.type == KIND]:
        step.resolve(inc, step.now, why)
    watch = state.watch
    if watch is not None and watch.start_errors:
        watch.start_errors = ()
        _drop_if_empty(state)


# -- heartbeats (the engine's side channel) -----------------------------------------------
UNCHANGED: Final = 0
MOVED: Final = 1
"""The heartbeat moved a family's time, not far enough to be worth writing down."""
NEWS: Final = 2
"""The heartbeat is worth a snapshot of the node's state: a new family, a silence closed,
or the family's time past the next multiple of :func:`_persist_span`."""


def on_heartbeat(step: Step, tick: Tick, heard: float) -> int:
    """A node agent says its ``tick.source`` last read its input at ``heard``: keep the
    latest (rounded down), and close that family's silence. Returns :data:`UNCHANGED`,
    :data:`MOVED` or :data:`NEWS`.

    Trap: a state written at every beat is every node's state rewritten every few seconds
    on the changelog; written when the time passes a multiple of a quarter of the
    silence, a restored state is at most that much behind, and the beats that follow a
    restart catch up long before a silence is due."""
    state = step.state
    family = tick.source
    heard = _floor(heard, step.config)
    known = state.heard
    old = -math.inf
    for name, when in known:
        if name == family:
            old = when
            break
    else:
        if len(known) >= _MAX_FAMILIES:
            return UNCHANGED
    if heard <= old:
        return UNCHANGED
    span = _persist_span(step.config)
    said = NEWS if old == -math.inf or heard // span != old // span else MOVED
    if old == -math.inf:
        state.heard = (*known, (intern(family), heard))
    else:
        state.heard = tuple((n, heard if n == family else w) for n, w in known)
    state.timers_dirty = True
    other = _SUBSTITUTES.get(family)
    silence = step.config.monitoring_silence_seconds
    for name, when in known:
        if name == other and when + silence <= heard:
            _forget(step, name, f"the kernel log is read through {family} now")
            said = NEWS
    inc = step.find(KIND, family)
    if inc is not None and inc.attributes.get("reason") == SILENT:
        item = Evidence(
            event_id=tick.id,
            schema="tick.v1",
            time=tick.time,
            text=f"{family} heard again on {state.node} (read at {_iso(heard)})",
        )
        step.add_evidence(inc, item, context=True)
        step.resolve(inc, max(step.now, inc.last_seen), f"{family} heard again")
        return NEWS
    return said


def _forget(step: Step, family: str, why: str) -> None:
    """The family is no longer read on this node: drop its time, close its silence."""
    state = step.state
    state.heard = tuple((n, w) for n, w in state.heard if n != family)
    state.timers_dirty = True
    inc = step.find(KIND, family)
    if inc is not None and inc.attributes.get("reason") == SILENT:
        step.resolve(inc, max(step.now, inc.last_seen), why)


def _forget_read_by(step: Step, role: str, pod: str) -> None:
    """The node's last ``role`` pod was deleted: the families it reads are gone on
    purpose (uninstalled, moved off the node), not silent; heard again, they count anew."""
    for family, _ in step.state.heard:
        if role in _READERS.get(family, ()):
            _forget(step, family, f"its {role} pod {pod} was removed from the node")


def _replaced(state: NodeState, family: str, since: float, now: float, silence: float) -> str:
    """The substitute reading the same input as ``family`` (kmsg or journal), when it
    has been heard after ``family`` went quiet and within the silence; else ``""``."""
    other = _SUBSTITUTES.get(family)
    if other is None:
        return ""
    for name, when in state.heard:
        if name == other and when > since and when + silence > now:
            return other
    return ""


def _persist_span(config: CoreSettings) -> float:
    return max(config.monitoring_resolution_seconds, config.monitoring_silence_seconds / 4, 1.0)


def _floor(when: float, config: CoreSettings) -> float:
    step = config.monitoring_resolution_seconds
    return math.floor(when / step) * step if step > 0 else when


# -- monitoring pods ------------------------------------------------------------------------
def on_pod(step: Step, ev: PodEvent, key: str) -> None:
    """A monitoring pod's record: count its restarts, see it loop or run again."""
    state, config = step.state, step.config
    ident = pod_hash(key)
    if ev.op == "deleted":
        watch = state.watch
        if watch is not None and ident in watch.monitors:
            monitors = dict(watch.monitors)
            role = monitors.pop(ident).role
            watch.monitors = monitors
            _drop_if_empty(state)
            if all(m.role != role for m in monitors.values()):
                _forget_read_by(step, role, f"{ev.namespace}/{ev.name}")
        return  # its own crash-loop gap stays open: a node whose exporter is gone is blind
    watch = _watch(state)
    track = watch.monitors.get(ident)
    if track is None:
        track = MonitorPod(role=intern(ev.monitor))
        watch.monitors = {**watch.monitors, ident: track}
    count = sum(c.restart_count for c in ev.containers)
    horizon = step.now - config.monitoring_restart_window_seconds
    crashes = tuple(t for t in track.crashes if t > horizon)
    rose = track.restarts >= 0 and count > track.restarts
    if rose:
        more = min(count - track.restarts, config.monitoring_restarts)
        crashes = (*crashes, *([step.now] * more))[-config.monitoring_restarts :]
    if crashes != track.crashes:
        track.crashes = crashes
    track.restarts = max(track.restarts, count)
    looping = _looping(ev.containers)
    if looping is not None or len(crashes) >= config.monitoring_restarts:
        what = f"{looping.name} {looping.reason}" if looping is not None else "restarting"
        item = text.pod_status(ev, f"({ev.monitor}) {what}, {count} restarts")
        _fail(step, ev.monitor, _info(ev, looping), item, CRASH_LOOP)
        return
    _maybe_recovered(step, ev, key, track.role, rose)


def on_kube_event(step: Step, ev: KubeEvent) -> None:
    """The kubelet's Events on a monitoring pod: a liveness kill, a back-off."""
    watch = step.state.watch
    obj = ev.involved
    if watch is None or obj.kind != "Pod":
        return
    reason, message = ev.reason, ev.message
    killed = reason == "Killing" and _KILLED in message
    probed = reason == "Unhealthy" and message.startswith(_PROBE_FAILED)
    if killed or (probed and ev.count >= _PROBE_FAILURES):
        why = LIVENESS
    elif reason == "BackOff" and message.startswith(_BACK_OFF):
        why = CRASH_LOOP
    else:
        return
    track = watch.monitors.get(pod_hash(f"{obj.namespace}/{obj.name}"))
    if track is None:
        return
    info = PodInfo(
        namespace=obj.namespace, name=obj.name, container=obj.container, role="restarting"
    )
    _fail(step, track.role, info, text.kube_event(ev), why)


def _fail(step: Step, role: str, info: PodInfo, item: Evidence, why: str) -> None:
    """A monitoring pod of ``role`` fails (``why``): open its gap, or add to it."""
    state = step.state
    if not watchable(state):
        return
    inc = step.find(KIND, role)
    if inc is None:
        inc = step.open(KIND, role, item.event_id, step.now)
        inc.attributes["source"] = role
        inc.attributes["since"] = _iso(step.now)
    elif inc.attributes.get("reason") == LIVENESS:
        why = LIVENESS  # the more telling word stays: the loop is the kills'
    step.add_pod(inc, info)
    step.add_evidence(inc, item)
    step.set_deadline(inc, NEVER)
    if inc.attributes.get("reason") != why:
        inc.attributes["reason"] = why
    said = "is liveness-killed" if why == LIVENESS else "crash-loops"
    inc.summary = (
        f"we are blind on {state.node} since {_clock(inc.first_seen)}: its {role} pod "
        f"{info.namespace}/{info.name} {said}"
    )
    inc.action = (
        f"Read the {role} pod's logs on {state.node} (kubectl logs --previous) and why it "
        "fails (a hung GPU stalls DCGM until its probe kills it): until it runs, GPU faults "
        "there may go unreported."
    )


def _maybe_recovered(step: Step, ev: PodEvent, key: str, role: str, rose: bool) -> None:
    """A running monitoring pod ends its role's gap: at once when it replaces the pod that
    failed, after ``monitoring_recovered_seconds`` without a restart when it is that pod
    (the clock starts at the record that shows it running after its last restart: a
    healthy pod sends no record after it, so no later one may be waited for)."""
    inc = step.find(KIND, role)
    if inc is None:
        return
    if not _running(ev):
        step.set_deadline(inc, NEVER)
    elif key in inc.pods:
        if rose or inc.resolve_at == NEVER:
            step.set_deadline(inc, step.now + step.config.monitoring_recovered_seconds)
    else:
        step.add_evidence(inc, text.pod_status(ev, f"({ev.monitor}) running"), context=True)
        step.resolve(inc, max(step.now, inc.last_seen), f"replaced by {key}, running")


def _running(ev: PodEvent) -> bool:
    containers = ev.containers
    return (
        ev.phase == "Running"
        and ev.deleted_at is None
        and bool(containers)
        and all(c.state == "running" for c in containers)
    )


def _looping(containers: tuple[ContainerStatus, ...]) -> ContainerStatus | None:
    for status in containers:
        if status.reason == "CrashLoopBackOff":
            return status
    return None


def _info(ev: PodEvent, ctr: ContainerStatus | None) -> PodInfo:
    return PodInfo(
        namespace=ev.namespace,
        name=ev.name,
        owner_kind=ev.owner_kind,
        owner_name=ev.owner_name,
        container=ctr.name if ctr is not None else "",
        role="restarting",
    )


# -- GPU containers that cannot start -----------------------------------------------------
def start_error(term: Termination) -> bool:
    """Did the runtime fail to start the container (it never ran)?"""
    return term.reason in _START_ERROR_REASONS


def starting(state: NodeState) -> bool:
    """Are GPU start failures being watched on this node (every pod update then takes
    the full path: a container that runs ends them)?"""
    watch = state.watch
    return watch is not None and bool(watch.start_errors)


def on_start_error(step: Step, ev: PodEvent, key: str, container: str, term: Termination) -> None:
    """A GPU container the runtime could not start: a burst of them is the node's."""
    state, config = step.state, step.config
    watch = _watch(state)
    item = text.termination(ev, container, term)
    inc = step.find(KIND, RUNTIME)
    horizon = step.now - config.monitoring_start_error_window_seconds
    kept = watch.start_errors if inc is not None else _recent(watch, horizon)
    if any(entry.line.event_id == item.event_id for entry in kept):
        return
    words = term.message.lower()
    gpu = any(w in words for w in _GPU_RUNTIME_WORDS)
    owner = f"{ev.namespace}/{ev.owner_kind}/{ev.owner_name}" if ev.owner_name else ""
    failed_start = FailedStart(when=step.now, pod=key, gpu=gpu, line=item, owner=owner)
    watch.start_errors = (*kept, failed_start)[-_MAX_START_ERRORS:]
    info = PodInfo(
        namespace=ev.namespace,
        name=ev.name,
        owner_kind=ev.owner_kind,
        owner_name=ev.owner_name,
        container=container,
        role="failed",
    )
    if inc is None:
        burst = [e for e in watch.start_errors if e.when > horizon]
        if len(burst) < config.monitoring_start_errors or not _the_nodes(burst):
            return
        if not watchable(state):
            return
        first = burst[0]
        inc = step.open(KIND, RUNTIME, first.line.event_id, first.when)
        inc.attributes["source"] = RUNTIME
        inc.attributes["reason"] = START_ERRORS
        inc.attributes["since"] = _iso(first.when)
        for entry in burst:
            step.add_evidence(inc, entry.line)
            namespace, _, name = entry.pod.partition("/")
            step.add_pod(inc, PodInfo(namespace=namespace, name=name, role="failed"))
        inc.count = len(burst)
    else:
        step.add_evidence(inc, item)
        inc.count += 1
    step.add_pod(inc, info)
    step.set_deadline(inc, step.now + config.monitoring_start_error_quiet_seconds)
    failed = len({e.pod for e in watch.start_errors})
    inc.summary = (
        f"we are blind on {state.node} since {_clock(inc.first_seen)}: GPU containers fail "
        f"to start there ({inc.count} StartErrors, {failed} pod{'s' if failed != 1 else ''})"
    )
    inc.action = (
        f"Check the container runtime and the NVIDIA container toolkit on {state.node} "
        "(a driver/library version mismatch after a driver update is the usual cause); "
        "cordon it until GPU containers start."
    )


def on_gpu_running(step: Step, ev: PodEvent, key: str, fresh: bool) -> None:
    """A GPU pod record while start failures are watched: a container of a pod that
    failed to start, or of a pod first seen now, running proves the runtime works."""
    watch = step.state.watch
    if watch is None or not watch.start_errors:
        return
    if not any(c.state == "running" for c in ev.containers) or ev.op == "deleted":
        return
    if not fresh and all(entry.pod != key for entry in watch.start_errors):
        return
    watch.start_errors = ()
    _drop_if_empty(step.state)
    inc = step.find(KIND, RUNTIME)
    if inc is not None:
        step.add_evidence(inc, text.pod_status(ev, "running"), context=True)
        step.resolve(inc, max(step.now, inc.last_seen), f"a GPU container runs: {key}")


def _recent(watch: WatchState, horizon: float) -> tuple[FailedStart, ...]:
    return tuple(e for e in watch.start_errors if e.when > horizon)


def _the_nodes(burst: list[FailedStart]) -> bool:
    """Is a burst of failed starts the node's, not one workload's? It is when the message
    names the NVIDIA container stack (even one pod restarting on it), or when at least two
    workloads fail (two owners; a pod without one is its own). Trap: the replicas of one
    Deployment or Job share its broken command (``exec: "pythn": executable file not
    found``) and fail together on any node: counted by pod, they looked like the node's."""
    if any(e.gpu for e in burst):
        return True
    owners = {e.owner or e.pod for e in burst}
    return len(owners) > 1


# -- timers --------------------------------------------------------------------------------
def deadline(state: NodeState, config: CoreSettings) -> float:
    """The earliest silence due (a family heard, not yet told, on a watchable node), or
    the oldest failed start leaving its window while no burst is open."""
    found = NEVER
    watch = state.watch
    if watch is not None and watch.start_errors and f"{KIND}|{RUNTIME}" not in state.incidents:
        found = watch.start_errors[0].when + config.monitoring_start_error_window_seconds
    if not state.heard or not watchable(state):
        return found
    silence = config.monitoring_silence_seconds
    for family, heard in state.heard:
        if not _told(state, family):
            found = min(found, heard + silence)
    return found


def on_timer(step: Step) -> None:
    """Open the silences due; resolve the gaps whose quiet or recovery time has come."""
    state, now = step.state, step.now
    for inc in sorted(
        (i for i in state.incidents.values() if i.type == KIND and i.resolve_at <= now),
        key=lambda i: (i.resolve_at, i.id),
    ):
        if inc.subject == RUNTIME:
            watch = state.watch
            if watch is not None and watch.start_errors:
                watch.start_errors = ()
                _drop_if_empty(state)
            note = "no StartError for monitoring_start_error_quiet_seconds"
        else:
            note = f"{inc.subject} ran monitoring_recovered_seconds without a restart"
        step.resolve(inc, inc.resolve_at, note)
    watch = state.watch
    if watch is not None and watch.start_errors and step.find(KIND, RUNTIME) is None:
        horizon = now - step.config.monitoring_start_error_window_seconds
        kept = _recent(watch, horizon)
        if kept != watch.start_errors:
            watch.start_errors = kept
            _drop_if_empty(state)
            state.timers_dirty = True
    if not state.heard or not watchable(state):
        return
    silence = step.config.monitoring_silence_seconds
    for family, heard in state.heard:
        if heard + silence <= now and not _told(state, family):
            other = _replaced(state, family, heard, now, silence)
            if other:
                _forget(step, family, f"the kernel log is read through {other} now")
            else:
                _open_silence(step, family, heard)


def _told(state: NodeState, family: str) -> bool:
    """Is the family's gap open, or is the pod it is read through failing (its gap)?"""
    incidents = state.incidents
    if not incidents:
        return False
    if f"{KIND}|{family}" in incidents:
        return True
    role = _COVERS.get(family)
    return role is not None and f"{KIND}|{role}" in incidents


def _open_silence(step: Step, family: str, heard: float) -> None:
    state = step.state
    since = _iso(heard)
    item = Evidence(
        event_id=f"heartbeat:{state.cluster}/{state.node}/{family}@{since}",
        schema="tick.v1",
        time=to_datetime(heard),
        text=f"{family} on {state.node} last heard {since}, nothing since",
    )
    inc = step.open(KIND, family, item.event_id, heard)
    step.add_evidence(inc, item)
    inc.attributes["source"] = family
    inc.attributes["reason"] = SILENT
    inc.attributes["since"] = since
    inc.summary = (
        f"we are blind on {state.node} since {_clock(heard)}: {family} silent for "
        f"{_span(step.now - heard)}"
    )
    action = _ACTIONS.get(family)
    inc.action = (
        action.format(node=state.node)
        if action is not None
        else f"Check the {family} source on {state.node}: until it reads again, "
        "what it reports there is not seen."
    )


# -- helpers ---------------------------------------------------------------------------------
def _watch(state: NodeState) -> WatchState:
    if state.watch is None:
        state.watch = WatchState()
    return state.watch


def _drop_if_empty(state: NodeState) -> None:
    watch = state.watch
    if watch is not None and not watch.monitors and not watch.start_errors:
        state.watch = None


def _iso(when: float) -> str:
    return to_datetime(when).isoformat()


def _clock(when: float) -> str:
    return to_datetime(when).strftime("%Y-%m-%d %H:%M:%S UTC")


def _span(seconds: float) -> str:
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m" if not secs else f"{minutes}m{secs:02d}s"
    return f"{secs}s"


SPEC: NodeRule = NodeRule(
    name="watchers",
    emits=((KIND, "ticket"),),
    reads=(NodeEvent, PodEvent, KubeEvent),
    state=("heard", "watch"),
    settings=(
        "monitoring_resolution_seconds",
        "monitoring_silence_seconds",
        "monitoring_restarts",
        "monitoring_restart_window_seconds",
        "monitoring_recovered_seconds",
        "monitoring_start_errors",
        "monitoring_start_error_window_seconds",
        "monitoring_start_error_quiet_seconds",
    ),
    deadline=deadline,
    on_timer=on_timer,
)
"""``monitoring_gap``: heartbeats (the engine's side channel), monitoring pods
(``pod.v1`` with ``monitor``, the kubelet's Events on them), GPU pods' StartErrors."""
