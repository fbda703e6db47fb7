"""The DRA join: ResourceSlices, ResourceClaims, their templates and DeviceTaintRules, as the
records the core reads (effective slice taints, pods' claims resolved, DRA bindings).

The core never re-joins claims: fed every watched object in watch order, this class says
what to publish for it. Pure and deterministic (no clock, no I/O); any order of the same
objects ends in the same bindings. It holds GPU objects only, and forgets deleted ones.

Traps: a device is named by (driver, pool, device), never by its name alone; a slice may
be missing while its claims hold devices (a DRA plugin restart republishes it), so a
binding is never dropped for that, and a claim seen before its slice waits for it; a
binding changes on a claim's allocation or ``reservedFor`` only (bind, rebind, unbind with
``pods=()``), and its id names the object that caused it, so no two differing records
share an id; a rule's selector this class cannot evaluate (CEL, a device class) is not
applied (a guess would taint every GPU).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Final

import msgspec

from schemas.events import (
    ClaimRequest,
    DeviceHealth,
    DeviceTaint,
    GpuBindingEvent,
    PodClaim,
    PodEvent,
    PodRef,
    ResourceClaimEvent,
    ResourceSliceEvent,
    SliceDevice,
)
from schemas.ids import k8s_event_id
from schemas.keys import DRA
from schemas.types import MAX_NODE_PODS, Op

if TYPE_CHECKING:
    from connectors.k8s.slim import SlimConfig

CLAIM_RESOURCE: Final = "claim:"
"""How the kubelet names a DRA claim's devices in ``allocatedResourcesStatus``:
``claim:<pod claim name>/<request>``."""


class ClaimTemplate(msgspec.Struct, frozen=True, kw_only=True):
    """A ResourceClaimTemplate, slimmed to what a pod's claim made from it asks for.

    Never published: the join reads it to count a pod's GPUs before its claim exists.
    ``id``/``time``/``op``/``resource_version`` as on the records, so the watcher's
    bookkeeping (repeats, deletions seen by absence) treats it like one.
    """

    id: str
    time: datetime
    op: Op = "modified"
    namespace: str
    name: str
    uid: str = ""
    resource_version: int = 0
    requests: tuple[ClaimRequest, ...] = ()


class TaintRule(msgspec.Struct, frozen=True, kw_only=True):
    """A DeviceTaintRule (``resource.k8s.io`` v1beta2 or v1alpha3), slimmed to its selector
    and taint. Never published itself: it changes the slices it selects."""

    id: str
    time: datetime
    op: Op = "modified"
    name: str
    uid: str = ""
    resource_version: int = 0
    driver: str = ""
    """Selector fields; empty selects any."""
    pool: str = ""
    device: str = ""
    exact: bool = True
    """False when the selector also has a device class or CEL selectors (v1alpha3): the
    rule is then not applied."""
    taint: DeviceTaint

    def selects(self, driver: str, pool: str, device: str) -> bool:
        """Whether the rule taints the device ``driver``/``pool``/``device``."""
        return (
            self.exact
            and self.driver in ("", driver)
            and self.pool in ("", pool)
            and self.device in ("", device)
        )


Joined = PodEvent | ResourceSliceEvent | ResourceClaimEvent | GpuBindingEvent
"""What the join publishes."""
DeviceKey = tuple[str, str, str]
"""(driver, pool, device): a DRA device's identity."""


@dataclass(frozen=True, slots=True)
class _Found:
    node: str
    device: SliceDevice


def _version_text(event: ResourceClaimEvent | ResourceSliceEvent) -> str:
    return str(event.resource_version) if event.resource_version else event.id.rpartition(":")[2]


def is_gpu_claim(claim: ResourceClaimEvent, drivers: Iterable[str]) -> bool:
    """Asks for GPUs (``gpus``: a GPU class) or was allocated a GPU driver's device."""
    return claim.gpus > 0 or any(d.driver in drivers for d in claim.devices)


def gpu_request(requests: Iterable[ClaimRequest], classes: frozenset[str]) -> ClaimRequest | None:
    """The first request of a GPU device class."""
    return next((r for r in requests if r.device_class in classes), None)


class DraJoin:
    """Holds slices, claims, templates and rules; :meth:`on` gives the records to publish."""

    def __init__(self, config: SlimConfig) -> None:
        self._drivers = frozenset(config.gpu_drivers)
        self._classes = frozenset(config.gpu_classes)
        self._slices: dict[str, ResourceSliceEvent] = {}
        """uid -> the slice as slimmed (its own taints)."""
        self._pools: dict[tuple[str, str], set[str]] = {}
        """(driver, pool) -> uids of its slices."""
        self._claims: dict[str, ResourceClaimEvent] = {}
        """uid -> GPU claim."""
        self._claim_names: dict[tuple[str, str], str] = {}
        """(namespace, name) -> uid."""
        self._holders: dict[DeviceKey, set[str]] = {}
        """device -> uids of the claims allocated it."""
        self._templates: dict[tuple[str, str], ClaimTemplate] = {}
        self._rules: dict[str, TaintRule] = {}
        self._bound: dict[DeviceKey, GpuBindingEvent] = {}
        """device -> the last binding published with pods (an unbind removes it)."""
        self._published: dict[str, int] = {}
        """slice uid -> the newest version published of it (rules re-emit it newer)."""

    def __len__(self) -> int:
        """Objects held (slices, claims, templates, rules, bindings): for bounds in tests."""
        return (
            len(self._slices)
            + len(self._claims)
            + len(self._templates)
            + len(self._rules)
            + len(self._bound)
            + len(self._holders)
            + len(self._published)
        )

    # -- the entry point ---------------------------------------------------------------
    def on(
        self, record: PodEvent | ResourceSliceEvent | ResourceClaimEvent | ClaimTemplate | TaintRule
    ) -> list[Joined]:
        """The records to publish for one watched object (a pod: itself, resolved)."""
        if isinstance(record, PodEvent):
            return [self.pod(record)]
        if isinstance(record, ResourceSliceEvent):
            return self.slice(record)
        if isinstance(record, ResourceClaimEvent):
            return self.claim(record)
        if isinstance(record, ClaimTemplate):
            self.template(record)
            return []
        return list(self.rule(record))

    def is_gpu_claim(self, claim: ResourceClaimEvent) -> bool:
        """Asks for GPUs (a GPU class) or was allocated a GPU driver's device."""
        return is_gpu_claim(claim, self._drivers)

    # -- pods ----------------------------------------------------------------------------
    def pod(self, event: PodEvent) -> PodEvent:
        """``event`` with its claims' GPUs resolved (from the claim, else its template) and
        only the GPU claims' devices kept in its containers' health."""
        if not event.claims and not any(c.devices for c in event.containers):
            return event
        claims = tuple(self._resolved(event.namespace, claim) for claim in event.claims)
        gpu_claims = {c.name for c in claims if c.gpus > 0}
        containers = tuple(
            msgspec.structs.replace(c, devices=kept)
            if (kept := _gpu_devices(c.devices, gpu_claims)) != c.devices
            else c
            for c in event.containers
        )
        if claims == event.claims and containers == event.containers:
            return event
        return msgspec.structs.replace(event, claims=claims, containers=containers)

    def _resolved(self, namespace: str, claim: PodClaim) -> PodClaim:
        requests: tuple[ClaimRequest, ...] | None = None
        gpus = 0
        uid = self._claim_names.get((namespace, claim.claim)) if claim.claim else None
        if uid is not None:
            known = self._claims[uid]
            requests, gpus = known.requests, known.gpus
        elif claim.template:
            template = self._templates.get((namespace, claim.template))
            if template is not None:
                requests = template.requests
                gpus = sum(r.count for r in requests if r.device_class in self._classes)
        if requests is None:
            return claim
        first = gpu_request(requests, self._classes)
        device_class = "" if first is None else first.device_class
        return msgspec.structs.replace(claim, gpus=gpus, device_class=device_class)

    # -- templates ---------------------------------------------------------------------
    def template(self, template: ClaimTemplate) -> None:
        """Remember a GPU template (forget it when deleted or not one)."""
        key = (template.namespace, template.name)
        known = self._templates.get(key)
        if template.op == "deleted" or gpu_request(template.requests, self._classes) is None:
            if known is not None and known.uid == template.uid:
                del self._templates[key]
            return
        self._templates[key] = template

    # -- slices ------------------------------------------------------------------------
    def slice(self, event: ResourceSliceEvent) -> list[Joined]:
        """The slice with its effective taints, and the bindings it completes."""
        if event.driver not in self._drivers:
            return []
        pool = (event.driver, event.pool)
        if event.op == "deleted":
            self._slices.pop(_uid(event), None)
            self._published.pop(_uid(event), None)
            uids = self._pools.get(pool)
            if uids is not None:
                uids.discard(_uid(event))
                if not uids:
                    del self._pools[pool]
            return [self._effective(event)]
        uid = _uid(event)
        self._slices[uid] = event
        self._published[uid] = max(self._published.get(uid, 0), event.resource_version)
        self._pools.setdefault(pool, set()).add(uid)
        out: list[Joined] = [self._effective(event)]
        for device in event.devices:
            key = (event.driver, event.pool, device.name)
            if key in self._holders:
                out.extend(self._rebind(key, event.cluster, uid, event))
        return out

    def _find(self, key: DeviceKey) -> _Found | None:
        """The device in its pool's newest-generation slice that has it."""
        best: ResourceSliceEvent | None = None
        found: SliceDevice | None = None
        for uid in sorted(self._pools.get((key[0], key[1]), ())):
            candidate = self._slices[uid]
            if best is not None and candidate.generation <= best.generation:
                continue
            device = next((d for d in candidate.devices if d.name == key[2]), None)
            if device is not None:
                best, found = candidate, device
        if best is None or found is None:
            return None
        return _Found(best.node, found)

    def _rule_taints(self, driver: str, pool: str, device: str) -> list[DeviceTaint]:
        rules = sorted(self._rules.values(), key=lambda r: r.name)
        return [r.taint for r in rules if r.selects(driver, pool, device)]

    def _effective(self, event: ResourceSliceEvent) -> ResourceSliceEvent:
        """The slice with the taints of the rules selecting its devices added."""
        if not self._rules:
            return event
        devices = tuple(
            msgspec.structs.replace(d, taints=(*d.taints, *extra))
            if (extra := self._rule_taints(event.driver, event.pool, d.name))
            else d
            for d in event.devices
        )
        if devices == event.devices:
            return event
        return msgspec.structs.replace(event, devices=devices)

    # -- rules -------------------------------------------------------------------------
    def rule(self, rule: TaintRule) -> list[ResourceSliceEvent]:
        """The slices whose effective taints the rule's change touches, re-emitted.

        A re-emitted slice's version is the newer of its own and the rule's (etcd's
        revision counts across objects: a rule written after the slice makes it newer
        than any record of the slice before, and older than its next change), and its
        time the rule's. Trap: a rule older than the slice (seen late, as in a file)
        keeps the newest version published, so the id names the rule too.
        """
        old = self._rules.pop(rule.uid, None)
        if rule.op != "deleted" and rule.exact and rule.driver in ("", *self._drivers):
            self._rules[rule.uid] = rule
        touched: list[ResourceSliceEvent] = []
        for uid in sorted(self._slices):
            event = self._slices[uid]
            if any(
                (old is not None and old.selects(event.driver, event.pool, d.name))
                or rule.selects(event.driver, event.pool, d.name)
                for d in event.devices
            ):
                touched.append(event)
        out: list[ResourceSliceEvent] = []
        for event in touched:
            uid = _uid(event)
            before = max(event.resource_version, self._published.get(uid, 0))
            version = max(before, rule.resource_version)
            record_id = k8s_event_id(uid, str(version))
            if version == before:  # an older rule: that version's id is taken
                record_id = f"{record_id}:rule:{rule.uid}:{rule.resource_version}"
            self._published[uid] = version
            out.append(
                msgspec.structs.replace(
                    self._effective(event),
                    id=record_id,
                    time=max(event.time, rule.time),
                    op="modified",
                    resource_version=version,
                )
            )
        return out

    # -- claims and bindings ---------------------------------------------------------------
    def claim(self, event: ResourceClaimEvent) -> list[Joined]:
        """The claim, and the bindings its change makes (bind, rebind, unbind)."""
        old = self._claims.pop(event.uid, None)
        if old is not None:
            self._forget_holder(old)
        if event.op != "deleted" and self.is_gpu_claim(event):
            self._claims[event.uid] = event
            self._claim_names[(event.namespace, event.name)] = event.uid
            for key in self._gpu_devices(event):
                self._holders.setdefault(key, set()).add(event.uid)
        touched = set(self._gpu_devices(event))
        if old is not None:
            touched.update(self._gpu_devices(old))
        out: list[Joined] = [event]
        for key in sorted(touched):
            out.extend(self._rebind(key, event.cluster, event.uid, event))
        return out

    def _gpu_devices(self, claim: ResourceClaimEvent) -> list[DeviceKey]:
        return [(d.driver, d.pool, d.device) for d in claim.devices if d.driver in self._drivers]

    def _forget_holder(self, claim: ResourceClaimEvent) -> None:
        name = (claim.namespace, claim.name)
        if self._claim_names.get(name) == claim.uid:
            del self._claim_names[name]
        for key in self._gpu_devices(claim):
            holders = self._holders.get(key)
            if holders is not None:
                holders.discard(claim.uid)
                if not holders:
                    del self._holders[key]

    def _rebind(
        self,
        key: DeviceKey,
        cluster: str,
        cause_uid: str,
        cause: ResourceClaimEvent | ResourceSliceEvent,
    ) -> list[GpuBindingEvent]:
        """The binding record for ``key`` if its holders changed since the last one."""
        holders = [self._claims[uid] for uid in sorted(self._holders.get(key, ()))]
        pods = sorted(
            {PodRef(namespace=c.namespace, name=p.name) for c in holders for p in c.reserved_for},
            key=lambda p: (p.namespace, p.name),
        )[:MAX_NODE_PODS]
        bound = self._bound.get(key)
        node = "" if bound is None else bound.node
        identity = None if bound is None else bound
        found = self._find(key)
        if not pods:
            if bound is None:
                return []
            del self._bound[key]
            record = msgspec.structs.replace(bound, pods=(), claims=(), shared=False)
        else:
            claims = tuple(sorted({f"{c.namespace}/{c.name}" for c in holders if c.reserved_for}))
            if found is not None:
                node = found.node
                identity = _binding_identity(found, key[2], cluster)
            if identity is None:
                return []  # no slice names the device yet: the slice completes the join
            record = msgspec.structs.replace(
                identity,
                node=node,
                pods=tuple(pods),
                claims=claims,
                shared=len(pods) > 1,
            )
            if bound is not None and _same(bound, record):
                return []
        record = msgspec.structs.replace(
            record,
            id=f"dra:{record.node}:{key[2]}:{cause_uid}:{_version_text(cause)}",
            time=cause.time,
            cluster=cluster,
        )
        if record.pods:
            self._bound[key] = record
        return [record]


def _uid(event: ResourceSliceEvent) -> str:
    """A slice's uid, from its id ``k8s:<uid>:<resourceVersion>``."""
    return event.id.split(":")[1] if event.id.startswith("k8s:") else event.name


def _binding_identity(found: _Found, device: str, cluster: str) -> GpuBindingEvent:
    """A binding naming the slice's device, without pods yet (id and time set later)."""
    d = found.device
    mig = d.type == "mig" or bool(d.parent_uuid)
    return GpuBindingEvent(
        id="",
        cluster=cluster,
        time=datetime.min,
        node=found.node,
        gpu_uuid=d.parent_uuid if mig else d.uuid,
        pci_bus_id=d.pci_bus_id,
        device=device,
        mig_profile=d.mig_profile if mig else "",
        mig_uuid=d.uuid if mig else "",
        pods_known=True,
        source=DRA,
    )


def _same(a: GpuBindingEvent, b: GpuBindingEvent) -> bool:
    """Equal but for id and time: nothing to publish."""
    return msgspec.structs.replace(b, id=a.id, time=a.time) == a


def _gpu_devices(
    devices: tuple[DeviceHealth, ...], gpu_claims: set[str]
) -> tuple[DeviceHealth, ...]:
    """The devices of GPU resources and of GPU claims (``claim:<name>/<request>``)."""
    return tuple(
        d
        for d in devices
        if not d.resource.startswith(CLAIM_RESOURCE)
        or d.resource[len(CLAIM_RESOURCE) :].partition("/")[0] in gpu_claims
    )
