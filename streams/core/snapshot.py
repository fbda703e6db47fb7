"""Serialising one key's state, for a changelog-backed table.

The state is versioned by its tag (``node_state.v1``); a change that old
snapshots cannot decode into needs a new tag and a migration, exactly like an
event schema. Snapshots are MessagePack (see :func:`schemas.codec.msgpack_codec`).

One such migration lives here (:func:`_migrate`): fields that moved from a leaf struct
into an optional side struct of it (``GpuTrack.last_xid`` into ``GpuTrack.xid``,
``ContainerTrack.restarts`` into ``ContainerTrack.crash``...). Trap: msgspec drops a map
key it does not know without a word, so without it an older snapshot would restore
with its XID and crash history silently gone.
"""

from __future__ import annotations

from typing import Any, cast

import msgspec

from schemas.codec import msgpack_codec
from streams.core.state import ClusterState, KeyState, NodeState

_encode, _decode = msgpack_codec(NodeState | ClusterState)

_MOVED: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("gpus", "xid", (("last_xid", "last"), ("last_xid_app", "app"), ("fatal", "fatal"))),
    (
        "pods",
        "crash",
        (("restarts", "restarts"), ("oom_at", "oom_at"), ("cuda_log", "cuda_log")),
    ),
)
"""Per ``NodeState`` field: the side struct's field name and (old flat name, its name
inside the side struct). ``pods`` means each pod's containers."""

_OLD_KEYS = (b"last_xid", b"\xa5fatal", b"\xa8restarts", b"\xa6oom_at", b"\xa8cuda_log")
"""The old flat names as MessagePack spells them (a short str's length is in its first
byte): a snapshot holding none of them is decoded directly. A stray match (the words in
a log line) only costs the slower path, which gives the same state."""


def encode_state(state: KeyState) -> bytes:
    """One key's state as bytes."""
    return _encode(state)


def decode_state(data: bytes) -> KeyState:
    """The state :func:`encode_state` wrote, or an older release wrote (moved fields are
    read where they live now); raises ``schemas.codec.RecordError``."""
    if any(old in data for old in _OLD_KEYS):
        state = _decode(data)  # validates, and raises the usual error on bad input
        if isinstance(state, NodeState):
            raw = msgspec.msgpack.decode(data)
            _migrate(raw)
            return msgspec.convert(raw, NodeState)
        return cast(KeyState, state)
    return cast(KeyState, _decode(data))


def _migrate(raw: dict[str, Any]) -> None:
    """Move the old flat fields of a node state's GPUs and containers (builtins, in
    place) into their side structs."""
    for field, side, names in _MOVED:
        for leaf in _leaves(raw.get(field), field):
            moved = {new: leaf.pop(old) for old, new in names if old in leaf}
            if moved and side not in leaf:
                leaf[side] = moved


def _leaves(value: object, field: str) -> list[dict[str, Any]]:
    """The GPU maps of ``gpus``, or the container maps of every pod of ``pods``."""
    if not isinstance(value, dict):
        return []
    if field == "gpus":
        return [v for v in value.values() if isinstance(v, dict)]
    found: list[dict[str, Any]] = []
    for pod in value.values():
        ctrs = pod.get("containers") if isinstance(pod, dict) else None
        if isinstance(ctrs, dict):
            found.append(ctrs)
        elif isinstance(ctrs, list):
            found.extend(c for c in ctrs if isinstance(c, dict))
    return found
