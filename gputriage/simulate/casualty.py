"""Which crash the domain calls a GPU fault's casualty, whatever made it in the simulator.

A scenario knows why a pod crashed; the core does not and must not. By the domain's rule
("a pod joins a device chain only if it ran on the affected GPU or its failure says
device"), a pod holding a GPU that logged a fatal XID, whose container exits non-zero
within the chain's window after one of the fault's lines, is that fault's casualty, so the
fault is a ``device_unhealthy_eviction``, whichever scenario drew the crash; while the
chain holds the pod its crashes are not a ``suspected_cuda_oom`` loop.

Exceptions, as the core states them: the workload's own last words, a signal (137, 143),
an ``OOMKilled``, a crash right after an application XID on its own GPU. Trap: the numbers
are the domain's defaults, not imported from the core's configuration.
docs/replay.md, design notes: the casualty rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gputriage.simulate.truth import Pending

WINDOW = timedelta(minutes=10)
"""Pods failing within 10 min of the fault join its chain."""
NEAR = timedelta(seconds=60)
"""How near a fatal line must be to claim a crash that an application XID explains."""
SKEW = timedelta(seconds=5)
"""A failure's report may seem to precede the XID by the two clocks' skew, no more."""
SIGNALS = frozenset({0, 137, 143})
"""Exit codes that are no crash of the process's own (success, SIGKILL, SIGTERM)."""
GPU_WORDS = ("cuda", "nvml", "nvidia", "xid", "ecc", "gpu", "nccl", "device", "driver")
"""A message with none of these names an application error, not a dying GPU."""
OOM_WORDS = "CUDA out of memory"


@dataclass
class Fault:
    """One fatal-XID fault of one GPU, as the truth needs it."""

    fault: str
    cluster: str
    node: str
    gpu: str
    first: datetime
    lines: list[datetime] = field(default_factory=list)
    ticket: Pending | None = None
    """The fault's ``gpu_degraded`` truth, once its scenario expects one."""
    chained: bool = False
    """A pod failed of it: its truth is (now) a ``device_unhealthy_eviction``."""
    casualty: tuple[str, str, datetime] | None = None
    """(pod, owner, reported) of a crash that made it a chain before its ticket existed."""


class Casualties:
    """The GPUs' recent fatal faults and the pods a chain of theirs holds."""

    def __init__(self) -> None:
        self._faults: dict[str, Fault] = {}
        self._app: dict[str, datetime] = {}
        self._held: dict[str, Fault] = {}

    def fatal(self, *, fault: str, cluster: str, node: str, gpu: str, time: datetime) -> Fault:
        """A fatal XID line of ``fault`` on ``gpu``."""
        known = self._faults.get(gpu)
        if known is None or known.fault != fault:
            known = self._faults[gpu] = Fault(fault, cluster, node, gpu, time)
        known.lines.append(time)
        return known

    def fault(self, gpu: str) -> Fault | None:
        return self._faults.get(gpu)

    def app_xid(self, gpu: str, time: datetime) -> None:
        """An application XID (13, 31, 43) on ``gpu``: the workload's kernel faulted."""
        self._app[gpu] = time

    def crash(
        self,
        *,
        pod: str,
        gpus: list[str],
        time: datetime,
        exit_code: int,
        oom_killed: bool,
        message: str,
        degraded: bool,
    ) -> Fault | None:
        """A container of ``pod`` (holding ``gpus``) exited at ``time``. Returns the fault
        whose chain holds the pod now (this crash is the chain's), or None.

        ``degraded``: the pod's node has GPUs unallocatable (a chain lasts until they
        are back, or its window closes)."""
        held = self._held.get(pod)
        if held is not None:
            if degraded or time <= max(held.lines) + WINDOW:
                return held
            del self._held[pod]
        if exit_code in SIGNALS or oom_killed or OOM_WORDS in message:
            return None
        if message and not any(word in message.lower() for word in GPU_WORDS):
            return None  # its own last words name an application error
        for gpu in gpus:
            found = self._faults.get(gpu)
            if found is None or not _after_a_line(found, time, WINDOW):
                continue
            app = self._app.get(gpu)
            if (
                app is not None
                and time - NEAR <= app <= time
                and not _after_a_line(found, time, NEAR)
            ):
                continue  # its kernel faulted just before, and the fatal line is not near
            self._held[pod] = found
            return found
        return None


def _after_a_line(fault: Fault, time: datetime, within: timedelta) -> bool:
    return any(line - SKEW <= time <= line + within for line in fault.lines)
