"""A real gRPC server of the kubelet's ``v1.PodResourcesLister`` on a Unix socket, for tests.

It is the generated servicer (:mod:`connectors.podresources._proto`) served by grpc.aio, as
the kubelet serves it: only what it answers is the test's (:attr:`KubeletServer.pods`,
:attr:`KubeletServer.devices`), and a test changes that between polls.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import grpc
from grpc import aio

from connectors.podresources._proto import api_pb2, api_pb2_grpc

Allocation = Mapping[str, Mapping[str, Iterable[str]]]
"""``{"namespace/pod": {"resource": [device ids]}}`` (one container, ``main``)."""


def list_response(pods: Allocation) -> api_pb2.ListPodResourcesResponse:
    out = api_pb2.ListPodResourcesResponse()
    for key, resources in pods.items():
        namespace, name = key.split("/")
        container = api_pb2.ContainerResources(
            name="main",
            devices=[
                api_pb2.ContainerDevices(resource_name=r, device_ids=list(ids))
                for r, ids in resources.items()
            ],
        )
        out.pod_resources.append(
            api_pb2.PodResources(name=name, namespace=namespace, containers=[container])
        )
    return out


class KubeletServer(api_pb2_grpc.PodResourcesListerServicer):
    """The servicer: answers from :attr:`pods` and :attr:`devices`, counts the calls."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, list[str]]] = {}
        self.devices: dict[str, list[str]] = {}
        """Allocatable device ids by resource."""
        self.allocatable_implemented = True
        self.lists = 0

    async def List(
        self,
        request: api_pb2.ListPodResourcesRequest,
        context: aio.ServicerContext[
            api_pb2.ListPodResourcesRequest, api_pb2.ListPodResourcesResponse
        ],
    ) -> api_pb2.ListPodResourcesResponse:
        self.lists += 1
        return list_response(self.pods)

    async def GetAllocatableResources(
        self,
        request: api_pb2.AllocatableResourcesRequest,
        context: aio.ServicerContext[
            api_pb2.AllocatableResourcesRequest, api_pb2.AllocatableResourcesResponse
        ],
    ) -> api_pb2.AllocatableResourcesResponse:
        if not self.allocatable_implemented:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method")
        return api_pb2.AllocatableResourcesResponse(
            devices=[
                api_pb2.ContainerDevices(resource_name=r, device_ids=ids)
                for r, ids in self.devices.items()
            ]
        )

    async def Get(
        self,
        request: api_pb2.GetPodResourcesRequest,
        context: aio.ServicerContext[
            api_pb2.GetPodResourcesRequest, api_pb2.GetPodResourcesResponse
        ],
    ) -> api_pb2.GetPodResourcesResponse:
        """Not used by the source (it lists); answered as the kubelet would."""
        key = f"{request.pod_namespace}/{request.pod_name}"
        if key not in self.pods:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"pod {key} not found")
        (pod,) = list_response({key: self.pods[key]}).pod_resources
        return api_pb2.GetPodResourcesResponse(pod_resources=pod)


def socket_path(tmp_path: Path) -> Path:
    """Where the test's kubelet listens: in ``tmp_path``, unless that path is too long for a
    Unix socket's address (108 bytes on Linux, ``sun_path``): then in a short folder under
    the temp dir named after ``tmp_path`` (the same one for every call of one test)."""
    inside = tmp_path / "kubelet.sock"
    if len(str(inside)) < 100:
        return inside
    digest = hashlib.sha1(str(tmp_path).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"podres-{digest}"
    folder.mkdir(exist_ok=True)
    return folder / "kubelet.sock"


def target_of(tmp_path: Path) -> str:
    return f"unix://{socket_path(tmp_path)}"


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[tuple[KubeletServer, str]]:
    """A started server and its ``unix://`` target; stopped (and a short folder gone) after."""
    path = socket_path(tmp_path)
    target = f"unix://{path}"
    servicer = KubeletServer()
    server = aio.server()
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(servicer, server)
    server.add_insecure_port(target)
    await server.start()
    try:
        yield servicer, target
    finally:
        await server.stop(grace=None)
        if tmp_path not in path.parents:
            shutil.rmtree(path.parent, ignore_errors=True)
