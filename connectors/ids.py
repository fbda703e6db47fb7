"""Deterministic event ids for sources whose records carry no id of their own.

A connector that re-reads the same input (a restart, a replayed file, a
re-scrape) must produce the same ids, or the correlation core cannot tell a
redelivery from a new fact. So ids are hashes of what identifies the fact,
never counters or random values: ``<source>-<20 hex digits>`` (80 bits of
blake2b; collisions are not a concern at any realistic volume).

Trap: parts are joined with the ASCII unit separator, so ``("a", "bc")`` and
``("ab", "c")`` hash differently; ``str()`` of each part must itself be stable
(no dict or set reprs).
"""

from __future__ import annotations

from hashlib import blake2b
from typing import Final

_SEP: Final = "\x1f"


def hashed_id(source: str, *parts: object) -> str:
    """``<source>-`` + 20 hex digits of a hash of ``parts``."""
    material = _SEP.join(str(p) for p in parts).encode()
    return f"{source}-{blake2b(material, digest_size=10).hexdigest()}"
