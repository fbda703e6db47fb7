"""Follow the cluster-autoscaler's (or Karpenter's) pod logs through the Kubernetes API.

:class:`LogFollower` follows one container of every *running* pod the selector finds (only
the leader logs decisions, so a leader change needs nothing), onto a one-slot queue: a
stalled publish loop stops the reads and TCP pushes back. Reconnects resume at
``sinceTime`` and skip repeats; a restarted container's tail is read once with
``previous=true``, so a drop just before a crash loses nothing.

Traps: kubernetes-asyncio's log call has no ``since_time``, so the request goes through
the client's ``call_api`` on the same path; a log stream has no heartbeat (a NAT-dropped
one stays open), so silence reconnects; the position's filter is kept across a container
restart; a container not running answers 400 and waits for the next poll.
In full: docs/connectors.md, design notes: connectors/autoscaler/follow.py.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
from kubernetes_asyncio.client import ApiClient, CoreV1Api

from connectors.autoscaler.cursor import FollowState, LogCursor, Position, since_time
from connectors.autoscaler.metrics import AutoscalerMetrics
from connectors.autoscaler.settings import AutoscalerSettings
from connectors.autoscaler.status_watch import StatusUpdate
from connectors.autoscaler.streamlines import stream_lines
from connectors.backoff import Backoff
from schemas import codec
from schemas.codec import RecordError

log = logging.getLogger("gputriage.connect.autoscaler")

LOG_PATH: Final = "/api/v1/namespaces/{namespace}/pods/{name}/log"


BACKOFF: Final = Backoff()
"""Between failed listings and log streams."""
CONNECT_TIMEOUT_SECONDS: Final = 10.0
MAX_LINE_BYTES: Final = 1024 * 1024
"""A longer line is cut here (the parser reads 64 KiB of it anyway)."""


@dataclass(frozen=True, slots=True)
class Target:
    """One container of one pod, as the pod's status shows it now."""

    pod: str
    """``namespace/name``."""
    uid: str
    container: str
    restart_count: int
    running: bool

    @property
    def key(self) -> tuple[str, str]:
        return self.pod, self.container


@dataclass(frozen=True, slots=True)
class LogLine:
    """A new line and the container's cursor just after it."""

    cursor: LogCursor
    raw: bytes
    index: int
    """The line's place among the lines at its timestamp (part of the record ids)."""


@dataclass(frozen=True, slots=True)
class Forget:
    """The pod is gone: its cursor leaves the state file."""

    pod: str
    container: str


def targets_of(pods: object, container: str = "") -> list[Target]:
    """The followable containers of a raw ``PodList`` (a shape it does not have: none)."""
    items = pods.get("items") if isinstance(pods, dict) else None
    found: list[Target] = []
    for pod in items if isinstance(items, list) else []:
        target = target_of(pod, container)
        if target is not None:
            found.append(target)
    return found


def target_of(pod: object, container: str = "") -> Target | None:
    """The followed container of a raw pod, or None (no such container, no name)."""
    if not isinstance(pod, dict):
        return None
    meta, spec, status = _object(pod, "metadata"), _object(pod, "spec"), _object(pod, "status")
    name, namespace = meta.get("name"), meta.get("namespace")
    if not (isinstance(name, str) and isinstance(namespace, str)):
        return None
    if not container:
        containers = spec.get("containers")
        first = containers[0] if isinstance(containers, list) and containers else None
        container = first.get("name", "") if isinstance(first, dict) else ""
    if not container or meta.get("deletionTimestamp"):
        return None
    restarts, running = 0, False
    statuses = status.get("containerStatuses")
    for entry in statuses if isinstance(statuses, list) else []:
        if isinstance(entry, dict) and entry.get("name") == container:
            count = entry.get("restartCount")
            restarts = count if isinstance(count, int) else 0
            state = entry.get("state")
            running = isinstance(state, dict) and isinstance(state.get("running"), dict)
    return Target(f"{namespace}/{name}", str(meta.get("uid") or ""), container, restarts, running)


def _object(parent: dict[str, Any], key: str) -> dict[str, Any]:
    value = parent.get(key)
    return value if isinstance(value, dict) else {}


class LogFollower:
    """Follows every matching running pod; run :meth:`run`, read :attr:`queue`."""

    def __init__(
        self,
        api: ApiClient,
        settings: AutoscalerSettings,
        saved: FollowState | None = None,
        *,
        metrics: AutoscalerMetrics | None = None,
        backoff: Backoff = BACKOFF,
        connect_timeout_seconds: float = CONNECT_TIMEOUT_SECONDS,
        max_line_bytes: int = MAX_LINE_BYTES,
    ) -> None:
        self.api = api
        self.settings = settings
        self.backoff = backoff
        self.connect_timeout_seconds = connect_timeout_seconds
        self.max_line_bytes = max_line_bytes
        self.queue: asyncio.Queue[LogLine | Forget | StatusUpdate] = asyncio.Queue(1)
        """Lines and forgotten pods; the source also puts the status watcher's updates here."""
        self.positions: dict[tuple[str, str], Position] = {}
        """(pod, container) -> the read position (ahead of what is committed)."""
        self.saved = {(c.pod, c.container): c for c in (saved.cursors if saved else ())}
        """The state file's cursors not yet taken up by a followed container."""
        self._core = CoreV1Api(api)
        self.metrics = metrics or AutoscalerMetrics()

    # -- pods -------------------------------------------------------------------------
    async def _list(self) -> list[Target] | None:
        try:
            call: Awaitable[Any] = self._core.list_namespaced_pod(
                self.settings.namespace,
                label_selector=self.settings.selector,
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=60),
            )
            response: aiohttp.ClientResponse = await call
            try:
                body = await response.read()
            finally:
                response.release()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("listing %s pods: no answer: %r", self.settings.selector, exc)
            self.metrics.api_errors.labels(str(0)).inc()
            return None
        if response.status != 200:
            log.warning("listing pods: HTTP %d %s", response.status, body[:200])
            self.metrics.api_errors.labels(str(response.status)).inc()
            return None
        try:
            return targets_of(codec.loads(body), self.settings.container)
        except RecordError as exc:
            log.warning("listing pods: %s", exc)
            return None

    async def _read(self, pod: str, container: str) -> Target | RecordError | None:
        """The pod's current target; None when it is gone; RecordError when unknown."""
        namespace, name = pod.split("/", 1)
        try:
            call: Awaitable[Any] = self._core.read_namespaced_pod(
                name,
                namespace,
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(total=30),
            )
            response: aiohttp.ClientResponse = await call
            try:
                body = await response.read()
            finally:
                response.release()
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            self.metrics.api_errors.labels(str(0)).inc()
            return RecordError(f"no answer: {exc!r}")
        if response.status == 404:
            return None
        if response.status != 200:
            self.metrics.api_errors.labels(str(response.status)).inc()
            return RecordError(f"HTTP {response.status}")
        try:
            return target_of(codec.loads(body), container)
        except RecordError as exc:
            return exc

    # -- the loop ---------------------------------------------------------------------
    async def run(self) -> None:
        """List the pods every ``poll_interval_seconds``; a follow task per (pod uid, container)."""
        tasks: dict[tuple[str, str, str], asyncio.Task[None]] = {}
        try:
            while True:
                targets = await self._list()
                if targets is not None:
                    current = {(t.pod, t.uid, t.container): t for t in targets}
                    for key, task in list(tasks.items()):
                        if task.done():
                            del tasks[key]
                            task.result()  # a crashed follower ends the connector, loudly
                        elif key not in current:
                            task.cancel()
                            del tasks[key]
                    for key, target in current.items():
                        if key not in tasks and target.running:
                            tasks[key] = asyncio.create_task(
                                self._follow(target), name=f"log:{target.pod}"
                            )
                    live = {(t.pod, t.container) for t in targets}
                    for gone in [k for k in (*self.positions, *self.saved) if k not in live]:
                        self.positions.pop(gone, None)
                        self.saved.pop(gone, None)
                        await self.queue.put(Forget(*gone))
                await asyncio.sleep(self.settings.poll_interval_seconds)
        finally:
            for task in tasks.values():
                task.cancel()
            await asyncio.gather(*tasks.values(), return_exceptions=True)

    def _position(self, target: Target) -> tuple[Position, LogCursor | None]:
        """The target's position, and the old container's cursor when it restarted."""
        position = self.positions.get(target.key)
        if position is None:
            saved = self.saved.pop(target.key, None)
            if saved is not None and saved.uid == target.uid:
                position = Position(saved)
        if position is not None and position.cursor.uid != target.uid:
            position = None
        old: LogCursor | None = None
        if position is None:
            position = Position(
                LogCursor(
                    pod=target.pod,
                    uid=target.uid,
                    container=target.container,
                    restart_count=target.restart_count,
                )
            )
        elif position.cursor.restart_count != target.restart_count:
            old = position.cursor if position.resumable else None
            position.restarted(target.restart_count)
        self.positions[target.key] = position
        return position, old

    async def _follow(self, target: Target) -> None:
        """Follow one container until its pod is gone; reconnect with resume."""
        attempt = 0
        current: Target | RecordError | None = target
        while True:
            if isinstance(current, Target) and current.uid == target.uid and current.running:
                position, old = self._position(current)
                if old is not None:
                    await self._stream(current, position, previous=old)
                received = await self._stream(current, position)
                if received:
                    attempt = 0
            elif current is None or (isinstance(current, Target) and current.uid != target.uid):
                return  # the pod is gone (the next list forgets it)
            await asyncio.sleep(self.backoff.after(attempt, None))
            attempt += 1
            current = await self._read(target.pod, target.container)

    async def _stream(
        self, target: Target, position: Position, previous: LogCursor | None = None
    ) -> int:
        """One log request: put every new line on the queue; the lines received."""
        namespace, name = target.pod.split("/", 1)
        query: list[tuple[str, Any]] = [("container", target.container), ("timestamps", True)]
        if previous is not None:
            query.append(("previous", True))
            query.append(("sinceTime", since_time(previous.time_ns)))
        else:
            query.append(("follow", True))
            if position.resumable:
                query.append(("sinceTime", since_time(position.cursor.time_ns)))
        position.reconnected()
        received = 0
        reason = "closed"
        try:
            response: aiohttp.ClientResponse = await self.api.call_api(
                LOG_PATH,
                "GET",
                path_params={"namespace": namespace, "name": name},
                query_params=query,
                header_params={"Accept": "text/plain"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self.connect_timeout_seconds
                ),
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("%s: log request failed: %r", target.pod, exc)
            self.metrics.api_errors.labels(str(0)).inc()
            self.metrics.streams.labels("error").inc()
            return 0
        try:
            if response.status != 200:
                body = await response.read()
                log.warning("%s: log: HTTP %d %s", target.pod, response.status, body[:200])
                self.metrics.api_errors.labels(str(response.status)).inc()
                reason = "error"
                return 0
            lines = stream_lines(
                response,
                silence_seconds=self.settings.silence_timeout_seconds,
                max_line_bytes=self.max_line_bytes,
            )
            async for line in lines:
                received += 1
                if position.admit(line):
                    index = len(position.cursor.seen) - 1
                    await self.queue.put(LogLine(position.cursor, line, index))
        except TimeoutError:
            log.warning(
                "%s: log silent for %g s; reconnecting",
                target.pod,
                self.settings.silence_timeout_seconds,
            )
            reason = "silent"
        except (aiohttp.ClientError, OSError) as exc:
            log.warning("%s: log stream broke: %r", target.pod, exc)
            reason = "broken"
        finally:
            response.close()
            self.metrics.streams.labels(reason).inc()
        return received
