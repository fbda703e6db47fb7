"""Which incident a ground-truth expectation found: the matching rule and a one-to-one pairing.

An incident matches a truth (:func:`fits`) with the same type and cluster, the same node
(node-scoped types), one of the truth's pods and GPU uuids among its own where the truth
names any, the truth's node group where named, and ``first_seen`` within ``[not_before,
not_after]``. It is scored as its latest revision, detected at its first, counted by id.
The pairing (:func:`match`) is one-to-one and maximum (augmenting paths: a greedy one could
leave a truth unmatched), ordered by time then id, never hash order. Optional truths join
after the required ones, so they never cost one its incident. The confusion pairs what is
left with an incident of another type about the same subject: it explains a miss and a
false positive, it does not excuse them.

Trap: a MIG instance carries its parent's uuid, so a truth naming the GPU matches an
incident about one of its instances. docs/replay.md, design notes.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from schemas.incidents import Incident
from schemas.truth import CLUSTER_SCOPED, ExpectedIncident


@dataclass(frozen=True)
class Detected:
    """One incident as a score sees it: its latest revision and when it first came out."""

    incident: Incident
    """The highest revision of the incident."""
    published: datetime
    """The stream's clock when its first revision came out
    (:attr:`gputriage.replay.ReplayResult.first_published`)."""


@dataclass(frozen=True)
class Pair:
    """A truth and the incident paired with it."""

    truth: ExpectedIncident
    detected: Detected

    @property
    def delay_seconds(self) -> float:
        """Detection delay: first publication minus the fault's ``start`` (negative if the
        truth's ``start`` is after the incident came out, which a wrong truth can say)."""
        return (self.detected.published - self.truth.start).total_seconds()


@dataclass(frozen=True)
class Matching:
    """The outcome of :func:`match`; every tuple in a deterministic order."""

    matched: tuple[Pair, ...]
    """True positives, in the truths' order."""
    misses: tuple[ExpectedIncident, ...]
    """Truths no incident matched (false negatives), in order of ``(start, id)``."""
    false_positives: tuple[Detected, ...]
    """Incidents that matched no truth, in order of ``(first_seen, id)``."""
    confused: tuple[Pair, ...]
    """A miss and a false positive of another type about the same subject."""
    excused: tuple[Pair, ...] = ()
    """Incidents that matched only an *optional* truth (:attr:`ExpectedIncident.optional`:
    due where the stream ends): counted neither way."""


def detections(
    revisions: Iterable[Incident], first_published: Mapping[str, datetime]
) -> list[Detected]:
    """One :class:`Detected` per incident id: its latest revision, published at its first.

    ``first_published`` must name every id in ``revisions`` (a replay's does).
    """
    latest: dict[str, Incident] = {}
    for incident in revisions:
        current = latest.get(incident.id)
        if current is None or incident.revision >= current.revision:
            latest[incident.id] = incident
    return [Detected(incident, first_published[key]) for key, incident in latest.items()]


def fits(truth: ExpectedIncident, incident: Incident) -> bool:
    """The matching rule of the module docstring: may ``incident`` be ``truth``'s?"""
    return (
        incident.type == truth.type
        and (truth.type in CLUSTER_SCOPED or incident.node == truth.node)
        and _same_subject(truth, incident, strict=True)
        and _node_group_fits(truth, incident)
    )


def same_subject(truth: ExpectedIncident, incident: Incident) -> bool:
    """Could ``incident`` be ``truth``'s fault reported as another type? (for confusion)

    The same cluster and node (both ``""`` when cluster-scoped), ``first_seen`` in the
    window, and the pods (GPUs) overlapping where *both* name pods (GPUs): types carry
    different subjects (a host OOM names no GPU, a device eviction does), so a side
    that does not name them does not rule a pairing out. The node group is not
    compared: only two types carry one.
    """
    return incident.node == truth.node and _same_subject(truth, incident, strict=False)


def _same_subject(truth: ExpectedIncident, incident: Incident, *, strict: bool) -> bool:
    """Cluster, window, pods and GPUs; ``strict``: what the truth names, the incident must."""
    if incident.cluster != truth.cluster:
        return False
    if not truth.not_before <= incident.first_seen <= truth.not_after:
        return False
    if truth.pods:
        pods = {f"{pod.namespace}/{pod.name}" for pod in incident.pods}
        if (pods or strict) and pods.isdisjoint(truth.pods):
            return False
    if truth.gpus:
        gpus = {gpu.uuid for gpu in incident.gpus if gpu.uuid}
        if (gpus or strict) and gpus.isdisjoint(truth.gpus):
            return False
    return True


def _node_group_fits(truth: ExpectedIncident, incident: Incident) -> bool:
    if not truth.node_group:
        return True
    attributes = incident.attributes
    if attributes.get("node_group") == truth.node_group:
        return True
    return truth.node_group in attributes.get("node_groups", "").split(",")


def match(truths: Sequence[ExpectedIncident], detected: Sequence[Detected]) -> Matching:
    """Pair ``truths`` with ``detected`` one-to-one by :func:`fits`, then the leftovers by
    :func:`same_subject` (the module docstring says how, and why a maximum pairing).

    Truth ids must be unique (:func:`~gputriage.scoring.truth_file.read_truth` checks)
    and so must incident ids (:func:`detections` gives one per id): the report names
    both sides of a confusion by id.
    """
    ordered_truths = sorted((t for t in truths if not t.optional), key=_truth_order)
    optional = sorted((t for t in truths if t.optional), key=_truth_order)
    ordered = sorted(detected, key=_detected_order)
    # Candidates come from an index on what must be equal, not from every incident:
    # a long simulation has thousands of each, and the rule compares few of them.
    by_key: dict[tuple[str, str, str], list[int]] = defaultdict(list)
    for index, item in enumerate(ordered):
        by_key[_match_key(item.incident.type, item.incident.cluster, item.incident.node)].append(
            index
        )

    def candidates(truth: ExpectedIncident) -> list[int]:
        indexes = by_key.get(_match_key(truth.type, truth.cluster, truth.node), [])
        return [i for i in indexes if fits(truth, ordered[i].incident)]

    # Required truths first, then the optional ones, in one pairing: an augmenting path
    # never unpairs a truth, so every required truth paired in the first part stays
    # paired (an optional one can never cost a required one its incident), while an
    # optional truth may still re-route a required one to another incident it fits,
    # which leaves fewer false positives than pairing the optional ones apart.
    required = len(ordered_truths)
    pairs = _assign([*ordered_truths, *optional], candidates)
    paired = sorted(pairs.items())
    matched = [Pair(ordered_truths[t], ordered[d]) for t, d in paired if t < required]
    excused = [Pair(optional[t - required], ordered[d]) for t, d in paired if t >= required]
    taken = set(pairs.values())
    misses = [truth for t, truth in enumerate(ordered_truths) if t not in pairs]
    spare = [i for i in range(len(ordered)) if i not in taken]
    by_subject: dict[tuple[str, str], list[int]] = defaultdict(list)
    for index in spare:
        incident = ordered[index].incident
        by_subject[incident.cluster, incident.node].append(index)

    def lookalikes(truth: ExpectedIncident) -> list[int]:
        indexes = by_subject.get((truth.cluster, truth.node), [])
        return [
            i
            for i in indexes
            if ordered[i].incident.type != truth.type and same_subject(truth, ordered[i].incident)
        ]

    confusions = _assign(misses, lookalikes)
    confused = [Pair(misses[t], ordered[d]) for t, d in sorted(confusions.items())]
    return Matching(
        matched=tuple(matched),
        misses=tuple(misses),
        false_positives=tuple(ordered[i] for i in spare),
        confused=tuple(confused),
        excused=tuple(excused),
    )


def _assign(
    truths: Sequence[ExpectedIncident], candidates: Callable[[ExpectedIncident], list[int]]
) -> dict[int, int]:
    """A maximum one-to-one pairing, truth index -> incident index (augmenting paths).

    Each truth in turn: a breadth-first search over alternating paths (an incident it
    fits; if taken, the truth holding it and that truth's other candidates...), in
    candidate order, to the first free incident; the path is then flipped. Breadth
    first, so a truth takes a free candidate of its own before displacing anyone, and
    no recursion, so a long chain cannot exhaust the stack.
    """
    owner: dict[int, int] = {}  # incident -> truth
    partner: dict[int, int] = {}  # truth -> incident
    fitting = [candidates(truth) for truth in truths]
    for start in range(len(truths)):
        if not fitting[start]:
            continue
        came_from: dict[int, int] = {}  # incident -> the truth that reached it
        queue = deque([start])
        found = -1
        while queue and found < 0:
            truth = queue.popleft()
            for incident in fitting[truth]:
                if incident in came_from:
                    continue
                came_from[incident] = truth
                holder = owner.get(incident)
                if holder is None:
                    found = incident
                    break
                queue.append(holder)
        while found >= 0:  # flip the path back to ``start``
            truth = came_from[found]
            previous = partner.get(truth, -1)
            owner[found] = truth
            partner[truth] = found
            found = previous if truth != start else -1
    return partner


def _match_key(kind: str, cluster: str, node: str) -> tuple[str, str, str]:
    return (kind, cluster, "" if kind in CLUSTER_SCOPED else node)


def _truth_order(truth: ExpectedIncident) -> tuple[datetime, str]:
    return (truth.start, truth.id)


def _detected_order(item: Detected) -> tuple[datetime, str]:
    return (item.incident.first_seen, item.incident.id)
