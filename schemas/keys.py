"""Correlation keys: which records must meet in one worker (part of the topic contract).

Every raw record is keyed by its correlation key, and every raw topic has the
same partition count, so all signals about one node hash to the same partition
number of every topic and meet in the worker that owns it (DESIGN §4,
principle 3). Producers (the connectors) and the processor must agree on this
function byte for byte, which is why it lives with the schemas and not in
either of them.

* node-scoped records (pods, nodes, XIDs, GPU bindings, node Events): ``cluster/node``;
* cluster-scoped records (autoscaler decisions, pending pods' cluster view): ``cluster``.

Trap: changing this function, or the partition count of a running deployment,
re-homes keys; it needs a fresh processor state, not a rolling upgrade.
"""

from __future__ import annotations

from schemas.codec import AnyEvent


def key_of(cluster: str, node: str = "") -> str:
    """The correlation key of a node (``cluster/node``) or of a cluster (``cluster``)."""
    return f"{cluster}/{node}" if node else cluster


def correlation_key(event: AnyEvent) -> str:
    """``cluster/node`` for node-scoped events, ``cluster`` for cluster-scoped ones."""
    return key_of(event.cluster, getattr(event, "node", ""))
