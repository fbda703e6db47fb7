"""Karpenter log records to autoscaler facts: JSON (v0.32+ and v1) and the older console format.

Karpenter logs through zap. Three generations are in the corpus (tests/data/autoscaler,
SOURCES.md trap 17): the console encoder of v0.3x and older
(``<time>\\t<LEVEL>\\t<logger>\\t<message>\\t{context}``, TABs sometimes turned to
spaces by a paste), JSON with ``logger: controller.provisioner`` and flat keys
(``nodepool``, ``nodeclaim``, ``pods``), and v1 JSON with ``logger: controller``,
``controller: provisioner`` and objects (``NodePool: {name}``, ``NodeClaim: {name}``,
``Pods``). Messages recognised (kubernetes-sigs/karpenter ``pkg/controllers/...``):

* ``found provisionable pod(s)``, ``Batched N pods`` -> ``unschedulable``;
  ``Could not schedule pod, incompatible with nodepool`` -> ``unschedulable``/``config``;
* ``computed new nodeclaim(s) to fit pod(s)``, ``Computed packing of``, ``created
  nodeclaim`` -> ``scale_up_planned``;
* ``failed launching nodeclaim`` (ICE, NodeClassNotReady), ``Reconciler error`` whose
  error starts ``launching nodeclaim``, console ``creating instance, ...`` ->
  ``scale_up_failed``, classified by the EC2/Azure code in the text
  (:mod:`connectors.autoscaler.classify`: ``VcpuLimitExceeded`` under an
  "insufficient capacity" wrapper is ``quota``), a node class problem is ``config``;
* ``all available instance types exceed limits for nodepool``, ``N out of M instance
  types were excluded because they would breach [provisioner] limits`` ->
  ``max_size_reached``/``max_size`` (NodePool or Provisioner limits);
* ``terminating due to registration ttl`` (September 2023 to July 2025) and
  ``terminating due to timeout`` with ``reason`` ``registration_timeout`` or
  ``launch_timeout`` (since kubernetes-sigs/karpenter PR #2349, July 2025;
  ``pkg/controllers/nodeclaim/lifecycle/liveness.go``): the NodeClaim's node did not
  launch or register in time and the claim is deleted -> ``scale_up_timeout``/``timeout``,
  ``cloud_code`` the logged ``reason``. Debug level except from April to May 2024 (PR
  #1183 until the logger migration), so most logs lack it; the provider (AWS, Azure
  Node Auto-Provisioning) does not change the wording (SOURCES.md, karpenter_azure.jsonl).
* ``disrupting node(s)``, ``tainted node``, ``deleted node`` -> ``scale_down``.

``launched nodeclaim`` (success) and simulation chatter are not records.

The node group is the NodePool (or v0.x Provisioner). A failed launch names only the
NodeClaim; its NodePool is the claim's name without the five-character suffix
Kubernetes' ``generateName`` adds (the corpus shows ``default-5b9h6`` in nodepool
``default``, ``stable-multi-az-xxlarge-4gct7`` in ``stable-multi-az-xxlarge``).
"""

from __future__ import annotations

import re
from typing import Any, Final

from connectors.autoscaler.classify import classify
from connectors.autoscaler.klog import Fact
from schemas import codec
from schemas.codec import RecordError
from schemas.events import PodRef

CONSOLE: Final = re.compile(
    r"(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d))\s+"
    r"(?P<level>DEBUG|INFO|WARN|WARNING|ERROR|DPANIC|PANIC|FATAL)\s+(?P<logger>\S+)\s+"
    r"(?P<msg>.*?)\s*(?P<ctx>\{[^{}]*\})?\s*$"
)
_GENERATED: Final = re.compile(r"^(?P<pool>.+)-[a-z0-9]{5}$")
_LIMITS_NODEPOOL: Final = re.compile(
    r"exceed limits for (?:nodepool|provisioner): \"(?P<g>[^\"]+)\""
)
_MAX_PODS: Final = 64
_LIVENESS_REASONS: Final = frozenset({"registration_timeout", "launch_timeout"})


TRIGGERS: Final = (
    "provisionable pod",
    "Batched ",
    "atched ",
    "ould not schedule pod",
    "omputed new nodeclaim",
    "omputed packing",
    "reated nodeclaim",
    "ailed launching nodeclaim",
    "reating instance",
    "econciler error",
    "isrupting node",
    "ainted node",
    "eleted node",
    "limits",
    "erminating due to",
)
"""Every Karpenter record with a fact contains one of these (first letter left off: the
wording's case changed between releases)."""


def console_record(text: str) -> dict[str, Any] | None:
    """A console-encoder line as the JSON record it would have been; ``None`` if not one."""
    match = CONSOLE.match(text)
    if match is None:
        return None
    record: dict[str, Any] = {}
    if match["ctx"]:
        try:
            context = codec.loads(match["ctx"])
        except RecordError:
            context = None
        if isinstance(context, dict):
            record.update(context)
    record.update(
        level=match["level"], time=match["ts"], logger=match["logger"], message=match["msg"]
    )
    return record


def _name(record: dict[str, Any], *keys: str) -> str:
    for key in keys:
        value = record.get(key)
        if isinstance(value, dict):
            value = value.get("name")
        if isinstance(value, str) and value:
            return value
    return ""


def node_group(record: dict[str, Any]) -> str:
    """The NodePool (or Provisioner) a record is about, when it can be told."""
    group = _name(record, "nodepool", "NodePool", "provisioner", "Provisioner")
    if group:
        return group
    claim = _name(record, "nodeclaim", "NodeClaim", "machine", "Machine")
    match = _GENERATED.match(claim)
    return match["pool"] if match else ""


def _pods(record: dict[str, Any]) -> tuple[PodRef, ...]:
    value = record.get("pods", record.get("Pods", record.get("pod", record.get("Pod"))))
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


def parse_record(record: dict[str, Any]) -> tuple[Fact, ...]:
    """The facts of one Karpenter record (usually none)."""
    message = message_of(record)
    error = record.get("error")
    error = error if isinstance(error, str) else ""
    lower = message.lower()
    group = node_group(record)
    if "limits" in lower and ("exceed limits" in lower or "breach" in lower):
        match = _LIMITS_NODEPOOL.search(message)
        return (Fact("max_size_reached", "max_size", match["g"] if match else group),)
    if lower.startswith(("found provisionable pod", "batched ")):
        return (Fact("unschedulable", node_group=group, pods=_pods(record)),)
    if lower.startswith("could not schedule pod"):
        text = f"{message} {error}"
        if "exceed limits" in text:
            match = _LIMITS_NODEPOOL.search(text)
            return (Fact("max_size_reached", "max_size", match["g"] if match else group),)
        return (Fact("unschedulable", "config", group, pods=_pods(record)),)
    if lower.startswith(("computed new nodeclaim", "computed packing", "created nodeclaim")):
        return (Fact("scale_up_planned", node_group=group),)
    failed = lower.startswith(("failed launching nodeclaim", "creating instance"))
    if failed or (lower == "reconciler error" and error.startswith("launching nodeclaim")):
        reason, code = classify(f"{message} {error}")
        if reason == "timeout":
            reason = "other"
        return (Fact("scale_up_failed", reason, group, cloud_code=code),)
    if lower.startswith("terminating due to"):
        cause = record.get("reason")
        cause = cause if isinstance(cause, str) else ""
        if "registration" in lower or cause in _LIVENESS_REASONS:
            return (Fact("scale_up_timeout", "timeout", group, cloud_code=cause),)
        return ()
    if lower.startswith(("disrupting node", "tainted node", "deleted node")):
        return (Fact("scale_down", node_group=group),)
    return ()
