"""Shared helpers for naming pods in incidents."""

from __future__ import annotations

from schemas.incidents import PodInfo
from streams.core.state import NodeState, PodTrack, bound_pods


def pod_info(key: str, track: PodTrack | None, role: str, container: str = "") -> PodInfo:
    """A :class:`PodInfo` for the pod stored under ``namespace/name``."""
    namespace, _, name = key.partition("/")
    return PodInfo(
        namespace=namespace,
        name=name,
        owner_kind=track.owner_kind if track else "",
        owner_name=track.owner_name if track else "",
        container=container,
        role=role,
    )


def co_tenants(state: NodeState, key: str) -> list[str]:
    """Other pods bound to any GPU this pod is bound to (time-slicing / MPS neighbours)."""
    found: dict[str, None] = {}
    for gpu in state.gpus.values():
        pods = bound_pods(gpu)
        if key in pods:
            for other in pods:
                if other != key:
                    found[other] = None
    return list(found)
