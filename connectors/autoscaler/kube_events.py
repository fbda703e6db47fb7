"""Autoscaler Kubernetes Events to ``autoscaler.v1`` records: live objects and pasted rows.

cluster-autoscaler and Karpenter record their decisions as Events on the pods they could or
could not help. :func:`autoscaler_event` turns such an Event into an
:class:`~schemas.events.AutoscalerEvent` whatever the GPU filter says of it (a CPU pool's
failed scale-up is context for the GPU pod beside it); the CLI hands it to the k8s
connector as its ``derive`` hook, so the families stay independent. :func:`pasted` reads
the same Events as people paste them (``kubectl describe`` and ``get events`` rows, the
autoscaler's log of its Events, bare messages); both end in :func:`event_fact`.

Traps: a GCE node group is a URL, ended at ``": "``, never at its first ``:``;
``NotTriggerScaleUp``'s reason is the most actionable class listed, not the most frequent;
a ``Nominated`` onto an existing node is no scale-up; the scheduler's and the kubelet's
Events are not the autoscaler's. Each reason, by release: docs/connectors.md, design notes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Final

from connectors.autoscaler import klog
from connectors.autoscaler.classify import classify_failure, cloud_of, not_triggered
from connectors.autoscaler.karpenter import pool_of_claim
from connectors.autoscaler.klog import Fact
from schemas.events import AutoscalerEvent, KubeEvent, PodRef
from schemas.ids import hashed_id

CA: Final = "cluster-autoscaler"
KARPENTER: Final = "karpenter"
SOURCES: Final = frozenset({CA, KARPENTER})
"""``source.component`` / ``reportingController`` of the autoscalers' Events."""

_CA_REASONS: Final = frozenset(
    {
        "TriggeredScaleUp",
        "NotTriggerScaleUp",
        "ScaledUpGroup",
        "FailedToScaleUpGroup",
        "ScaleUpFailed",
        "ScaleUpTimedOut",
        "MaxNodesTotalReached",
        "ScaleDown",
        "ScaleDownEmpty",
        "ScaleDownFailed",
    }
)
_KARPENTER_DOWN: Final = frozenset(
    {
        "DisruptionLaunching",
        "DisruptionWaitingReadiness",
        "DisruptionWaitingDeletion",
        "DisruptionTerminating",
        "DeprovisioningLaunching",
        "DeprovisioningWaitingReadiness",
        "DeprovisioningWaitingDeletion",
        "DeprovisioningTerminating",
        "Disrupted",
        "TerminationGracePeriodExpiring",
    }
)
_KARPENTER_BLOCKED: Final = frozenset(
    {"DisruptionBlocked", "DeprovisioningBlocked", "FailedDraining"}
)
_KARPENTER_REASONS: Final = (
    frozenset(
        {
            "Nominated",
            "NoCompatibleInstanceTypes",
            "InsufficientCapacityError",
            "NodeClassNotReady",
            "Unconsolidatable",
        }
    )
    | _KARPENTER_DOWN
    | _KARPENTER_BLOCKED
)
_SHARED: Final = frozenset({"FailedScheduling", "Evicted"})
"""Reasons other components use too: the autoscaler's only by source or wording."""
REASONS: Final = _CA_REASONS | _KARPENTER_REASONS | _SHARED

_TRIGGERED_OLD: Final = re.compile(
    r"group: (?P<g>[^,\s]+), sizes \(current/new\): (?P<a>\d+)/(?P<b>\d+)"
)
_SIZE_SET: Final = re.compile(
    r"group (?P<g>\S+) size (?:set )?to (?P<b>\d+)(?: instead of (?P<a>\d+))?"
    r"(?: \(max: (?P<m>\d+)\))?"
)
_GROUP_NAMED: Final = re.compile(
    r"(?:Scale-up failed for group|to group|Nodes added to group|target size for group) "
    r"(?P<g>\S+?)(?=:? |:?$|;)"
)
"""The group ends before ``": "``, ``" "``, ``";"`` or the end: a GCE URL keeps its
``https:`` (the failure must name the group the pods' TriggeredScaleUp names)."""
_NODEPOOL: Final = re.compile(r'(?:nodepool|provisioner):? "(?P<pool>[^"]+)"')
_CLAIM: Final = re.compile(r"(?:nodeclaim|machine)/(?P<claim>[\w.-]+)")
_CLAIM_EVENT: Final = re.compile(r"^(?:NodeClaim|Machine) (?P<claim>[\w.-]+) event: ")
COMBINED: Final = "(combined from similar events): "
"""client-go's event aggregation puts this before the message of an Event it folded
similar ones into (``tools/record/events_cache.go``): the message after it is the
autoscaler's."""


def _sized(match: re.Match[str] | None) -> Fact:
    if match is None:
        return Fact("scale_up_planned")
    found = match.groupdict()
    return Fact(
        "scale_up_planned",
        node_group=found["g"],
        size_from=klog.small_int(found.get("a")),
        size_to=klog.small_int(found.get("b")),
        max_size=klog.small_int(found.get("m")),
    )


def _named_group(message: str) -> str:
    match = _GROUP_NAMED.search(message)
    return match["g"] if match is not None else ""


def _ca_facts(reason: str, message: str) -> tuple[Fact, ...]:
    if reason == "TriggeredScaleUp":
        items = tuple(_sized(m) for m in klog.PLAN_ITEM_RE.finditer(message))
        return items or (_sized(_TRIGGERED_OLD.search(message)),)
    if reason == "ScaledUpGroup":
        return (_sized(_SIZE_SET.search(message)),)
    if reason == "NotTriggerScaleUp":
        return (Fact(*not_triggered(message)),)
    if reason in ("FailedToScaleUpGroup", "ScaleUpFailed"):
        group = _named_group(message)
        if "requested outside" in message:  # a size outside the group's min/max
            return (Fact("scale_up_failed", "config", group),)
        _, _, error = message.partition(f"{group}: ") if group else ("", "", message)
        facts = klog.parse_message(message)
        if facts and facts[0].action == "scale_up_failed":
            why, code = facts[0].reason, facts[0].cloud_code
        else:
            why, code = classify_failure(error or message)
        return (Fact("scale_up_failed", why, group, cloud_code=code),)
    if reason == "ScaleUpTimedOut":
        return (Fact("scale_up_timeout", "timeout", _named_group(message), cloud_code="timeout"),)
    if reason == "MaxNodesTotalReached":
        return (Fact("max_size_reached", "max_size"),)
    if reason.startswith("ScaleDown"):
        return (Fact("scale_down", "other" if reason == "ScaleDownFailed" else ""),)
    return ()


def _karpenter_facts(reason: str, message: str, kind: str, name: str) -> tuple[Fact, ...]:
    pool = _NODEPOOL.search(message)
    group = pool["pool"] if pool else (name if kind == "NodePool" else "")
    if reason == "Nominated":
        if "node/" in message:
            return ()  # existing capacity: no scale-up
        claim = _CLAIM.search(message)
        return (
            Fact("scale_up_planned", node_group=pool_of_claim(claim["claim"]) if claim else ""),
        )
    if reason == "NoCompatibleInstanceTypes":
        return (Fact("scale_up_failed", "config", group),)
    if reason in ("InsufficientCapacityError", "NodeClassNotReady"):
        claim = _CLAIM_EVENT.search(message)
        if not group:
            group = pool_of_claim(claim["claim"] if claim else name if kind == "NodeClaim" else "")
        why, code = classify_failure(message)
        if reason == "NodeClassNotReady" or (why == "other" and "odeClass" in message):
            why = "config"
        return (Fact("scale_up_failed", why, group, cloud_code=code),)
    if reason == "FailedScheduling":
        if "exceed limits" in message or "would breach" in message:
            return (Fact("max_size_reached", "max_size", group),)
        return (Fact("unschedulable", "config", group),)
    if reason in _KARPENTER_DOWN or reason == "Evicted":
        return (Fact("scale_down", "", group),)
    if reason in _KARPENTER_BLOCKED:
        return (Fact("scale_down", "other", group),)
    return ()  # Unconsolidatable: not a candidate, the steady state


def event_facts(
    reason: str, source: str, message: str, kind: str = "", namespace: str = "", name: str = ""
) -> tuple[Fact, ...]:
    """Every fact an autoscaler Event states (a TriggeredScaleUp naming several groups
    gives one each), ``()`` when it is not the autoscaler's or states none.

    ``kind``/``namespace``/``name`` are the involved object's: a Pod's becomes every
    fact's pod, a NodePool's name its node group.
    """
    message = message.removeprefix(COMBINED)
    if source == CA:
        facts = _ca_facts(reason, message)
    elif source == KARPENTER:
        facts = _karpenter_facts(reason, message, kind, name)
    else:
        return ()
    if kind == "Pod" and name:
        pods = (PodRef(namespace=namespace, name=name),)
        facts = tuple(replace(fact, pods=pods) for fact in facts)
    return facts


def event_fact(
    reason: str, source: str, message: str, kind: str = "", namespace: str = "", name: str = ""
) -> Fact | None:
    """The first of :func:`event_facts`, or None."""
    facts = event_facts(reason, source, message, kind, namespace, name)
    return facts[0] if facts else None


def autoscaler_events(event: KubeEvent) -> tuple[AutoscalerEvent, ...]:
    """The ``autoscaler.v1`` records of an autoscaler's Event (``()``: not one of those),
    one per fact; the first keeps the id an Event's one record always had."""
    involved = event.involved
    facts = event_facts(
        event.reason, event.source, event.message, involved.kind, involved.namespace, involved.name
    )
    return tuple(
        klog.to_event(
            fact,
            event_id=hashed_id("as-ev", event.id) if k == 0 else hashed_id("as-ev", event.id, k),
            cluster=event.cluster,
            time=event.time,
            message=event.message,
            cloud=cloud_of(event.message),
            line=event.message,
            source=event.source,
        )
        for k, fact in enumerate(facts)
    )


def autoscaler_event(event: KubeEvent) -> AutoscalerEvent | None:
    """The first of :func:`autoscaler_events`, or None."""
    records = autoscaler_events(event)
    return records[0] if records else None


def derive(event: KubeEvent) -> tuple[AutoscalerEvent, ...]:
    """The k8s connector's ``derive`` hook: the records, if the Event is an autoscaler's
    (the same facts a pasted row of it gives)."""
    return autoscaler_events(event)


# -- pasted Events -------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Pasted:
    """An Event read from text: what the row or message shows of it."""

    reason: str
    source: str
    message: str
    kind: str = ""
    namespace: str = ""
    name: str = ""

    def facts(self) -> tuple[Fact, ...]:
        """The facts the Event states (see :func:`event_facts`)."""
        return event_facts(
            self.reason, self.source, self.message, self.kind, self.namespace, self.name
        )


_TYPE_REASON: Final = re.compile(r"(?:^|\s)(?:Normal|Warning)\s+(?P<reason>[A-Z][A-Za-z]+)(?=\s|$)")
_AGE: Final = r"(?:<unknown>|<invalid>|\d+[smhdy][\dsmhdy]*)"
_AGE_COLUMN: Final = re.compile(rf"{_AGE}(?: \(x\d+ over {_AGE}\))?(?:\s+|$)")
_OBJECT_COLUMN: Final = re.compile(
    r"(?:[a-z][\w.-]*/[\w.:-]+|Pod|Node|ConfigMap|NodeClaim|NodePool|Machine|Provisioner)"
    r"(?:\s{2,}|\t|$)"
)
_KNOWN_SOURCES: Final = (CA, KARPENTER, "default-scheduler", "kubelet", "node-controller")
_NAMES: Final = "|".join(map(re.escape, _KNOWN_SOURCES))
_SOURCE_COLUMN: Final = re.compile(
    rf"(?:\{{(?P<braced>{_NAMES})(?: [\w.-]*)?\}}|(?P<src>{_NAMES})(?:, [\w.-]+)?)(?:\s+|$)"
)
"""The source: ``karpenter`` (describe's From), ``{cluster-autoscaler }`` (old ``get
events``), ``kubelet, node-1`` (component and host)."""
_WIDE_TAIL: Final = re.compile(rf"\s{{2,}}{_AGE}\s+\d+\s+\S+\s*$")
"""``-o wide``'s FIRST SEEN, COUNT and NAME after the message."""
_LOGGED: Final = re.compile(
    r"(?:Event\((?:v1|api)\.ObjectReference\{Kind:\"(?P<kind>\w+)\", Namespace:\"(?P<ns>[^\"]*)\","
    r" Name:\"(?P<name>[^\"]*)\"[^}]*\}\): )?type: '(?P<type>\w+)' reason: '(?P<reason>\w+)' "
    r"(?P<msg>.*)"
)
_BARE_WORDING: Final = (
    (r"^[Pp]od triggered scale-up", CA, "TriggeredScaleUp"),
    (r"^[Pp]od didn't trigger scale-up", CA, "NotTriggerScaleUp"),
    (r"^Scale-up failed for group ", CA, "FailedToScaleUpGroup"),
    (r"^Failed adding \d+ nodes to group \S+ due to ", CA, "ScaleUpFailed"),
    (r"^Nodes added to group \S+ failed to register within", CA, "ScaleUpTimedOut"),
    (r"^Scale-up: (?:setting )?group \S+ size (?:set )?to \d+ instead of", CA, "ScaledUpGroup"),
    (r"^Max total nodes in cluster reached: \d+$", CA, "MaxNodesTotalReached"),
    (r"^Pod should schedule on: ", KARPENTER, "Nominated"),
    (r"^NodePool requirements filtered out all", KARPENTER, "NoCompatibleInstanceTypes"),
    (r"^(?:NodeClaim|Machine) \S+ event: ", KARPENTER, "InsufficientCapacityError"),
    (r"^Failed to schedule pod, ", KARPENTER, "FailedScheduling"),
    (r"^Launching (?:NodeClaim|Machine): ", KARPENTER, "DisruptionLaunching"),
    (
        r"^(?:Disrupt|Deprovision)ing (?:Node|NodeClaim|Machine): ",
        KARPENTER,
        "DisruptionTerminating",
    ),
    (r"^Waiting on (?:readiness|deletion) to continue d", KARPENTER, "DisruptionWaitingReadiness"),
    (
        r"^(?:Cannot (?:disrupt|deprovision) |No allowed disruptions)",
        KARPENTER,
        "DisruptionBlocked",
    ),
    (r"^Evicted pod(?::|$)", KARPENTER, "Evicted"),
    (r"^Failed to drain node, ", KARPENTER, "FailedDraining"),
)
"""A bare message's reason, by the wording its reason's format string always has."""
_BARE: Final = re.compile("|".join(f"({text.removeprefix('^')})" for text, _, _ in _BARE_WORDING))
"""One alternation of every wording (each a group, none with groups of its own): the
group that matched says which (one pass per line, not one per wording)."""
_NAMED: Final = re.compile(r"^[\w.-]+(?:/[\w.-]+)?: (?=[A-Z]|pod )")
"""An event watcher's ``<object>: <message>`` (``e2e-workload-2vwsq: pod triggered ...``)."""
TRIGGERS: Final = (
    "Normal",
    "Warning",
    "reason: '",
    "scale-up",
    "Scale-up",
    "Failed adding",
    "Nodes added",
    "Max total nodes",
    "schedule on",
    "NodePool requirements",
    " event: ",
    "Failed to schedule",
    "Launching ",
    "isrupting ",
    "eprovisioning ",
    "Waiting on ",
    "Cannot ",
    "No allowed disruptions",
    "Evicted pod",
    "Failed to drain",
)
"""Every pasted Event contains one of these (the fast path's test)."""


def _source_for(reason: str, message: str) -> str:
    """The source of a row that shows none: by the reason, else by Karpenter's wording."""
    if reason in _CA_REASONS:
        return CA
    if reason in _KARPENTER_REASONS:
        return KARPENTER
    if (reason == "FailedScheduling" and message.startswith("Failed to schedule pod, ")) or (
        reason == "Evicted" and message.startswith("Evicted pod")
    ):
        return KARPENTER
    return ""


def _row(text: str) -> Pasted | None:
    """A ``kubectl describe`` or ``kubectl get events`` row naming an autoscaler reason."""
    for match in _TYPE_REASON.finditer(text):
        reason = match["reason"]
        if reason in REASONS:
            break
    else:
        return None
    rest = text[match.end() :].lstrip()
    source = kind = name = ""
    namespace = ""
    for _ in range(4):  # the columns between the reason and the message, in any layout
        if (column := _AGE_COLUMN.match(rest)) is not None:
            rest = rest[column.end() :]
        elif (column := _OBJECT_COLUMN.match(rest)) is not None:
            kind, _, name = column.group(0).strip().partition("/")
            rest = rest[column.end() :]
        elif (column := _SOURCE_COLUMN.match(rest)) is not None and not source:
            source = column["src"] or column["braced"]
            rest = rest[column.end() :]
        else:
            break
    message = _WIDE_TAIL.sub("", rest).strip()
    if kind.lower() == "pod":
        kind = "Pod"
        head = text[: match.start()].split()
        namespace = head[0] if head and not _AGE_COLUMN.fullmatch(head[0] + " ") else ""
    elif kind.lower() in ("nodepool", "nodeclaim"):
        kind = "NodePool" if kind.lower() == "nodepool" else "NodeClaim"
    if not source:
        source = _source_for(reason, message)
    return Pasted(reason, source, message, kind, namespace, name)


def _logged(text: str) -> Pasted | None:
    """cluster-autoscaler's log of an Event it emitted (``event_sink_logging_wrapper.go``)."""
    match = _LOGGED.search(text)
    if match is None:
        return None
    reason, message = match["reason"], match["msg"]
    source = _source_for(reason, message) or CA
    return Pasted(
        reason, source, message, match["kind"] or "", match["ns"] or "", match["name"] or ""
    )


def bare(text: str, *, named_only: bool = False) -> Pasted | None:
    """A bare Event message, alone or after an event watcher's ``<object>: `` (only
    after one with ``named_only``: a klog message is a watcher's line or no Event)."""
    if named_only and ": " not in text:
        return None
    message = text.strip().removeprefix(COMBINED)
    named = _NAMED.match(message)
    if named_only and named is None:
        return None
    for candidate in (message, message[named.end() :]) if named else (message,):
        match = _BARE.match(candidate)
        if match is not None and match.lastindex is not None:
            _, source, reason = _BARE_WORDING[match.lastindex - 1]
            return Pasted(reason, source, candidate)
    return None


def pasted(text: str) -> Pasted | None:
    """The autoscaler Event a line of text shows (a row, a logged Event, a bare message)."""
    if "reason: '" in text:
        return _logged(text)
    return _row(text) or bare(text)
