"""A kmock API server for the write-back: pods and Events in kmock's emulator, nodes with
the server-side-apply rules the write-back relies on.

kmock's emulator stores what is created, answers 409 to a second create and 404 to what is
not there, but merges a patch as plain JSON: a node's ``status.conditions`` (a list map
keyed by ``type`` under server-side apply) would be replaced whole. Nodes are therefore
answered by :class:`Nodes`: apply merges conditions by type, records each type's field
manager in ``managedFields``, answers 409 when another manager owns a type with another
value (and no ``force``), and a merge patch of ``spec`` checks ``metadata.resourceVersion``.
The real kubernetes-asyncio client talks to it over HTTP; every request is recorded.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

import kmock
from kmock._internal.rendering import Response  # not in kmock.__all__, same class
from kubernetes_asyncio.client import ApiClient, Configuration

WRITES: Final = frozenset(("POST", "PUT", "PATCH", "DELETE"))


def status(code: int, reason: str, message: str) -> Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    return Response(status=code, payload={**body, "reason": reason, "message": message})


@dataclass
class Nodes:
    """The nodes, as an API server with server-side apply keeps them."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    applies: list[tuple[str, str, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    """(node, field manager, body, query) of each apply."""
    failures: list[int] = field(default_factory=list)
    """Statuses the next applies answer instead of applying (a 500, a 429), oldest first."""
    _version: int = 100

    def put(self, node: dict[str, Any]) -> None:
        self.objects[node["metadata"]["name"]] = copy.deepcopy(node)

    def owner(self, name: str, kind: str) -> str | None:
        for entry in self.objects[name]["metadata"].get("managedFields") or []:
            conditions = entry["fieldsV1"].get("f:status", {}).get("f:conditions", {})
            if f'k:{{"type":"{kind}"}}' in conditions:
                return str(entry["manager"])
        return None

    def own(self, name: str, kind: str, manager: str) -> None:
        meta = self.objects[name]["metadata"]
        entries = [e for e in meta.get("managedFields") or [] if e["manager"] != manager]
        mine = next((e for e in meta.get("managedFields") or [] if e["manager"] == manager), None)
        mine = mine or {"manager": manager, "operation": "Apply", "fieldsV1": {}}
        conditions = mine["fieldsV1"].setdefault("f:status", {}).setdefault("f:conditions", {})
        conditions[f'k:{{"type":"{kind}"}}'] = {"f:status": {}, "f:reason": {}}
        for entry in entries:  # a manager loses what another takes over
            theirs = entry["fieldsV1"].get("f:status", {}).get("f:conditions", {})
            theirs.pop(f'k:{{"type":"{kind}"}}', None)
        meta["managedFields"] = [*entries, mine]

    def condition(self, name: str, kind: str) -> dict[str, Any] | None:
        for condition in self.objects[name]["status"].get("conditions") or []:
            if condition["type"] == kind:
                return dict(condition)
        return None

    def _bump(self, name: str) -> None:
        self._version += 1
        self.objects[name]["metadata"]["resourceVersion"] = str(self._version)

    async def handle(self, request: kmock.Request) -> Response:
        method = str(request.method.value if hasattr(request.method, "value") else request.method)
        name = request.name
        if method == "GET" and name is None:  # a page of ``limit`` from ``continue``
            items = [copy.deepcopy(self.objects[n]) for n in sorted(self.objects)]
            start = int(request.params.get("continue") or 0)
            limit = int(request.params.get("limit") or len(items) or 1)
            meta = {"continue": str(start + limit)} if start + limit < len(items) else {}
            body: dict[str, Any] = {"kind": "NodeList", "apiVersion": "v1", "metadata": meta}
            body["items"] = items[start : start + limit]
            return Response(status=200, payload=body)
        if name is None or name not in self.objects:
            return status(404, "NotFound", f'nodes "{name}" not found')
        if method == "GET":
            return Response(status=200, payload=copy.deepcopy(self.objects[name]))
        if method != "PATCH":
            return status(405, "MethodNotAllowed", method)
        content_type = request.headers.get("Content-Type", "")
        data: dict[str, Any] = request.data or {}
        if request.subresource == "status" and content_type.startswith("application/apply-patch"):
            manager = str(request.params.get("fieldManager", ""))
            query = dict(request.params)
            self.applies.append((name, manager, copy.deepcopy(data), query))
            if not manager:
                return status(422, "Invalid", "fieldManager is required for apply")
            if self.failures:
                code = self.failures.pop(0)
                return status(code, "InternalError", "etcdserver: request timed out")
            force = str(query.get("force", "")).lower() == "true"
            conditions = self.objects[name]["status"].setdefault("conditions", [])
            for wanted in data.get("status", {}).get("conditions", []):
                owner = self.owner(name, wanted["type"])
                current = self.condition(name, wanted["type"])
                differs = current is None or current.get("status") != wanted.get("status")
                if owner not in (None, manager) and differs and not force:
                    return status(409, "Conflict", f"conflict with {owner!r}: .status.conditions")
                conditions[:] = [c for c in conditions if c["type"] != wanted["type"]]
                conditions.append(copy.deepcopy(wanted))
                self.own(name, wanted["type"], manager)
            self._bump(name)
            return Response(status=200, payload=copy.deepcopy(self.objects[name]))
        if request.subresource is None and "merge-patch" in content_type:
            asked = (data.get("metadata") or {}).get("resourceVersion")
            if asked and asked != self.objects[name]["metadata"].get("resourceVersion"):
                return status(409, "Conflict", "the object has been modified")
            for key, value in (data.get("spec") or {}).items():
                self.objects[name].setdefault("spec", {})[key] = value
            self._bump(name)
            return Response(status=200, payload=copy.deepcopy(self.objects[name]))
        return status(415, "UnsupportedMediaType", content_type)


@dataclass
class Cluster:
    """The server, its client, and the nodes."""

    server: kmock.KubernetesEmulator
    url: str
    api: ApiClient
    nodes: Nodes

    def add_pod(self, namespace: str, name: str, uid: str = "", created: str = "") -> None:
        """A pod (``created``: its creationTimestamp, RFC 3339; absent when empty)."""
        meta = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}"}
        if created:
            meta["creationTimestamp"] = created
        self.server.objects["v1/pods", namespace, name] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": meta,
            "spec": {"nodeName": "gpu-1"},
        }

    def add_node(self, node: dict[str, Any]) -> None:
        self.nodes.put(node)
        name = node["metadata"]["name"]
        self.server.objects["v1/nodes", None, name] = {"metadata": {"name": name}}

    def events(self) -> list[dict[str, Any]]:
        """The Events stored now (events.k8s.io/v1), deleted ones left out."""
        found = []
        for (resource, _, _), obj in self.server.objects.items():
            if resource.plural == "events" and not obj.deleted:
                found.append(dict(obj.raw))
        return found

    def event_history(self, namespace: str, name: str) -> list[Any]:
        """Every version an Event had (None: deleted), oldest first."""
        for (resource, ns, n), obj in self.server.objects.items():
            if resource.plural == "events" and ns == namespace and n == name:
                return [None if v is None else dict(v.raw) for v in obj.history]
        return []

    def writes(self) -> list[kmock.Request]:
        """Every request that could change something (create, patch, delete)."""
        return [r for r in self.server if str(getattr(r.method, "value", r.method)) in WRITES]

    def event_writes(self) -> list[kmock.Request]:
        return [r for r in self.writes() if "/events" in r.url.path]

    def node_writes(self) -> list[kmock.Request]:
        return [r for r in self.writes() if "/nodes" in r.url.path]


@asynccontextmanager
async def cluster() -> AsyncIterator[Cluster]:
    """Start the server; yield it with a client."""
    async with kmock.KubernetesEmulator() as server, kmock.Server(server) as running:
        nodes = Nodes()
        server[kmock.resource("", "v1", "nodes")] << nodes.handle
        url = str(running.url).rstrip("/")
        async with ApiClient(Configuration(host=url)) as api:
            yield Cluster(server=server, url=url, api=api, nodes=nodes)


def gpu_node(
    name: str, *, pool: str = "gpu-a", conditions: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """A GPU node of Karpenter pool ``pool`` (empty: no pool label)."""
    labels = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    if pool:
        labels["karpenter.sh/nodepool"] = pool
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1", "labels": labels},
        "spec": {},
        "status": {"conditions": [ready, *(conditions or [])]},
    }
