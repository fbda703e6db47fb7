"""What a GPU node's labels say about its GPUs, read by the node key and the cluster key.

Apart from ``streams.core.node`` so that a rule of the cluster key
(:mod:`streams.core.rules.mismatch`) can read it without importing the node module, which
imports the rule registry, which imports every rule: a cycle.
"""

from __future__ import annotations

from schemas.wellknown import REPLICAS_LABEL, SHARING_LABEL


def sharing_of(labels: dict[str, str]) -> str:
    """``time-slicing`` or ``mps`` when the node's labels say its GPUs are shared (the GPU
    operator's sharing strategy, or more than one replica per GPU); else empty."""
    strategy = labels.get(SHARING_LABEL, "")
    if strategy in ("time-slicing", "mps"):
        return strategy
    replicas = labels.get(REPLICAS_LABEL, "1")
    if replicas != "1" and replicas.isdigit() and int(replicas) > 1:
        return "time-slicing"
    return ""
