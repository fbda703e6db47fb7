"""``suspected_cuda_oom``: a GPU container crash-loops with non-zero exits, never OOMKilled.

CUDA running out of GPU memory is invisible to Kubernetes: the process raises,
exits 1, and the container restarts. So the rule needs no log source: more than
``cuda_oom_restarts`` non-zero terminations within ``cuda_oom_window_seconds``,
none of them ``OOMKilled`` (that is host memory: ``host_oom_kill``).

Traps (DESIGN §2 refinements): exit 137 without ``OOMKilled`` and exit 143 are
signals sent from outside (the kubelet after a failed liveness probe or preStop
grace, an eviction, a deletion), never CUDA OOM, so :mod:`streams.core.node` does
not count them here; and restarts are counted from ``restartCount`` too, so crashes
between two updates we saw (a watch gap, a relist) still count
(:func:`on_unseen_restarts`). When a
termination message (``FallbackToLogsOnError``) says ``CUDA out of memory``, the
incident says the suspicion is confirmed by the log.

On a shared GPU (time-slicing / MPS) a neighbour may have taken the memory: the
co-tenants are named as candidates, never one guessed culprit.
"""

from __future__ import annotations

from schemas.events import PodEvent, Termination
from streams.core import evidence as text
from streams.core.lifecycle import Step
from streams.core.rules import chain
from streams.core.rules.pods import co_tenants, pod_info
from streams.core.state import ContainerTrack, PodTrack
from streams.core.timeconv import to_datetime

KIND = "suspected_cuda_oom"
_MAX_RESTARTS = 32


def on_crash(
    step: Step,
    key: str,
    track: PodTrack,
    ctr: ContainerTrack,
    term: Termination,
    ev: PodEvent,
    finished: float,
) -> None:
    """A non-zero, non-OOM termination of a GPU container."""
    config = step.config
    window = config.cuda_oom_window_seconds
    kept = tuple(t for t in ctr.restarts if t > finished - window)[-_MAX_RESTARTS + 1 :]
    ctr.restarts = (*kept, finished)
    if not kept:
        ctr.cuda_log = False  # a fresh window: forget the previous episode's log line
    if any(p in term.message for p in config.cuda_oom_patterns):
        ctr.cuda_log = True
    subject = f"{key}/{ctr.name}"
    ordinal = len(ctr.restarts)
    inc = step.find(KIND, subject)
    if inc is None:
        if len(ctr.restarts) <= config.cuda_oom_restarts:
            return  # the common case on a crash: no text built for nothing
        if ctr.oom_at > finished - window or chain.holds_pod(step, key):
            return
        inc = step.open(KIND, subject, ev.id, ctr.restarts[0])
        step.add_pod(inc, pod_info(key, track, "restarting", ctr.name))
        neighbours = co_tenants(step.state, key)
        if neighbours or step.state.sharing:
            inc.attributes["shared_gpu"] = step.state.sharing or "shared"
        for other in neighbours:
            step.add_pod(inc, pod_info(other, step.state.pods.get(other), "candidate"))
    # Unseen restarts (restartCount deltas) share one stamp: list each time once.
    shown = dict.fromkeys(ctr.restarts[:-1])
    earlier = ", ".join(to_datetime(t).strftime("%H:%M:%S") for t in list(shown)[-4:])
    item = text.termination(
        ev,
        ctr.name,
        term,
        f"crash {ordinal} in {config.cuda_oom_window_seconds / 60:g} min"
        + (f" (earlier: {earlier})" if earlier else ""),
    )
    inc.count = len(ctr.restarts)
    step.add_evidence(inc, item)
    step.set_deadline(inc, step.now + window)
    confirmed = ctr.cuda_log
    inc.attributes["confidence"] = "log-confirmed" if confirmed else "suspected"
    inc.attributes["restarts_in_window"] = str(inc.count)
    minutes = window / 60
    inc.summary = (
        f"container {subject} on {step.state.node} restarted {inc.count} times in "
        f"{minutes:g} min with non-zero exits and no OOMKilled: "
        + (
            "CUDA out of memory (seen in its termination message)"
            if confirmed
            else "suspected CUDA OOM or driver error"
        )
    )
    shared = (
        " On a shared GPU, check the co-tenant pods' memory use."
        if ("shared_gpu" in inc.attributes)
        else ""
    )
    inc.action = (
        "Check the container's logs for torch.cuda.OutOfMemoryError; reduce batch size or "
        f"request a larger GPU / MIG profile.{shared}"
    )


def on_unseen_restarts(step: Step, ctr: ContainerTrack, count: int, since: float) -> None:
    """``count`` crashes that only ``restartCount`` shows, at the earliest ``since``.

    They join the container's window as restarts stamped ``since`` (the last time we
    saw the container): the next handled crash counts them, opens the incident if
    they take it past ``cuda_oom_restarts`` (its evidence lists each earlier time once).
    An OOM kill in the window still vetoes, as for seen crashes.
    """
    window = step.config.cuda_oom_window_seconds
    if since <= step.now - window:
        return  # the delta may be spread over more than the window: not a loop in it
    kept = tuple(t for t in ctr.restarts if t > step.now - window)
    if not kept:
        ctr.cuda_log = False
    ctr.restarts = (*kept, *((since,) * count))[-_MAX_RESTARTS + 1 :]


def on_oom_killed(step: Step, key: str, ctr: ContainerTrack) -> None:
    """The container's last termination was OOMKilled: this is host memory, not CUDA."""
    inc = step.find(KIND, f"{key}/{ctr.name}")
    if inc is not None:
        step.resolve(inc, step.now, "superseded: last termination was OOMKilled (host_oom_kill)")
