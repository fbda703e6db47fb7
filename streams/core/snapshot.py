"""Serialising one key's state, for a changelog-backed table.

The state is versioned by its tag (``node_state.v1``); a change that old
snapshots cannot decode into needs a new tag and a migration, exactly like an
event schema. Snapshots are MessagePack (see :func:`schemas.codec.msgpack_codec`).
"""

from __future__ import annotations

from typing import cast

from schemas.codec import msgpack_codec
from streams.core.state import ClusterState, KeyState, NodeState

_encode, _decode = msgpack_codec(NodeState | ClusterState)


def encode_state(state: KeyState) -> bytes:
    """One key's state as bytes."""
    return _encode(state)


def decode_state(data: bytes) -> KeyState:
    """The state :func:`encode_state` wrote; raises ``schemas.codec.RecordError``."""
    return cast(KeyState, _decode(data))
