"""Slim raw Kubernetes objects (parsed dicts, or the JSON bytes) into the typed schema events.

Why raw JSON, not kubernetes-asyncio models: a real pod is ~10 KB, mostly fields we never
read, and the models cost far more and raise on shapes proxies and old servers send. Small
msgspec views declare only the fields read; what they cannot say (a quantity is ``"8"`` not
``"500m"``, a time is RFC 3339) is checked here. Errors are values: the event, ``None`` (a
BOOKMARK) or a :class:`~schemas.codec.RecordError` naming the JSON path; harmless odd shapes
are tolerated, wrong types in a field we read are not (guessing invents facts).

Traps: a pod has no "changed at" time (offline, the newest status timestamp, and a
``deletionTimestamp`` lies in the future by the grace period); ids are
``k8s:<uid>:<resourceVersion>``; init containers count as Kubernetes counts them; Run:ai's
``gpu-fraction`` pods request no GPU resource; values the codec would refuse are errors
here, so the watch never publishes a dead letter. In full: docs/connectors.md, design notes.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, NoReturn

import msgspec

from connectors.k8s.dra import CLAIM_RESOURCE, ClaimTemplate, TaintRule
from connectors.k8s.settings import (
    GPU_PREFIXES,
    GPU_RESOURCES,
    MONITOR_SELECTORS,
    MonitorSelector,
    parse_monitor_selectors,
)
from connectors.settings import GPU_DEVICE_CLASSES, GPU_DRIVERS
from schemas import codec
from schemas.codec import RecordError
from schemas.events import (
    CORDON_TAINT,
    ContainerStatus,
    DeviceHealth,
    GpuShare,
    KubeEvent,
    NodeCondition,
    NodeEvent,
    ObjectRef,
    PodClaim,
    PodCondition,
    PodEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
    Taint,
    Termination,
)
from schemas.ids import k8s_event_id, resource_version_number
from schemas.types import Op
from schemas.wellknown import NFD_GPU_LABELS, POOL_LABELS, labelled_gpu_node

MAX_TEXT: Final = 4096
"""Longest message/note kept, in characters; longer text is cut and marked with ``…``."""

GPU_LABELS: Final = (
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.replicas",
    "nvidia.com/gpu.sharing-strategy",
    "nvidia.com/mig.config",
    "nvidia.com/mig.strategy",
    "nvidia.com/mig.capable",
    "nvidia.com/gpu.present",
    "nvidia.com/gpu.machine",
    "nvidia.com/gpu.clique",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone",
    *NFD_GPU_LABELS,
    *POOL_LABELS,
)
"""Node labels kept on :class:`NodeEvent` (GPU feature discovery + well-known labels, and
the node pool's: :data:`~schemas.wellknown.POOL_LABELS`, which the fleet view groups by).

GPU feature discovery writes ``gpu.product/count/memory/machine``, ``mig.capable``
and ``mig.strategy`` (``single``: ``nvidia.com/gpu`` counts MIG devices, ``mixed``:
one ``nvidia.com/mig-<profile>`` resource per profile); the gpu-operator writes
``gpu.present`` (the node has an NVIDIA PCI device, even before any device plugin
advertises ``nvidia.com/gpu``). GPU feature discovery also writes ``gpu.clique``
(``<clusterUUID>.<cliqueId>``) on nodes whose GPUs share a multi-node NVLink fabric
(GB200 / GB300 NVL72): the core's NVLink domain. Node Feature Discovery's NVIDIA PCI
labels (:data:`~schemas.wellknown.NFD_GPU_LABELS`) mark a GPU node where no operator
writes ``gpu.present`` (NVIDIA's DRA driver alone). Kept as strings, not interpreted here.
"""

_LEGACY_LABELS: Final = {
    "beta.kubernetes.io/instance-type": "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
}
"""Deprecated labels still set on old clusters, mapped to the current name (if absent)."""

DRA_KINDS: Final = frozenset(
    {"ResourceSlice", "ResourceClaim", "ResourceClaimTemplate", "DeviceTaintRule"}
)
"""The ``resource.k8s.io`` kinds read (:mod:`connectors.k8s.dra_slim`)."""

WATCH_OPS: Final[dict[str, Op]] = {"ADDED": "added", "MODIFIED": "modified", "DELETED": "deleted"}

Slimmed = (
    PodEvent
    | NodeEvent
    | KubeEvent
    | ResourceSliceEvent
    | ResourceClaimEvent
    | ClaimTemplate
    | TaintRule
    | RecordError
    | None
)
"""What slimming gives: an event, a DRA cache record (never published), an error value,
or ``None`` for nothing to emit."""


@dataclass(frozen=True)
class SlimConfig:
    """What counts as a GPU: extended resources (exact names and name prefixes), DRA
    drivers (slices, allocations) and DRA device classes (claim requests)."""

    gpu_resources: tuple[str, ...] = GPU_RESOURCES
    gpu_prefixes: tuple[str, ...] = GPU_PREFIXES
    gpu_drivers: tuple[str, ...] = GPU_DRIVERS
    gpu_classes: tuple[str, ...] = GPU_DEVICE_CLASSES
    monitors: tuple[MonitorSelector, ...] = parse_monitor_selectors(MONITOR_SELECTORS)
    """GPU monitoring pods' roles by label (:data:`connectors.k8s.settings.MONITOR_SELECTORS`)."""

    def is_gpu_resource(self, name: str) -> bool:
        """Whether resource ``name`` is a configured GPU resource."""
        return name in self.gpu_resources or name.startswith(self.gpu_prefixes)


DEFAULT_CONFIG: Final = SlimConfig()


# -- views: the fields we read, as the API spells them ------------------------------
class _View(msgspec.Struct, rename="camel", gc=False):
    """Base of the views. ``gc=False``: short-lived and acyclic, so never worth tracking.

    Every field is optional (``None`` when absent or ``null``, as the API omits
    empty fields), and list entries are ``X | None``: a ``null`` entry reads as
    an empty one, as it always has.
    """


class _OwnerRefView(_View):
    kind: str | None = None
    name: str | None = None
    controller: Any = None
    """Only ``true`` marks the controller; any other value (even ``"true"``) does not."""


class _MetaView(_View):
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None


class _SharedGpuView(
    _View,
    rename={
        "gpu_fraction": "gpu-fraction",
        "gpu_memory": "gpu-memory",
        "devices": "gpu-fraction-num-devices",
    },
):
    """The fractional-GPU scheduler annotations of a pod (Run:ai, KAI Scheduler).

    A Struct, not ``dict[str, Any]``: the other annotations (``kubectl apply``'s
    copy of the whole object among them) are skipped without being built. Values
    are ``Any``: the API only sends strings, hand-written files may hold numbers.
    """

    gpu_fraction: Any = None
    gpu_memory: Any = None
    devices: Any = None


class _PodMetaView(_MetaView):
    owner_references: list[_OwnerRefView | None] | None = None
    annotations: _SharedGpuView | None = None
    labels: Any = None
    """``Any``: only compared to the monitor selectors (:func:`_monitor_role`); a pod's odd
    labels must not cost the pod, as they cost nothing before they were read."""


class _NodeMetaView(_MetaView):
    labels: dict[str, Any] | None = None
    """Values are ``Any``: only :data:`GPU_LABELS` are read, as ``str(value)``."""


class _ResourcesView(_View):
    requests: dict[str, Any] | None = None
    limits: dict[str, Any] | None = None


class _ContainerView(_View):
    resources: _ResourcesView | None = None


class _PodClaimView(_View):
    """``spec.resourceClaims[]`` (and ``status.resourceClaimStatuses[]``: name and claim)."""

    name: str | None = None
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


class _PodSpecView(_View):
    node_name: str | None = None
    containers: list[_ContainerView | None] | None = None
    init_containers: list[_ContainerView | None] | None = None
    resource_claims: list[_PodClaimView | None] | None = None


class _TerminatedView(_View):
    reason: str | None = None
    exit_code: int | None = None
    message: str | None = None
    started_at: str | None = None
    finished_at: str | None = None


class _WaitingView(_View):
    reason: str | None = None


class _RunningView(_View):
    started_at: str | None = None


class _StateView(_View):
    terminated: _TerminatedView | None = None
    waiting: _WaitingView | None = None
    running: _RunningView | None = None


class _LastStateView(_View):
    terminated: _TerminatedView | None = None


class _ResourceHealthView(_View, rename={"resource_id": "resourceID"}):
    resource_id: str | None = None
    health: str | None = None


class _ResourceStatusView(_View):
    """One entry of ``allocatedResourcesStatus``: a resource name and its devices."""

    name: str | None = None
    resources: list[_ResourceHealthView | None] | None = None


class _ContainerStatusView(_View):
    name: str | None = None
    restart_count: int | None = None
    state: _StateView | None = None
    last_state: _LastStateView | None = None
    allocated_resources_status: list[_ResourceStatusView | None] | None = None


class _PodConditionView(_View):
    type: Any = None
    status: str | None = None
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None


class _PodStatusView(_View):
    phase: str | None = None
    reason: str | None = None
    message: str | None = None
    conditions: list[_PodConditionView | None] | None = None
    init_container_statuses: list[_ContainerStatusView | None] | None = None
    container_statuses: list[_ContainerStatusView | None] | None = None
    resource_claim_statuses: list[_PodClaimView | None] | None = None


class _PodView(_View, tag_field="kind", tag="Pod"):
    metadata: _PodMetaView | None = None
    spec: _PodSpecView | None = None
    status: _PodStatusView | None = None


class _NodeConditionView(_View):
    type: str | None = None
    status: str | None = None
    reason: str | None = None
    message: str | None = None
    last_transition_time: str | None = None
    last_heartbeat_time: str | None = None


class _TaintView(_View):
    key: str | None = None
    value: str | None = None
    effect: str | None = None


class _NodeSpecView(_View):
    taints: list[_TaintView | None] | None = None
    unschedulable: bool | None = None


class _NodeStatusView(_View):
    capacity: dict[str, Any] | None = None
    allocatable: dict[str, Any] | None = None
    conditions: list[_NodeConditionView | None] | None = None


class _NodeView(_View, tag_field="kind", tag="Node"):
    metadata: _NodeMetaView | None = None
    spec: _NodeSpecView | None = None
    status: _NodeStatusView | None = None


class _RefView(_View):
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    field_path: str | None = None


class _SourceView(_View):
    component: str | None = None
    host: str | None = None


class _SeriesView(_View):
    count: int | None = None
    last_observed_time: str | None = None


class _EventView(_View, tag_field="kind", tag="Event"):
    """core/v1 and events.k8s.io/v1 Events in one view (the API serves either).

    The two never share a field name we read, so one view costs nothing in strictness.
    """

    metadata: _MetaView | None = None
    api_version: Any = None
    reason: str | None = None
    type: str | None = None
    series: _SeriesView | None = None
    event_time: str | None = None
    # core/v1
    involved_object: _RefView | None = None
    message: str | None = None
    source: _SourceView | None = None
    reporting_component: str | None = None
    count: int | None = None
    last_timestamp: str | None = None
    first_timestamp: str | None = None
    # events.k8s.io/v1
    regarding: _RefView | None = None
    note: str | None = None
    reporting_controller: str | None = None
    reporting_instance: str | None = None
    deprecated_source: _SourceView | None = None
    deprecated_count: int | None = None
    deprecated_last_timestamp: str | None = None
    deprecated_first_timestamp: str | None = None


_VIEWS: Final[dict[str, type[_PodView | _NodeView | _EventView]]] = {
    "Pod": _PodView,
    "Node": _NodeView,
    "Event": _EventView,
}

# Empty views stand in for absent or ``null`` objects and list entries, as ``{}`` did.
_EMPTY_STATUS: Final = _ContainerStatusView()
_EMPTY_POD_SPEC: Final = _PodSpecView()
_EMPTY_POD_STATUS: Final = _PodStatusView()
_EMPTY_NODE_SPEC: Final = _NodeSpecView()
_EMPTY_NODE_STATUS: Final = _NodeStatusView()
_EMPTY_OWNER: Final = _OwnerRefView()
_EMPTY_NODE_CONDITION: Final = _NodeConditionView()
_EMPTY_TAINT: Final = _TaintView()
_EMPTY_SERIES: Final = _SeriesView()
_EMPTY_SOURCE: Final = _SourceView()
_EMPTY_REF: Final = _RefView()


# -- errors --------------------------------------------------------------------------
class _Bad(Exception):
    """Internal: a field with the wrong value; turned into a RecordError at the boundary.

    ``field`` may be relative (``.finishedAt``) while it travels up: each caller
    that knows more of the path puts it in front (:meth:`within`), so the happy
    path never formats a path it will not need.
    """

    def __init__(self, reason: str, field: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.field = field

    def within(self, prefix: str) -> _Bad:
        """This error with ``prefix`` in front of its field (re-raise the result)."""
        self.field = prefix + self.field
        return self


_MSGSPEC_TYPE: Final = re.compile(r"Expected `(?P<expected>[^`]+)`, got `(?P<got>[^`]+)`")
_EXPECTED: Final = {
    "object": "an object",
    "object | null": "an object",
    "array | null": "an array",
    "str | null": "a string",
    "int | null": "an integer",
}
_GOT: Final = {"str": "string", "int": "number", "float": "number", "bool": "boolean"}
_TIME_KEYS: Final = frozenset(
    {
        "creationTimestamp",
        "deletionTimestamp",
        "startedAt",
        "finishedAt",
        "lastTransitionTime",
        "lastHeartbeatTime",
        "lastObservedTime",
        "eventTime",
        "lastTimestamp",
        "firstTimestamp",
        "deprecatedLastTimestamp",
        "deprecatedFirstTimestamp",
    }
)
"""View fields holding times: a wrong type there reads "expected an RFC 3339 time"."""


def _worded(error: RecordError, expected: str | None = None) -> RecordError:
    """A view's type error in our words, at ``$`` when msgspec names no field.

    "Expected `int | null`, got `str` - at `$.x`" becomes "expected an integer,
    got string" at ``$.x``; ``expected`` replaces the phrase for the whole value.
    Anything else msgspec says is kept as it is.
    """
    field = error.field or "$"
    match = _MSGSPEC_TYPE.fullmatch(error.reason)
    phrase = None if match is None else expected or _EXPECTED.get(match["expected"])
    if match is None or phrase is None:
        return RecordError(error.reason, field)
    if phrase == "a string" and field.rpartition(".")[2] in _TIME_KEYS:
        phrase = "an RFC 3339 time"
    got = match["got"]
    return RecordError(f"expected {phrase}, got {_GOT.get(got, got)}", field)


def _not_an_object(value: object, expected: str) -> RecordError:
    """The error for a top-level ``value`` that is not a JSON object (msgspec names its type)."""
    try:
        codec.convert_as(value, dict)
    except RecordError as exc:
        return _worded(exc, expected)
    return RecordError(f"expected {expected}", "$")  # pragma: no cover - value was a dict


# -- value checks (what a view cannot say) ----------------------------------------------
def _shown(value: object, limit: int = 40) -> str:
    """``str(value)``, cut to ``limit`` characters, for a message about a value we could
    not use. Never raises: ``str`` of a list nested ~1,000 levels deep (orjson parses up
    to 1,024) raises ``RecursionError``."""
    try:
        text = str(value)
    except RecursionError:
        text = "<nested too deep to show>"
    return text[:limit]


def _text(value: str | None) -> str:
    if not value:
        return ""
    return value if len(value) <= MAX_TEXT else value[: MAX_TEXT - 1] + "…"


def _time(value: str | None, field: str) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise _Bad(f"invalid time {value[:40]!r}", field) from None
    if parsed.tzinfo is None:
        raise _Bad(f"time without a timezone {value[:40]!r}", field)
    problem = codec.time_problem(parsed)
    if problem is not None:
        raise _Bad(problem, field)
    return parsed


def _quantity(value: object, field: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _Bad(f"expected an integer quantity, got {str(value)[:40]!r}", field)


def _newest(*times: datetime | None) -> datetime | None:
    present = [t for t in times if t is not None]
    return max(present) if present else None


# -- shared metadata ---------------------------------------------------------------
@dataclass
class _Identity:
    name: str
    namespace: str
    uid: str
    id: str
    version: int
    """The resourceVersion as a number (0: not a decimal one); the id keeps the string."""
    created: datetime | None
    deleted: datetime | None
    """Deletion *request* time: deletionTimestamp minus the grace period."""


def _no_metadata() -> NoReturn:
    raise _Bad("missing metadata", "$.metadata")


def _identity(meta: _MetaView) -> _Identity:
    name, uid, version = meta.name, meta.uid, meta.resource_version
    if not name:
        raise _Bad("missing name", "$.metadata.name")
    if not uid:
        raise _Bad("missing uid (needed for a deterministic id)", "$.metadata.uid")
    if not version:
        raise _Bad(
            "missing resourceVersion (needed for a deterministic id)", "$.metadata.resourceVersion"
        )
    deleted = _time(meta.deletion_timestamp, "$.metadata.deletionTimestamp")
    if deleted is not None:
        deleted -= timedelta(seconds=meta.deletion_grace_period_seconds or 0)
    return _Identity(
        name=name,
        namespace=meta.namespace or "",
        uid=uid,
        id=k8s_event_id(uid, version),
        version=resource_version_number(version),
        created=_time(meta.creation_timestamp, "$.metadata.creationTimestamp"),
        deleted=deleted,
    )


def _event_time(meta: _Identity, newest: datetime | None, observed: datetime | None) -> datetime:
    if observed is not None:
        return observed
    time = _newest(newest, meta.created, meta.deleted)
    if time is None:
        raise _Bad("no timestamp in the object and no observation time", "$.metadata")
    return time


# -- pods --------------------------------------------------------------------------
_FRACTION_PATH: Final = "$.metadata.annotations['gpu-fraction']"
_MEMORY_PATH: Final = "$.metadata.annotations['gpu-memory']"
_DEVICES_PATH: Final = "$.metadata.annotations['gpu-fraction-num-devices']"


def _fraction(value: object, field: str) -> float:
    """A ``gpu-fraction``: a decimal in (0, 1], as a string (or a number by hand)."""
    fraction: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        fraction = float(value)
    elif isinstance(value, str):
        try:
            fraction = float(value)
        except ValueError:
            fraction = None
    if fraction is None or not math.isfinite(fraction) or not 0 < fraction <= 1:
        raise _Bad(f"expected a GPU fraction in (0, 1], got {str(value)[:40]!r}", field)
    return fraction


def _gpu_share(meta: _PodMetaView) -> GpuShare | None:
    """The part of a GPU the fractional-GPU annotations ask for, if any.

    ``""`` reads as absent (as for times). ``gpu-fraction-num-devices`` is only
    read (and checked) when a fraction or a memory amount is asked for.
    """
    shared = meta.annotations
    if shared is None:
        return None
    fraction = 0.0
    if shared.gpu_fraction not in (None, ""):
        fraction = _fraction(shared.gpu_fraction, _FRACTION_PATH)
    memory = 0
    if shared.gpu_memory not in (None, ""):
        memory = _quantity(shared.gpu_memory, _MEMORY_PATH)
    if not fraction and not memory:
        return None
    devices = 1
    if shared.devices not in (None, ""):
        devices = _quantity(shared.devices, _DEVICES_PATH)
        if devices < 1:
            raise _Bad(f"expected at least 1 device, got {devices}", _DEVICES_PATH)
    return GpuShare(fraction=fraction, memory_mib=memory, devices=devices)


def _resources(
    containers: list[_ContainerView | None] | None, path: str, kind: str, config: SlimConfig
) -> list[dict[str, int]]:
    """GPU ``requests`` or ``limits`` of each container, in order."""
    out: list[dict[str, int]] = []
    for index, container in enumerate(containers or ()):
        resources = None if container is None else container.resources
        amounts: dict[str, int] = {}
        declared = None if resources is None else getattr(resources, kind)
        for name, value in (declared or {}).items():
            if config.is_gpu_resource(name):
                try:
                    count = _quantity(value, f"['{name}']")
                except _Bad as bad:
                    raise bad.within(f"{path}[{index}].resources.{kind}") from None
                if count > 0:
                    amounts[name] = count
        out.append(amounts)
    return out


def _effective(app: list[dict[str, int]], init: list[dict[str, int]]) -> dict[str, int]:
    total: dict[str, int] = {}
    for amounts in app:
        for name, count in amounts.items():
            total[name] = total.get(name, 0) + count
    for amounts in init:
        for name, count in amounts.items():
            total[name] = max(total.get(name, 0), count)
    return dict(sorted(total.items()))


def _gpu_amounts(spec: _PodSpecView, kind: str, config: SlimConfig) -> dict[str, int]:
    app = _resources(spec.containers, "$.spec.containers", kind, config)
    init = _resources(spec.init_containers, "$.spec.initContainers", kind, config)
    return _effective(app, init)


def _termination(term: _TerminatedView) -> tuple[Termination, datetime | None]:
    """Field paths of its errors are relative to the ``terminated`` object."""
    finished = _time(term.finished_at, ".finishedAt")
    started = _time(term.started_at, ".startedAt")
    return (
        Termination(
            reason=term.reason or "",
            exit_code=term.exit_code or 0,
            finished_at=finished,
            message=_text(term.message),
        ),
        _newest(finished, started),
    )


def _devices(status: _ContainerStatusView, config: SlimConfig) -> tuple[DeviceHealth, ...]:
    """Its GPU resources' and DRA claims' devices with their health.

    Every ``claim:`` entry is kept here: which claims hold GPUs is the DRA join's to
    say (:meth:`connectors.k8s.dra.DraJoin.pod` drops the others).
    """
    devices: list[DeviceHealth] = []
    for entry in status.allocated_resources_status or ():
        if entry is None or not entry.name:
            continue
        name = entry.name
        if not (name.startswith(CLAIM_RESOURCE) or config.is_gpu_resource(name)):
            continue
        for device in entry.resources or ():
            if device is None:
                continue
            devices.append(
                DeviceHealth(
                    resource=name, device=device.resource_id or "", health=device.health or ""
                )
            )
    return tuple(devices)


def _container_status(
    status: _ContainerStatusView | None, config: SlimConfig = DEFAULT_CONFIG
) -> tuple[ContainerStatus, datetime | None]:
    """Field paths of its errors are relative to the container status."""
    status = status or _EMPTY_STATUS
    name = status.name
    if not name:
        raise _Bad("container status without a name", ".name")
    state = status.state
    kind = ""
    reason = ""
    terminated: Termination | None = None
    newest: datetime | None = None
    if state is not None:
        if state.terminated is not None:
            kind = "terminated"
            try:
                terminated, newest = _termination(state.terminated)
            except _Bad as bad:
                raise bad.within(".state.terminated") from None
            reason = terminated.reason
        elif state.waiting is not None:
            kind = "waiting"
            reason = state.waiting.reason or ""
        elif state.running is not None:
            kind = "running"
            newest = _time(state.running.started_at, ".state.running.startedAt")
    last = status.last_state
    last_terminated: Termination | None = None
    if last is not None and last.terminated is not None:
        try:
            last_terminated, last_time = _termination(last.terminated)
        except _Bad as bad:
            raise bad.within(".lastState.terminated") from None
        newest = _newest(newest, last_time)
    return (
        ContainerStatus(
            name=name,
            restart_count=status.restart_count or 0,
            state=kind,
            reason=reason,
            terminated=terminated,
            last_terminated=last_terminated,
            devices=_devices(status, config),
        ),
        newest,
    )


def _owner(meta: _PodMetaView) -> tuple[str, str]:
    chosen: _OwnerRefView | None = None
    for ref in meta.owner_references or ():
        current = ref or _EMPTY_OWNER
        if current.controller is True:
            chosen = current
            break
        if chosen is None:
            chosen = current
    if chosen is None:
        return "", ""
    return chosen.kind or "", chosen.name or ""


def _monitor_role(labels: Any, config: SlimConfig) -> str:
    """The role of the first monitor selector whose every label the pod carries, or ``""``.

    Compared as strings: the API only sends strings, a hand-written file may hold a number.
    """
    if not labels or not isinstance(labels, dict):
        return ""
    for role, pairs in config.monitors:
        if all(key in labels and str(labels[key]) == value for key, value in pairs):
            return role
    return ""


def _pod(
    view: _PodView, op: Op, cluster: str, observed: datetime | None, config: SlimConfig
) -> PodEvent:
    metadata = view.metadata or _no_metadata()
    meta = _identity(metadata)
    spec = view.spec or _EMPTY_POD_SPEC
    status = view.status or _EMPTY_POD_STATUS
    newest: datetime | None = None
    containers: list[ContainerStatus] = []
    for key, statuses in (
        ("initContainerStatuses", status.init_container_statuses),
        ("containerStatuses", status.container_statuses),
    ):
        for index, raw in enumerate(statuses or ()):
            try:
                container, when = _container_status(raw, config)
            except _Bad as bad:
                raise bad.within(f"$.status.{key}[{index}]") from None
            containers.append(container)
            newest = _newest(newest, when)
    scheduled: PodCondition | None = None
    disruption: PodCondition | None = None
    for index, cond in enumerate(status.conditions or ()):
        if cond is None:
            continue  # an empty condition: no time, not PodScheduled
        try:
            changed = _time(cond.last_transition_time, ".lastTransitionTime")
        except _Bad as bad:
            raise bad.within(f"$.status.conditions[{index}]") from None
        newest = _newest(newest, changed)
        if cond.type in ("PodScheduled", "DisruptionTarget"):
            condition = PodCondition(
                status=cond.status or "",
                reason=cond.reason or "",
                message=_text(cond.message),
            )
            if cond.type == "PodScheduled":
                scheduled = condition
            else:
                disruption = condition
    owner_kind, owner_name = _owner(metadata)
    return PodEvent(
        id=meta.id,
        cluster=cluster,
        time=_event_time(meta, newest, observed),
        node=spec.node_name or "",
        op=op,
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        phase=status.phase or "",
        reason=status.reason or "",
        message=_text(status.message),
        gpu_requests=_gpu_amounts(spec, "requests", config),
        gpu_limits=_gpu_amounts(spec, "limits", config),
        owner_kind=owner_kind,
        owner_name=owner_name,
        containers=tuple(containers),
        scheduled=scheduled,
        created_at=meta.created,
        deleted_at=meta.deleted,
        gpu_share=_gpu_share(metadata),
        resource_version=meta.version,
        claims=_pod_claims(spec, status),
        disruption=disruption,
        monitor=_monitor_role(metadata.labels, config),
    )


def _pod_claims(spec: _PodSpecView, status: _PodStatusView) -> tuple[PodClaim, ...]:
    """The pod's DRA claims with their object names; ``gpus`` is the DRA join's to fill.

    The claim object is ``status.resourceClaimStatuses`` (made from a template by the
    claim controller, named ``<pod>-<claim>-<random>``) or ``resourceClaimName``.
    """
    made: dict[str, str] = {}
    for entry in status.resource_claim_statuses or ():
        if entry is not None and entry.name and entry.resource_claim_name:
            made[entry.name] = entry.resource_claim_name
    claims: list[PodClaim] = []
    for entry in spec.resource_claims or ():
        if entry is None or not entry.name:
            continue
        claims.append(
            PodClaim(
                name=entry.name,
                claim=entry.resource_claim_name or made.get(entry.name, ""),
                template=entry.resource_claim_template_name or "",
            )
        )
    return tuple(claims)


# -- nodes -------------------------------------------------------------------------
def _gpu_map(raw: dict[str, Any] | None, path: str, config: SlimConfig) -> dict[str, int]:
    amounts: dict[str, int] = {}
    for name, value in sorted((raw or {}).items()):
        if config.is_gpu_resource(name):
            amounts[name] = _quantity(value, f"{path}['{name}']")
    return amounts


def _conditions(
    raw: list[_NodeConditionView | None] | None, where: str
) -> tuple[tuple[NodeCondition, ...], datetime | None]:
    """Conditions of the node's shape (a node's, a claim device's) and the newest time
    they carry; a bad time is an error at ``where[index]``."""
    newest: datetime | None = None
    conditions: list[NodeCondition] = []
    for index, entry in enumerate(raw or ()):
        cond = entry or _EMPTY_NODE_CONDITION
        try:
            newest = _newest(
                newest,
                _time(cond.last_transition_time, ".lastTransitionTime"),
                _time(cond.last_heartbeat_time, ".lastHeartbeatTime"),
            )
        except _Bad as bad:
            raise bad.within(f"{where}[{index}]") from None
        conditions.append(
            NodeCondition(
                type=cond.type or "",
                status=cond.status or "",
                reason=cond.reason or "",
                message=_text(cond.message),
            )
        )
    return tuple(conditions), newest


def _node(
    view: _NodeView, op: Op, cluster: str, observed: datetime | None, config: SlimConfig
) -> NodeEvent:
    metadata = view.metadata or _no_metadata()
    meta = _identity(metadata)
    spec = view.spec or _EMPTY_NODE_SPEC
    status = view.status or _EMPTY_NODE_STATUS
    conditions, newest = _conditions(status.conditions, "$.status.conditions")
    raw_labels = metadata.labels or {}
    labels: dict[str, str] = {}
    for key in GPU_LABELS:
        value = raw_labels.get(key)
        if value is not None:
            labels[key] = str(value)
    for old, new in _LEGACY_LABELS.items():
        value = raw_labels.get(old)
        if value is not None and new not in labels:
            labels[new] = str(value)
    taints: list[Taint] = []
    for entry in spec.taints or ():
        taint = entry or _EMPTY_TAINT
        taints.append(
            Taint(key=taint.key or "", value=taint.value or "", effect=taint.effect or "")
        )
    if spec.unschedulable and all(t.key != CORDON_TAINT for t in taints):
        # A cordon the node lifecycle controller has not mirrored as its taint yet: the
        # same fact, one shape for the core (streams.core.rules.disruption).
        taints.append(Taint(key=CORDON_TAINT, effect="NoSchedule"))
    return NodeEvent(
        id=meta.id,
        cluster=cluster,
        time=_event_time(meta, newest, observed),
        node=meta.name,
        op=op,
        capacity=_gpu_map(status.capacity, "$.status.capacity", config),
        allocatable=_gpu_map(status.allocatable, "$.status.allocatable", config),
        conditions=conditions,
        labels=dict(sorted(labels.items())),
        taints=tuple(taints),
        resource_version=meta.version,
    )


# -- events ------------------------------------------------------------------------
_CONTAINER_PATH: Final = re.compile(
    r"spec\.(?:containers|initContainers|ephemeralContainers)\{(?P<name>[^{}]+)\}"
)
"""A reference's ``fieldPath`` naming a container, as the kubelet writes it."""


def _is_modern(view: _EventView) -> bool:
    """events.k8s.io by ``apiVersion``; by shape when there is none (a bare List item).

    Without an ``apiVersion`` an Event with ``regarding`` or ``note`` is an
    events.k8s.io one (core/v1 has neither); one with ``involvedObject`` (or
    neither) stays core/v1, as every Event without ``apiVersion`` was read before.
    """
    if view.api_version not in (None, ""):
        return str(view.api_version).startswith("events.k8s.io/")
    return view.involved_object is None and (view.regarding is not None or view.note is not None)


def _kube_event(view: _EventView, cluster: str) -> KubeEvent:
    """core/v1 and events.k8s.io/v1 Events; the latter renames most fields.

    Times are parsed in the order they are preferred and only until one is
    found, so a bad time behind a good one is not reported (as before).
    The component is ``reportingController``, else ``deprecatedSource.component``:
    an Event written through the core/v1 API by an old client and read back as
    events.k8s.io/v1 has only the latter.
    """
    meta = _identity(view.metadata or _no_metadata())
    modern = _is_modern(view)
    series = view.series or _EMPTY_SERIES
    if modern:
        ref, text = view.regarding, view.note
        deprecated = view.deprecated_source or _EMPTY_SOURCE
        source_name = view.reporting_controller or deprecated.component or ""
        host = deprecated.host or ""
        if not host and source_name == "kubelet":
            host = view.reporting_instance or ""
        deprecated_count = 1 if view.deprecated_count is None else view.deprecated_count
        count = deprecated_count if series.count is None else series.count
        time = (
            _newest(
                _time(series.last_observed_time, "$.series.lastObservedTime"),
                _time(view.deprecated_last_timestamp, "$.deprecatedLastTimestamp"),
            )
            or _time(view.event_time, "$.eventTime")
            or _time(view.deprecated_first_timestamp, "$.deprecatedFirstTimestamp")
        )
    else:
        ref, text = view.involved_object, view.message
        source = view.source or _EMPTY_SOURCE
        source_name = source.component or view.reporting_component or ""
        host = source.host or ""
        count = view.count or (1 if series.count is None else series.count)
        time = (
            _time(view.last_timestamp, "$.lastTimestamp")
            or _time(series.last_observed_time, "$.series.lastObservedTime")
            or _time(view.event_time, "$.eventTime")
            or _time(view.first_timestamp, "$.firstTimestamp")
        )
    time = time or meta.created
    if time is None:
        raise _Bad("event without any timestamp", "$.lastTimestamp")
    ref = ref or _EMPTY_REF
    container = None if not ref.field_path else _CONTAINER_PATH.fullmatch(ref.field_path)
    involved = ObjectRef(
        kind=ref.kind or "",
        name=ref.name or "",
        namespace=ref.namespace or "",
        uid=ref.uid or "",
        container="" if container is None else container["name"],
    )
    reason = view.reason
    if not reason:
        raise _Bad("event without a reason", "$.reason")
    return KubeEvent(
        id=meta.id,
        cluster=cluster,
        time=time,
        node=involved.name if involved.kind == "Node" else host,
        reason=reason,
        message=_text(text),
        type=view.type or "Normal",
        involved=involved,
        source=source_name,
        count=count,
    )


# -- objects without a kind ----------------------------------------------------------
def infer_kind(obj: dict[str, Any]) -> str | RecordError:
    """The kind of an object that has none, from its shape; a RecordError if no shape decides.

    For objects printed without ``kind`` (``jq '.items[]'`` over a List). Pod:
    ``spec.containers`` (workloads nest it under ``template``). Node: ``status.nodeInfo``,
    ``spec.podCIDR``, ``spec.providerID``, or ``status.capacity`` without containers. Event:
    ``reason`` with ``involvedObject`` or ``regarding``.

    Traps: a PersistentVolumeClaim has ``status.capacity`` too, so capacity with
    ``spec.accessModes`` decides nothing; no shape, or two at once, stays an "object without a
    kind" error at ``$.kind``: guessing would put invented facts into incidents. Only the
    presence of keys is looked at. docs/connectors.md, design notes: infer_kind.
    """
    spec = obj.get("spec")
    status = obj.get("status")
    spec_keys: dict[str, Any] = spec if isinstance(spec, dict) else {}
    status_keys: dict[str, Any] = status if isinstance(status, dict) else {}
    kinds: list[str] = []
    pod = "containers" in spec_keys
    if pod:
        kinds.append("Pod")
    if (
        "nodeInfo" in status_keys
        or "podCIDR" in spec_keys
        or "providerID" in spec_keys
        or ("capacity" in status_keys and not pod and "accessModes" not in spec_keys)
    ):
        kinds.append("Node")
    if "reason" in obj and ("involvedObject" in obj or "regarding" in obj):
        kinds.append("Event")
    if len(kinds) == 1:
        return kinds[0]
    if kinds:
        first, second = (f"an {k}" if k[0] in "AEIOU" else f"a {k}" for k in kinds[:2])
        return RecordError(
            f"object without a kind, shaped like both {first} and {second}", "$.kind"
        )
    return RecordError("object without a kind, and not shaped like a Pod, Node or Event", "$.kind")


# -- entry points ------------------------------------------------------------------
def _slim_view(
    view: _PodView | _NodeView | _EventView,
    op: Op,
    cluster: str,
    observed: datetime | None,
    config: SlimConfig,
) -> PodEvent | NodeEvent | KubeEvent | RecordError:
    try:
        event: PodEvent | NodeEvent | KubeEvent
        if isinstance(view, _PodView):
            event = _pod(view, op, cluster, observed, config)
        elif isinstance(view, _NodeView):
            event = _node(view, op, cluster, observed, config)
        else:
            event = _kube_event(view, cluster)
    except _Bad as bad:
        return RecordError(bad.reason, bad.field)
    except RecursionError:  # str() of a value nested ~1,000 deep (a label, a quantity)
        return RecordError("arrays or objects nested too deep to read")
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        # Defence in depth: a shape no check above foresaw is still a value, not a crash.
        return RecordError(f"unexpected shape: {exc}")
    return codec.checked(event)


def slim_object(
    obj: object,
    op: Op = "added",
    *,
    cluster: str,
    observed: datetime | None = None,
    config: SlimConfig = DEFAULT_CONFIG,
) -> Slimmed:
    """One raw Pod, Node, Event or DRA object to its typed record, or a RecordError.

    ``observed`` (aware datetime) is the live connector's receive time; pass
    ``None`` offline to take the newest change timestamp in the object (see the
    module docstring for why that can look late). Event objects always use
    their own timestamps.
    """
    if isinstance(obj, dict):
        kind = obj.get("kind")
    elif obj is None:
        kind = None  # nothing at all reads as an object without a kind, as it always has
    else:
        return _not_an_object(obj, "an object")
    view_type = _VIEWS.get(kind) if isinstance(kind, str) else None
    if view_type is None and isinstance(kind, str) and kind in DRA_KINDS and isinstance(obj, dict):
        from connectors.k8s.dra_slim import slim_dra  # noqa: PLC0415 - it builds on this module

        return slim_dra(obj, kind, op, cluster=cluster, observed=observed, config=config)
    if view_type is None:
        if kind is None:
            return RecordError("object without a kind", "$.kind")
        return RecordError(f"unsupported kind {_shown(kind)!r}", "$.kind")
    try:
        view = codec.convert_as(obj, view_type)
    except RecordError as exc:
        return _worded(exc)
    return _slim_view(view, op, cluster, observed, config)


def slim_watch_event(
    envelope: object,
    *,
    cluster: str,
    observed: datetime | None = None,
    config: SlimConfig = DEFAULT_CONFIG,
) -> Slimmed:
    """One watch event ``{"type": ..., "object": ...}`` to a typed event.

    BOOKMARK gives ``None`` (it only carries a resourceVersion to resume from).
    ERROR gives a RecordError with the API's Status reason and message (a 410
    Gone arrives this way: the live watcher must relist, not skip it).
    Field paths in errors are relative to the object (``$.status...``).
    """
    if not isinstance(envelope, dict):
        return _not_an_object(envelope, "a watch event object")
    kind = envelope.get("type")
    if kind == "BOOKMARK":
        return None
    if kind == "ERROR":
        status = envelope.get("object")
        status = status if isinstance(status, dict) else {}
        code, reason = _shown(status.get("code", "")), _shown(status.get("reason", ""), MAX_TEXT)
        text = f"watch error {code}: {reason}: {_shown(status.get('message', ''), MAX_TEXT)}"
        return RecordError(text, "$.object")
    op = WATCH_OPS.get(kind) if isinstance(kind, str) else None
    if op is None:
        return RecordError(f"unknown watch event type {_shown(kind)!r}", "$.type")
    return slim_object(
        envelope.get("object"), op, cluster=cluster, observed=observed, config=config
    )


class _WatchLineView(_View):
    type: str | None = None
    object: _PodView | _NodeView | _EventView | None = None
    """Tagged by ``kind``: a Status (ERROR), another kind or no kind fails the fast path."""


_decode_watch_line: Final = codec.typed_decoder(_WatchLineView)


def slim_watch_line(
    line: bytes,
    *,
    cluster: str,
    observed: datetime | None = None,
    config: SlimConfig = DEFAULT_CONFIG,
) -> Slimmed:
    """One watch event as the JSON bytes of its line: :func:`slim_watch_event` without the dicts.

    The bytes go straight into the views (no dict of the ~10 KB object is ever
    built), several times faster than parsing first. Anything the fast path does
    not take as it is (an ERROR or unknown type, an unknown or missing ``kind``,
    a type error, a check here that fails) is slimmed again the slow way,
    ``codec.loads`` then :func:`slim_watch_event`, so every error has exactly the
    reason and field the dict path gives.

    Trap: msgspec checks the syntax of fields it skips but not their content,
    so a line whose *unread* parts are broken (invalid UTF-8 in an annotation,
    ``1e999`` in ``managedFields``) slims here, while ``codec.loads`` rejects
    the whole line as invalid JSON.
    """
    try:
        envelope = _decode_watch_line(line)
    except RecordError:
        envelope = None
    if envelope is not None:
        if envelope.type == "BOOKMARK":
            return None
        op = WATCH_OPS.get(envelope.type) if envelope.type is not None else None
        if op is not None and envelope.object is not None:
            result = _slim_view(envelope.object, op, cluster, observed, config)
            if not isinstance(result, RecordError):
                return result
    try:
        parsed = codec.loads(line)
    except RecordError as exc:
        return exc
    return slim_watch_event(parsed, cluster=cluster, observed=observed, config=config)


# -- GPU-only filters --------------------------------------------------------------
def is_gpu_pod(event: PodEvent) -> bool:
    """A pod that requests (or only limits) any configured GPU resource, part of a GPU,
    or GPUs through its DRA claims; never a GPU monitoring pod (``monitor`` set).

    Part of a GPU: a fractional-GPU scheduler annotation (``gpu_share``); such a
    pod requests no GPU resource at all, so the resources alone would drop it. Claims:
    only once the DRA join has resolved them (``PodClaim.gpus``). A monitor is not a
    workload even where it claims GPUs (the GPU operator's DRA dcgm-exporter takes an
    admin-access claim on every GPU of its node).
    """
    return not event.monitor and bool(
        event.gpu_requests
        or event.gpu_limits
        or event.gpu_share is not None
        or any(claim.gpus > 0 for claim in event.claims)
    )


def is_gpu_node(event: NodeEvent) -> bool:
    """A node with any GPU capacity (a node whose GPUs all went unhealthy still qualifies),
    or labelled as one (the GPU operator's ``nvidia.com/gpu.present=true``, NFD's NVIDIA
    PCI label: :func:`~schemas.wellknown.labelled_gpu_node`, the router's test too): a DRA
    node has no ``nvidia.com/gpu`` at all (its GPUs are in its ResourceSlices)."""
    return any(count > 0 for count in event.capacity.values()) or labelled_gpu_node(event.labels)
