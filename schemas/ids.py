"""Deterministic ids, for events whose sources carry none and for incidents.

A connector that re-reads the same input (a restart, a replayed file, a
re-scrape) must produce the same event ids, or the correlation core cannot tell
a redelivery from a new fact; an incident's id must be the same in a replay, after
a crash, or in a second worker, so that a ``resolved`` revision lands on the same
compacted-topic key as the ``open`` one. So ids are hashes of what identifies the
fact, never counters, clocks or random values: ``<prefix>-<20 hex digits>`` (80 bits
of blake2b; collisions are not a concern at any realistic volume).

Trap: parts are joined with the ASCII unit separator, so ``("a", "bc")`` and
``("ab", "c")`` hash differently; ``str()`` of each part must itself be stable
(no dict or set reprs).
"""

from __future__ import annotations

from hashlib import blake2b
from typing import Final

from schemas.types import MAX_RESOURCE_VERSION

_SEP: Final = "\x1f"


def hashed_id(prefix: str, *parts: object) -> str:
    """``<prefix>-`` + 20 hex digits of a hash of ``parts``."""
    material = _SEP.join(str(p) for p in parts).encode()
    return f"{prefix}-{blake2b(material, digest_size=10).hexdigest()}"


def incident_id(kind: str, cluster: str, node: str, subject: str, anchor: str) -> str:
    """An incident's id: its type, where it is, its subject (a GPU, a container, "the chain
    on this node") and the id of the event that anchored it (its first evidence in event
    time): ``inc-`` + 20 hex digits."""
    return hashed_id("inc", kind, cluster, node, subject, anchor)


def k8s_event_id(uid: str, resource_version: str) -> str:
    """The id of an event made from a Kubernetes object: ``k8s:<uid>:<resourceVersion>``.

    The object's own identity and version, so a relist or a redelivery of the same
    version is the same event, and the core can read the version back
    (:func:`k8s_version`) to tell a newer copy of an object from an older one.
    """
    return f"k8s:{uid}:{resource_version}"


def k8s_version(event_id: str) -> int:
    """The resourceVersion inside a :func:`k8s_event_id`; 0 when the id is not one.

    Kubernetes calls resourceVersion opaque, but every API server in use backs it
    with etcd's revision, a decimal counter that grows with every write across the
    cluster: a larger number is a later version of the same object. Anything else
    (a non-numeric version, an id of another source, a test's counter) is 0,
    "unknown", and the caller must then not order by it.
    """
    if not event_id.startswith("k8s:"):
        return 0
    return resource_version_number(event_id[event_id.rfind(":") + 1 :])


def resource_version_number(resource_version: str) -> int:
    """A resourceVersion as the number it stands for (etcd's revision); 0 when it is none.

    What :attr:`schemas.events.PodEvent.resource_version` carries. Only ASCII decimal
    digits up to :data:`~schemas.types.MAX_RESOURCE_VERSION` are a number. Traps:
    ``str.isdigit`` is true of ``"²"``, which ``int`` refuses (an exception in the core's
    hot path), and of 30 digits, which no MessagePack snapshot can hold.
    """
    if not (resource_version.isascii() and resource_version.isdigit()):
        return 0
    number = int(resource_version)
    return number if number <= MAX_RESOURCE_VERSION else 0
