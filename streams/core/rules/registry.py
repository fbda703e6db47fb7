"""Every rule, in the order its timers fire: add a new rule's ``SPEC`` here, nowhere else.

``streams.core.node`` and ``streams.core.cluster`` loop over these tuples for timers and
deadlines; ``CoreSettings.severity`` starts from :data:`DEFAULT_SEVERITY`; the tests count
incident types from :data:`INCIDENT_TYPES`.

Why an explicit tuple and not discovery (``pkgutil`` over this package): the order is
part of the output (two incidents due at one instant are published in it), and a
listing's order is a file name's; the core does no I/O, and a directory listing at
import is I/O; and a tuple is plain code that mypyc compiles. A forgotten registration
does not go unnoticed: a test imports every module of this package and fails on a
``SPEC`` that is not listed here.
"""

from __future__ import annotations

from schemas.types import Severity
from streams.core.rules import (
    chain,
    cuda,
    degraded,
    fabric,
    mismatch,
    not_ready,
    nvlink,
    oom,
    stalled,
    starved,
    watchers,
    xid,
)
from streams.core.rules.spec import ClusterRule, NodeRule, emitted, types_of

NODE_RULES: tuple[NodeRule, ...] = (
    chain.SPEC,
    degraded.SPEC,
    oom.SPEC,
    not_ready.SPEC,
    xid.SPEC,
    cuda.SPEC,
    nvlink.SPEC,
    watchers.SPEC,
    stalled.SPEC,
)
"""The node key's rules. The first five have timers, in the order they always fired; the
rules appended since fire after them."""

CLUSTER_RULES: tuple[ClusterRule, ...] = (
    starved.SPEC,
    mismatch.SPEC,
    fabric.SPEC,
)
"""The cluster key's rules."""

NODE_TYPES: tuple[str, ...] = types_of(NODE_RULES)
CLUSTER_TYPES: tuple[str, ...] = types_of(CLUSTER_RULES)
INCIDENT_TYPES: tuple[str, ...] = NODE_TYPES + CLUSTER_TYPES
"""Every incident type the core can open, each once."""

DEFAULT_SEVERITY: dict[str, Severity] = {
    kind: severity for rules in (NODE_RULES, CLUSTER_RULES) for kind, severity in emitted(rules)
}
"""Per type, from the rules' declarations. ``gpu_pods_starved`` and ``scale_up_failure``
take ``quota_severity`` instead when the cloud refused for quota (it will not heal by
waiting)."""
