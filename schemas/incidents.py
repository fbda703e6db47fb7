"""The incident record: what the processor publishes on the incident topic.

Each publication is one *revision* of an incident. All revisions share the id
(the message key on the compacted topic), so the topic ends up holding the
latest state of each incident, and a consumer that dedupes on ``(id, revision)``
sees every change exactly once.
"""

from __future__ import annotations

import msgspec

from schemas.types import IncidentStatus, Severity, Time


class GpuRef(msgspec.Struct, frozen=True, kw_only=True):
    """A GPU as far as we know it: any of the identifiers may be empty."""

    uuid: str = ""
    """For a MIG instance, its parent GPU's uuid (and bus id, index)."""
    pci_bus_id: str = ""
    index: int | None = None
    gpu_instance: int | None = None
    """The MIG GPU instance id when the incident is about one instance of the GPU
    (an XID naming ``GPU-I:NN``, a pod bound to that instance); None for a whole GPU."""
    mig_profile: str = ""
    """That instance's MIG profile (``1g.10gb``), when a binding said it."""


class PodInfo(msgspec.Struct, frozen=True, kw_only=True):
    """An affected pod, its owner, and its part in the incident.

    ``role`` says how sure we are: ``evicted``/``failed``/``restarting``/
    ``oom_killed`` for pods the evidence names, ``bound`` for the one pod that held
    a GPU, ``candidate`` when a shared (time-sliced/MPS) GPU means we cannot tell
    which of several pods was involved, ``running`` for pods at risk.
    """

    namespace: str
    name: str
    owner_kind: str = ""
    owner_name: str = ""
    container: str = ""
    role: str = ""


class Evidence(msgspec.Struct, frozen=True, kw_only=True):
    """One event the incident rests on, with a one-line human description."""

    event_id: str
    schema: str
    time: Time
    text: str


class Incident(msgspec.Struct, frozen=True, kw_only=True, tag_field="schema", tag="incident.v1"):
    """One revision of a typed incident."""

    id: str
    type: str
    status: IncidentStatus
    revision: int
    severity: Severity
    cluster: str
    node: str = ""
    gpus: tuple[GpuRef, ...] = ()
    pods: tuple[PodInfo, ...] = ()
    first_seen: Time
    last_seen: Time
    resolved_at: Time | None = None
    summary: str
    action: str = ""
    evidence: tuple[Evidence, ...] = ()
    evidence_omitted: int = 0
    """How many further evidence events were left out to bound the record size."""
    attributes: dict[str, str] = {}
    """Type-specific facts, e.g. ``{"xid": "79"}`` or ``{"confidence": "log-confirmed"}``."""
