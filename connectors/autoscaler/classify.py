"""The reason vocabulary: which cloud error means quota, which means capacity.

Shared by the cluster-autoscaler and Karpenter parsers. Always classify by the *code* or
the cloud's own words, never by the error class alone. Quota codes are looked for first,
so a quota inside a capacity message wins.

Traps: cluster-autoscaler's GCE client renames codes and gives quota and stockout the same
class; on AWS every failed ASG activity is ``placeholder-cannot-be-fulfilled``, the cause
only in the ``scaling failed with description`` line (without it: ``capacity``); Azure's
asynchronous failures are ``provisioning-state-failed`` whatever the cause; Karpenter
counts quota codes as "insufficient capacity".
In full: docs/connectors.md, design notes: connectors/autoscaler/classify.py.
"""

from __future__ import annotations

import re
from typing import Final

_QUOTA_CODE: Final = re.compile(
    r"VcpuLimitExceeded|VCPULimitExceeded|MaxSpotInstanceCountExceeded|MaxFleetCountExceeded|"
    r"InstanceLimitExceeded|SpotQuotaExceeded|FleetQuotaExceeded|QuotaExceeded|[A-Z_]*QUOTA[A-Z_]*|"
    r"SubscriptionQuotaReached"
)
_QUOTA_TEXT: Final = re.compile(
    r"exceeding (?:approved )?quota limit|Quota '[^']*' exceeded|quota limit exceeded|"
    # EC2's VcpuLimitExceeded message, quoted without its code by some wrappers:
    # "You have requested more vCPU capacity than your current vCPU limit of 32 allows".
    r"more vCPU capacity than your current vCPU limit|"
    # Karpenter for Azure's own words (karpenter-provider-azure offerings/commonerrorhandlers.go)
    # and ARM's family-cores wording:
    r"vCPU quota\b.{0,80}?\breached|reached the regional vCPU quota|"
    r"exceeding approved [\w ]{1,60}quota"
)
_CAPACITY_CODE: Final = re.compile(
    r"InsufficientInstanceCapacity|UnfulfillableCapacity|ReservationCapacityExceeded|"
    r"(?:ZONE_)?RESOURCE_POOL_EXHAUSTED\w*|STOCKOUT|INSUFFICIENT_CAPACITY|"
    r"placeholder-cannot-be-fulfilled|provisioning-state-failed|ZonalAllocationFailed|"
    r"AllocationFailed|Overconstrained(?:Zonal)?AllocationRequest|SkuNotAvailable|"
    r"(?:Overconstrained)?(?:Zonal)?AllocationFailure|SKUNotAvailable|InsufficientFreeAddressesInSubnet"
)
_CAPACITY_TEXT: Final = re.compile(
    r"[Ii]nsufficient capacity|does not have enough resources available|cannot provision any more|"
    r"unable to allocate resources|requested SKU is unavailable"
)
_CONFIG: Final = re.compile(
    r"(?i)nodeclass|node class|predicate|affinity|taint|incompatible|not match"
)
_CONFIG_CODE: Final = re.compile(
    r"InvalidBlockDeviceMapping|InvalidLaunchTemplate[\w.]*|UnauthorizedOperation|"
    r"InvalidUserData[\w.]*|InvalidAMIID[\w.]*|InvalidParameterCombination"
)
"""EC2 codes of a launch the node class or the controller's role makes impossible."""
_AZURE_CODE: Final = re.compile(r"Code=[\"'](?P<code>\w+)[\"']")

_MAX_SIZE_TEXT: Final = re.compile(
    # AWS refusing SetDesiredCapacity above the ASG's MaxSize (cluster-autoscaler's view of the
    # group's max lagged the cloud's): "New SetDesiredCapacity value 11 is above max value 10".
    r"is above max value \d+|above the maximum size"
)
_PERMISSION: Final = re.compile(
    # The autoscaler's identity may not resize the group: AWS, Azure, GCE wording.
    r"AccessDenied|UnauthorizedOperation|is not authorized to perform|AuthorizationFailed|"
    r"Required '[\w.]+' permission"
)
_CAPACITY_ELSEWHERE: Final = re.compile(
    # Oracle Cloud's and Hetzner's words for a zone or location without machines.
    r"Out of host capacity|\(resource_unavailable\)"
)


def classify(text: str, code: str = "") -> tuple[str, str]:
    """``(reason, cloud code)`` of a failure described by ``code`` and ``text``.

    ``code`` is the structured code when the line has one (``errorCode=...``); the
    text is searched for a code or wording that says more (a quota behind a
    ``cloudProviderError``, the EC2 code inside an ICE message).
    """
    both = f"{code} {text}" if code else text
    match = _QUOTA_CODE.search(both)
    if match or _QUOTA_TEXT.search(text):
        return "quota", code or (match.group(0) if match else _azure_code(text))
    match = _CAPACITY_CODE.search(both)
    if match or _CAPACITY_TEXT.search(text):
        return "capacity", code or (match.group(0) if match else _azure_code(text))
    if code == "timeout" or "timed out" in text:
        return "timeout", code
    match = _CONFIG_CODE.search(text)
    if match:
        return "config", code or match.group(0)
    if _CONFIG.search(text):
        return "config", code or _azure_code(text)
    if _MAX_SIZE_TEXT.search(text):
        return "max_size", code or _azure_code(text)
    if _PERMISSION.search(text):
        return "config", code or _azure_code(text)
    if _CAPACITY_ELSEWHERE.search(text):
        return "capacity", code
    return "other", code or _azure_code(text)


def classify_failure(text: str, code: str = "") -> tuple[str, str]:
    """:func:`classify` for a failed scale-up: a ``timeout`` there is an API call that
    timed out (``other``), not nodes that failed to register (``scale_up_timeout``)."""
    reason, found = classify(text, code)
    return ("other" if reason == "timeout" else reason), found


def _azure_code(text: str) -> str:
    match = _AZURE_CODE.search(text)
    return match["code"] if match else ""


_GCE: Final = ("googleapis.com", "QUOTA_EXCEEDED", "RESOURCE_POOL_EXHAUSTED", "STOCKOUT", "gce")
_AWS: Final = (
    "placeholder-cannot-be-fulfilled",
    "auto_scaling_groups.go",
    "aws_",
    "AWS",
    "EC2",
    "aws:///",
    "ec2nodeclass",
    "InsufficientInstanceCapacity",
    "VcpuLimitExceeded",
    "ASG ",
)
_AZURE: Final = (
    "azure",
    "Azure",
    "provisioning-state-failed",
    "containerservice",
    "VirtualMachineScaleSets",
    "Microsoft.Compute",
    "Standard_",
    "-vmss",
)


_CLOUDS: Final = (("gce", _GCE), ("azure", _AZURE), ("aws", _AWS))


def cloud_of(text: str, default: str = "") -> str:
    """``gce``, ``aws`` or ``azure`` when ``text`` shows which, else ``default``."""
    for cloud, words in _CLOUDS:
        for word in words:
            if word in text:
                return cloud
    return default


# -- NotTriggerScaleUp: its list of reasons, read the same from an Event and a log line --
_COUNTED: Final = re.compile(r"(?:^|, )(?P<count>\d+) (?P<what>[^,]+?)(?=, \d+ |\.?$)")


def reason_class(text: str) -> str:
    """The vocabulary class of one ``NotTriggerScaleUp`` reason (``max node group size
    reached`` -> ``max_size``, ``Insufficient nvidia.com/gpu`` -> ``config``)."""
    lowered = text.lower()
    if "backoff" in lowered:
        return "backoff"
    if "max node group size" in lowered or "max total nodes" in lowered or "limit" in lowered:
        return "max_size"
    if "quota" in lowered:
        return "max_size"  # cluster-autoscaler's own resource limits, see classify.py
    return "config"


_RANK: Final = ("backoff", "max_size", "config", "other")


def not_triggered(message: str) -> tuple[str, str]:
    """``(action, reason)`` of a ``NotTriggerScaleUp`` message."""
    if "max total nodes in cluster reached" in message:
        return "max_size_reached", "max_size"
    _, _, listed = message.partition("scale-up")
    _, sep, listed = listed.partition(": ")
    classes = {reason_class(m["what"]) for m in _COUNTED.finditer(listed.strip())} if sep else set()
    if not classes and sep:  # reasons without counts ("backoff after failed scale-up")
        classes = {reason_class(item) for item in listed.strip().rstrip(".").split(", ") if item}
    if not classes:
        return "unschedulable", "config"  # "it wouldn't fit if a new node is added"
    reason = min(classes, key=_RANK.index)
    if classes == {"backoff"}:
        return "backoff", "backoff"
    if classes == {"max_size"}:
        return "max_size_reached", "max_size"
    return "unschedulable", reason
