"""Karpenter log records to autoscaler facts, every generation from v0.5 to v1.x, any provider.

Three layouts: zap's console encoder (v0.5 to v0.31, whose TABs a paste turns into spaces),
JSON with flat strings (v0.32 to v0.37) and JSON with objects (v1). Messages are read by
what they say, since the wording changed often: pods waiting (``unschedulable``), a
scale-up going on (``scale_up_planned``: a launch is a step that did not fail, and the
rules count only failures), a scale-up failing (its reason from the cloud's words), limits
(``max_size_reached``), a node that never joined (``scale_up_timeout``) and a node going
away (``scale_down``, a planned disruption, not a fault). The node group is the NodePool,
else the NodeClaim's name less ``generateName``'s five characters.

Traps: Karpenter wraps a quota in "insufficient capacity"; a line with no time is taken
only when its logger is Karpenter's, so a cluster-autoscaler line is never read as one.
Each message, by release: docs/connectors.md, design notes.
"""

from __future__ import annotations

import re
from typing import Any, Final

from connectors.autoscaler.classify import classify_failure
from connectors.autoscaler.klog import Fact
from schemas import codec
from schemas.codec import RecordError
from schemas.events import PodRef

_TS: Final = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)"
_LEVELS: Final = r"DEBUG|INFO|WARN|WARNING|ERROR|DPANIC|PANIC|FATAL"
CONSOLE: Final = re.compile(rf"(?P<ts>{_TS})\s+(?P<level>{_LEVELS})\s+(?P<rest>\S.*)$", re.S)
_HEADLESS: Final = re.compile(
    rf"(?P<level>{_LEVELS})\s+(?P<rest>(?:controller|webhook)(?:\.[\w-]+)*\s.*)$", re.S
)
_LOGGER: Final = re.compile(r"[a-z][\w-]*(?:\.[\w-]+)*$")
_CALLER: Final = re.compile(r"[\w./-]+\.go:\d+$")
_TOKEN: Final = re.compile(r"(\S+)\s*")
_MAX_CONTEXT_TRIES: Final = 8

_GENERATED: Final = re.compile(r"^(?P<pool>.+)-[bcdfghjklmnpqrstvwxz2456789]{5}$")
_POOL_IN_TEXT: Final = re.compile(
    r"(?:incompatible with|exceed limits for|exhausted for) (?:nodepool|provisioner):? "
    r"\"(?P<g>[^\"]+)\"|nodepools=\[(?P<l>[^\],\s]+)"
)
_LIMITED_POOL: Final = re.compile(
    r"(?:exceed limits for|exhausted for) (?:nodepool|provisioner):? \"(?P<g>[^\"]+)\""
)
_MAX_PODS: Final = 64
_LIVENESS_REASONS: Final = frozenset({"registration_timeout", "launch_timeout"})

_UNSCHEDULABLE: Final = re.compile(r"batched \d+ pod|found (?:\d+ )?provisionable pod")
_CANNOT_PLACE: Final = re.compile(
    r"could not schedule pod|unable to schedule pod|failed to find instance type option|"
    r"failed to compute packing"
)
_PROGRESS: Final = re.compile(
    r"computed packing|computed (?:\d+ )?new (?:node|machine|nodeclaim)|created node with|"
    r"launching machine with|created (?:machine|nodeclaim)\b|launched instance:|"
    r"(?:launched|registered|initialized|linked) (?:machine|nodeclaim)\b"
)
_LAUNCH_FAILED: Final = re.compile(
    r"failed launching (?:nodeclaim|machine)|creating instance,|insufficient capacity,|"
    r"could not launch node|failed to launch \d+|provisioning failed"
)
_LAUNCH_ERROR: Final = re.compile(r"launching (?:nodeclaim|machine|node)\b|creating instance\b")
_NO_INSTANCE_TYPES: Final = re.compile(
    r"skipping, (?:no resolved instance types|unable to resolve instance types|"
    r"nodepool requirements filtered out all instance types)|"
    r"creating scheduler, getting instance types"
)
_LIMITS: Final = re.compile(
    r"exceed limits for|would breach (?:provisioner )?limits|node limits have been exhausted"
)
_TIMEOUT: Final = re.compile(
    r"terminating (?:machine )?due to (?:registration ttl|timeout)|"
    r"triggering termination for node that failed to join"
)
_REMOVAL: Final = re.compile(
    r"disrupting (?:node|nodeclaim|via)|deprovisioning via|triggering termination (?:after|for "
    r"expired)|(?:cordoned|tainted|deleted) node|deleted (?:machine|nodeclaim)|"
    r"annotated nodeclaim"
)
_REMOVAL_FAILED: Final = re.compile(
    r"failed to disrupt nodes|failed terminating nodes while executing a disruption|"
    r"terminating machine, "
)

TRIGGERS: Final = (
    "provisionable pod",
    "Batched ",
    "atched ",
    "ould not schedule pod",
    "ailed to compute packing",
    "nable to schedule pod",
    "ailed to find instance type",
    "omputed new node",
    " new node(s)",
    "omputed new machine",
    "omputed new nodeclaim",
    "omputed packing",
    "reated node with",
    "reated machine",
    "reated nodeclaim",
    "aunching machine with",
    "aunched instance:",
    "aunched machine",
    "aunched nodeclaim",
    "egistered machine",
    "egistered nodeclaim",
    "nitialized machine",
    "nitialized nodeclaim",
    "ailed launching nodeclaim",
    "reating instance",
    "ould not launch node",
    "ailed to launch",
    "rovisioning failed",
    "econciler error",
    "esolved instance types",
    "esolve instance types",
    "iltered out all instance types",
    "etting instance types",
    "isrupting node",
    "isrupting via",
    "eprovisioning via",
    "riggering termination",
    "ordoned node",
    "ainted node",
    "eleted node",
    "eleted machine",
    "nnotated nodeclaim",
    "ailed to disrupt nodes",
    "ailed terminating nodes",
    "limits",
    "erminating due to",
    "erminating machine",
)
"""Every Karpenter record with a fact contains one of these (first letter left off: the
wording's case changed between releases)."""

ANCHORS: Final = (
    "machine",
    "aunch",
    "instance type",
    " new node",
    "reated node",
    "rovisioning",
    "ermination",
    "ordoned node",
    "packing",
)
"""The fast-path words (:data:`connectors.autoscaler.lines.ANCHORS`) Karpenter needs beyond
those cluster-autoscaler's messages already bring (``nodeclaim``, ``provisionable``,
``isrupting``, ``eleted node``, ``limits``...): with both, every word in :data:`TRIGGERS`
contains an anchor (a test checks it). Without them the fast path drops a line before
this parser sees it."""


def console_record(text: str) -> dict[str, Any] | None:
    """A console-encoder line as the JSON record it would have been; ``None`` if not one.

    Takes a line with its time, or without one when the logger is Karpenter's.
    """
    match = CONSOLE.match(text)
    headless = False
    if match is None:
        match = _HEADLESS.match(text)
        headless = True
    if match is None:
        return None
    record: dict[str, Any] = {"level": match["level"]}
    if not headless:
        record["time"] = match["ts"]
    rest = match["rest"]
    token = _TOKEN.match(rest)
    if token and _LOGGER.match(token[1]):
        record["logger"] = token[1]
        rest = rest[token.end() :]
        token = _TOKEN.match(rest)
        if token and _CALLER.match(token[1]):
            record["caller"] = token[1]
            rest = rest[token.end() :]
    message, context = _split_context(rest)
    for key, value in context.items():
        record.setdefault(key, value)
    record["message"] = message
    return record


def _split_context(rest: str) -> tuple[str, dict[str, Any]]:
    """The message and the context object that ends the line (none when it cannot be read)."""
    body = rest.rstrip()
    start = body.find('{"')
    for _ in range(_MAX_CONTEXT_TRIES):
        if start < 0:
            break
        try:
            context = codec.loads(body[start:])
        except RecordError:
            context = None
        if isinstance(context, dict):
            return body[:start].rstrip(), context
        start = body.find('{"', start + 2)
    return body, {}


def _name(record: dict[str, Any], *keys: str) -> str:
    for key in keys:
        value = record.get(key)
        if isinstance(value, dict):
            value = value.get("name")
        if isinstance(value, str) and value:
            return value
    return ""


def pool_of_claim(claim: str) -> str:
    """The NodePool a NodeClaim was generated from (``gpu-x7k2p`` -> ``gpu``), else ``""``:
    Kubernetes' ``generateName`` adds five characters of its own alphabet (no vowels, no
    0, 1 or 3), so a name the user chose is rarely mistaken for a generated one."""
    match = _GENERATED.match(claim)
    return match["pool"] if match else ""


def node_group(record: dict[str, Any], text: str = "") -> str:
    """The NodePool (or Provisioner) a record is about, when it can be told."""
    group = _name(record, "nodepool", "NodePool", "provisioner", "Provisioner")
    if group:
        return group
    match = _POOL_IN_TEXT.search(text) or _POOL_IN_TEXT.search(_text(record.get("command")))
    if match:
        return match["g"] or match["l"]
    claim = _name(record, "nodeclaim", "NodeClaim", "machine", "Machine")
    if not claim:
        disrupted = record.get("disrupted-nodes")
        if isinstance(disrupted, list) and disrupted and isinstance(disrupted[0], dict):
            claim = _name(disrupted[0], "NodeClaim")
    return pool_of_claim(claim)


def _pods(record: dict[str, Any]) -> tuple[PodRef, ...]:
    value = record.get("pods", record.get("Pods", record.get("pod", record.get("Pod"))))
    if isinstance(value, dict):
        name, namespace = value.get("name"), value.get("namespace", "")
        if isinstance(name, str) and name and isinstance(namespace, str):
            return (PodRef(namespace=namespace, name=name),)
        return ()
    if not isinstance(value, str):
        return ()
    head = value.split(" and ", 1)[0]
    refs = []
    for part in head.split(", ")[:_MAX_PODS]:
        item = part.strip()
        if item and " " not in item:
            namespace, _, name = item.rpartition("/")
            refs.append(PodRef(namespace=namespace, name=name))
    return tuple(refs)


def message_of(record: dict[str, Any]) -> str:
    """The record's message (``message``, or ``msg`` for provider fallback loggers)."""
    value = record.get("message", record.get("msg", ""))
    return value if isinstance(value, str) else ""


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def parse_record(record: dict[str, Any]) -> tuple[Fact, ...]:
    """The facts of one Karpenter record (usually none)."""
    message = message_of(record)
    error = _text(record.get("error"))
    text = f"{message} {error}" if error else message
    lower = message.lower()
    group = node_group(record, text)
    head = lower[:200]
    if _LIMITS.search(text):
        limited = _LIMITED_POOL.search(text)
        return (Fact("max_size_reached", "max_size", limited["g"] if limited else group),)
    if _UNSCHEDULABLE.match(head):
        return (Fact("unschedulable", node_group=group, pods=_pods(record)),)
    if _CANNOT_PLACE.match(head):
        return (Fact("unschedulable", "config", group, pods=_pods(record)),)
    if _NO_INSTANCE_TYPES.match(head):
        return (Fact("scale_up_failed", "config", group),)
    if _PROGRESS.match(head):
        return (Fact("scale_up_planned", node_group=group),)
    launch_error = lower == "reconciler error" and _LAUNCH_ERROR.match(error.lower())
    if _LAUNCH_FAILED.match(head) or launch_error:
        reason, code = classify_failure(text)
        return (Fact("scale_up_failed", reason, group, cloud_code=code),)
    if _TIMEOUT.match(head):
        cause = _text(record.get("reason"))
        if "timeout" in lower and cause and cause not in _LIVENESS_REASONS:
            return ()
        return (Fact("scale_up_timeout", "timeout", group, cloud_code=cause),)
    if _REMOVAL.match(head):
        return (Fact("scale_down", node_group=group),)
    if _REMOVAL_FAILED.match(head):
        return (Fact("scale_down", "other", group),)
    return ()
