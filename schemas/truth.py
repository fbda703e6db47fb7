"""Ground truth: the incidents a simulated stream must give, written by ``gputriage simulate``.

``--truth TRUTH.jsonl`` writes one :class:`ExpectedIncident` per injected fault, and
``gputriage score EVENTS TRUTH`` matches a replay's incidents against them (by type,
cluster, node, pods, GPUs, node group and a ``first_seen`` window). Noise writes nothing,
so an unmatched incident is a false positive. The simulator says what to expect, never the
core: a core that drifts from the domain shows as a drop in recall, not as a new truth.

Traps: ``not_before``/``not_after`` bound ``first_seen`` (earliest evidence), not the
publication; the delay is measured from ``start`` to the first revision's event time;
versioned like the wire (``truth.v1``): a new field gets a default.
docs/replay.md, design notes: the truth records.
"""

from __future__ import annotations

import msgspec

from schemas.codec import typed_decoder
from schemas.types import Time

CLUSTER_SCOPED = frozenset(
    {
        "scale_up_failure",
        "gpu_pods_starved",
        "gpu_pods_unschedulable",
        "allocation_mismatch",
        "nvlink_domain_fault",
    }
)
"""Incident types raised on a cluster's key, with no node to match on."""


class ExpectedIncident(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag_field="schema",
    tag="truth.v1",
    omit_defaults=True,
):
    """One incident a simulated fault must give."""

    id: str
    """The fault's own id (deterministic: seeded), to name it in a score's misses."""
    fault: str
    """The simulator's name of the fault (``fatal_xid_eviction``, ``host_oom``...)."""
    type: str
    """The incident type it must give (docs/detection.md lists them)."""
    cluster: str
    node: str = ""
    """"" for the cluster-scoped types (:data:`CLUSTER_SCOPED`)."""
    gpus: tuple[str, ...] = ()
    """GPU UUIDs the incident must name (one of them suffices to match)."""
    pods: tuple[str, ...] = ()
    """``namespace/name`` of the pods the incident must name (one suffices to match)."""
    owner: str = ""
    """``Kind/name`` of the pods' owner, for the report."""
    node_group: str = ""
    """The autoscaler's node group (``scale_up_failure``, ``gpu_pods_starved``)."""
    start: Time
    """Event time of the fault's first event: detection delay counts from here."""
    not_before: Time
    """The earliest ``first_seen`` a matching incident may have."""
    not_after: Time
    """The latest ``first_seen`` a matching incident may have."""
    severity: str = ""
    """The severity the domain gives it (``page``/``ticket``/``info``), "" when it depends
    on configuration; reported, not matched."""
    optional: bool = False
    """The stream ends too close to when the incident is due for the truth to say whether
    it opens (a 5 min persistence timer that the last events' watermark may or may not
    pass): an incident that matches it is neither a true nor a false positive, and none
    is no miss. Added after the first release of ``truth.v1``: older files decode with
    ``False``."""


decode_truth = typed_decoder(ExpectedIncident)
"""One line of a truth file; :class:`schemas.codec.RecordError` (naming the field) on a
bad one. Write one with :func:`schemas.codec.encode`."""
