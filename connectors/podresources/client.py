"""The kubelet's pod-resources v1 API over its Unix socket (grpc.aio); its answers as plain data.

``List`` and ``GetAllocatableResources`` through the stubs generated from the upstream
proto. Every failure is a :class:`PollFailed` value with an outcome for the poller's
metrics and backoff; nothing here retries.

Traps: the socket is root's (created with the default umask, and connecting needs write
permission), so a reader runs as uid 0; an older or gated kubelet answers
``UNIMPLEMENTED`` to ``GetAllocatableResources``, which is no failure (:meth:`allocatable`
returns None and the poller stops asking); the channel is made once, since grpc reconnects
by itself and a kubelet restart is an ``UNAVAILABLE`` or two.
In full: docs/connectors.md, design notes: connectors/podresources/client.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import grpc
from google.protobuf import json_format
from grpc import aio

from connectors.podresources._proto import api_pb2, api_pb2_grpc
from connectors.podresources.devices import PREFIXES, RESOURCES, Device, Holding, is_gpu_resource
from schemas.events import PodRef

MAX_MESSAGE: Final = 16 * 1024 * 1024
"""The most one answer may be. A ``List`` of a node with hundreds of pods is well under
1 MiB; the client's default cap is 4 MiB, and an answer over the cap fails the poll
(``RESOURCE_EXHAUSTED``) instead of being read: the headroom is cheap insurance."""


class PollFailed(Exception):
    """One call failed: ``outcome`` names the kind for metrics, the message says why."""

    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome


@dataclass(frozen=True)
class Filter:
    """Which extended resources are GPUs."""

    resources: tuple[str, ...] = RESOURCES
    resource_prefixes: tuple[str, ...] = PREFIXES

    def __call__(self, name: str) -> bool:
        return is_gpu_resource(name, self.resources, self.resource_prefixes)


def holdings(response: api_pb2.ListPodResourcesResponse, gpu: Filter) -> list[Holding]:
    """Every (container, GPU device id) pair of a ``List`` answer."""
    out: list[Holding] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            ref = PodRef(namespace=pod.namespace, name=pod.name, container=container.name)
            for devices in container.devices:
                if gpu(devices.resource_name):
                    out.extend(
                        Holding(pod=ref, device=Device(devices.resource_name, device_id))
                        for device_id in devices.device_ids
                    )
    return out


def allocatable_devices(devices: Iterable[api_pb2.ContainerDevices], gpu: Filter) -> list[Device]:
    """The GPU device ids of a ``GetAllocatableResources`` answer."""
    return [
        Device(d.resource_name, device_id)
        for d in devices
        if gpu(d.resource_name)
        for device_id in d.device_ids
    ]


def parse_list_json(text: str) -> api_pb2.ListPodResourcesResponse:
    """A ``List`` answer saved as JSON (``grpcurl ... v1.PodResourcesLister/List``: camelCase
    or the proto's own snake_case names, both read); raises :class:`ValueError`."""
    try:
        return json_format.Parse(text, api_pb2.ListPodResourcesResponse())
    except json_format.ParseError as exc:  # its message may span lines: one line for the CLI
        raise ValueError(" ".join(str(exc).split())) from None


class Client:
    """One channel to the kubelet; :meth:`list` and :meth:`allocatable` per poll."""

    def __init__(self, target: str, *, timeout_seconds: float) -> None:
        """``target`` and ``timeout_seconds``: the settings' ``socket`` and ``timeout_seconds``."""
        self.target = target
        self.timeout_seconds = timeout_seconds
        self._channel = aio.insecure_channel(
            target,
            options=[("grpc.max_receive_message_length", MAX_MESSAGE)],
        )
        self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)

    async def list(self) -> api_pb2.ListPodResourcesResponse:
        try:
            return await self._stub.List(
                api_pb2.ListPodResourcesRequest(), timeout=self.timeout_seconds
            )
        except aio.AioRpcError as exc:
            raise _failed(exc) from None

    async def allocatable(self) -> api_pb2.AllocatableResourcesResponse | None:
        """The node's devices, or None from a kubelet without the call (the module)."""
        try:
            return await self._stub.GetAllocatableResources(
                api_pb2.AllocatableResourcesRequest(), timeout=self.timeout_seconds
            )
        except aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNIMPLEMENTED:
                return None
            raise _failed(exc) from None

    async def close(self) -> None:
        await self._channel.close()


def _failed(exc: aio.AioRpcError) -> PollFailed:
    code = exc.code()
    outcome = {
        grpc.StatusCode.UNAVAILABLE: "unreachable",
        grpc.StatusCode.DEADLINE_EXCEEDED: "timeout",
    }.get(code, "error")
    return PollFailed(outcome, f"{code.name}: {exc.details() or 'no details'}")
