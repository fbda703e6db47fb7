"""``nvlink_domain_fault``: one fault in a multi-node NVLink domain is one incident.

On GB200/GB300 NVL72 racks the nodes with the same ``nvidia.com/gpu.clique`` label share one
NVLink partition; one GPU's link going down (XID 149) is followed within seconds by XIDs
144-148 on the other trays' GPUs, which lost packets to it. NVIDIA's catalog says 149
originates and 144-148 follow within 30 s (``fabric_window_seconds``); 150 stays its GPU's.
The cluster key collects every fabric XID and, when the first line's window closes, picks
one root (originating code, then time, node, GPU, id: the same in any arrival order) and
pages once. Each node key defers its own incidents of a follow-up code to that page
(``info``, naming the domain).

Traps: both halves must decide "a fatal fabric line" alike, or a deferring node hides a
page; a repeating 149 on one GPU is that GPU's; the page comes one window after the first
line, the price of one root. Sources, decode table: docs/detection.md, design notes.
"""

from __future__ import annotations

import math

from schemas.events import NodeEvent, XidEvent
from schemas.ids import incident_id
from schemas.incidents import Evidence, GpuRef
from schemas.keys import FABRIC_XIDS
from schemas.wellknown import CLIQUE_LABEL
from streams.core import evidence as text
from streams.core.config import CoreSettings
from streams.core.lifecycle import ClusterStep, Step
from streams.core.rules import chain
from streams.core.rules.spec import ClusterRule
from streams.core.state import NEVER, ClusterState, FabricFault, FabricLine, OpenIncident

KIND = "nvlink_domain_fault"
ORIGIN_CODES = frozenset((149,))
"""Codes that originate a domain fault (the link event); the other fabric codes follow."""
MAX_LINES = 512
"""Lines a fault keeps before its root is chosen (a 72-GPU rack logs one or two each)."""
_DEFERRED = frozenset((chain.KIND, chain.DEGRADED))
_DEFERRED_FROM = "severity_before_domain"
"""Attribute of a deferred incident: the severity its own rule gave it."""


def domain_of(labels: dict[str, str]) -> str:
    """The NVLink domain a node's labels put it in: its whole ``nvidia.com/gpu.clique``
    label (``<clusterUUID>.<cliqueId>``, one partition); empty without one."""
    return labels.get(CLIQUE_LABEL, "")


def severity_word(message: str) -> str:
    """``fatal`` / ``nonfatal`` as an NVLink5 line states it before its register dump
    (``RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 ...)``); ``""`` when it says neither."""
    for token in message.split("(", 1)[0].split():
        word = token.strip(",:;").lower()
        if word in ("nonfatal", "non-fatal"):
            return "nonfatal"
        if word == "fatal":
            return "fatal"
    return ""


# -- the node key: an affected node defers to its domain's incident ---------------------


def defer(step: Step) -> None:
    """Make the incidents this step touched on a node in a domain, that tell only NVLink
    fabric faults, that fault's share (``info``, naming the domain)."""
    state = step.state
    if not state.clique or not step.dirty:
        return
    for inc in step.dirty:
        if _fabric_share(inc):
            _mark(inc, state.clique, step.config)
        elif _DEFERRED_FROM in inc.attributes:
            _unmark(inc)


def _fabric_share(inc: OpenIncident) -> bool:
    if inc.type == chain.REPEAT:
        code = inc.attributes.get("xid", "")
        return code.isdigit() and int(code) in FABRIC_XIDS and int(code) not in ORIGIN_CODES
    if inc.type not in _DEFERRED:
        return False
    fabric = False
    for item in inc.evidence:
        found = text.xid_code_and_class(item)
        if found is None or found[1] != "fatal":
            continue
        if found[0] not in FABRIC_XIDS:
            return False  # another hardware fault: the node's own page
        fabric = fabric or not _says_nonfatal(item)
    return fabric


def _says_nonfatal(item: Evidence) -> bool:
    return any(t.strip(",:;").lower() in ("nonfatal", "non-fatal") for t in item.text.split())


def _mark(inc: OpenIncident, domain: str, config: CoreSettings) -> None:
    if inc.severity != "info" or _DEFERRED_FROM not in inc.attributes:
        inc.attributes[_DEFERRED_FROM] = inc.severity  # the rule's own, kept to give back
    inc.severity = "info"
    inc.attributes["nvlink_domain"] = domain
    note = f"; part of the fault of NVLink domain {domain} (see its {KIND})"
    if not inc.summary.endswith(note):
        inc.summary += note
    inc.action = (
        f"Follow the {KIND} incident of NVLink domain {domain}: it names the root GPU and "
        "every affected node. Do not reset or replace this GPU on its own: an NVLink XID "
        f"within {config.fabric_window_seconds:g} s of a link going down in the domain is "
        "that fault's by-product (NVIDIA's XID catalog: CHECK_NVLINK_FAILURE_FLOW)."
    )


def _unmark(inc: OpenIncident) -> None:
    """The incident now tells another fault too (an XID 79 joined the node's ticket): it is
    the node's own again, at the severity its rule gave it."""
    severity = inc.attributes.pop(_DEFERRED_FROM)
    inc.attributes.pop("nvlink_domain", None)
    if severity == "page":
        inc.severity = "page"
    elif severity == "ticket":
        inc.severity = "ticket"
    head, sep, _ = inc.summary.partition("; part of the fault of NVLink domain ")
    if sep:
        inc.summary = head


# -- the cluster key: one incident per domain fault ---------------------------------------


def on_node(step: ClusterStep, ev: NodeEvent) -> None:
    """Remember the node's domain (from the copy of its record), or that it has none."""
    cliques = step.state.cliques
    domain = "" if ev.op == "deleted" else domain_of(ev.labels)
    if domain:
        if cliques.get(ev.node) != domain:
            cliques[ev.node] = domain
    elif ev.node in cliques:
        del cliques[ev.node]


def on_xid(step: ClusterStep, ev: XidEvent) -> None:
    """The copy of a fabric XID: start, join or extend its domain's fault."""
    state, config = step.state, step.config
    domain = state.cliques.get(ev.node, "")
    if not domain or ev.sxid or ev.code not in FABRIC_XIDS:
        return
    rule = config.xid.get(ev.code)
    if rule is None or rule.xid_class != "fatal":
        return  # the user moved the code out of the fatal class: the node key agrees
    _open_due(step)
    fatal = _fatal(state, config, ev, rule.line_severity, step.now)
    window = config.fabric_window_seconds
    fault = state.fabric.get(domain)
    if fault is not None and step.now - fault.last >= window:
        _end(state, domain, fault)
        fault = None
    if fault is None:
        if not fatal:
            return  # a Nonfatal line starts nothing
        fault = state.fabric[domain] = FabricFault(
            start=step.now, last=step.now, closes=step.now + window
        )
        state.timers_dirty = True
    if fatal:
        fault.last = max(fault.last, step.now)
        state.timers_dirty = True
    line = FabricLine(
        time=step.now,
        node=ev.node,
        bus=ev.pci_bus_id,
        uuid=ev.gpu_uuid,
        code=ev.code,
        item=text.xid(ev, rule, ev.gpu_uuid),
        fatal=fatal,
    )
    inc = state.incidents.get(fault.incident) if fault.incident else None
    if inc is not None:
        step.set_deadline(inc, fault.last + config.fabric_quiet_seconds)
        if f"{line.node}/{line.bus or line.uuid}" in inc.gpus:
            # A GPU the incident names already: no revision for it (a flapping link logs
            # for minutes); the resolution's revision carries the time.
            inc.last_seen = max(inc.last_seen, step.now)
            return
        _add_line(step, inc, line)
        _describe(step, inc, domain)
    elif len(fault.lines) < MAX_LINES and all(x.item.event_id != ev.id for x in fault.lines):
        fault.lines.append(line)


def _fatal(
    state: ClusterState, config: CoreSettings, ev: XidEvent, worded: bool, now: float
) -> bool:
    """Is this line a fault (as the node key reads it: ``streams.core.node._on_xid``)?"""
    if not worded:
        return True
    gap = max(config.xid_episode_gap_seconds, config.xid_coalesce_seconds)
    memory = state.fabric_nonfatal
    for key in [k for k, t in memory.items() if t <= now - gap]:
        del memory[key]
    key = f"{ev.node}|{ev.code}"
    word = severity_word(ev.message)
    if word == "nonfatal":
        memory[key] = now
        return False
    return bool(word) or key not in memory


def _open_due(step: ClusterStep) -> None:
    """Open the incident of every fault whose window has closed (the timer's work, done
    here too: an event at exactly a deadline goes before its timer)."""
    state = step.state
    for domain in list(state.fabric):
        fault = state.fabric[domain]
        if not fault.incident and fault.closes <= step.now:
            _open(step, domain, fault)


def _end(state: ClusterState, domain: str, fault: FabricFault) -> None:
    """Forget a fault whose lines stopped (its incident stays open until quiet)."""
    del state.fabric[domain]
    state.timers_dirty = True


def _root_key(line: FabricLine) -> tuple[int, float, str, str, str, str]:
    origin = 0 if line.code in ORIGIN_CODES else 1
    return (origin, line.time, line.node, line.bus, line.uuid, line.item.event_id)


def _open(step: ClusterStep, domain: str, fault: FabricFault) -> None:
    state, config = step.state, step.config
    fatal = [line for line in fault.lines if line.fatal]
    if not fatal:
        return
    root = min(fatal, key=_root_key)
    subject = f"{domain}/{root.item.event_id}"
    first = min(line.time for line in fault.lines)
    inc = OpenIncident(
        id=incident_id(KIND, state.cluster, "", domain, root.item.event_id),
        type=KIND,
        subject=subject,
        severity=config.severity.get(KIND, "page"),
        first_seen=first,
        last_seen=first,
    )
    inc.attributes["nvlink_domain"] = domain
    inc.attributes["root_node"] = root.node
    inc.attributes["root_gpu"] = root.bus or root.uuid
    inc.attributes["root_xid"] = str(root.code)
    inc.attributes["root_seen"] = "true" if root.code in ORIGIN_CODES else "false"
    state.incidents[f"{KIND}|{subject}"] = inc
    step.touch(inc)
    _add_line(step, inc, root)
    for line in sorted(fault.lines, key=_root_key):
        _add_line(step, inc, line)
    fault.incident = f"{KIND}|{subject}"
    fault.lines = []
    fault.closes = NEVER
    state.timers_dirty = True
    _describe(step, inc, domain)
    step.set_deadline(inc, fault.last + config.fabric_quiet_seconds)


def _add_line(step: ClusterStep, inc: OpenIncident, line: FabricLine) -> None:
    step.add_evidence(inc, line.item)
    key = f"{line.node}/{line.bus or line.uuid}"
    if key not in inc.gpus:
        step.add_gpu(inc, key, GpuRef(uuid=line.uuid, pci_bus_id=line.bus))
    nodes = inc.attributes.get("nodes", "")
    if line.node not in nodes.split(","):
        inc.attributes["nodes"] = f"{nodes},{line.node}" if nodes else line.node
    codes = inc.attributes.get("xids", "")
    if str(line.code) not in codes.split(","):
        inc.attributes["xids"] = ",".join(sorted({*codes.split(","), str(line.code)} - {""}))


def _describe(step: ClusterStep, inc: OpenIncident, domain: str) -> None:
    config = step.config
    attrs = inc.attributes
    nodes = attrs["nodes"].split(",")
    attrs["node_count"] = str(len(nodes))
    code = int(attrs["root_xid"])
    rule = config.xid.get(code)
    name = f" ({rule.mnemonic})" if rule is not None and rule.mnemonic else ""
    where = f"{attrs['root_gpu'] or 'unknown GPU'} ({attrs['root_node']})"
    others = [c for c in attrs["xids"].split(",") if c != str(code)]
    window = f"{config.fabric_window_seconds:g} s"
    listed = ", ".join(nodes)
    if attrs["root_seen"] == "true":
        inc.summary = (
            f"NVLink domain {domain}: XID {code}{name} on {where}"
            + (f", then XID {'/'.join(others)} on the domain's other GPUs" if others else "")
            + f" within {window}: one fault, {len(nodes)} node(s) affected: {listed}"
        )
        inc.action = (
            f"Reset the root GPU {where} and investigate its link (NVIDIA's catalog for XID "
            f"{code}: RESET_GPU, then the investigatory action its decode names, e.g. "
            "INVESTIGATE_LINK_SI or INVESTIGATE_PEER_DEVICE). The XIDs on the other nodes "
            "are this fault's by-products (CHECK_NVLINK_FAILURE_FLOW): do not reset or "
            "replace their GPUs; restart the domain's jobs once the root GPU is back."
        )
    else:
        inc.summary = (
            f"NVLink domain {domain}: follow-up XID {attrs['xids']} on {len(nodes)} node(s) "
            f"within {window} and no originating XID 149 received (its node's log may be "
            f"missing); earliest: XID {code}{name} on {where}; nodes: {listed}"
        )
        inc.action = (
            "Find the link that went down in this domain (XID 149 in the kernel log of a "
            "node whose log did not reach gputriage, or the NVLink switches' telemetry) and "
            "reset that GPU. The XIDs seen are by-products (CHECK_NVLINK_FAILURE_FLOW): do "
            "not reset or replace each GPU that logged one."
        )


def on_timer(step: ClusterStep) -> None:
    """Choose the roots of faults whose window closed, forget faults gone quiet, and
    resolve incidents quiet for ``fabric_quiet_seconds``."""
    state, config = step.state, step.config
    if state.fabric:
        _open_due(step)
        for domain in list(state.fabric):
            fault = state.fabric[domain]
            if fault.incident and step.now - fault.last >= config.fabric_window_seconds:
                _end(state, domain, fault)
    due = sorted(
        (i for i in state.incidents.values() if i.type == KIND and i.resolve_at <= step.now),
        key=lambda i: (i.resolve_at, i.id),
    )
    for inc in due:
        step.resolve(inc, inc.resolve_at, "no NVLink fabric XID in the fault for a quiet period")


def deadline(state: ClusterState, config: CoreSettings) -> float:
    """The earliest event time at which :func:`on_timer` has a fault to look at."""
    found = math.inf
    for fault in state.fabric.values():
        when = fault.last + config.fabric_window_seconds if fault.incident else fault.closes
        found = min(found, when)
    return found if found < math.inf else NEVER


SPEC: ClusterRule = ClusterRule(
    name="fabric",
    emits=((KIND, "page"),),
    reads=(NodeEvent, XidEvent),
    state=("cliques", "fabric", "fabric_nonfatal"),
    settings=(
        "fabric_window_seconds",
        "fabric_quiet_seconds",
        "xid_coalesce_seconds",
        "xid_episode_gap_seconds",
    ),
    deadline=deadline,
    on_timer=on_timer,
)
"""``nvlink_domain_fault``: one fault of a multi-node NVLink domain, its root chosen once
its window closes."""
