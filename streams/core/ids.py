"""Deterministic incident ids.

An id is a hash of what makes an incident *this* incident: its type, where it
is (cluster, node), its subject (a GPU, a container, "the chain on this node")
and the id of the event that anchored it (the first evidence in event-time
order). No clock and no random source goes in, so a replay, a redelivery after
a crash, or a second worker all derive the same id, and a ``resolved`` revision
lands on the same compacted-topic key as the ``open`` one.
"""

from __future__ import annotations

from hashlib import blake2b

_SEP = "\x1f"


def incident_id(kind: str, cluster: str, node: str, subject: str, anchor: str) -> str:
    """``inc-`` followed by 20 hex digits (80 bits: collisions are not a concern)."""
    material = _SEP.join((kind, cluster, node, subject, anchor)).encode()
    return "inc-" + blake2b(material, digest_size=10).hexdigest()
