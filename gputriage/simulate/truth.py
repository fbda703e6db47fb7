"""Ground truth: the incidents the simulated faults must give (``schemas/truth.py``).

The recorder watches the scenarios; it never draws from the rng (the stream's bytes must
not depend on whether truth is written) and never runs the core: each truth is the
domain's rule applied to what was *emitted*, made at once, pending (a condition that must
last; kept at the end only if the stream ran past its due time) or counted at the end
(restarts, XID episodes, :mod:`gputriage.simulate.cluster_truth`). Windows bound
``first_seen``, widened by :data:`SLACK` for jitter.

Trap: the thresholds are the domain's defaults, deliberately not imported from
``streams/core/config.py``: a change of the core's configuration must show in the score,
not in the truth. The XID episode gap is the one number taken from the core's default.
docs/replay.md, design notes: the truth recorder.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import msgspec

from gputriage.simulate.cluster_truth import ClusterTruth
from gputriage.simulate.mismatch_truth import MismatchTruth
from gputriage.simulate.spec import StreamSpec
from schemas.truth import ExpectedIncident

SLACK = timedelta(seconds=2.0)
"""Widening of every window: jitter, termination-before-update, slot spacing."""
END_MARGIN = timedelta(seconds=5.0)
"""A pending truth counts only if the stream runs this far past its due time."""

CUDA_OOM_RESTARTS = 3
"""suspected_cuda_oom: *more* than this many restarts..."""
CUDA_OOM_WINDOW = timedelta(minutes=15)
"""...within this long."""
SIGNAL_EXITS = frozenset({137, 143})
"""Exit codes of a container killed from outside (SIGKILL, SIGTERM): never CUDA OOM."""
SAME_INCIDENT = {
    "host_oom_kill": timedelta(minutes=15),
    "gpu_app_fault": timedelta(hours=1),
}
"""A fault of these types on the subject of an incident still open (its last evidence
less than this ago) updates that incident (``open`` -> ``updated``): no new truth. The
horizons are the incidents' quiet periods (``oom_quiet_seconds``,
``app_fault_quiet_seconds``): the domain gives the lifecycle, not the numbers."""
XID_REPEAT_EPISODES = 5
XID_REPEAT_WINDOW = timedelta(hours=24)
XID_EPISODE_GAP = timedelta(minutes=10)
EVICTION_LOOKBACK = timedelta(minutes=2)
"""device_unhealthy_eviction: a pod failure this long before the fault still joins."""
DEGRADED_QUIET = timedelta(days=1)
"""gpu_degraded with no end (a fatal XID, no drop): open this long (degraded_quiet_seconds)."""
DEGRADED_XIDS_BEFORE = timedelta(minutes=30)
"""gpu_degraded of a drop: XIDs on the node this long before it are its evidence."""
XID_COALESCE = timedelta(seconds=1)
"""Lines of one code on one GPU this close are one occurrence (kmsg and NVML overlap)."""


@dataclass
class Pending:
    """A truth that holds once its condition has lasted until ``due``."""

    incident: ExpectedIncident
    due: datetime
    state: str = "open"
    """``open``, ``confirmed`` or ``cancelled``."""

    def confirm(self) -> None:
        if self.state == "open":
            self.state = "confirmed"

    def cancel(self) -> None:
        if self.state == "open":
            self.state = "cancelled"


@dataclass
class _Restart:
    time: datetime
    exit_code: int
    oom_killed: bool
    fault: str
    node: str
    owner: str
    held: bool = False
    """A device chain holds the pod: the crash is the chain's, and opens no loop."""


@dataclass
class _Subject:
    cluster: str
    node: str
    gpu: str
    code: int
    times: list[datetime] = field(default_factory=list)
    fault: str = ""


class TruthRecorder:
    """Collects :class:`ExpectedIncident` records while the stream is generated."""

    def __init__(self, spec: StreamSpec) -> None:
        self.spec = spec
        self._seq = 0
        self._pending: list[Pending] = []
        self._restarts: dict[tuple[str, str], list[_Restart]] = defaultdict(list)
        self._xids: dict[tuple[str, str, str, int], _Subject] = {}
        self._last: dict[tuple[str, ...], datetime] = {}
        self._app_lines: dict[str, list[datetime]] = defaultdict(list)
        """Every application-class XID line per GPU (any source): see :meth:`app_line`."""
        self._node_xids: dict[tuple[str, str], list[datetime]] = defaultdict(list)
        self._ends: dict[str, datetime] = {}
        self._superseded: dict[str, datetime] = {}
        self._escalated: dict[str, datetime] = {}
        """Tickets a casualty escalated after they opened (:meth:`escalated`)."""
        self.expected: list[ExpectedIncident] = []
        """The truths, by ``start``, once :meth:`finish` has run."""
        self.cluster = ClusterTruth(SLACK)
        """Pending pods and autoscaler records: ``scale_up_failure``, ``gpu_pods_starved``."""
        self.mismatch = MismatchTruth(SLACK)
        """The exporter outages and what their nodes' pods hold: ``allocation_mismatch``."""

    def fault_id(self, fault: str) -> str:
        """A fresh id for one injected fault (a counter: deterministic, no rng)."""
        self._seq += 1
        return f"{fault}-{self._seq:05d}"

    def expect(
        self,
        *,
        fault_id: str,
        kind: str,
        cluster: str,
        start: datetime,
        first: datetime,
        last: datetime,
        due: datetime | None = None,
        **subject: object,
    ) -> Pending:
        """One expected incident: ``first_seen`` within ``[first, last]`` (widened by
        :data:`SLACK`). Confirmed now unless ``due`` says when its condition is met."""
        incident = ExpectedIncident(
            id=f"{fault_id}/{kind}",
            fault=fault_id.rsplit("-", 1)[0],
            type=kind,
            cluster=cluster,
            start=start,
            not_before=min(first, start) - SLACK,
            not_after=last + SLACK,
            **subject,  # type: ignore[arg-type]
        )
        pending = Pending(incident, due or start)
        if due is None:
            pending.confirm()
        self._pending.append(pending)
        return pending

    def still_open(self, kind: str, key: tuple[str, ...], time: datetime) -> bool:
        """Whether a ``kind`` fault on ``key`` at ``time`` joins an incident still open
        (:data:`SAME_INCIDENT`); records ``time`` as that incident's latest evidence."""
        horizon = SAME_INCIDENT[kind]
        if kind == "gpu_app_fault":
            # The core's quiet hour runs from the incident's *last* line, any source: a
            # dcgm copy scraped up to 30 s after the kmsg line, a second code seconds
            # later (seen in a simulated fleet: a fault 3,579 s after a copy joined the open one).
            # Those lines are recorded by :meth:`app_line`, not here.
            lines = self._app_lines.get(key[0], ())
            return any(time - horizon < t < time for t in lines)
        last = self._last.get((kind, *key))
        self._last[(kind, *key)] = time
        return last is not None and time - last < horizon

    def app_line(self, gpu: str, time: datetime) -> None:
        """An application-class XID line on ``gpu``, whichever fault or source logged it."""
        self._app_lines[gpu].append(time)

    def restart(
        self,
        *,
        cluster: str,
        node: str,
        pod: str,
        owner: str,
        time: datetime,
        exit_code: int,
        oom_killed: bool = False,
        fault: str = "",
        held: bool = False,
    ) -> None:
        """A container of ``pod`` (``namespace/name``) terminated and is restarted;
        ``held``: a device chain holds the pod (it counts, but opens no loop)."""
        self._restarts[(cluster, pod)].append(
            _Restart(time, exit_code, oom_killed, fault, node, owner, held)
        )

    def ended(self, incident_id: str, at: datetime) -> bool:
        """Whether the condition behind ``incident_id`` ended at or before ``at``."""
        end = self._ends.get(incident_id)
        return end is not None and end <= at

    def ends(self, incident_id: str, at: datetime) -> None:
        """The condition behind ``incident_id`` ended at ``at`` (the incident resolves): a
        fault of the same subject before then joins it instead of making its own."""
        self._ends[incident_id] = at

    def _joined(self, found: list[ExpectedIncident]) -> list[ExpectedIncident]:
        """Drop the truths that join an incident still open on their subject: one
        ``gpu_degraded`` per node (docs/detection.md: "One per node"; without an end it stays open
        for ``degraded_quiet_seconds``, a day; a drop that joins it ends it when all GPUs
        are allocatable again; a flaky GPU's ends at its ``xid_repeat``).
        ``allocation_mismatch`` (one per cluster) is joined where it is counted
        (:mod:`gputriage.simulate.mismatch_truth`)."""
        open_until: dict[tuple[str, str, str], datetime] = {}
        quiet: set[tuple[str, str, str]] = set()
        """Tickets open only by the quiet day (no drop of their own yet)."""
        alone: dict[tuple[str, str, str], datetime] = {}
        """A flaky GPU's ticket that its xid_repeat supersedes, with its day-long end
        should anything join it first (then it tells more than that GPU: it stays)."""
        kept = []
        for incident in found:
            if incident.type != "gpu_degraded":
                kept.append(incident)
                continue
            key = (incident.type, incident.cluster, incident.node)
            ended = self._ends.get(incident.id)
            end = incident.start + DEGRADED_QUIET if ended is None else ended
            until = open_until.get(key)
            if until is not None and key in alone and incident.start <= until:
                until = open_until[key] = alone.pop(key)
            if until is not None and incident.start <= until:
                if incident.type == "gpu_degraded" and ended is not None and key in quiet:
                    # A drop that joins a ticket its XIDs keep open ends it when it
                    # recovers (docs/detection.md: "Resolves when all GPUs are allocatable again
                    # (once a drop was seen)"): the core cannot tell which GPU came back.
                    open_until[key] = ended
                    quiet.discard(key)
                else:
                    open_until[key] = max(until, end)
                continue
            open_until[key] = end
            alone.pop(key, None)
            if ended is None:
                quiet.add(key)
                superseded = self._superseded.get(incident.id)
                if superseded is not None:
                    alone[key] = end
                    open_until[key] = superseded
            else:
                quiet.discard(key)
            kept.append(incident)
        return kept

    def _supersede(self, repeats: list[ExpectedIncident]) -> None:
        """A flaky GPU's ``gpu_degraded`` ends when its ``xid_repeat`` opens (docs/detection.md: "an
        ``xid_repeat`` of its only GPU supersedes it": the page says RMA, the ticket's one
        reset will not hold), at the episode that makes the repeat; a drop on the node
        after that is a new ticket. Only a ticket of that GPU alone (:meth:`_joined`)."""
        for repeat in repeats:
            if repeat.fault == "flaky_gpu":
                ticket = repeat.id.replace("/xid_repeat", "/gpu_degraded")
                opened = repeat.not_after - SLACK
                escalated = self._escalated.get(ticket)
                if escalated is not None and escalated <= opened:
                    continue  # a pod's failure joined it: it tells more than that GPU
                self._superseded[ticket] = opened

    def escalated(self, incident_id: str, at: datetime) -> None:
        """A casualty of the fault joined its ticket after the ticket opened (the core's
        ``chain.escalate``: same incident, the chain's severity). Such a ticket tells
        more than its GPU, so an ``xid_repeat`` no longer supersedes it (the core's
        ``degraded.on_repeat`` leaves an escalated ticket open; a simulated fleet: a
        flaky GPU's bound pod crashed 229 s after an XID 48, and a drop hours later
        joined the ticket still open)."""
        known = self._escalated.get(incident_id)
        if known is None or at < known:
            self._escalated[incident_id] = at

    def xid(self, *, cluster: str, node: str, time: datetime) -> None:
        """Any XID line on a node (a degraded node's incident names its recent XIDs)."""
        self._node_xids[(cluster, node)].append(time)

    def _widened(self, incident: ExpectedIncident) -> ExpectedIncident:
        """Move ``not_before`` back to evidence the domain attaches from before the fault:

        * ``device_unhealthy_eviction``: a failure of its pods up to
          :data:`EVICTION_LOOKBACK` before the fault joins the chain (docs/detection.md: "or failed
          up to 2 min before"), so an unlucky crash just before is its first evidence;
        * ``gpu_degraded`` of a drop: the node's recent XIDs are attached as evidence
          (attached as evidence; up to :data:`DEGRADED_XIDS_BEFORE`
          before: a drop names no GPU, so any of them may be the cause).
        """
        earliest = incident.not_before
        if incident.type == "device_unhealthy_eviction":
            for pod in incident.pods:
                for r in self._restarts.get((incident.cluster, pod), ()):
                    if incident.start - EVICTION_LOOKBACK <= r.time <= incident.start:
                        earliest = min(earliest, r.time - SLACK)
        elif incident.type == "gpu_degraded" and not incident.gpus:
            for t in self._node_xids.get((incident.cluster, incident.node), ()):
                if incident.start - DEGRADED_XIDS_BEFORE <= t <= incident.start:
                    earliest = min(earliest, t - SLACK)
        if earliest == incident.not_before:
            return incident
        return msgspec.structs.replace(incident, not_before=earliest)

    def fatal_xid(
        self, *, cluster: str, node: str, gpu: str, code: int, time: datetime, fault: str
    ) -> None:
        """A fatal XID line on a GPU (every source: they are coalesced here)."""
        key = (cluster, node, gpu, code)
        subject = self._xids.get(key)
        if subject is None:
            subject = self._xids[key] = _Subject(cluster, node, gpu, code)
        if fault.startswith("flaky_gpu") or not subject.fault:
            subject.fault = fault
        subject.times.append(time)

    def recurs(self, *, cluster: str, node: str, gpu: str, code: int, time: datetime) -> bool:
        """Whether the fatal line at ``time`` (already recorded) comes back to a code its GPU
        logged in the ``XID_REPEAT_WINDOW`` before, whichever fault logged it: the core
        then opens no ticket for it (``degraded.recurrence``: the first episode's incident
        told the fault; the repeat counts it coming back)."""
        subject = self._xids.get((cluster, node, gpu, code))
        if subject is None:
            return False
        return any(time - XID_REPEAT_WINDOW < t < time for t in subject.times)

    def finish(self, end: datetime) -> None:
        """Settle pending truths at the stream's ``end`` and count restarts and episodes."""
        found: list[ExpectedIncident] = []
        for pending in self._pending:
            if pending.state == "confirmed" or (
                pending.state == "open" and pending.due + END_MARGIN <= end
            ):
                found.append(self._widened(pending.incident))
            elif pending.state == "open":
                # Due within END_MARGIN of the end (or after it): whether the core's
                # watermark passes the due time depends on the last events' times and
                # its grace. Neither required nor forbidden (seen in a simulated fleet: a drop
                # 5 min 3 s before the end opened a ticket the truth had left out).
                optional = msgspec.structs.replace(pending.incident, optional=True)
                found.append(self._widened(optional))
        found.extend(self._cuda_oom())
        repeats = self._xid_repeats()
        self._supersede(repeats)
        found.extend(repeats)
        found.extend(self.cluster.expected(self.fault_id, end - END_MARGIN))
        found.extend(self.mismatch.expected(end - END_MARGIN))
        found.sort(key=lambda e: (e.start, e.id))
        found = self._joined(found)
        seen: dict[str, int] = {}
        for k, incident in enumerate(found):  # one fault may give two of a type
            n = seen[incident.id] = seen.get(incident.id, 0) + 1
            if n > 1:
                found[k] = msgspec.structs.replace(incident, id=f"{incident.id}#{n}")
        self.expected = found

    def _cuda_oom(self) -> list[ExpectedIncident]:
        found = []
        for (cluster, pod), restarts in self._restarts.items():
            restarts.sort(key=lambda r: r.time)
            quiet_until: datetime | None = None
            for k, r in enumerate(restarts):
                if quiet_until is not None and r.time <= quiet_until:
                    quiet_until = r.time + CUDA_OOM_WINDOW
                    continue
                quiet_until = None
                window = [x for x in restarts[: k + 1] if r.time - x.time <= CUDA_OOM_WINDOW]
                if any(x.oom_killed for x in window):
                    continue
                counted = [
                    x for x in window if x.exit_code != 0 and x.exit_code not in SIGNAL_EXITS
                ]
                if len(counted) <= CUDA_OOM_RESTARTS or r.held:
                    # A crash the eviction chain holds opens no loop (the core's holds_pod:
                    # the pod's crashes are the device's while its chain is open).
                    continue
                faults = [x.fault for x in counted if x.fault]
                fault_id = faults[0] if faults else self.fault_id("restart_burst")
                found.append(
                    ExpectedIncident(
                        id=f"{fault_id}/suspected_cuda_oom",
                        fault=fault_id.rsplit("-", 1)[0],
                        type="suspected_cuda_oom",
                        cluster=cluster,
                        node=r.node,
                        pods=(pod,),
                        owner=r.owner,
                        start=counted[0].time,
                        not_before=counted[0].time - SLACK,
                        not_after=r.time + SLACK,
                        severity="ticket",
                    )
                )
                quiet_until = r.time + CUDA_OOM_WINDOW
        return found

    def _xid_repeats(self) -> list[ExpectedIncident]:
        found = []
        for subject in self._xids.values():
            times = sorted(subject.times)
            episodes: list[datetime] = []
            last: datetime | None = None
            for t in times:
                if last is not None and t - last < XID_COALESCE:
                    continue
                if last is None or t - last >= XID_EPISODE_GAP:
                    episodes.append(t)
                last = t
            for k in range(XID_REPEAT_EPISODES - 1, len(episodes)):
                first = episodes[k - XID_REPEAT_EPISODES + 1]
                if episodes[k] - first <= XID_REPEAT_WINDOW:
                    found.append(
                        ExpectedIncident(
                            id=f"{subject.fault or self.fault_id('xid_repeat')}/xid_repeat",
                            fault=(subject.fault or "xid_repeat").rsplit("-", 1)[0],
                            type="xid_repeat",
                            cluster=subject.cluster,
                            node=subject.node,
                            gpus=(subject.gpu,),
                            start=episodes[0],
                            not_before=episodes[0] - SLACK,
                            not_after=episodes[k] + SLACK,
                            severity="page",
                        )
                    )
                    break
        return found
