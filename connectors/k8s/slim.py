"""Slim raw Kubernetes objects (dicts from orjson) into the typed schema events.

Why raw dicts and not kubernetes-asyncio models: a real pod is ~10 KB of JSON,
most of it ``managedFields``, annotations and volume specs we never read.
Building the client's model objects for all of it costs far more than walking
the few keys we need (``bench/slim_bench.py`` measures both), and the models
raise on shapes the API server happily sends through proxies and old versions.

Errors are values: every public function returns the typed event, ``None``
(nothing to emit: a BOOKMARK) or a :class:`~schemas.codec.RecordError` whose
``field`` is a JSON path (``$.status.containerStatuses[0].restartCount``). Odd
but harmless shapes are tolerated: a missing ``status``, ``containerStatuses:
null``, unknown fields, huge annotations (never read). Wrong *types* in a field
we read are errors, since guessing would put invented facts into incidents.

Traps, each handled here:

* **Event time of pods and nodes.** A pod has no "this change happened at"
  field. When the caller passes ``observed`` (the live connector's receive
  time) that is used. Otherwise (offline files) the time is the newest
  timestamp in the object that a status change writes: container
  ``startedAt``/``finishedAt``, condition ``lastTransitionTime`` (and for
  nodes ``lastHeartbeatTime``, which the kubelet refreshes whenever it posts a
  status change, e.g. an allocatable drop), creation, and deletion. The trap:
  changes that write no timestamp (a label edit by GPU feature discovery, a
  ``restartCount`` bump seen before ``finishedAt``) get the time of an
  *earlier* change, so they can look late to the core. A second trap:
  ``deletionTimestamp`` is in the *future* (request time + grace period), so
  we subtract ``deletionGracePeriodSeconds`` before using it.
* **Ids** are ``k8s:<uid>:<resourceVersion>``: the same object version gives
  the same id after a relist or a restart, so downstream dedupe works. Both
  parts are required.
* **Quantities**: extended resources are integers, but arrive as strings
  (``"1"``) or, from hand-written files, as numbers. ``"500m"`` is not a valid
  GPU count and is reported, not rounded.
* **Init containers** count as Kubernetes counts them: the pod's effective
  request is max(sum over app containers, largest init container).
* **Long free text** (termination messages with FallbackToLogsOnError, event
  notes) is capped at :data:`MAX_TEXT` characters so one chatty pod cannot
  bloat every Kafka record.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from schemas.codec import RecordError
from schemas.events import (
    ContainerStatus,
    KubeEvent,
    NodeCondition,
    NodeEvent,
    ObjectRef,
    PodCondition,
    PodEvent,
    Taint,
    Termination,
)
from schemas.types import Op

MAX_TEXT: Final = 4096
"""Longest message/note kept, in characters; longer text is cut and marked with ``…``."""

GPU_LABELS: Final = (
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.count",
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.replicas",
    "nvidia.com/gpu.sharing-strategy",
    "nvidia.com/mig.config",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/zone",
)
"""Node labels kept on :class:`NodeEvent` (GPU feature discovery + well-known labels)."""

_LEGACY_LABELS: Final = {
    "beta.kubernetes.io/instance-type": "node.kubernetes.io/instance-type",
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
}
"""Deprecated labels still set on old clusters, mapped to the current name (if absent)."""

WATCH_OPS: Final[dict[str, Op]] = {"ADDED": "added", "MODIFIED": "modified", "DELETED": "deleted"}

Slimmed = PodEvent | NodeEvent | KubeEvent | RecordError | None
"""What slimming gives: an event, an error value, or ``None`` for nothing to emit."""


@dataclass(frozen=True)
class SlimConfig:
    """Which extended resources count as GPUs (exact names and name prefixes)."""

    gpu_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    gpu_prefixes: tuple[str, ...] = ("nvidia.com/mig-",)
    """MIG resources are named per profile (``nvidia.com/mig-1g.10gb``): match by prefix."""

    def is_gpu_resource(self, name: str) -> bool:
        """Whether resource ``name`` is a configured GPU resource."""
        return name in self.gpu_resources or name.startswith(self.gpu_prefixes)


DEFAULT_CONFIG: Final = SlimConfig()


class _Bad(Exception):
    """Internal: a field with the wrong shape; turned into a RecordError at the boundary."""

    def __init__(self, reason: str, field: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.field = field


# -- typed accessors ---------------------------------------------------------------
def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return type(value).__name__


def _dict(value: object, path: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _Bad(f"expected an object, got {_type_name(value)}", path)
    return value


def _list(value: object, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Bad(f"expected an array, got {_type_name(value)}", path)
    return value


def _str(obj: dict[str, Any], key: str, path: str) -> str:
    value = obj.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _Bad(f"expected a string, got {_type_name(value)}", f"{path}.{key}")
    return value


def _text(obj: dict[str, Any], key: str, path: str) -> str:
    value = _str(obj, key, path)
    return value if len(value) <= MAX_TEXT else value[: MAX_TEXT - 1] + "…"


def _int(obj: dict[str, Any], key: str, path: str, default: int = 0) -> int:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"expected an integer, got {_type_name(value)}", f"{path}.{key}")
    return value


def _time(obj: dict[str, Any], key: str, path: str) -> datetime | None:
    value = obj.get(key)
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _Bad(f"expected an RFC 3339 time, got {_type_name(value)}", f"{path}.{key}")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise _Bad(f"invalid time {value[:40]!r}", f"{path}.{key}") from None
    if parsed.tzinfo is None:
        raise _Bad(f"time without a timezone {value[:40]!r}", f"{path}.{key}")
    return parsed


def _quantity(value: object, path: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _Bad(f"expected an integer quantity, got {str(value)[:40]!r}", path)


def _newest(*times: datetime | None) -> datetime | None:
    present = [t for t in times if t is not None]
    return max(present) if present else None


# -- shared metadata ---------------------------------------------------------------
@dataclass
class _Meta:
    name: str
    namespace: str
    uid: str
    id: str
    created: datetime | None
    deleted: datetime | None
    """Deletion *request* time: deletionTimestamp minus the grace period."""


def _meta(obj: dict[str, Any]) -> _Meta:
    meta = _dict(obj.get("metadata"), "$.metadata")
    if not meta:
        raise _Bad("missing metadata", "$.metadata")
    path = "$.metadata"
    name = _str(meta, "name", path)
    uid = _str(meta, "uid", path)
    version = _str(meta, "resourceVersion", path)
    if not name:
        raise _Bad("missing name", f"{path}.name")
    if not uid:
        raise _Bad("missing uid (needed for a deterministic id)", f"{path}.uid")
    if not version:
        raise _Bad(
            "missing resourceVersion (needed for a deterministic id)", f"{path}.resourceVersion"
        )
    deleted = _time(meta, "deletionTimestamp", path)
    if deleted is not None:
        deleted -= timedelta(seconds=_int(meta, "deletionGracePeriodSeconds", path))
    return _Meta(
        name=name,
        namespace=_str(meta, "namespace", path),
        uid=uid,
        id=f"k8s:{uid}:{version}",
        created=_time(meta, "creationTimestamp", path),
        deleted=deleted,
    )


def _event_time(meta: _Meta, newest: datetime | None, observed: datetime | None) -> datetime:
    if observed is not None:
        return observed
    time = _newest(newest, meta.created, meta.deleted)
    if time is None:
        raise _Bad("no timestamp in the object and no observation time", "$.metadata")
    return time


# -- pods --------------------------------------------------------------------------
def _resources(
    containers: list[Any], path: str, kind: str, config: SlimConfig
) -> list[dict[str, int]]:
    """GPU ``requests`` or ``limits`` of each container, in order."""
    out: list[dict[str, int]] = []
    for index, raw in enumerate(containers):
        cpath = f"{path}[{index}]"
        container = _dict(raw, cpath)
        resources = _dict(container.get("resources"), f"{cpath}.resources")
        rpath = f"{cpath}.resources.{kind}"
        amounts: dict[str, int] = {}
        for name, value in _dict(resources.get(kind), rpath).items():
            if config.is_gpu_resource(name):
                count = _quantity(value, f"{rpath}['{name}']")
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


def _gpu_amounts(spec: dict[str, Any], kind: str, config: SlimConfig) -> dict[str, int]:
    app = _resources(
        _list(spec.get("containers"), "$.spec.containers"), "$.spec.containers", kind, config
    )
    init = _resources(
        _list(spec.get("initContainers"), "$.spec.initContainers"),
        "$.spec.initContainers",
        kind,
        config,
    )
    return _effective(app, init)


def _termination(raw: object, path: str) -> tuple[Termination, datetime | None]:
    term = _dict(raw, path)
    finished = _time(term, "finishedAt", path)
    started = _time(term, "startedAt", path)
    return (
        Termination(
            reason=_str(term, "reason", path),
            exit_code=_int(term, "exitCode", path),
            finished_at=finished,
            message=_text(term, "message", path),
        ),
        _newest(finished, started),
    )


def _container_status(raw: object, path: str) -> tuple[ContainerStatus, datetime | None]:
    status = _dict(raw, path)
    name = _str(status, "name", path)
    if not name:
        raise _Bad("container status without a name", f"{path}.name")
    state = _dict(status.get("state"), f"{path}.state")
    kind = ""
    reason = ""
    terminated: Termination | None = None
    newest: datetime | None = None
    for key in ("terminated", "waiting", "running"):
        if state.get(key) is not None:
            kind = key
            break
    spath = f"{path}.state.{kind}"
    if kind == "terminated":
        terminated, newest = _termination(state["terminated"], spath)
        reason = terminated.reason
    elif kind == "waiting":
        reason = _str(_dict(state["waiting"], spath), "reason", spath)
    elif kind == "running":
        newest = _time(_dict(state["running"], spath), "startedAt", spath)
    last = _dict(status.get("lastState"), f"{path}.lastState")
    last_terminated: Termination | None = None
    if last.get("terminated") is not None:
        last_terminated, last_time = _termination(
            last["terminated"], f"{path}.lastState.terminated"
        )
        newest = _newest(newest, last_time)
    return (
        ContainerStatus(
            name=name,
            restart_count=_int(status, "restartCount", path),
            state=kind,
            reason=reason,
            terminated=terminated,
            last_terminated=last_terminated,
        ),
        newest,
    )


def _owner(meta_raw: dict[str, Any]) -> tuple[str, str]:
    owners = _list(meta_raw.get("ownerReferences"), "$.metadata.ownerReferences")
    chosen: dict[str, Any] | None = None
    for index, raw in enumerate(owners):
        ref = _dict(raw, f"$.metadata.ownerReferences[{index}]")
        if ref.get("controller") is True:
            chosen = ref
            break
        if chosen is None:
            chosen = ref
    if chosen is None:
        return "", ""
    path = "$.metadata.ownerReferences"
    return _str(chosen, "kind", path), _str(chosen, "name", path)


def _pod(
    obj: dict[str, Any], op: Op, cluster: str, observed: datetime | None, config: SlimConfig
) -> PodEvent:
    meta = _meta(obj)
    spec = _dict(obj.get("spec"), "$.spec")
    status = _dict(obj.get("status"), "$.status")
    newest: datetime | None = None
    containers: list[ContainerStatus] = []
    for key in ("initContainerStatuses", "containerStatuses"):
        path = f"$.status.{key}"
        for index, raw in enumerate(_list(status.get(key), path)):
            container, when = _container_status(raw, f"{path}[{index}]")
            containers.append(container)
            newest = _newest(newest, when)
    scheduled: PodCondition | None = None
    for index, raw in enumerate(_list(status.get("conditions"), "$.status.conditions")):
        path = f"$.status.conditions[{index}]"
        cond = _dict(raw, path)
        newest = _newest(newest, _time(cond, "lastTransitionTime", path))
        if cond.get("type") == "PodScheduled":
            scheduled = PodCondition(
                status=_str(cond, "status", path),
                reason=_str(cond, "reason", path),
                message=_text(cond, "message", path),
            )
    owner_kind, owner_name = _owner(_dict(obj.get("metadata"), "$.metadata"))
    return PodEvent(
        id=meta.id,
        cluster=cluster,
        time=_event_time(meta, newest, observed),
        node=_str(spec, "nodeName", "$.spec"),
        op=op,
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        phase=_str(status, "phase", "$.status"),
        reason=_str(status, "reason", "$.status"),
        message=_text(status, "message", "$.status"),
        gpu_requests=_gpu_amounts(spec, "requests", config),
        gpu_limits=_gpu_amounts(spec, "limits", config),
        owner_kind=owner_kind,
        owner_name=owner_name,
        containers=tuple(containers),
        scheduled=scheduled,
        created_at=meta.created,
        deleted_at=meta.deleted,
    )


# -- nodes -------------------------------------------------------------------------
def _gpu_map(raw: object, path: str, config: SlimConfig) -> dict[str, int]:
    amounts: dict[str, int] = {}
    for name, value in sorted(_dict(raw, path).items()):
        if config.is_gpu_resource(name):
            amounts[name] = _quantity(value, f"{path}['{name}']")
    return amounts


def _node(
    obj: dict[str, Any], op: Op, cluster: str, observed: datetime | None, config: SlimConfig
) -> NodeEvent:
    meta = _meta(obj)
    spec = _dict(obj.get("spec"), "$.spec")
    status = _dict(obj.get("status"), "$.status")
    newest: datetime | None = None
    conditions: list[NodeCondition] = []
    for index, raw in enumerate(_list(status.get("conditions"), "$.status.conditions")):
        path = f"$.status.conditions[{index}]"
        cond = _dict(raw, path)
        newest = _newest(
            newest,
            _time(cond, "lastTransitionTime", path),
            _time(cond, "lastHeartbeatTime", path),
        )
        conditions.append(
            NodeCondition(
                type=_str(cond, "type", path),
                status=_str(cond, "status", path),
                reason=_str(cond, "reason", path),
                message=_text(cond, "message", path),
            )
        )
    raw_labels = _dict(_dict(obj.get("metadata"), "$.metadata").get("labels"), "$.metadata.labels")
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
    for index, raw in enumerate(_list(spec.get("taints"), "$.spec.taints")):
        path = f"$.spec.taints[{index}]"
        taint = _dict(raw, path)
        taints.append(
            Taint(
                key=_str(taint, "key", path),
                value=_str(taint, "value", path),
                effect=_str(taint, "effect", path),
            )
        )
    return NodeEvent(
        id=meta.id,
        cluster=cluster,
        time=_event_time(meta, newest, observed),
        node=meta.name,
        op=op,
        capacity=_gpu_map(status.get("capacity"), "$.status.capacity", config),
        allocatable=_gpu_map(status.get("allocatable"), "$.status.allocatable", config),
        conditions=tuple(conditions),
        labels=dict(sorted(labels.items())),
        taints=tuple(taints),
    )


# -- events ------------------------------------------------------------------------
def _kube_event(obj: dict[str, Any], cluster: str) -> KubeEvent:
    """core/v1 and events.k8s.io/v1 Events; the latter renames most fields."""
    meta = _meta(obj)
    modern = str(obj.get("apiVersion", "")).startswith("events.k8s.io/")
    series = _dict(obj.get("series"), "$.series")
    if modern:
        ref_key, text_key = "regarding", "note"
        source_name = _str(obj, "reportingController", "$")
        host = _str(
            _dict(obj.get("deprecatedSource"), "$.deprecatedSource"), "host", "$.deprecatedSource"
        )
        if not host and source_name == "kubelet":
            host = _str(obj, "reportingInstance", "$")
        count = _int(series, "count", "$.series", _int(obj, "deprecatedCount", "$", 1))
        time = (
            _newest(
                _time(series, "lastObservedTime", "$.series"),
                _time(obj, "deprecatedLastTimestamp", "$"),
            )
            or _time(obj, "eventTime", "$")
            or _time(obj, "deprecatedFirstTimestamp", "$")
        )
    else:
        ref_key, text_key = "involvedObject", "message"
        source = _dict(obj.get("source"), "$.source")
        source_name = _str(source, "component", "$.source") or _str(obj, "reportingComponent", "$")
        host = _str(source, "host", "$.source")
        count = _int(obj, "count", "$", 0) or _int(series, "count", "$.series", 1)
        time = (
            _time(obj, "lastTimestamp", "$")
            or _time(series, "lastObservedTime", "$.series")
            or _time(obj, "eventTime", "$")
            or _time(obj, "firstTimestamp", "$")
        )
    time = time or meta.created
    if time is None:
        raise _Bad("event without any timestamp", "$.lastTimestamp")
    ref_path = f"$.{ref_key}"
    ref = _dict(obj.get(ref_key), ref_path)
    involved = ObjectRef(
        kind=_str(ref, "kind", ref_path),
        name=_str(ref, "name", ref_path),
        namespace=_str(ref, "namespace", ref_path),
        uid=_str(ref, "uid", ref_path),
    )
    reason = _str(obj, "reason", "$")
    if not reason:
        raise _Bad("event without a reason", "$.reason")
    return KubeEvent(
        id=meta.id,
        cluster=cluster,
        time=time,
        node=involved.name if involved.kind == "Node" else host,
        reason=reason,
        message=_text(obj, text_key, "$"),
        type=_str(obj, "type", "$") or "Normal",
        involved=involved,
        source=source_name,
        count=count,
    )


# -- entry points ------------------------------------------------------------------
def slim_object(
    obj: object,
    op: Op = "added",
    *,
    cluster: str,
    observed: datetime | None = None,
    config: SlimConfig = DEFAULT_CONFIG,
) -> Slimmed:
    """One raw Pod, Node or Event object to its typed event, or a RecordError.

    ``observed`` (aware datetime) is the live connector's receive time; pass
    ``None`` offline to take the newest change timestamp in the object (see the
    module docstring for why that can look late). Event objects always use
    their own timestamps.
    """
    try:
        body = _dict(obj, "$")
        kind = body.get("kind")
        if kind == "Pod":
            return _pod(body, op, cluster, observed, config)
        if kind == "Node":
            return _node(body, op, cluster, observed, config)
        if kind == "Event":
            return _kube_event(body, cluster)
        if kind is None:
            return RecordError("object without a kind", "$.kind")
        return RecordError(f"unsupported kind {str(kind)[:40]!r}", "$.kind")
    except _Bad as bad:
        return RecordError(bad.reason, bad.field)
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        # Defence in depth: a shape no check above foresaw is still a value, not a crash.
        return RecordError(f"unexpected shape: {exc}")


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
        return RecordError(f"expected a watch event object, got {_type_name(envelope)}", "$")
    kind = envelope.get("type")
    if kind == "BOOKMARK":
        return None
    if kind == "ERROR":
        status = envelope.get("object")
        status = status if isinstance(status, dict) else {}
        code = status.get("code", "")
        text = f"watch error {code}: {status.get('reason', '')}: {status.get('message', '')}"
        return RecordError(text, "$.object")
    op = WATCH_OPS.get(kind) if isinstance(kind, str) else None
    if op is None:
        return RecordError(f"unknown watch event type {str(kind)[:40]!r}", "$.type")
    return slim_object(
        envelope.get("object"), op, cluster=cluster, observed=observed, config=config
    )


# -- GPU-only filters --------------------------------------------------------------
def is_gpu_pod(event: PodEvent) -> bool:
    """A pod that requests (or only limits) any configured GPU resource."""
    return bool(event.gpu_requests or event.gpu_limits)


def is_gpu_node(event: NodeEvent) -> bool:
    """A node with any GPU capacity (a node whose GPUs all went unhealthy still qualifies)."""
    return any(count > 0 for count in event.capacity.values())
