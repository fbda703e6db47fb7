"""Watch the ``cluster-autoscaler-status`` ConfigMap; each change's *new* facts as records.

List by name, then watch from the list's resourceVersion with bookmarks; 410 Gone lists
again, an ended stream is watched again, other errors back off. Only what the previous
parse did not state is yielded: cluster-autoscaler rewrites the ConfigMap every scan, and
a resync must not publish the same backoff again. A small loop of its own, not the k8s
family's ``ResourceWatcher``: families do not import each other, and one object needs no
relist diff.

Traps: a ``data.status`` in neither format is a :class:`StatusUpdate` with an ``error`` (a
dead letter) and the previous good parse is kept; after a restart the current state is
published again with the same ids, which the core skips.
In full: docs/connectors.md, design notes: connectors/autoscaler/status_watch.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from connectors.autoscaler.metrics import AutoscalerMetrics
from connectors.autoscaler.settings import AutoscalerSettings
from connectors.autoscaler.status import Status, new_facts, parse_status
from connectors.autoscaler.streamlines import stream_lines
from connectors.backoff import Backoff
from connectors.settings import required
from schemas import codec
from schemas.codec import RecordError
from schemas.events import AutoscalerEvent

log = logging.getLogger("gputriage.connect.autoscaler")


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    """What one version of the ConfigMap gave: its new facts, or why it was unreadable."""

    events: tuple[AutoscalerEvent, ...] = ()
    error: RecordError | None = None
    raw: bytes = b""


class _Gone(Exception):
    pass


def _now() -> datetime:
    return datetime.now(UTC)


class StatusWatcher:
    """List-then-watch one ConfigMap; :meth:`items` yields a :class:`StatusUpdate` per change.

    The settings give the cluster, the namespace, the ConfigMap (``status_configmap``) and
    the silence timeout; the server is asked to end each watch at 80% of the latter, so
    only a dead connection trips it.
    """

    def __init__(
        self,
        api: ApiClient,
        settings: AutoscalerSettings,
        *,
        backoff: Backoff | None = None,
        metrics: AutoscalerMetrics | None = None,
        clock: Callable[[], datetime] = _now,
        max_line_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        self.cluster = required(settings.cluster, "cluster")
        self.max_line_bytes = max_line_bytes
        self.namespace = settings.namespace
        self.name = required(settings.status_configmap, "status_configmap")
        self.backoff = backoff or Backoff()
        self.silence_timeout_seconds = settings.silence_timeout_seconds
        self.watch_timeout_seconds = max(1, int(self.silence_timeout_seconds * 0.8))
        self.metrics = metrics or AutoscalerMetrics()
        self.clock = clock
        self.previous: Status | None = None
        self.resource_version = ""
        self._core = CoreV1Api(api)
        self._lines = 0

    async def _request(self, **params: Any) -> aiohttp.ClientResponse:
        call: Awaitable[Any] = self._core.list_namespaced_config_map(
            self.namespace,
            field_selector=f"metadata.name={self.name}",
            _preload_content=False,
            **params,
        )
        response: aiohttp.ClientResponse = await call
        if response.status == 410:
            response.release()
            raise _Gone()
        if response.status != 200:
            response.release()
            self.metrics.api_errors.labels(str(response.status)).inc()
            raise aiohttp.ClientResponseError(
                response.request_info, (), status=response.status, message="status ConfigMap"
            )
        return response

    def _update(self, obj: object) -> StatusUpdate | None:
        data = obj.get("data") if isinstance(obj, dict) else None
        text = data.get("status") if isinstance(data, dict) else None
        if not isinstance(text, str):
            return None
        status = parse_status(text)
        if isinstance(status, RecordError):
            return StatusUpdate(error=status, raw=text.encode())
        events = new_facts(status, self.previous, self.cluster, self.clock())
        self.previous = status
        return StatusUpdate(events=events) if events else None

    async def _list(self) -> AsyncIterator[StatusUpdate]:
        response = await self._request(_request_timeout=aiohttp.ClientTimeout(total=60))
        try:
            body = await response.read()
        finally:
            response.release()
        page = codec.loads(body)
        items = page.get("items") if isinstance(page, dict) else None
        meta = page.get("metadata") if isinstance(page, dict) else None
        self.resource_version = str((meta or {}).get("resourceVersion") or "")
        for obj in items if isinstance(items, list) else []:
            update = self._update(obj)
            if update is not None:
                yield update
        if not items:
            self.previous = None

    async def _watch(self) -> AsyncIterator[StatusUpdate]:
        response = await self._request(
            watch=True,
            allow_watch_bookmarks=True,
            resource_version=self.resource_version,
            timeout_seconds=self.watch_timeout_seconds,
            _request_timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        try:
            lines = stream_lines(
                response,
                silence_seconds=self.silence_timeout_seconds,
                max_line_bytes=self.max_line_bytes,
            )
            async for line in lines:
                self._lines += 1
                envelope = codec.loads(line)
                if not isinstance(envelope, dict):
                    continue
                kind, obj = envelope.get("type"), envelope.get("object")
                meta = obj.get("metadata") if isinstance(obj, dict) else None
                version = (meta or {}).get("resourceVersion")
                if kind == "ERROR":
                    code = obj.get("code") if isinstance(obj, dict) else None
                    if code == 410:
                        raise _Gone()
                    raise aiohttp.ClientPayloadError(f"watch ERROR event {code}")
                if isinstance(version, str) and version:
                    self.resource_version = version
                if kind == "DELETED":
                    self.previous = None
                elif kind in ("ADDED", "MODIFIED"):
                    update = self._update(obj)
                    if update is not None:
                        yield update
        finally:
            response.close()

    async def items(self) -> AsyncIterator[StatusUpdate]:
        """List, watch, relist on 410, back off on errors; forever."""
        attempt = 0
        need_list = True
        while True:
            self._lines = 0
            try:
                if need_list:
                    async for update in self._list():
                        yield update
                    need_list = False
                async for update in self._watch():
                    yield update
                if self._lines:  # the server ended a watch that worked: again at once
                    attempt = 0
                    continue
            except _Gone:
                need_list = True
                continue
            except (aiohttp.ClientError, OSError, TimeoutError, RecordError) as exc:
                log.warning("%s/%s: %r", self.namespace, self.name, exc)
                if isinstance(exc, RecordError | OSError):
                    self.metrics.api_errors.labels("0").inc()
            await asyncio.sleep(self.backoff.after(attempt, None))
            attempt += 1
