"""Slim the DRA kinds (``resource.k8s.io``): ResourceSlice, ResourceClaim, ResourceClaimTemplate
and DeviceTaintRule, raw dicts to typed records, errors as values (as :mod:`.slim` does).

Only GPU drivers' slices give a record (the others give ``None``); templates and rules give
the join's cache records (:class:`~connectors.k8s.dra.ClaimTemplate`,
:class:`~connectors.k8s.dra.TaintRule`), never published. Ids are ``k8s:<uid>:<rv>``,
times as for pods (the receive time live, the newest timestamp in the object offline).

Traps: attribute values are a typed union (``{"string": ..}``, ``{"int": ..}``,
``{"bool": ..}``, ``{"version": ..}``) and a name may be qualified by the driver's domain
(``gpu.nvidia.com/uuid``); the bus id is the standard ``resource.kubernetes.io/pciBusID``
(older NVIDIA drivers: ``pcieBusID``); a request is v1's ``exactly`` / ``firstAvailable``
or, before v1, flat (``deviceClassName`` on the request); a v1beta1 device nests its
fields under ``basic``; a claim's node is only in its allocation's ``nodeSelector``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from connectors.k8s.dra import ClaimTemplate, TaintRule
from connectors.k8s.slim import (
    SlimConfig,
    _Bad,
    _conditions,
    _event_time,
    _identity,
    _MetaView,
    _newest,
    _no_metadata,
    _NodeConditionView,
    _TaintView,
    _time,
    _View,
    _worded,
)
from schemas import codec
from schemas.codec import RecordError
from schemas.events import (
    MAX_SLICE_DEVICES,
    ClaimDevice,
    ClaimDeviceStatus,
    ClaimRequest,
    DeviceTaint,
    PodRef,
    ResourceClaimEvent,
    ResourceSliceEvent,
    SliceDevice,
)
from schemas.pci import canonical_bus_id
from schemas.types import MAX_NODE_PODS, Op

BUS_ID_ATTRIBUTES: Final = ("resource.kubernetes.io/pciBusID", "pciBusID", "pcieBusID")
"""The bus id's attribute names, preferred first: the standard one, then NVIDIA's older."""

DraSlimmed = ResourceSliceEvent | ResourceClaimEvent | ClaimTemplate | TaintRule


# -- views -------------------------------------------------------------------------------
class _AttributeView(_View, rename={"text": "string", "number": "int", "flag": "bool"}):
    text: Any = None
    number: Any = None
    flag: Any = None
    version: Any = None


class _DeviceTaintView(_TaintView):
    time_added: str | None = None


class _BasicDeviceView(_View):
    attributes: dict[str, _AttributeView | None] | None = None
    taints: list[_DeviceTaintView | None] | None = None


class _DeviceView(_BasicDeviceView):
    name: str | None = None
    basic: _BasicDeviceView | None = None
    """v1beta1 nests a device's fields here."""


class _PoolView(_View):
    name: str | None = None
    generation: int | None = None
    resource_slice_count: int | None = None


class _SliceSpecView(_View):
    driver: str | None = None
    pool: _PoolView | None = None
    node_name: str | None = None
    devices: list[_DeviceView | None] | None = None


class _SliceView(_View):
    metadata: _MetaView | None = None
    spec: _SliceSpecView | None = None


class _ExactView(_View):
    device_class_name: str | None = None
    allocation_mode: str | None = None
    count: int | None = None
    admin_access: Any = None
    """``True``: administrative access (a monitor's), which holds nothing (:func:`_request`)."""


class _SubRequestView(_ExactView):
    name: str | None = None


class _RequestView(_SubRequestView):
    """v1: ``exactly`` or ``firstAvailable``; before: the ``_ExactView`` fields flat."""

    exactly: _ExactView | None = None
    first_available: list[_SubRequestView | None] | None = None


class _DevicesSpecView(_View):
    requests: list[_RequestView | None] | None = None


class _ClaimSpecView(_View):
    devices: _DevicesSpecView | None = None


class _ResultView(_View):
    request: str | None = None
    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    admin_access: Any = None
    """``True``: allocated for administrative access, not held (:func:`_claim`)."""


class _FieldRequirementView(_View):
    key: str | None = None
    operator: str | None = None
    values: list[str | None] | None = None


class _TermView(_View):
    match_fields: list[_FieldRequirementView | None] | None = None


class _NodeSelectorView(_View):
    node_selector_terms: list[_TermView | None] | None = None


class _AllocatedDevicesView(_View):
    results: list[_ResultView | None] | None = None


class _AllocationView(_View):
    devices: _AllocatedDevicesView | None = None
    node_selector: _NodeSelectorView | None = None


class _ConsumerView(_View):
    api_group: str | None = None
    resource: str | None = None
    name: str | None = None


class _DeviceStatusView(_View):
    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    conditions: list[_NodeConditionView | None] | None = None


class _ClaimStatusView(_View):
    allocation: _AllocationView | None = None
    reserved_for: list[_ConsumerView | None] | None = None
    devices: list[_DeviceStatusView | None] | None = None


class _ClaimView(_View):
    metadata: _MetaView | None = None
    spec: _ClaimSpecView | None = None
    status: _ClaimStatusView | None = None


class _TemplateSpecView(_View):
    spec: _ClaimSpecView | None = None


class _TemplateView(_View):
    metadata: _MetaView | None = None
    spec: _TemplateSpecView | None = None


class _SelectorView(_View):
    driver: str | None = None
    pool: str | None = None
    device: str | None = None
    device_class_name: str | None = None
    selectors: list[Any] | None = None


class _RuleSpecView(_View):
    device_selector: _SelectorView | None = None
    taint: _DeviceTaintView | None = None


class _RuleView(_View):
    metadata: _MetaView | None = None
    spec: _RuleSpecView | None = None


_EMPTY_DEVICE: Final = _DeviceView()
_EMPTY_ATTRIBUTE: Final = _AttributeView()


# -- helpers -----------------------------------------------------------------------------
def _attribute_text(value: _AttributeView | None) -> str:
    """An attribute's value as text, whichever member of the union it is."""
    value = value or _EMPTY_ATTRIBUTE
    for member in (value.text, value.version):
        if isinstance(member, str):
            return member
    if isinstance(value.flag, bool):
        return "true" if value.flag else "false"
    if isinstance(value.number, int):
        return str(value.number)
    return ""


def _attribute(attributes: dict[str, _AttributeView | None], driver: str, *names: str) -> str:
    """The first of ``names`` present, unqualified or qualified by the driver's domain."""
    for name in names:
        for key in (name, f"{driver}/{name}"):
            if key in attributes:
                text = _attribute_text(attributes[key])
                if text:
                    return text
    return ""


def _taints(raw: list[_DeviceTaintView | None] | None, rule: str = "") -> tuple[DeviceTaint, ...]:
    taints: list[DeviceTaint] = []
    for index, entry in enumerate(raw or ()):
        if entry is None:
            continue
        try:
            added = _time(entry.time_added, ".timeAdded")
        except _Bad as bad:
            raise bad.within(f"[{index}]") from None
        taints.append(
            DeviceTaint(
                key=entry.key or "",
                value=entry.value or "",
                effect=entry.effect or "",
                time_added=added,
                rule=rule,
            )
        )
    return tuple(taints)


def _device(
    raw: _DeviceView | None, driver: str, index: int
) -> tuple[SliceDevice, datetime | None]:
    device = raw or _EMPTY_DEVICE
    basic = device.basic or device
    if not device.name:
        raise _Bad("device without a name", f"$.spec.devices[{index}].name")
    attributes = basic.attributes or {}
    try:
        taints = _taints(basic.taints)
    except _Bad as bad:
        where = ".basic.taints" if device.basic is not None else ".taints"
        raise bad.within(f"$.spec.devices[{index}]{where}") from None
    kind = _attribute(attributes, driver, "type")
    mig = kind == "mig"
    return (
        SliceDevice(
            name=device.name,
            uuid=_attribute(attributes, driver, "uuid"),
            pci_bus_id=canonical_bus_id(_attribute(attributes, driver, *BUS_ID_ATTRIBUTES)),
            product=_attribute(attributes, driver, "productName"),
            type=kind,
            parent_uuid=_attribute(attributes, driver, "parentUUID"),
            mig_profile=_attribute(attributes, driver, "profile") if mig else "",
            taints=taints,
        ),
        _newest(*(t.time_added for t in taints)),
    )


def _slice(
    view: _SliceView, op: Op, cluster: str, observed: datetime | None, config: SlimConfig
) -> ResourceSliceEvent | None:
    spec = view.spec or _SliceSpecView()
    driver = spec.driver or ""
    if driver not in config.gpu_drivers:
        return None
    meta = _identity(view.metadata or _no_metadata())
    pool = spec.pool or _PoolView()
    if not pool.name:
        raise _Bad("slice without a pool name", "$.spec.pool.name")
    devices: list[SliceDevice] = []
    newest: datetime | None = None
    for index, raw in enumerate((spec.devices or ())[:MAX_SLICE_DEVICES]):
        device, when = _device(raw, driver, index)
        devices.append(device)
        newest = _newest(newest, when)
    return ResourceSliceEvent(
        id=meta.id,
        cluster=cluster,
        time=_event_time(meta, newest, observed),
        node=spec.node_name or "",
        op=op,
        name=meta.name,
        driver=driver,
        pool=pool.name,
        generation=max(pool.generation or 0, 0),
        slice_count=max(pool.resource_slice_count or 1, 1),
        devices=tuple(devices),
        resource_version=meta.version,
    )


def _request(raw: _RequestView, index: int, classes: tuple[str, ...]) -> ClaimRequest:
    """One request: ``exactly``, the first GPU one of ``firstAvailable``, or flat."""
    if not raw.name:
        raise _Bad("request without a name", f"[{index}].name")
    chosen: _ExactView = raw
    if raw.exactly is not None:
        chosen = raw.exactly
    elif raw.first_available:
        options = [s for s in raw.first_available if s is not None]
        gpu = [s for s in options if s.device_class_name in classes]
        chosen = (gpu or options or [raw])[0]
    count = 0 if chosen.allocation_mode == "All" else chosen.count or 1
    if chosen.admin_access is True:
        # Administrative access "for monitoring or other management services", which
        # ignores every ordinary claim to the device (resource.k8s.io/v1): the GPU
        # operator's DRA dcgm-exporter asks every GPU of its node so. It holds no GPU.
        count = 0
    return ClaimRequest(name=raw.name, device_class=chosen.device_class_name or "", count=count)


def requests_of(
    spec: _ClaimSpecView | None, path: str, config: SlimConfig
) -> tuple[ClaimRequest, ...]:
    """A claim spec's requests (``path``: where the spec is, for errors)."""
    devices = None if spec is None else spec.devices
    out: list[ClaimRequest] = []
    for index, raw in enumerate((None if devices is None else devices.requests) or ()):
        if raw is None:
            continue
        try:
            out.append(_request(raw, index, config.gpu_classes))
        except _Bad as bad:
            raise bad.within(f"{path}.devices.requests") from None
    return tuple(out)


def _allocated_node(allocation: _AllocationView) -> str:
    """The node of a node-local allocation: ``matchFields`` ``metadata.name In [node]``."""
    selector = allocation.node_selector
    for term in (None if selector is None else selector.node_selector_terms) or ():
        for field in (None if term is None else term.match_fields) or ():
            if field is None or field.key != "metadata.name" or field.operator != "In":
                continue
            values = [v for v in field.values or () if v]
            if len(values) == 1:
                return values[0]
    return ""


def _claim(
    view: _ClaimView, op: Op, cluster: str, observed: datetime | None, config: SlimConfig
) -> ResourceClaimEvent:
    meta = _identity(view.metadata or _no_metadata())
    status = view.status or _ClaimStatusView()
    requests = requests_of(view.spec, "$.spec", config)
    allocation = status.allocation
    devices: list[ClaimDevice] = []
    node = ""
    if allocation is not None:
        node = _allocated_node(allocation)
        results = None if allocation.devices is None else allocation.devices.results
        for index, result in enumerate(results or ()):
            if result is None or result.admin_access is True:
                continue  # administrative access holds nothing (see _request)
            if not (result.driver and result.pool and result.device):
                field = f"$.status.allocation.devices.results[{index}]"
                raise _Bad("allocation result without driver, pool and device", field)
            devices.append(
                ClaimDevice(
                    request=result.request or "",
                    driver=result.driver,
                    pool=result.pool,
                    device=result.device,
                )
            )
    reserved = tuple(
        PodRef(namespace=meta.namespace, name=c.name)
        for c in status.reserved_for or ()
        if c is not None and c.name and c.resource == "pods" and not c.api_group
    )[:MAX_NODE_PODS]
    newest: datetime | None = None
    statuses: list[ClaimDeviceStatus] = []
    for index, raw in enumerate(status.devices or ()):
        if raw is None:
            continue
        conditions, changed = _conditions(raw.conditions, f"$.status.devices[{index}].conditions")
        newest = _newest(newest, changed)
        statuses.append(
            ClaimDeviceStatus(
                driver=raw.driver or "",
                pool=raw.pool or "",
                device=raw.device or "",
                conditions=conditions,
            )
        )
    allocated = sum(1 for d in devices if d.driver in config.gpu_drivers)
    requested = sum(r.count for r in requests if r.device_class in config.gpu_classes)
    return ResourceClaimEvent(
        id=meta.id,
        cluster=cluster,
        time=_event_time(meta, newest, observed),
        node=node,
        op=op,
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        requests=requests,
        devices=tuple(devices),
        reserved_for=reserved,
        device_status=tuple(statuses),
        gpus=allocated or requested,
        resource_version=meta.version,
    )


def _template(
    view: _TemplateView, op: Op, observed: datetime | None, config: SlimConfig
) -> ClaimTemplate:
    meta = _identity(view.metadata or _no_metadata())
    spec = view.spec or _TemplateSpecView()
    return ClaimTemplate(
        id=meta.id,
        time=_event_time(meta, None, observed),
        op=op,
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.version,
        requests=requests_of(spec.spec, "$.spec.spec", config),
    )


def _rule(view: _RuleView, op: Op, observed: datetime | None) -> TaintRule:
    meta = _identity(view.metadata or _no_metadata())
    spec = view.spec or _RuleSpecView()
    selector = spec.device_selector or _SelectorView()
    if spec.taint is None:
        raise _Bad("rule without a taint", "$.spec.taint")
    try:
        (taint,) = _taints([spec.taint], rule=meta.name)
    except _Bad as bad:
        raise bad.within("$.spec.taint") from None
    return TaintRule(
        id=meta.id,
        time=_event_time(meta, taint.time_added, observed),
        op=op,
        name=meta.name,
        uid=meta.uid,
        resource_version=meta.version,
        driver=selector.driver or "",
        pool=selector.pool or "",
        device=selector.device or "",
        exact=not (selector.device_class_name or selector.selectors),
        taint=taint,
    )


_VIEWS: Final[dict[str, type[_SliceView | _ClaimView | _TemplateView | _RuleView]]] = {
    "ResourceSlice": _SliceView,
    "ResourceClaim": _ClaimView,
    "ResourceClaimTemplate": _TemplateView,
    "DeviceTaintRule": _RuleView,
}


def slim_dra(
    obj: dict[str, Any],
    kind: str,
    op: Op,
    *,
    cluster: str,
    observed: datetime | None,
    config: SlimConfig,
) -> DraSlimmed | RecordError | None:
    """One raw DRA object of ``kind`` (one of :data:`DRA_KINDS`) to its record, or an error;
    ``None`` for a slice of a driver that is not a GPU one."""
    try:
        view = codec.convert_as(obj, _VIEWS[kind])
    except RecordError as exc:
        return _worded(exc)
    try:
        if isinstance(view, _SliceView):
            event: ResourceSliceEvent | ResourceClaimEvent | None = _slice(
                view, op, cluster, observed, config
            )
        elif isinstance(view, _ClaimView):
            event = _claim(view, op, cluster, observed, config)
        elif isinstance(view, _TemplateView):
            return _template(view, op, observed, config)
        else:
            return _rule(view, op, observed)
    except _Bad as bad:
        return RecordError(bad.reason, bad.field)
    except RecursionError:
        return RecordError("arrays or objects nested too deep to read")
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        return RecordError(f"unexpected shape: {exc}")
    return None if event is None else codec.checked(event)
