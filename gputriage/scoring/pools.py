"""The score of each node pool kind: DRA nodes apart from device-plugin ones.

On a mixed cluster one figure per type hides which nodes it measures, so the score
splits every type by pool kind, :data:`DRA` or :data:`DEVICE_PLUGIN`. A truth is DRA's
when the simulator's DRA pool made it (``fault`` starts with :data:`DRA_FAULT_PREFIX`);
an incident is DRA's when its node is a DRA node (it publishes a ResourceSlice in the
events, or a DRA truth names it), or, cluster-scoped, it names a pod or node group of a
DRA truth or lists a DRA node among its ``nodes`` (a false "0 requested, 8 bound").
A confusion goes with its truth. The parts of a type add up to its whole.

Trap: a stream read from stdin cannot be scanned twice: there only the truths say which
nodes are DRA's (a false positive on a DRA node no truth names counts as device-plugin).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from connectors.files import FileReader
from gputriage.scoring.matching import Detected, Matching
from gputriage.scoring.metrics import TypeScore, type_scores
from schemas.incidents import Incident
from schemas.truth import ExpectedIncident

DRA: Final = "dra"
DEVICE_PLUGIN: Final = "device-plugin"
POOLS: Final = (DEVICE_PLUGIN, DRA)
DRA_FAULT_PREFIX: Final = "dra_"
"""The simulator's DRA pool names its faults ``dra_<story>``."""
_SLICE_TAG: Final = b'"resource_slice.v1"'
_NODE_KEY: Final = b'"node":"'


@dataclass
class DraSubjects:
    """What marks an incident as DRA's: nodes, pods (``namespace/name``), node groups."""

    nodes: set[tuple[str, str]] = field(default_factory=set)
    pods: set[tuple[str, str]] = field(default_factory=set)
    groups: set[tuple[str, str]] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.nodes or self.pods or self.groups)


def is_dra_truth(truth: ExpectedIncident) -> bool:
    return truth.fault.startswith(DRA_FAULT_PREFIX)


def subjects(
    truths: Iterable[ExpectedIncident], nodes: Iterable[tuple[str, str]] = ()
) -> DraSubjects:
    """The DRA subjects the DRA truths name, plus ``nodes`` ((cluster, node) pairs)."""
    found = DraSubjects(nodes=set(nodes))
    for truth in truths:
        if not is_dra_truth(truth):
            continue
        if truth.node:
            found.nodes.add((truth.cluster, truth.node))
        found.pods.update((truth.cluster, pod) for pod in truth.pods)
        if truth.node_group:
            found.groups.add((truth.cluster, truth.node_group))
    return found


def slice_nodes(path: str) -> set[tuple[str, str]]:
    """(cluster, node) of every ResourceSlice record in the event file ``path`` (the
    connector publishes a GPU driver's slices only); empty for stdin. A cheap scan:
    only lines that carry the slice tag are decoded."""
    from schemas.codec import try_decode_event  # noqa: PLC0415 - only when scanning
    from schemas.events import ResourceSliceEvent  # noqa: PLC0415

    found: set[tuple[str, str]] = set()
    if path in {"-", "<stdin>"}:
        return found
    with FileReader(path) as source:
        for _, raw in source.lines():
            if isinstance(raw, bytes) and _SLICE_TAG in raw and _NODE_KEY in raw:
                event = try_decode_event(raw)
                if isinstance(event, ResourceSliceEvent) and event.node:
                    found.add((event.cluster, event.node))
    return found


def incident_pool(incident: Incident, dra: DraSubjects) -> str:
    """:data:`DRA` or :data:`DEVICE_PLUGIN` (the module docstring's rule)."""
    cluster = incident.cluster
    if incident.node:
        return DRA if (cluster, incident.node) in dra.nodes else DEVICE_PLUGIN
    if any((cluster, f"{p.namespace}/{p.name}") in dra.pods for p in incident.pods):
        return DRA
    named = incident.attributes.get("nodes", "").split(",")
    if any((cluster, n) in dra.nodes for n in named if n):
        return DRA
    groups = {incident.attributes.get("node_group", "")}
    groups.update(incident.attributes.get("node_groups", "").split(","))
    if any((cluster, g) in dra.groups for g in groups if g):
        return DRA
    return DEVICE_PLUGIN


def pool_scores(matching: Matching, dra: DraSubjects) -> dict[str, dict[str, TypeScore]]:
    """``{pool: {type: TypeScore}}`` for each pool kind with a truth or an incident."""
    scores: dict[str, dict[str, TypeScore]] = {}
    for pool in POOLS:
        part = _part(matching, pool, dra)
        if part.matched or part.misses or part.false_positives:
            scores[pool] = type_scores(part)
    return scores


def _part(matching: Matching, pool: str, dra: DraSubjects) -> Matching:
    def truth_in(truth: ExpectedIncident) -> bool:
        return (DRA if is_dra_truth(truth) else DEVICE_PLUGIN) == pool

    def detected_in(item: Detected) -> bool:
        return incident_pool(item.incident, dra) == pool

    return Matching(
        matched=tuple(p for p in matching.matched if truth_in(p.truth)),
        misses=tuple(t for t in matching.misses if truth_in(t)),
        false_positives=tuple(d for d in matching.false_positives if detected_in(d)),
        confused=tuple(p for p in matching.confused if truth_in(p.truth)),
        excused=tuple(p for p in matching.excused if truth_in(p.truth)),
    )
