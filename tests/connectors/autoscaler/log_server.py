"""A kmock API server with autoscaler pods and their container logs, for the log-follow tests.

The pods (``list``/``get``) and ``pods/NAME/log`` are answered here, the way the API
server and kubelet answer them: ``timestamps=true`` prefixes the kubelet's RFC 3339
nano timestamp, ``sinceTime`` (whole seconds) keeps lines at or after it, ``previous``
serves the container instance before the current one, ``follow`` keeps the stream open
for lines appended later. :meth:`LogServer.drop` aborts the open streams (a broken
connection, as a dead proxy gives); :meth:`LogServer.restart` starts a new container.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import kmock
from kmock._internal.rendering import Response  # not in kmock.__all__, same class
from kubernetes_asyncio.client import ApiClient, Configuration

from tests.k8s_helpers import ScriptedResource

NAMESPACE = "kube-system"


@dataclass
class Container:
    """One container instance's log: (kubelet timestamp, text) lines."""

    lines: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class FakePod:
    name: str
    uid: str
    labels: dict[str, str]
    instances: list[Container] = field(default_factory=lambda: [Container()])
    running: bool = True

    @property
    def restart_count(self) -> int:
        return len(self.instances) - 1

    def manifest(self) -> dict[str, Any]:
        state: dict[str, Any] = {"running": {"startedAt": "2026-12-01T10:00:00Z"}}
        return {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {
                "name": self.name,
                "namespace": NAMESPACE,
                "uid": self.uid,
                "labels": self.labels,
                "resourceVersion": "1",
            },
            "spec": {"containers": [{"name": "cluster-autoscaler"}]},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "cluster-autoscaler",
                        "restartCount": self.restart_count,
                        "state": state if self.running else {"waiting": {"reason": "x"}},
                    }
                ],
            },
        }


def _second(stamp: str) -> str:
    return stamp[:19]


class LogServer:
    def __init__(self) -> None:
        self.pods: dict[str, FakePod] = {}
        self.log_requests: list[dict[str, str]] = []
        self.configmaps = ScriptedResource("configmaps", "ConfigMap")
        """The status ConfigMap's list and watch answers."""
        self.server: kmock.KubernetesEmulator | None = None
        """Every request it received: ``list(server)``."""
        self._drops = 0
        self._changed: asyncio.Event | None = None
        """Set (and replaced) on every write, drop and restart: the streams wait on it."""

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def add(self, name: str, labels: dict[str, str] | None = None) -> FakePod:
        pod = FakePod(name, f"uid-{name}", labels or {"app": "cluster-autoscaler"})
        self.pods[name] = pod
        return pod

    def write(self, name: str, stamp: str, text: str) -> None:
        """The current container of pod ``name`` logs ``text`` at ``stamp``."""
        self.pods[name].instances[-1].lines.append((stamp, text))
        self._wake()

    def drop(self) -> None:
        """Abort every open log stream (the connection breaks)."""
        self._drops += 1
        self._wake()

    def restart(self, name: str) -> None:
        """The container of pod ``name`` exits and a new one starts (restartCount + 1)."""
        self.pods[name].instances.append(Container())
        self._wake()

    # -- the server's side ------------------------------------------------------------
    async def handle(self, request: kmock.Request) -> Response:
        if request.namespace != NAMESPACE:
            return Response(status=404, payload={"kind": "Status", "code": 404})
        if request.subresource == "log":
            return self._log(request)
        if request.name:
            pod = self.pods.get(request.name)
            if pod is None:
                return Response(status=404, payload={"kind": "Status", "code": 404})
            return Response(status=200, payload=pod.manifest())
        wanted = dict(
            part.split("=", 1)
            for part in request.params.get("labelSelector", "").split(",")
            if part
        )
        items = [
            pod.manifest()
            for pod in self.pods.values()
            if all(pod.labels.get(k) == v for k, v in wanted.items())
        ]
        body = {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}
        return Response(status=200, payload=body)

    def _log(self, request: kmock.Request) -> Response:
        params = dict(request.params)
        self.log_requests.append(params)
        pod = self.pods.get(request.name or "")
        if pod is None:
            return Response(status=404, payload={"kind": "Status", "code": 404})
        previous = params.get("previous", "").lower() == "true"
        if previous and pod.restart_count == 0:
            return Response(status=400, payload={"kind": "Status", "code": 400})
        instance = pod.instances[-2] if previous else pod.instances[-1]
        follow = params.get("follow", "").lower() == "true" and not previous
        return Response(status=200, payload=self._stream(request, pod, instance, params, follow))

    async def _stream(
        self,
        request: kmock.Request,
        pod: FakePod,
        instance: Container,
        params: dict[str, str],
        follow: bool,
    ) -> AsyncIterator[bytes]:
        raw = request._raw_request
        since = params.get("sinceTime", "")
        since = _second(since) if since else ""
        drops = self._drops
        sent = 0
        yield b""
        while True:
            if self._changed is None:
                self._changed = asyncio.Event()
            changed = self._changed  # taken before looking: a change after it sets it
            transport = raw.transport if raw is not None else None
            if transport is None or transport.is_closing():
                return
            if self._drops != drops:
                transport.abort()
                return
            if sent < len(instance.lines):
                stamp, text = instance.lines[sent]
                sent += 1
                if not since or _second(stamp) >= since:
                    yield f"{stamp} {text}\n".encode()
                continue
            if not follow or pod.instances[-1] is not instance:
                return  # all of it sent, or the container exited
            # Woken by the next write, drop or restart; at the latest after 0.2 s, to see
            # a client that went away (the transport gives no event for that).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), 0.2)


@asynccontextmanager
async def log_server() -> AsyncIterator[tuple[LogServer, ApiClient]]:
    """kmock answering pods, pods/log and configmaps from a :class:`LogServer`; a client."""
    logs = LogServer()
    async with kmock.KubernetesEmulator() as server, kmock.Server(server) as running:
        server[kmock.resource("", "v1", "pods")] << logs.handle
        server[kmock.resource("", "v1", "configmaps")] << logs.configmaps.handle
        logs.server = server
        url = str(running.url).rstrip("/")
        async with ApiClient(Configuration(host=url)) as api:
            yield logs, api


def stamp(second: int, nanos: int = 0) -> str:
    """A kubelet timestamp on 2026-12-01 at 10:00:``second``, ``nanos`` (trailing zeros cut)."""
    base = datetime(2026, 12, 1, 10, 0, second).strftime("%Y-%m-%dT%H:%M:%S")
    frac = f"{nanos:09d}".rstrip("0")
    return f"{base}.{frac}Z" if frac else f"{base}Z"
