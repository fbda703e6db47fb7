"""List-then-watch over the Kubernetes API, as an async iterator of typed events with a checkpoint.

One :class:`ResourceWatcher` follows one resource (pods, nodes or core/v1 Events) as
client-go's reflector does: list (paginated), diff with what was known, watch from the
list's resourceVersion with bookmarks; on 410 Gone list again (the diff emits deletions
too); after a silence watch again, after errors back off first. It yields :class:`Emitted`,
:class:`Rejected` (dead letters) and :class:`Synced`; the checkpoint lives in memory only.

Traps: no client models on the hot path (raw responses, ~15x cheaper); lines are split
here from raw chunks (aiohttp's ``readline`` raises on long ones); listed objects are
stamped with their own newest time, so a relist re-emits the same events; deleted Events
are never emitted; errors are values; repeats of the last published record are dropped;
events.k8s.io/v1 is not watched (it would double every Event). In full, with restarts:
docs/connectors.md, design notes: connectors/k8s/watch.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

import aiohttp
from kubernetes_asyncio.client import (
    ApiClient,
    CoreV1Api,
    ResourceV1alpha3Api,
    ResourceV1Api,
    ResourceV1beta2Api,
)

from connectors.backoff import Backoff, retry_after_seconds
from connectors.health import Condition
from connectors.k8s.dra import ClaimTemplate, DraJoin, TaintRule
from connectors.k8s.metrics import ConnectorMetrics
from connectors.k8s.relist import Known, Tracked, deletion, diff, identity, repeated
from connectors.k8s.settings import K8sSettings
from connectors.k8s.slim import DEFAULT_CONFIG, WATCH_OPS, SlimConfig, Slimmed, slim_object
from connectors.settings import required
from schemas import codec
from schemas.codec import AnyEvent, RecordError
from schemas.dead_letters import DeadLetter
from schemas.events import (
    KubeEvent,
    NodeEvent,
    PodEvent,
    ResourceClaimEvent,
    ResourceSliceEvent,
)
from schemas.types import Op

log = logging.getLogger("gputriage.connect.k8s")

Resource = Literal[
    "pods",
    "nodes",
    "events",
    "resourceslices",
    "resourceclaims",
    "resourceclaimtemplates",
    "devicetaintrules",
]
KINDS: Final[dict[Resource, str]] = {
    "pods": "Pod",
    "nodes": "Node",
    "events": "Event",
    "resourceslices": "ResourceSlice",
    "resourceclaims": "ResourceClaim",
    "resourceclaimtemplates": "ResourceClaimTemplate",
    "devicetaintrules": "DeviceTaintRule",
}
"""List items come without ``kind``; slimming needs it."""
DRA_RESOURCES: Final[tuple[Resource, ...]] = (
    "resourceslices",
    "resourceclaims",
    "resourceclaimtemplates",
    "devicetaintrules",
)
"""The ``resource.k8s.io`` resources: served from Kubernetes 1.34 (``v1``); DeviceTaintRules
with the ``DRADeviceTaints`` gate (``v1alpha3`` on 1.33-1.35, ``v1beta2`` on 1.36) or from
1.37 (``v1``, GA)."""
RULE_VERSIONS: Final = ("v1", "v1beta2", "v1alpha3")
"""The DeviceTaintRule API versions tried, newest first."""
_QUERY: Final = {
    "limit": "limit",
    "_continue": "continue",
    "watch": "watch",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "resource_version": "resourceVersion",
    "timeout_seconds": "timeoutSeconds",
}
"""The list/watch parameters sent, by the client's name for them."""


def list_v1_device_taint_rules(api: ApiClient, **params: Any) -> Awaitable[Any]:
    """``GET /apis/resource.k8s.io/v1/devicetaintrules`` (Kubernetes 1.37), which the client's
    generated APIs (36.x) do not have; the same parameters as theirs."""
    query = [(_QUERY[k], v) for k, v in params.items() if k in _QUERY and v is not None]
    result: Awaitable[Any] = api.call_api(
        "/apis/resource.k8s.io/v1/devicetaintrules",
        "GET",
        {},
        query,
        {"Accept": "application/json"},
        response_types_map={200: None},
        auth_settings=["BearerToken"],
        _preload_content=params.get("_preload_content", True),
        _request_timeout=params.get("_request_timeout"),
    )
    return result


MAX_DEAD_LETTER_BYTES: Final = 512 * 1024
"""Raw bytes kept in a dead letter; a longer value is cut (and the reason says so)."""

K8sEvent = PodEvent | NodeEvent | KubeEvent | ResourceSliceEvent | ResourceClaimEvent

_TOO_LONG: Final = b"\0too long"
"""Marker line for an over-long line (a real line never starts with NUL: JSON cannot)."""


@dataclass(frozen=True)
class WatchOptions:
    """How to list and watch, beyond the settings (:class:`K8sSettings`: the namespace and
    the silence timeout); the defaults suit a production API server."""

    watch_timeout_seconds: int = 240
    """``timeoutSeconds`` of each watch request: the server ends the watch, we resume. A
    silence timeout at or below it pulls it down (:func:`watch_timeout`)."""
    list_page_size: int = 500
    connect_timeout_seconds: float = 10.0
    list_timeout_seconds: float = 120.0
    """Total time for one list page."""
    backoff: Backoff = field(default_factory=Backoff)
    max_line_bytes: int = 16 * 1024 * 1024
    unserved_retry_seconds: float = 600.0
    """A DRA resource the API server does not serve (404) is asked for again this long
    after: a cluster upgraded to serve it is seen without a restart."""


def watch_timeout(options: WatchOptions, silence_timeout_seconds: float) -> int:
    """The ``timeoutSeconds`` to ask for: the server must end a healthy watch before the
    silence timeout takes it for a dead one, so a short silence timeout pulls it down."""
    if silence_timeout_seconds <= options.watch_timeout_seconds:
        return max(1, int(silence_timeout_seconds * 0.8))
    return options.watch_timeout_seconds


@dataclass(frozen=True, slots=True)
class Emitted:
    """A typed event for the raw topics."""

    resource: Resource
    event: K8sEvent
    also: tuple[AnyEvent, ...] = ()
    """Records derived from it (``derive``), published right after it."""


@dataclass(frozen=True, slots=True)
class Derived:
    """Records derived from an object the GPU filter did not keep or that is never published
    itself: autoscaler decisions from an Event, slices a DeviceTaintRule re-emits."""

    resource: Resource
    events: tuple[AnyEvent, ...]


@dataclass(frozen=True, slots=True)
class Rejected:
    """A line or object that could not be slimmed: becomes a dead letter."""

    resource: Resource
    error: RecordError
    raw: bytes
    key: str = ""
    """uid or namespace/name when known, for the dead letter's key."""
    observed: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass(frozen=True, slots=True)
class Synced:
    """A (re)list is complete: every change up to ``resource_version`` has been yielded."""

    resource: Resource
    resource_version: str
    relist: bool
    served: bool = True
    """False: the API server does not serve the resource (404); nothing to wait for."""


WatchItem = Emitted | Derived | Rejected | Synced

Derive = Callable[[KubeEvent], tuple[AnyEvent, ...]]
"""A hook from an Event to more records (the CLI passes the autoscaler family's, which
this family does not import): it sees every Event, before the GPU filter."""


class ApiError(Exception):
    """An API request that failed; ``status`` 0 when no HTTP answer came."""

    def __init__(self, status: int, reason: str, retry_after: float | None = None) -> None:
        super().__init__(f"{status} {reason}".strip())
        self.status = status
        self.reason = reason
        self.retry_after = retry_after


class Gone(ApiError):
    """410: the resourceVersion (or continue token) is too old; list again."""


class Silent(Exception):
    """The watch stream sent nothing for longer than the silence timeout."""


def dead_letter(item: Rejected) -> DeadLetter:
    """The dead-letter record for a rejected line/object (no Kafka coordinates: -1)."""
    value = item.raw
    reason = item.error.reason
    if len(value) > MAX_DEAD_LETTER_BYTES:
        reason = f"{reason} (value cut at {MAX_DEAD_LETTER_BYTES} of {len(value)} bytes)"
        value = value[:MAX_DEAD_LETTER_BYTES]
    return DeadLetter(
        topic=f"kubernetes/{item.resource}",
        partition=-1,
        offset=-1,
        reason=reason,
        field=item.error.field,
        key=item.key.encode() if item.key else None,
        value=value,
        timestamp_ms=int(item.observed.timestamp() * 1000),
    )


def _now() -> datetime:
    return datetime.now(UTC)


def _prefixed(error: RecordError, prefix: str) -> RecordError:
    if error.field.startswith("$"):
        return RecordError(error.reason, prefix + error.field[1:])
    return error


def _key(obj: object) -> str:
    uid, _ = identity(obj)
    if uid:
        return uid
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        meta = obj["metadata"]
        return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}".strip("/")
    return ""


class ResourceWatcher:
    """List, then watch, one resource; iterate :meth:`items` (never ends by itself)."""

    def __init__(
        self,
        api: ApiClient,
        resource: Resource,
        settings: K8sSettings,
        *,
        options: WatchOptions | None = None,
        config: SlimConfig = DEFAULT_CONFIG,
        keep: Callable[[K8sEvent], bool] | None = None,
        metrics: ConnectorMetrics | None = None,
        clock: Callable[[], datetime] = _now,
        derive: Derive | None = None,
        join: DraJoin | None = None,
        place: Callable[[KubeEvent], KubeEvent] | None = None,
    ) -> None:
        self.resource: Resource = resource
        self.join = join
        """The DRA join, shared by the watchers of one connector (None: records as slimmed,
        DRA cache records dropped)."""
        self.derive = derive
        """Records to add for an Event (kept by the GPU filter or not); None: none."""
        self.cluster = required(settings.cluster, "cluster")
        self.namespace = settings.namespace
        """One namespace, or None for the whole cluster (nodes are cluster-scoped either way)."""
        self.silence_timeout_seconds = settings.silence_timeout_seconds
        """Reconnect when nothing arrives for this long (a dead connection, not a quiet cluster)."""
        self.options = options or WatchOptions()
        self.watch_timeout_seconds = watch_timeout(self.options, self.silence_timeout_seconds)
        self.config = config
        self.keep = keep
        """Which events to forward (the GPU-only filter); None: all."""
        self.place = place
        """A kept Event about a pod, on the pod's node when its source named none
        (:meth:`~connectors.k8s.gpu_filter.GpuFilter.place`); None: as slimmed."""
        self.metrics = metrics
        self.clock = clock
        self.known: dict[str, Known] = {}
        """uid -> what we last emitted; the "before" side of a relist's diff."""
        self.resource_version = ""
        """The checkpoint: the newest version handed out; the next watch starts here."""
        self._core = CoreV1Api(api)
        self._resource = ResourceV1Api(api)
        self._api = api
        self._rule_apis = (ResourceV1beta2Api(api), ResourceV1alpha3Api(api))
        self._rule_api = 0
        """Index in :data:`RULE_VERSIONS` of the version asked for."""
        self._served = True
        self._lists = 0
        self._lines_seen = 0
        """Lines received by the current watch: what counts as progress for the backoff."""

    # -- requests ---------------------------------------------------------------------
    def _call(self, **params: Any) -> Awaitable[Any]:
        """The API method's coroutine; with ``_preload_content=False`` it gives the raw response."""
        core, namespace = self._core, self.namespace
        params["_preload_content"] = False
        if self.resource in DRA_RESOURCES:
            return self._call_dra(**params)
        if self.resource == "nodes":
            return core.list_node(**params)
        if self.resource == "pods":
            if namespace:
                return core.list_namespaced_pod(namespace, **params)
            return core.list_pod_for_all_namespaces(**params)
        if namespace:
            return core.list_namespaced_event(namespace, **params)
        return core.list_event_for_all_namespaces(**params)

    def _call_dra(self, **params: Any) -> Awaitable[Any]:
        api, namespace = self._resource, self.namespace
        if self.resource == "resourceslices":
            return api.list_resource_slice(**params)
        if self.resource == "devicetaintrules":
            if self._rule_api == 0:
                return list_v1_device_taint_rules(self._api, **params)
            return self._rule_apis[self._rule_api - 1].list_device_taint_rule(**params)
        if self.resource == "resourceclaims":
            if namespace:
                return api.list_namespaced_resource_claim(namespace, **params)
            return api.list_resource_claim_for_all_namespaces(**params)
        if namespace:
            return api.list_namespaced_resource_claim_template(namespace, **params)
        return api.list_resource_claim_template_for_all_namespaces(**params)

    def api_version(self) -> str:
        """``group/version`` asked for (for logs)."""
        if self.resource == "devicetaintrules":
            return f"resource.k8s.io/{RULE_VERSIONS[self._rule_api]}"
        return "resource.k8s.io/v1" if self.resource in DRA_RESOURCES else "v1"

    async def _request(self, **params: Any) -> aiohttp.ClientResponse:
        """Send one list/watch request; raise :class:`ApiError`/:class:`Gone` unless 2xx."""
        try:
            response: aiohttp.ClientResponse = await self._call(**params)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise ApiError(0, f"no answer: {exc!r}") from None
        if 200 <= response.status < 300:
            return response
        try:
            body = await response.read()
        except (aiohttp.ClientError, OSError, TimeoutError):
            body = b""
        finally:
            response.release()
        message = ""
        try:
            status = codec.loads(body)
            if isinstance(status, dict):
                message = str(status.get("message") or status.get("reason") or "")
        except RecordError:
            message = body[:200].decode("utf-8", "replace")
        retry = retry_after_seconds(response.headers)
        error = Gone if response.status == 410 else ApiError
        raise error(response.status, message[:300], retry)

    # -- list ------------------------------------------------------------------------
    async def _list_all(self) -> tuple[list[Any], str]:
        """Every item (all pages) and the list's resourceVersion.

        Trap: a continue token expires like a resourceVersion (410); the list
        then starts over from the first page, since pages of different
        snapshots must not be mixed.
        """
        timeout = aiohttp.ClientTimeout(
            total=self.options.list_timeout_seconds,
            sock_connect=self.options.connect_timeout_seconds,
        )
        while True:
            items: list[Any] = []
            token = ""
            try:
                while True:
                    params: dict[str, Any] = {
                        "limit": self.options.list_page_size,
                        "_request_timeout": timeout,
                    }
                    if token:
                        params["_continue"] = token
                    response = await self._request(**params)
                    try:
                        body = await response.read()
                    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                        raise ApiError(0, f"list interrupted: {exc!r}") from None
                    finally:
                        response.release()
                    try:
                        page = codec.loads(body)
                    except RecordError as exc:
                        raise ApiError(response.status, f"list is not JSON: {exc}") from None
                    if not isinstance(page, dict):
                        raise ApiError(response.status, "list is not a JSON object")
                    meta = page.get("metadata")
                    meta = meta if isinstance(meta, dict) else {}
                    page_items = page.get("items")
                    items.extend(page_items if isinstance(page_items, list) else [])
                    token = str(meta.get("continue") or "")
                    if not token:
                        return items, str(meta.get("resourceVersion") or "")
            except Gone:
                if not token:
                    raise
                log.warning("%s: list continue token expired; listing again", self.resource)

    async def _relist(self) -> AsyncIterator[WatchItem]:
        items, list_version = await self._list_all()
        relist = self._lists > 0
        self._lists += 1
        if relist and self.metrics is not None:
            self.metrics.relists.labels(self.resource).inc()
        observed = self.clock()
        kind = KINDS[self.resource]
        changes = diff(self.known, items)
        for change in changes:
            if change.op == "deleted":
                self.known.pop(change.uid, None)
                last = change.last
                # Only forwarded objects have a last event to turn into a deletion.
                if last is not None and last.event is not None:
                    gone = deletion(last.event, change.uid, list_version, observed)
                    kept = not isinstance(gone, ClaimTemplate | TaintRule) and (
                        self.keep is None or self.keep(gone)  # the filter forgets it later
                    )
                    item = self._publish(gone, kept or isinstance(gone, PodEvent | NodeEvent))
                    if item is not None:
                        yield item
                continue
            obj = change.obj or {}
            obj.setdefault("kind", kind)
            uid, version = identity(obj)
            result = slim_object(obj, change.op, cluster=self.cluster, config=self.config)
            item = self._accept(result, change.op, uid, version, obj, observed)
            if item is not None:
                yield item
        if relist:
            log.info(
                "%s: relisted at resourceVersion %s: %d changes since the last watch",
                self.resource,
                list_version,
                len(changes),
            )
        self.resource_version = list_version
        yield Synced(self.resource, list_version, relist)

    # -- one object --------------------------------------------------------------------
    def _accept(
        self,
        result: Slimmed,
        op: Op,
        uid: str,
        version: str,
        raw: bytes | dict[str, Any],
        observed: datetime,
        prefix: str = "$",
    ) -> WatchItem | None:
        """Update the known set for one object and say what to yield for it."""
        if result is None:
            return None
        if isinstance(result, RecordError):
            if uid and version:
                # Known, so a relist does not report the same bad version again.
                if op == "deleted":
                    self.known.pop(uid, None)
                else:
                    self.known[uid] = Known(version)
            data = raw if isinstance(raw, bytes) else codec.dumps(raw)
            return self._reject(_prefixed(result, prefix), data, _key(raw_obj(raw)), observed)
        if self.join is not None and isinstance(result, PodEvent):
            result = self.join.pod(result)  # before the filter: claims make GPU pods
        cached, kept = True, False
        if not isinstance(result, ClaimTemplate | TaintRule):
            cached, kept = False, self.keep is None or self.keep(result)
            if kept and self.place is not None and isinstance(result, KubeEvent):
                result = self.place(result)
        derived: tuple[AnyEvent, ...] = ()
        if op == "deleted":
            self.known.pop(uid, None)
            if isinstance(result, KubeEvent):
                return None  # an Event expiring is not a change
        else:
            remembered: Tracked | None = None
            if (kept or cached) and not isinstance(result, KubeEvent):
                remembered = result
            if remembered is not None:
                published = repeated(self.known.get(uid), remembered)
                if published is not None:
                    # Nothing the core does not have: keep the record it has (and the
                    # new version, so that a relist does not report the object again).
                    self.known[uid] = Known(version, published)
                    if self.metrics is not None:
                        self.metrics.unchanged.labels(self.resource).inc()
                    return None
            self.known[uid] = Known(version, remembered)
            if self.derive is not None and isinstance(result, KubeEvent):
                derived = self.derive(result)
                if kept:
                    return Emitted(self.resource, result, derived)
                return Derived(self.resource, derived) if derived else None
        return self._publish(result, kept)

    def _publish(
        self, result: K8sEvent | ClaimTemplate | TaintRule, kept: bool
    ) -> WatchItem | None:
        """What to yield for a record: itself if kept, with what the DRA join adds."""
        if isinstance(result, PodEvent | NodeEvent | KubeEvent):
            return Emitted(self.resource, result) if kept else None
        if self.join is None:
            if kept and not isinstance(result, ClaimTemplate | TaintRule):
                return Emitted(self.resource, result)
            return None
        out = self.join.on(result)
        if isinstance(result, ClaimTemplate | TaintRule):
            return Derived(self.resource, tuple(out)) if out else None
        if not out:
            return None
        main, *rest = out
        if kept and isinstance(main, ResourceSliceEvent | ResourceClaimEvent):
            return Emitted(self.resource, main, tuple(rest))
        return Derived(self.resource, tuple(rest)) if rest else None

    def _reject(self, error: RecordError, raw: bytes, key: str, observed: datetime) -> Rejected:
        if self.metrics is not None:
            self.metrics.dead_letters.labels(self.resource).inc()
        return Rejected(self.resource, error, raw, key, observed)

    # -- watch -------------------------------------------------------------------------
    async def _lines(self, response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
        """Lines of the stream; :class:`Silent` after ``silence_timeout_seconds`` of nothing."""
        buffer = bytearray()
        limit = self.options.max_line_bytes
        dropping = False  # inside a line that is already over the limit: skip to its end
        while True:
            try:
                chunk = await asyncio.wait_for(
                    response.content.readany(), self.silence_timeout_seconds
                )
            except TimeoutError:
                raise Silent(f"nothing for {self.silence_timeout_seconds:g} s") from None
            if not chunk:
                return
            start = 0
            while True:
                end = chunk.find(b"\n", start)
                if not dropping:
                    buffer += chunk[start:] if end < 0 else chunk[start:end]
                    if len(buffer) > limit:
                        dropping = True
                        buffer.clear()
                if end < 0:
                    break
                if dropping:
                    dropping = False
                    yield _TOO_LONG
                elif buffer.strip():
                    yield bytes(buffer)
                buffer.clear()
                start = end + 1

    async def _watch(self) -> AsyncIterator[WatchItem]:
        timeout = aiohttp.ClientTimeout(
            total=None,
            connect=self.options.connect_timeout_seconds,
            sock_connect=self.options.connect_timeout_seconds,
        )
        response = await self._request(
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.resource_version,
            timeout_seconds=self.watch_timeout_seconds,
            _request_timeout=timeout,
        )
        kind = KINDS[self.resource]
        try:
            async for line in self._lines(response):
                self._lines_seen += 1
                observed = self.clock()
                if line == _TOO_LONG:
                    error = RecordError(f"line longer than {self.options.max_line_bytes} bytes")
                    yield self._reject(error, b"", "", observed)
                    continue
                try:
                    envelope = codec.loads(line)
                except RecordError as exc:
                    yield self._reject(exc, line, "", observed)
                    continue
                item = self._on_line(envelope, line, observed, kind)
                if item is not None:
                    yield item
        except (aiohttp.ClientError, OSError) as exc:
            raise ApiError(0, f"watch stream broke: {exc!r}") from None
        finally:
            response.close()

    def _on_line(
        self, envelope: object, line: bytes, observed: datetime, kind: str
    ) -> WatchItem | None:
        if not isinstance(envelope, dict):
            error = RecordError("expected a watch event object", "$")
            return self._accept(error, "added", "", "", line, observed)
        kind_of_event = envelope.get("type")
        obj = envelope.get("object")
        if kind_of_event == "BOOKMARK":
            _, version = identity(obj)
            if version:
                self.resource_version = version
            return None
        if kind_of_event == "ERROR":
            status = obj if isinstance(obj, dict) else {}
            code = status.get("code")
            reason = f"{status.get('reason', '')}: {status.get('message', '')}"
            if code == 410:
                raise Gone(410, reason)
            raise ApiError(code if isinstance(code, int) else 0, f"watch ERROR event {reason}")
        op = WATCH_OPS.get(kind_of_event) if isinstance(kind_of_event, str) else None
        if op is None:
            error = RecordError(f"unknown watch event type {str(kind_of_event)[:40]!r}", "$.type")
            return self._accept(error, "added", "", "", line, observed)
        uid, version = identity(obj)
        if isinstance(obj, dict):
            obj.setdefault("kind", kind)
        result = slim_object(obj, op, cluster=self.cluster, observed=observed, config=self.config)
        item = self._accept(result, op, uid, version, line, observed, prefix="$.object")
        if version:
            self.resource_version = version
        return item

    # -- the loop ---------------------------------------------------------------------
    async def items(self) -> AsyncGenerator[WatchItem, None]:
        """List, watch, relist on 410, reconnect on silence, back off on errors; forever.

        Keeps the ``watch-<resource>`` health condition (:mod:`connectors.health`): it
        holds once a list succeeded and when watch lines arrive; an API error, or a watch
        that ended without a line, fails it until a list succeeds or a line arrives (not
        merely until the next attempt starts).
        """
        health = self.metrics.delivery.health if self.metrics is not None else None
        # Made when watching starts, not with the watcher: a standby replica (leader
        # election) builds its watchers and never runs them, and must not read as failing.
        watching = (
            health.condition(f"watch-{self.resource}", detail="not listed yet") if health else None
        )
        try:
            async for item in self._items(watching):
                yield item
        finally:
            if watching is not None:  # lost the lease, or stopping: no longer ours to judge
                watching.set(True, "not watching (standby or stopping)")

    async def _unserved(self, watching: Condition | None, status: int) -> AsyncIterator[WatchItem]:
        """The API server does not serve this DRA resource (404), or the RBAC does not grant
        it (403: a manifest older than the connector): try the older version of
        DeviceTaintRules, else say so once, yield an unserved :class:`Synced` (nothing to
        wait for) and ask again after ``unserved_retry_seconds``: never a crash loop."""
        if self.resource == "devicetaintrules" and self._rule_api + 1 < len(RULE_VERSIONS):
            self._rule_api += 1
            return
        if self._served:
            log.warning(
                "%s: not served, going on without it: resource=%s api=%s status=%d "
                "(resource.k8s.io/v1 needs Kubernetes 1.34+, DeviceTaintRules the "
                "DRADeviceTaints feature gate; 403: the RBAC does not grant it)",
                self.resource,
                self.resource,
                self.api_version(),
                status,
            )
            self._served = False
        if watching is not None:
            watching.set(True, f"{self.api_version()} not served")
        yield Synced(self.resource, "", relist=False, served=False)
        self._rule_api = 0
        await asyncio.sleep(self.options.unserved_retry_seconds)

    async def _items(self, watching: Condition | None) -> AsyncGenerator[WatchItem, None]:
        attempt = 0
        need_list = True
        backoff = self.options.backoff
        while True:
            self._lines_seen = 0
            retry_after: float | None = None
            reason = "closed"
            try:
                if need_list:
                    async for item in self._relist():
                        yield item
                    need_list = False
                    if not self._served:
                        log.info("%s: served again (%s)", self.resource, self.api_version())
                        self._served = True
                    if watching is not None:
                        watching.set(True, "listed, watching")
                async for item in self._watch():
                    if watching is not None:
                        watching.set(True, "listed, watching")  # back after a failure
                    yield item
            except Gone as exc:
                log.warning("%s: resourceVersion too old (%s); relisting", self.resource, exc)
                need_list = True
                reason = "gone"
            except Silent as exc:
                log.warning("%s: watch silent (%s); reconnecting", self.resource, exc)
                reason = "silent"
            except ApiError as exc:
                if need_list and exc.status in (403, 404) and self.resource in DRA_RESOURCES:
                    if exc.status == 403 and self.metrics is not None:  # a fault, unlike 404
                        self.metrics.api_errors.labels(self.resource, "403").inc()
                    async for item in self._unserved(watching, exc.status):
                        yield item
                    continue
                if self.metrics is not None:
                    self.metrics.api_errors.labels(self.resource, str(exc.status)).inc()
                log.warning("%s: API error %s", self.resource, exc)
                retry_after = exc.retry_after
                reason = "error"
                if watching is not None:
                    watching.set(False, f"API error {exc}")
                if need_list and self.resource in DRA_RESOURCES and not self._lists:
                    # Nothing to wait for while it fails: the pods and the idle batches
                    # (the publish loop's clock) must not wait on a DRA resource.
                    yield Synced(self.resource, "", relist=False, served=False)
            if self.metrics is not None:
                self.metrics.watch_restarts.labels(self.resource, reason).inc()
            # Progress is "the watch delivered lines", bookmarks and the 410 ERROR included:
            # then an end, a silence or a 410 is routine and we go again at once. A watch
            # that ends without a single line, or any error, backs off (no tight loops).
            if self._lines_seen:
                attempt = 0
                if reason != "error":
                    continue
            delay = backoff.after(attempt, retry_after)
            attempt += 1
            if watching is not None and reason != "error":  # an error said why, above
                watching.set(False, f"watch {reason} without a line; retrying")
            log.info("%s: retrying in %.2f s (attempt %d)", self.resource, delay, attempt)
            await asyncio.sleep(delay)


def raw_obj(raw: bytes | dict[str, Any]) -> object:
    """The object inside a raw watch line (for the dead letter's key); the dict itself."""
    if isinstance(raw, dict):
        return raw
    try:
        envelope = codec.loads(raw)
    except RecordError:
        return None
    return envelope.get("object") if isinstance(envelope, dict) else None
