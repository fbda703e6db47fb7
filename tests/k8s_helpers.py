"""Kubernetes API tests: kmock with scripted list/watch answers, object factories, waiting.

kmock 0.8's emulator stores objects but has no resourceVersion semantics, no
bookmarks and no 410, so list and watch requests for pods, nodes and events are
answered here, by a kmock reaction per resource (:class:`ScriptedResource`),
while everything else (leases, discovery) is kmock's own emulator. The real
kubernetes-asyncio client talks to it over HTTP.

A watch request takes the next scripted answer (:meth:`ScriptedResource.fail`
for an HTTP error) or, when none is queued, becomes a *live* stream fed by
:meth:`ScriptedResource.send` / :meth:`ScriptedResource.end`. Steps wait in a
deque and are taken only by a connection whose client is still there: aiohttp
does not cancel a handler when its client goes away, and a dead stream must not
swallow a step meant for the reconnected one.

Traps: kubernetes-asyncio sends ``watch=True`` (capital T), which kmock's own
action guess does not recognise as a watch; the reactions here parse it
themselves. Every request is recorded by kmock (``list(kmock)``), which the
RBAC test turns into (apiGroup, resource, verb) triples.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple, TypeVar

import kmock
from kmock._internal.rendering import Response  # not in kmock.__all__, same class
from kubernetes_asyncio.client import ApiClient, Configuration

from connectors.backoff import Backoff
from connectors.k8s.leader import LeaseOptions
from connectors.k8s.settings import K8sSettings
from connectors.k8s.watch import WatchOptions

T = TypeVar("T")

END: Final = object()
"""A step that ends the live watch stream (the server closes it, as at timeoutSeconds)."""

GPU: Final = "nvidia.com/gpu"
CREATED: Final = "2026-11-30T10:00:00Z"

FAST_WATCH: Final = WatchOptions(backoff=Backoff(initial_seconds=0.01, max_seconds=0.05))
"""Watch options for tests: tiny backoffs."""
SILENCE_SECONDS: Final = 5.0
"""A silence timeout no test hits by accident, and short enough to show a hang."""
WATCHED: Final = K8sSettings(cluster="c1", silence_timeout_seconds=SILENCE_SECONDS)
"""The settings a test's watcher takes: cluster ``c1``, every namespace."""


@dataclass
class Fail:
    """An HTTP error answer: a Kubernetes Status body with ``status``, extra headers."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    reason: str = "Scripted"

    def response(self) -> Response:
        body = {
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "code": self.status,
            "reason": self.reason,
            "message": f"scripted {self.status}",
        }
        return Response(status=self.status, headers=self.headers, payload=body)


def _is_watch(request: kmock.Request) -> bool:
    return str(request.params.get("watch", "")).lower() in ("true", "1")


class ScriptedResource:
    """List and watch answers for one resource (core/v1 or ``group/version``), scripted by
    the test."""

    def __init__(self, plural: str, kind: str, api_version: str = "v1") -> None:
        self.plural = plural
        self.kind = kind
        self.api_version = api_version
        self.objects: dict[str, dict[str, Any]] = {}
        """uid -> current object, what a list returns."""
        self.list_version = "1000"
        self.list_answers: collections.deque[Fail] = collections.deque()
        self.watch_answers: collections.deque[Fail] = collections.deque()
        self.list_requests: list[dict[str, str]] = []
        self.watch_requests: list[dict[str, str]] = []
        self._steps: collections.deque[Any] = collections.deque()
        self._changed = asyncio.Event()

    # -- the test's side ---------------------------------------------------------------
    def put(self, obj: dict[str, Any]) -> None:
        """Store ``obj`` (by uid) as the current state a list returns."""
        self.objects[obj["metadata"]["uid"]] = obj

    def send(self, step: Any) -> None:
        """Feed the live watch stream: a watch event dict, raw bytes (a line), or END."""
        self._steps.append(step)
        self._changed.set()

    def event(self, kind: str, obj: dict[str, Any]) -> None:
        """Send ``{"type": kind, "object": obj}`` and keep the list state in step with it."""
        if kind == "DELETED":
            self.objects.pop(obj["metadata"]["uid"], None)
        elif kind in ("ADDED", "MODIFIED"):
            self.put(obj)
        self.send({"type": kind, "object": obj})

    def end(self) -> None:
        """End the current live stream (as the server does at timeoutSeconds)."""
        self.send(END)

    @property
    def pending(self) -> int:
        """Steps not yet taken by a live stream."""
        return len(self._steps)

    # -- the server's side -------------------------------------------------------------
    async def handle(self, request: kmock.Request) -> Response:
        if _is_watch(request):
            self.watch_requests.append(dict(request.params))
            if self.watch_answers:
                return self.watch_answers.popleft().response()
            return Response(status=200, payload=self._live(request))
        self.list_requests.append(dict(request.params))
        if self.list_answers:
            return self.list_answers.popleft().response()
        items = [
            {k: v for k, v in obj.items() if k not in ("kind", "apiVersion")}
            for obj in self.objects.values()
            if request.namespace is None or obj["metadata"].get("namespace") == request.namespace
        ]
        body = {
            "kind": f"{self.kind}List",
            "apiVersion": self.api_version,
            "metadata": {"resourceVersion": self.list_version},
            "items": items,
        }
        return Response(status=200, payload=body)

    async def _live(self, request: kmock.Request) -> AsyncIterator[Any]:
        raw = request._raw_request  # the only way to see the client left
        yield b""  # send the headers now, like the API server does
        while True:
            transport = raw.transport if raw is not None else None
            if transport is None or transport.is_closing():
                return  # the client is gone: leave the steps to its successor
            if not self._steps:
                self._changed.clear()
                with suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), 0.05)
                continue
            step = self._steps.popleft()
            if step is END:
                return
            yield step


DRA_GROUP: Final = "resource.k8s.io"
DRA_SCRIPTED: Final = {
    "resourceslices": ("ResourceSlice", "v1"),
    "resourceclaims": ("ResourceClaim", "v1"),
    "resourceclaimtemplates": ("ResourceClaimTemplate", "v1"),
    "devicetaintrules": ("DeviceTaintRule", "v1beta2"),
}
"""The DRA resources a :func:`fake_cluster` with ``dra=True`` serves, at the version served
(DeviceTaintRules: v1beta2, as Kubernetes 1.36 serves them)."""


@dataclass
class FakeCluster:
    """A kmock server with scripted pods, nodes and events (and DRA resources when asked for),
    and an ApiClient for it."""

    server: kmock.KubernetesEmulator
    url: str
    api: ApiClient
    pods: ScriptedResource
    nodes: ScriptedResource
    events: ScriptedResource
    dra: dict[str, ScriptedResource] = field(default_factory=dict)
    """Plural -> scripted DRA resource; empty: the server serves no resource.k8s.io."""

    def resource(self, plural: str) -> ScriptedResource:
        """The scripted resource by plural name."""
        core = {"pods": self.pods, "nodes": self.nodes, "events": self.events}
        return core[plural] if plural in core else self.dra[plural]

    def requests(self) -> list[kmock.Request]:
        """Every request the server received, in order."""
        return list(self.server)


@asynccontextmanager
async def fake_cluster(*, dra: bool = False) -> AsyncIterator[FakeCluster]:
    """Start kmock with scripted core/v1 pods, nodes and events, and with ``dra`` the
    resource.k8s.io resources (:data:`DRA_SCRIPTED`); yield it with a client. Without
    ``dra``, requests for them are answered 404, as by a cluster before Kubernetes 1.34."""
    async with kmock.KubernetesEmulator() as server, kmock.Server(server) as running:
        scripted = {
            "pods": ScriptedResource("pods", "Pod"),
            "nodes": ScriptedResource("nodes", "Node"),
            "events": ScriptedResource("events", "Event"),
        }
        for plural, resource in scripted.items():
            server[kmock.resource("", "v1", plural)] << resource.handle
        dra_scripted: dict[str, ScriptedResource] = {}
        if dra:
            for plural, (kind, version) in DRA_SCRIPTED.items():
                dra_scripted[plural] = ScriptedResource(plural, kind, f"{DRA_GROUP}/{version}")
                route = kmock.resource(DRA_GROUP, version, plural)
                server[route] << dra_scripted[plural].handle
        url = str(running.url).rstrip("/")
        async with ApiClient(Configuration(host=url)) as api:
            yield FakeCluster(
                server=server,
                url=url,
                api=api,
                pods=scripted["pods"],
                nodes=scripted["nodes"],
                events=scripted["events"],
                dra=dra_scripted,
            )


# -- objects -------------------------------------------------------------------------
def pod(
    name: str,
    rv: str,
    *,
    uid: str | None = None,
    namespace: str = "ml",
    gpus: int = 1,
    node: str = "gpu-1",
    phase: str = "Running",
    reason: str = "",
) -> dict[str, Any]:
    """A minimal but complete pod (GPU request unless ``gpus=0``)."""
    resources = {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}} if gpus else {}
    status: dict[str, Any] = {"phase": phase}
    if reason:
        status["reason"] = reason
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}",
            "resourceVersion": rv,
            "creationTimestamp": CREATED,
        },
        "spec": {"nodeName": node, "containers": [{"name": "main", "resources": resources}]},
        "status": status,
    }


def node(name: str, rv: str, *, gpus: int = 8, allocatable: int | None = None) -> dict[str, Any]:
    """A node with ``gpus`` GPUs of capacity (``allocatable`` defaults to the same)."""
    alloc = gpus if allocatable is None else allocatable
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "creationTimestamp": CREATED,
            "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        },
        "spec": {},
        "status": {
            "capacity": {GPU: str(gpus)} if gpus else {},
            "allocatable": {GPU: str(alloc)} if gpus else {},
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": CREATED}],
        },
    }


def kube_event(
    name: str, rv: str, *, reason: str, pod_name: str, namespace: str = "ml", message: str = ""
) -> dict[str, Any]:
    """A core/v1 Event about pod ``namespace/pod_name``."""
    return {
        "kind": "Event",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{name}",
            "resourceVersion": rv,
            "creationTimestamp": CREATED,
        },
        "involvedObject": {"kind": "Pod", "name": pod_name, "namespace": namespace},
        "reason": reason,
        "message": message or reason,
        "type": "Warning",
        "source": {"component": "kubelet", "host": "gpu-1"},
        "count": 1,
        "lastTimestamp": CREATED,
    }


def bookmark(rv: str, kind: str = "Pod") -> dict[str, Any]:
    """A BOOKMARK watch event at ``rv``."""
    return {"type": "BOOKMARK", "object": {"kind": kind, "metadata": {"resourceVersion": rv}}}


def gone() -> dict[str, Any]:
    """The ERROR watch event the API server sends for a too old resourceVersion."""
    return {
        "type": "ERROR",
        "object": {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "code": 410,
            "reason": "Expired",
            "message": "too old resource version: 1000 (1500)",
        },
    }


@asynccontextmanager
async def collecting(source: AsyncIterator[T]) -> AsyncIterator[list[T]]:
    """Iterate ``source`` in a task, appending to the yielded list; cancel it at exit."""
    items: list[T] = []

    async def pump() -> None:
        async for item in source:
            items.append(item)

    task = asyncio.create_task(pump())
    try:
        yield items
        if task.done():
            task.result()  # surface a crash of the iterator
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def ids(items: Iterator[Any] | list[Any]) -> list[str]:
    """The event ids of ``Emitted`` items, in order."""
    return [item.event.id for item in items if hasattr(item, "event")]


def kubeconfig(path: Path, url: str) -> Path:
    """Two contexts: the current one points nowhere, ``kmock`` at the test server."""
    path.write_text(
        f"""apiVersion: v1
kind: Config
current-context: elsewhere
clusters:
- name: nowhere
  cluster: {{server: "http://127.0.0.1:1"}}
- name: kmock
  cluster: {{server: "{url}"}}
users:
- name: nobody
  user: {{token: "not-a-real-token"}}
contexts:
- name: elsewhere
  context: {{cluster: nowhere, user: nobody}}
- name: kmock
  context: {{cluster: kmock, user: nobody}}
"""
    )
    return path


class Elected(NamedTuple):
    """What ``run_connect`` takes for an elected replica: its settings and its Lease."""

    settings: K8sSettings
    lease: LeaseOptions


def elected_options(
    tmp_path: Path,
    url: str,
    *,
    retry_period_seconds: float,
    lease_duration_seconds: float = 2.0,
    renew_deadline_seconds: float = 1.0,
) -> Elected:
    """``connect k8s`` settings against the test server (kubeconfig context ``kmock``, no
    metrics port), and leader election as ``replica-1`` in namespace ``gputriage``; pass
    :data:`FAST_WATCH` beside them for fast watches.

    Trap: on the wall clock a 1 s renew deadline is short on a loaded CI machine (the
    release is bounded by it too); a test that needs no failover should pass longer ones.
    """
    return Elected(
        K8sSettings(
            cluster="c1",
            kubeconfig=str(kubeconfig(tmp_path / "kubeconfig", url)),
            context="kmock",
            metrics_port=None,
            silence_timeout_seconds=SILENCE_SECONDS,
        ),
        LeaseOptions(
            namespace="gputriage",
            name=K8sSettings().lease_name,
            identity="replica-1",
            lease_duration_seconds=lease_duration_seconds,
            renew_deadline_seconds=renew_deadline_seconds,
            retry_period_seconds=retry_period_seconds,
        ),
    )
