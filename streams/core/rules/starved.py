"""``gpu_pods_starved`` and ``scale_up_failure``: GPU pods that wait on an autoscaler that fails.

A GPU pod pending more than 10 minutes while its node group failed to scale up three times
is starved, not waiting; out of quota it will not heal (page), a zone out of capacity
usually does (ticket). Attempts are counted, not lines (one failure is several lines, and a
group at max size is reported every 10 s). A pod a record ties to a group matches that
group only; an untied pod matches the failing GPU groups that may offer what it asks for.
A pod the autoscaler says no group can fit is ``gpu_pods_unschedulable``, never blamed on a
group's quota. One ``scale_up_failure`` per GPU group, named by its most telling reason;
one starved incident per owner, resolved when none of its pods pends.

Traps: cluster-autoscaler renames GCE codes, so the class alone cannot tell quota from
capacity; a starved incident's groups only grow while it is open (naming only the groups
failing now rewrote the page's reason away). docs/detection.md, design notes.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache

from schemas.events import AutoscalerEvent, KubeEvent, PodEvent
from schemas.incidents import Evidence, PodInfo
from schemas.types import Severity
from streams.core import evidence
from streams.core.config import CoreSettings
from streams.core.lifecycle import ClusterStep
from streams.core.rules.spec import ClusterRule
from streams.core.state import NEVER, ClusterState, GroupTrack, OpenIncident, PendingPod
from streams.core.timeconv import to_datetime, to_seconds

STARVED = "gpu_pods_starved"
SCALE_UP = "scale_up_failure"
UNFIT = "gpu_pods_unschedulable"

FAILURES = frozenset(("scale_up_failed", "scale_up_timeout", "max_size_reached"))
"""Actions that are a failed attempt to grow a group."""
CAUSES = ("quota", "capacity", "max_size", "timeout", "other")
"""Reasons a failure can have, most telling first (``backoff`` alone says nothing)."""
_RANK = {reason: rank for rank, reason in enumerate(CAUSES)}
_KEEP_EVIDENCE = 5
_NAMES_SHOWN = 3

_ACTION = {
    "quota": "Raise the cloud quota ({code}) for the node group's instance type and "
    "region, or move the workload to a group whose quota has room: this does not heal "
    "by waiting.",
    "capacity": "The zone has no capacity for the instance type ({code}): usually "
    "transient. Allow more zones or instance types for the group if it persists.",
    "max_size": "Raise the node group's maximum size (or the Karpenter NodePool's "
    "limits), or free GPU nodes.",
    "timeout": "Nodes were created but did not register in time: check the instances' "
    "boot (driver install, device plugin) and the cloud console.",
    "other": "Check the autoscaler's log for node group {group}.",
}


@lru_cache(maxsize=8)
def _pattern(text: str) -> re.Pattern[str]:
    return re.compile(text, re.IGNORECASE)


CLAIM_SHORTAGE = (
    "cannot allocate all claims",
    "timed out trying to allocate devices",
    "excluded by device class node filter",
    "resourceclaim not available on the node",
)
"""The scheduler's DRA words (plugin ``DynamicResources``) for a node that cannot give a
pod the devices its claims ask for: no free device fits (``cannot allocate all claims``),
the allocator gave up (``timed out trying to allocate devices``), the device class's node
selector leaves the node out (``excluded by device class node filter``), an allocated
claim is bound to another node (``resourceclaim not available on the node``). Counted per
node in ``0/3 nodes are available: 3 cannot allocate all claims.`` like ``Insufficient
nvidia.com/gpu``: a shortage of GPUs, as any ``Unschedulable`` message is, when the pod's
claims ask for GPUs. No rule matches them (:func:`shortage` rules out the others); a test
holds each to it."""
CLAIM_ON_ITS_WAY = re.compile(
    r"waiting for dynamic resource controller to create the resourceclaim"
    r'|resourceclaim "[^"]*" is being deleted'
    r"|resourceclaim in use",
    re.IGNORECASE,
)
"""The scheduler's DRA words for a pod waiting on its claim object, not on GPUs: the claim
controller has not made it from its template yet (``waiting for dynamic resource controller
to create the resourceclaim %q``, seconds after the pod is created), it is being deleted
(``resourceclaim %q is being deleted``), or other pods hold it and it cannot be shared
(``resourceclaim in use``). No node group could help; such a pod is waiting, not
unschedulable (a later shortage message makes it so)."""


def shortage(message: str) -> bool:
    """Does an ``Unschedulable`` message say the pod lacks room (GPUs, nodes), rather than
    that its claim is on its way (:data:`CLAIM_ON_ITS_WAY`; these come from PreFilter,
    alone in the message)?"""
    return CLAIM_ON_ITS_WAY.search(message) is None


def by_claim(pod: PendingPod) -> bool:
    """Does the pod ask for its GPUs by DRA claim? Its resource is then the claim's device
    class (``gpu.nvidia.com``: a DNS name), never an extended resource (``nvidia.com/gpu``:
    always ``<domain>/<name>``)."""
    return bool(pod.resource) and "/" not in pod.resource


def is_gpu_group(name: str, config: CoreSettings) -> bool:
    return bool(_pattern(config.gpu_node_group_pattern).search(name))


def _reason_of(ev: AutoscalerEvent) -> str:
    return ev.reason if ev.reason in _RANK else "other"


def on_autoscaler(step: ClusterStep, ev: AutoscalerEvent) -> None:
    state = step.state
    config = step.config
    state.starved_dirty = True
    group_name = ev.node_group
    if ev.pods:
        _judge(step, ev)
    if not group_name:
        return
    failure = ev.action in FAILURES or (ev.action == "backoff" and ev.reason in _RANK)
    if ev.action == "backoff" and ev.until is not None:
        group = _group(state, group_name, config)
        group.until = max(group.until, to_seconds(ev.until))
        inc = step.find(SCALE_UP, group_name)
        if inc is not None and not failure:  # say the new backoff on the open incident
            _describe_failure(step, inc, group_name, group)
    if not failure:
        return
    group = _group(state, group_name, config)
    for pod in state.pending.values():
        if group_name in pod.groups:
            # A group is only tracked from its failures on (a tie alone is pruned):
            # what the pods tied to it ask for is learned again now.
            group.gpu = True
            _learn(group, pod.resource)
    now = step.now
    reason = _reason_of(ev)
    counted = not group.attempts or now - group.attempts[-1] >= config.scale_up_attempt_gap_seconds
    horizon = now - config.scale_up_window_seconds
    group.attempts = tuple(t for t in group.attempts if t >= horizon)
    if counted:
        group.attempts = (*group.attempts, now)
    if not group.reason or _RANK[reason] < _RANK.get(group.reason, 99):
        group.reason = reason
    if ev.cloud_code and (reason == group.reason or not group.cloud_code):
        group.cloud_code = ev.cloud_code
    group.cloud = ev.cloud or group.cloud
    group.last = now
    line = evidence.autoscaler_line(ev)
    group.evidence = [*group.evidence, line][-_KEEP_EVIDENCE:]
    if group.gpu:
        _scale_up_failure(step, group_name, group, line, counted)


def _unfit(ev: AutoscalerEvent) -> bool:
    """Is this record the autoscaler's verdict that a group (or none) cannot fit its pods?
    A ``NotTriggerScaleUp`` whose reasons are all of configuration (no backoff, no max
    size), "can't be scheduled on <group>, predicate failed", Karpenter's "could not
    schedule pod" / "incompatible with nodepool". Trap: an ``unschedulable`` record
    without that reason ("Pod x is unschedulable", Karpenter's "found provisionable pod")
    is the autoscaler *seeing* the pod, about to act: no verdict. Nor is the bare old
    ``pod didn't trigger scale-up (it wouldn't fit if a new node is added)``: with no
    reasons listed it says the same when the only group that fits is at its max size."""
    if ev.action != "unschedulable" or ev.reason != "config":
        return False
    return not ev.message.rstrip(". ").endswith(_NO_REASONS)


_NO_REASONS = "(it wouldn't fit if a new node is added)"
"""cluster-autoscaler's old ``NotTriggerScaleUp`` message, when it lists no reason."""


def _judge(step: ClusterStep, ev: AutoscalerEvent) -> None:
    """What a record naming pending pods says of them, the latest record winning.

    * A verdict naming a cluster-autoscaler group: that group cannot fit the pod (it is
      no longer the pod's, and never matches it).
    * A verdict naming no group, or Karpenter's (it weighs every NodePool at once and
      names the first it rejected): no group can fit the pod (``PendingPod.unfit``).
    * A plan naming a group ties the pod to it (the group offers what the pod asks).
    * A backoff, a group at its max size or a plan: some group would fit it, it just
      cannot grow now: no verdict stands.
    """
    state, config = step.state, step.config
    group_name = ev.node_group
    unfit = _unfit(ev)
    whole = unfit and (not group_name or "karpenter" in ev.source)
    for ref in ev.pods:
        key = f"{ref.namespace}/{ref.name}"
        pod = state.pending.get(key)
        if pod is None:
            continue
        if whole:
            if pod.unfit is None:
                state.timers_dirty = True
            pod.unfit = evidence.autoscaler_line(ev)
        elif unfit:
            pod.groups = tuple(g for g in pod.groups if g != group_name)
            if group_name not in pod.unfit_groups:
                pod.unfit_groups = (*pod.unfit_groups, group_name)
        elif group_name:
            pod.unfit = None
            pod.unfit_groups = tuple(g for g in pod.unfit_groups if g != group_name)
            group = _group(state, group_name, config)
            group.gpu = True
            _learn(group, pod.resource)
            if group_name not in pod.groups:
                pod.groups = (*pod.groups, group_name)
        elif ev.action in _SOME_GROUP_FITS or ev.reason in _SOME_GROUP_FITS:
            pod.unfit = None


_SOME_GROUP_FITS = frozenset(("backoff", "max_size", "max_size_reached", "scale_up_planned"))
"""Actions, or reasons (a ``NotTriggerScaleUp`` listing "in backoff" among reasons of
configuration), that, naming a pod, say some group would fit it if it could grow now."""


_OFFERS_KEPT = 8
"""Resources a group is remembered to offer (a node group's nodes give one or two)."""


def _learn(group: GroupTrack, resource: str) -> None:
    """The group offers ``resource``: a pod asking for it was tied to the group. Kept
    past that pod (deleted by its owner, scheduled) so an untied pod asking for another
    resource is not blamed on the group's failures later, e.g. a DRA pool's quota
    blamed for a pod asking ``nvidia.com/gpu`` once the pool's own pods are gone."""
    if resource and resource not in group.offers:
        group.offers = (*group.offers, resource)[-_OFFERS_KEPT:]


def _group(state: ClusterState, name: str, config: CoreSettings) -> GroupTrack:
    group = state.groups.get(name)
    if group is None:
        group = state.groups[name] = GroupTrack(gpu=is_gpu_group(name, config))
    return group


def _severity(reason: str, config: CoreSettings, kind: str) -> Severity:
    if reason == "quota":
        return config.quota_severity
    return config.severity.get(kind, "ticket")


def _scale_up_failure(
    step: ClusterStep, name: str, group: GroupTrack, line: Evidence, counted: bool
) -> None:
    """One incident per GPU node group: one failed attempt is logged with several causes
    (an AWS quota failure as the quota line, then "placeholder-cannot-be-fulfilled"
    capacity lines), so the group's most telling reason names it, not each line's."""
    inc = step.find(SCALE_UP, name)
    if inc is None:
        inc = step.open(SCALE_UP, name, line.event_id, step.now)
    step.set_deadline(inc, step.now + step.config.scale_up_quiet_seconds)
    if counted:  # a revision per attempt, not per line (a group at max size: every 10 s)
        inc.count += 1
        step.add_evidence(inc, line)
    _describe_failure(step, inc, name, group)


def _describe_failure(step: ClusterStep, inc: OpenIncident, name: str, group: GroupTrack) -> None:
    reason = group.reason or "other"
    code = group.cloud_code
    before = (inc.summary, inc.severity, dict(inc.attributes))
    inc.severity = _severity(reason, step.config, SCALE_UP)
    attempts = "attempt" if inc.count == 1 else "attempts"
    inc.summary = f"scale-up of GPU node group {name} failed ({reason}"
    inc.summary += f": {code})" if code else ")"
    inc.summary += f", {inc.count} {attempts}"
    if group.until > step.now:
        inc.summary += f", in backoff until {to_datetime(group.until).isoformat()}"
    inc.action = _ACTION[reason].format(code=code or "see the line", group=name)
    attributes = {"node_group": name, "reason": reason, "attempts": str(inc.count)}
    if code:
        attributes["cloud_code"] = code
    if group.cloud:
        attributes["cloud"] = group.cloud
    if group.until > -math.inf:
        attributes["backoff_until"] = to_datetime(group.until).isoformat()
    inc.attributes = attributes
    if (inc.summary, inc.severity, inc.attributes) != before:
        step.touch(inc)


def on_left(step: ClusterStep, key: str, why: str) -> None:
    """A pending pod was scheduled or went away: its owner's incident may end."""
    state = step.state
    pod = state.pending.pop(key, None)
    if pod is None:
        return
    state.starved_dirty = state.timers_dirty = True
    owner = _owner(pod)
    unfit = step.find(UNFIT, owner)
    if unfit is not None:
        if any(p.unfit is not None and _owner(p) == owner for p in state.pending.values()):
            step.add_pod(unfit, _info(pod, "scheduled" if why.startswith("scheduled") else "gone"))
        else:
            step.resolve(unfit, step.now, f"no pod pending under the verdict (the last {why})")
    inc = step.find(STARVED, owner)
    if inc is None:
        return
    left = [p for p in state.pending.values() if _owner(p) == inc.subject]
    if left:
        step.add_pod(inc, _info(pod, "scheduled" if why.startswith("scheduled") else "gone"))
        return
    _SAID.pop(f"{STARVED}|{inc.subject}", None)
    step.resolve(inc, step.now, f"no pod pending any more (the last {why})")


def _owner(pod: PendingPod) -> str:
    if pod.owner_kind and pod.owner_name:
        return f"{pod.owner_kind}/{pod.namespace}/{pod.owner_name}"
    return f"Pod/{pod.namespace}/{pod.name}"


def _info(pod: PendingPod, role: str) -> PodInfo:
    return PodInfo(
        namespace=pod.namespace,
        name=pod.name,
        owner_kind=pod.owner_kind,
        owner_name=pod.owner_name,
        role=role,
    )


def _starving(pod: PendingPod, now: float, config: CoreSettings) -> bool:
    return pod.unschedulable is not None and now - pod.since >= config.starved_pending_seconds


def _prune(step: ClusterStep) -> None:
    """Forget groups with no failure within the window, no backoff ahead, no incident."""
    state = step.state
    horizon = step.now - step.config.scale_up_window_seconds
    stale = [
        name
        for name, group in state.groups.items()
        if group.last < horizon
        and group.until < step.now
        and f"{SCALE_UP}|{name}" not in state.incidents
    ]
    for name in stale:
        del state.groups[name]


def _recent(group: GroupTrack, now: float, config: CoreSettings) -> int:
    """The group's attempts within ``scale_up_window_seconds`` (pruned only on failures)."""
    horizon = now - config.scale_up_window_seconds
    return sum(1 for t in group.attempts if t >= horizon)


def _failing(state: ClusterState, now: float, config: CoreSettings) -> dict[str, GroupTrack]:
    """Groups with ``starved_failures`` attempts within the window, by name."""
    return {
        name: group
        for name, group in state.groups.items()
        if _recent(group, now, config) >= config.starved_failures
    }


def evaluate(step: ClusterStep) -> None:
    """Open or update one incident per owner whose pods starve (cheap when none pend)."""
    state = step.state
    if not state.starved_dirty:
        return
    state.starved_dirty = False
    config = step.config
    now = step.now
    _prune(step)
    if not state.pending:
        return
    failing = _failing(state, now, config)
    unfit = any(p.unfit is not None for p in state.pending.values())
    # No verdict and no gpu_pods_unschedulable open: _unschedulable has nothing to do.
    verdicts = unfit or any(k.startswith(f"{UNFIT}|") for k in state.incidents)
    if (
        not failing
        and not verdicts
        and not any(k.startswith(f"{STARVED}|") for k in state.incidents)
    ):
        return  # nothing fails, no verdict, nothing is open: no pod to walk
    by_owner: dict[str, list[PendingPod]] = {}
    offers: dict[str, set[str]] = {}
    for name, track in failing.items():
        if track.offers:
            offers[name] = set(track.offers)
    for pod in state.pending.values():
        by_owner.setdefault(_owner(pod), []).append(pod)
        for group in pod.groups:
            if pod.resource:
                offers.setdefault(group, set()).add(pod.resource)
    for owner, pods in sorted(by_owner.items()):
        if verdicts:
            _unschedulable(step, owner, pods)
        inc = step.find(STARVED, owner)
        starving = [p for p in pods if _starving(p, now, config) and p.unfit is None]
        if inc is None and not starving:
            continue
        # An open incident whose pods are not yet starving; pods no group can fit match
        # no group's failure: the autoscaler could not help them if it grew every group.
        judged = starving or [p for p in pods if p.unfit is None]
        if any(p.groups for p in judged):  # tied: only their own groups count
            named = sorted({g for p in judged for g in p.groups if g in failing})
            match = "named"
        else:
            named = sorted(
                g for g in failing if failing[g].gpu and any(_offers(offers, g, p) for p in judged)
            )
            match = "cluster"
        if inc is None:
            if not named:
                continue
            first = min(starving, key=lambda p: (p.since, p.name))
            anchor = first.unschedulable.event_id if first.unschedulable else owner
            inc = step.open(STARVED, owner, anchor, first.since)
        groups = [(g, state.groups[g]) for g in named]
        if _unchanged(step, inc, pods, groups, match):
            continue
        _describe(step, inc, pods, groups, match)


_SAID: dict[str, tuple[OpenIncident, tuple[object, ...]]] = {}
"""What each open ``gpu_pods_starved`` was last described from (:func:`_unchanged`), by
incident key, with the incident itself: an entry counts only for that very object, so a
restored snapshot, another Correlator or a reopened incident describe anew. Not state: a
miss only costs the description it saves."""
_SAID_MAX = 4096
"""Entries kept before the memo is emptied (an incident resolved elsewhere leaves one);
0: none (every incident described on every walk, as without the memo)."""


def _unchanged(
    step: ClusterStep,
    inc: OpenIncident,
    pods: list[PendingPod],
    groups: list[tuple[str, GroupTrack]],
    match: str,
) -> bool:
    """Would :func:`_describe` change nothing? True when everything it reads is what it
    read last time for this incident: the owner's pods (names, GPUs, resource), the
    failing groups (reason, cloud code, attempts within the window *now*, their last two
    lines) and the match. Every pending pod's update walks every owner; without this each
    open incident was re-described from scratch, the same words again.

    Trap: past ``max_evidence``, :meth:`KeyStep.add_evidence` counts a line it does not
    keep (``evidence_omitted``) on every call, so an incident whose evidence is full is
    always described: skipping would change that count."""
    if len(inc.evidence) >= step.config.max_evidence:
        return False
    now, config = step.now, step.config
    said = (
        match,
        tuple([(p.name, p.gpus, p.resource) for p in pods]),
        tuple(
            [
                (
                    name,
                    g.reason,
                    g.cloud_code,
                    _recent(g, now, config),
                    tuple([line.event_id for line in g.evidence[-2:]]),
                )
                for name, g in groups
            ]
        ),
    )
    if len(_SAID) >= _SAID_MAX:
        _SAID.clear()
    key = f"{STARVED}|{inc.subject}"
    known = _SAID.get(key)
    if known is not None and known[0] is inc and known[1] == said:
        return True
    _SAID[key] = (inc, said)
    return False


def _offers(offers: dict[str, set[str]], name: str, pod: PendingPod) -> bool:
    """Can an untied pod be waiting on group ``name``? Not when a record said the group
    cannot fit it, nor when the group is known to offer other GPU resources than the one
    the pod asks for (``offers``: the resources of the pods ever tied to each group while
    it is tracked, pending now or not; a MIG profile is not a whole GPU, a DRA device
    class is not ``nvidia.com/gpu``). A group nothing is known of may offer anything."""
    if name in pod.unfit_groups:
        return False
    known = offers.get(name)
    return not known or not pod.resource or pod.resource in known


def _unschedulable(step: ClusterStep, owner: str, pods: list[PendingPod]) -> None:
    """``gpu_pods_unschedulable``: the owner's pods pending and unschedulable for
    ``starved_pending_seconds`` that the autoscaler says no node group can fit. One ticket
    per owner naming the scheduler's and the autoscaler's words; it resolves when none of
    its pods pends under such a verdict any more (scheduled, deleted, or a record ties it
    to a group that would fit it)."""
    config = step.config
    stuck = [p for p in pods if p.unfit is not None and _starving(p, step.now, config)]
    inc = step.find(UNFIT, owner)
    if not stuck:
        if inc is not None and not any(p.unfit is not None for p in pods):
            step.resolve(inc, step.now, "no pod pending under the autoscaler's verdict any more")
        return
    if inc is None:
        first = min(stuck, key=lambda p: (p.since, p.name))
        verdict = first.unfit
        inc = step.open(UNFIT, owner, verdict.event_id if verdict else owner, first.since)
    before = (inc.summary, dict(inc.attributes), len(inc.pods))
    for pod in sorted(stuck, key=lambda p: p.name):
        if step.add_pod(inc, _info(pod, "pending")):
            for item in (pod.unschedulable, pod.unfit):
                if item is not None:
                    step.add_evidence(inc, item)
    latest = max(stuck, key=lambda p: (p.since, p.name))
    scheduler = latest.unschedulable.text if latest.unschedulable else ""
    autoscaler = latest.unfit.text if latest.unfit else ""
    kind, name = inc.subject.split("/", 1)
    minutes = int(config.starved_pending_seconds // 60)
    what = f"{len(stuck)} GPU pod{'s' if len(stuck) != 1 else ''} of {kind} {name}"
    inc.summary = (
        f"{what} pending over {minutes} min that no node group can fit: the autoscaler "
        f"says {autoscaler!r}; the scheduler says {scheduler!r}"
    )
    inc.action = (
        "No scale-up will come: no node group offers what these pods ask for. Check their "
        "node selector and affinity (the GPU product), tolerations and GPU resource "
        "against the node groups' labels and taints; fix the spec, or add a node group "
        "that offers it (a group scaling from zero must advertise its GPUs in its node "
        'template, or the autoscaler reads "Insufficient nvidia.com/gpu").'
    )
    if any(by_claim(p) for p in stuck):
        inc.action += (
            " For pods that ask by DRA claim: a group scales up from zero nodes only where "
            "the cloud provider supports its DRA driver; elsewhere keep one node in it, so "
            "the autoscaler sees its ResourceSlices."
        )
    inc.attributes = {
        "pending_pods": str(len(stuck)),
        "gpus_requested": str(sum(p.gpus for p in stuck)),
        "autoscaler": autoscaler,
        "scheduler": scheduler,
    }
    resources = sorted({p.resource for p in stuck if p.resource})
    if resources:
        inc.attributes["resource"] = ",".join(resources)
    if (inc.summary, inc.attributes, len(inc.pods)) != before:
        step.touch(inc)


def _describe(
    step: ClusterStep,
    inc: OpenIncident,
    pods: list[PendingPod],
    groups: list[tuple[str, GroupTrack]],
    match: str,
) -> None:
    """Fill the incident from the owner's pending pods and the failing groups; touch it
    only when what it says changed (an event per scheduling attempt must not make a
    revision each)."""
    config = step.config
    before = (inc.summary, inc.severity, dict(inc.attributes), len(inc.pods))
    for pod in sorted(pods, key=lambda p: p.name):
        # The scheduler's message changes with every attempt ("0/7 nodes", "0/6 nodes"):
        # evidence once per pod, when it joins, or every attempt would be a revision.
        if step.add_pod(inc, _info(pod, "pending")) and pod.unschedulable is not None:
            step.add_evidence(inc, pod.unschedulable)
    if groups:
        reason = min((g.reason or "other" for _, g in groups), key=lambda r: _RANK.get(r, 99))
        codes = sorted({g.cloud_code for _, g in groups if g.reason == reason and g.cloud_code})
        attempts = max(_recent(g, step.now, config) for _, g in groups)
        for _, group in groups:
            for line in group.evidence[-2:]:
                step.add_evidence(inc, line)
        # The groups that failed while these pods starved, not only those failing now:
        # a group whose failures age out of the window (or a backoff that ends) still
        # made the page, as the pods that were scheduled meanwhile stay named too.
        names = [name for name, _ in groups]
        before_names = inc.attributes.get("node_groups", "")
        names = sorted({*names, *(n for n in before_names.split(",") if n)})
        inc.severity = _severity(reason, config, STARVED)
        inc.attributes = {
            "node_groups": ",".join(names),
            "reason": reason,
            "attempts": str(attempts),
            "match": match,
            "pending_pods": str(len(pods)),
            "gpus_requested": str(sum(p.gpus for p in pods)),
        }
        resources = sorted({p.resource for p in pods if p.resource})
        if resources:
            inc.attributes["resource"] = ",".join(resources)
        if codes:
            inc.attributes["cloud_code"] = ",".join(codes)
        shown = ", ".join(names[:_NAMES_SHOWN]) + (
            f" and {len(names) - _NAMES_SHOWN} more" if len(names) > _NAMES_SHOWN else ""
        )
        owner = inc.subject.split("/", 1)
        what = f"{len(pods)} GPU pod{'s' if len(pods) != 1 else ''} of {owner[0]} {owner[1]}"
        minutes = int(config.starved_pending_seconds // 60)
        inc.summary = (
            f"{what} pending over {minutes} min: scale-up of {shown} failed {attempts} times "
            f"({reason}{': ' + ', '.join(codes) if codes else ''})"
        )
        inc.action = _ACTION[reason].format(code=", ".join(codes) or "see the line", group=shown)
    else:
        inc.attributes = {**inc.attributes, "pending_pods": str(len(pods))}
    if (inc.summary, inc.severity, inc.attributes, len(inc.pods)) != before:
        step.touch(inc)


def deadline(state: ClusterState, config: CoreSettings) -> float:
    """When the next pending, unschedulable pod reaches ``starved_pending_seconds``
    (after the rules last ran: one reached before was seen then)."""
    after, checked = config.starved_pending_seconds, state.checked_at  # read once
    found = NEVER
    for pod in state.pending.values():
        if pod.unschedulable is not None:
            at = pod.since + after
            if checked < at < found:
                found = at
    return found


def check(step: ClusterStep, timer: bool) -> None:
    """After an event, or on a timer (``timer``: a threshold in time may have come, so
    the pending pods are walked even though no record changed them)."""
    if timer:
        step.state.starved_dirty = True
    evaluate(step)


SPEC: ClusterRule = ClusterRule(
    name="starved",
    emits=((STARVED, "ticket"), (UNFIT, "ticket"), (SCALE_UP, "ticket")),
    reads=(PodEvent, KubeEvent, AutoscalerEvent),
    state=("pending", "groups", "starved_dirty"),
    settings=(
        "starved_pending_seconds",
        "starved_failures",
        "scale_up_window_seconds",
        "scale_up_attempt_gap_seconds",
        "scale_up_quiet_seconds",
        "quota_severity",
        "gpu_node_group_pattern",
    ),
    deadline=deadline,
    evaluate=check,
)
"""``gpu_pods_starved``, ``gpu_pods_unschedulable`` and ``scale_up_failure``: pending GPU
pods and the autoscaler's failures to make room for them."""
