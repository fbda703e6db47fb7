"""``allocation_mismatch``: Kubernetes and dcgm-exporter disagree on how many GPUs pods hold.

The cross-source sanity check, per node: GPUs requested by running GPU pods against GPUs
dcgm-exporter reports with a pod label (a blind dcgm-exporter, a GPU off the bus under a
pod). The sum over nodes of |requested - bound|, of nodes that disagreed for
``mismatch_after_seconds``, above ``mismatch_threshold`` is one ticket per cluster. Left
out: shared GPUs, NotReady nodes, nodes being removed, fractional-GPU pods, ignored
namespaces, nodes no pod-aware source reported. On
DRA nodes a pod's GPUs are those its claims ask for; a claim several pods reserve counts
once (:func:`place`), and only where dcgm-exporter ties claim-held GPUs to pods.

Traps: a dcgm-exporter that is down entirely sends nothing and is not seen here; only
dcgm-exporter's bindings count as bound: the kubelet's and DRA's agree with the requests
by construction. docs/detection.md, design notes: allocation_mismatch.
"""

from __future__ import annotations

import hashlib
from sys import intern

from schemas.events import GpuBindingEvent, NodeEvent, PodEvent
from schemas.incidents import Evidence
from schemas.keys import DRA, POD_RESOURCES, claim_gpus
from streams.core import evidence
from streams.core.config import CoreSettings
from streams.core.lifecycle import ClusterStep
from streams.core.rules import disruption
from streams.core.rules.gpuids import MIG_SEPARATOR
from streams.core.rules.labels import sharing_of
from streams.core.rules.spec import ClusterRule
from streams.core.state import NEVER, ClusterState, NodeTally

MISMATCH = "allocation_mismatch"
_DIGITS = 16
"""Hex digits per GPU in :attr:`NodeTally.bound` (a 64-bit hash of its key).

Trap: it was 4 (16 bits), "a collision about 1 in 2,000 nodes" -- but a fleet *has*
2,000 nodes, and a node with two GPUs of one hash can never count more than 7 of its
8 bound: it disagrees by 1 forever, its share adds to every real disagreement of
the cluster and its start becomes the incident's ``first_seen`` (the simulator's
1,000-node day had one: ip-10-11-107-157, GPUs ...a276e87c and ...f665c7b0 both
``cd09``). A MIG node of 56 instances collided in 16 bits 1 time in 40. In 64 bits
a collision in a fleet is below 1 in 10^12; 16 characters a GPU (2,000 nodes of 8:
256 KB of state) is still far below the uuid strings it stands for."""
_SUBJECT = "cluster"
_NODES_SHOWN = 5


def contribution(tally: NodeTally) -> int:
    """This node's share of the disagreement (0 when it is left out)."""
    if tally.shared or not tally.reported or tally.unreachable or tally.leaving:
        return 0
    return abs(tally.requested - bound_count(tally))


def bound_count(tally: NodeTally) -> int:
    """GPUs dcgm-exporter reports bound on the node (at the tally's own key width)."""
    return len(tally.bound) // tally.digits


def pod_hash(key: str) -> int:
    """A pod's key (``namespace/name``) as :attr:`ClusterState.placed` holds it: a stable
    64-bit hash (``hash()`` of a str changes per process: snapshots outlive it). The
    caller hashes once and hands it to :func:`placed_as` and :func:`place` (blake2b is
    ~5.7k instructions; a changed pod's copy reaches both)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big")


def _short(gpu: str, digits: int = _DIGITS) -> str:
    return hashlib.blake2b(gpu.encode(), digest_size=digits // 2).hexdigest()


def _tally(state: ClusterState, node: str) -> NodeTally:
    tally = state.tallies.get(node)
    if tally is None:
        tally = state.tallies[node] = NodeTally(digits=_DIGITS)
    return tally


def _changed(step: ClusterStep, node: str, before: int, item: Evidence | None) -> None:
    """Book a change of ``node``'s share (``before`` -> now) in the running tallies."""
    state = step.state
    tally = state.tallies.get(node)
    after = contribution(tally) if tally is not None else 0
    if tally is None or after == before:
        return
    if after and item is not None:
        state.witness[node] = item
    elif not after:
        state.witness.pop(node, None)
    if node in state.settled:
        state.settled_total += after - state.settled[node]
        if after:
            state.settled[node] = after
        else:
            del state.settled[node]
            state.settled_from.pop(node, None)
            state.settled_changed = state.timers_dirty = True
    elif not after:
        if state.disagree.pop(node, None) is not None:
            state.timers_dirty = True
    elif node not in state.disagree:
        state.disagree[node] = step.now
        state.timers_dirty = True


def _forget(state: ClusterState, node: str) -> None:
    state.disagree.pop(node, None)
    state.witness.pop(node, None)
    state.settled_from.pop(node, None)
    share = state.settled.pop(node, None)
    if share is not None:
        state.settled_total -= share
        state.settled_changed = state.timers_dirty = True


def placed_as(state: ClusterState, key_hash: int, node: str, devices: int, ev: PodEvent) -> bool:
    """Would :func:`place` with these arguments change nothing?"""
    if not ev.claims:
        return state.placed.get(key_hash) == ((node, devices) if node and devices else None)
    own = max(0, devices - claim_gpus(ev.claims))
    if state.placed.get(key_hash) != ((node, own) if node and own else None):
        return False
    return all(
        _holds(state, claim, ev.name) == (node if node and gpus > 0 else "")
        for claim, gpus, _ in claims_of(ev)
    )


def claims_of(ev: PodEvent) -> list[tuple[str, int, bool]]:
    """``(claim key, GPUs, shared)`` of each of the pod's claims. Shared: a ResourceClaim
    its spec names (``resourceClaimName``), which other pods may name too (NVIDIA's
    quickstart: two pods, one claim, one GPU), not one made for it alone from a template.
    A claim not made yet is keyed by the pod's own name for it."""
    ns = ev.namespace
    return [
        (f"{ns}/{c.claim}" if c.claim else f"{ns}/{ev.name}/{c.name}", c.gpus, not c.template)
        for c in ev.claims
    ]


def _holder_key(claim: str, pod: str) -> int:
    """``placed`` key of one pod's hold on a claim (no pod name has a ``|``)."""
    return pod_hash(f"{claim}|{pod}")


def _count_keys(claim: str, node: str) -> tuple[int, int]:
    """``placed`` keys of a shared claim on a node: its holders, its GPUs counted."""
    return pod_hash(f"{claim}|@holders@{node}"), pod_hash(f"{claim}|@gpus@{node}")


def _node_key(what: str, node: str) -> int:
    """``placed`` key of a fact of the node's (no pod key has an ``@``)."""
    return pod_hash(f"@{what}@{node}")


def _holds(state: ClusterState, claim: str, pod: str) -> str:
    held = state.placed.get(_holder_key(claim, pod))
    return held[0] if held is not None else ""


def _claimed(step: ClusterStep, node: str, delta: int, item: Evidence) -> None:
    """``delta`` GPUs held by claim on ``node``: requested there once its dcgm-exporter
    has tied a GPU to a pod (it maps DRA claims), else kept aside (:func:`on_binding`)."""
    state = step.state
    if _node_key("ties", node) in state.placed:
        tally = _tally(state, node)
        before = contribution(tally)
        tally.requested += delta
        _changed(step, node, before, item)
        return
    key = _node_key("untied", node)
    held = state.placed.get(key)
    left = (held[1] if held is not None else 0) + delta
    if left > 0:
        state.placed[key] = (intern(node), left)
    else:
        state.placed.pop(key, None)


def _hold(step: ClusterStep, claim: str, gpus: int, shared: bool, node: str, ev: PodEvent) -> None:
    """The pod now holds ``claim`` (of ``gpus`` GPUs) on ``node`` ("": none). A shared
    claim's GPUs count once on the node, from its first holder until its last."""
    state = step.state
    key = _holder_key(claim, ev.name)
    was = state.placed.get(key)
    want = node if node and gpus > 0 else ""
    if (was[0] if was is not None else "") == want:
        return
    item = evidence.pod_status(ev, ev.phase.lower() or ev.op)
    if was is not None:  # released
        del state.placed[key]
        counted = was[1]
        if shared:
            holders_key, gpus_key = _count_keys(claim, was[0])
            holders = state.placed.get(holders_key)
            if holders is not None and holders[1] > 1:
                state.placed[holders_key] = (holders[0], holders[1] - 1)
                counted = 0
            else:
                state.placed.pop(holders_key, None)
                first = state.placed.pop(gpus_key, None)
                counted = first[1] if first is not None else 0
        if counted:
            _claimed(step, was[0], -counted, item)
    if want:  # held
        at = intern(want)
        state.placed[key] = (at, gpus)
        added = gpus
        if shared:
            holders_key, gpus_key = _count_keys(claim, want)
            holders = state.placed.get(holders_key)
            state.placed[holders_key] = (at, 1 if holders is None else holders[1] + 1)
            if holders is None:
                state.placed[gpus_key] = (at, gpus)
            else:
                added = 0
        if added:
            _claimed(step, want, added, item)


def place(step: ClusterStep, key_hash: int, node: str, devices: int, ev: PodEvent) -> None:
    """The pod (its :func:`pod_hash`) now holds ``devices`` GPUs on ``node`` ("": none,
    anywhere). Those of its DRA claims are held by claim (:func:`claims_of`): a shared
    claim counts once however many pods hold it (two pods naming one claim hold one GPU,
    which dcgm-exporter binds once), so ``placed`` also keeps each hold, each shared
    claim's holders and GPUs, and two facts per node, under keys no pod's hash can have."""
    if ev.claims:
        for claim, gpus, shared in claims_of(ev):
            _hold(step, claim, gpus, shared, node, ev)
        devices = max(0, devices - claim_gpus(ev.claims))
    state = step.state
    was = state.placed.get(key_hash)
    # The node's name interned: every pod on it shares one string (a record's own copy
    # kept per pod was the largest share of this dict, ~85 bytes a pod).
    now_at = (intern(node), devices) if node and devices else None
    if was == now_at:
        return
    item = evidence.pod_status(ev, ev.phase.lower() or ev.op)
    if was is not None:
        del state.placed[key_hash]
        tally = state.tallies.get(was[0])
        if tally is not None:
            before = contribution(tally)
            tally.requested -= was[1]
            _changed(step, was[0], before, item)
    if now_at is not None:
        state.placed[key_hash] = now_at
        tally = _tally(state, node)
        before = contribution(tally)
        tally.requested += devices
        _changed(step, node, before, item)


def on_node(step: ClusterStep, ev: NodeEvent) -> None:
    state = step.state
    if ev.op == "deleted":
        state.tallies.pop(ev.node, None)
        _forget(state, ev.node)
        state.timers_dirty = True
        for key in [k for k, (n, _) in state.placed.items() if n == ev.node]:
            del state.placed[key]
        return
    tally = _tally(state, ev.node)
    before = contribution(tally)
    tally.shared = bool(sharing_of(ev.labels))
    tally.unreachable = any(
        c.type == "Ready" and c.status in ("False", "Unknown") for c in ev.conditions
    )
    tally.leaving = disruption.removing(ev)
    _changed(step, ev.node, before, None)


def on_binding(step: ClusterStep, ev: GpuBindingEvent) -> None:
    """dcgm-exporter's word on one GPU. The kubelet's (``pod-resources``) and the API
    server's (``dra``: allocated claims) bindings are the requests themselves: counted as
    bound they would hide the very outages this rule exists for. The router never copies
    them here; a record written by another router must not count either.

    Trap: dcgm-exporter ties claim-held GPUs to pods only with ``--kubernetes-enable-dra``
    (``KUBERNETES_ENABLE_DRA``, off by default): without it every DRA node would disagree
    by all its claims, forever. A node's claims count from the first GPU it ties to a pod
    there (a node mixing device-plugin and DRA pods counts them from the first of either)."""
    if not ev.pods_known or ev.source in (POD_RESOURCES, DRA):
        return
    state = step.state
    gpu = ev.gpu_uuid or ev.pci_bus_id
    if ev.gpu_instance is not None:
        gpu = f"{gpu}{MIG_SEPARATOR}{ev.gpu_instance}"
    tally = _tally(state, ev.node)
    before = contribution(tally)
    tally.reported = True
    if ev.pods and _node_key("ties", ev.node) not in state.placed:
        # dcgm-exporter ties GPUs to pods here: from now on the claims' GPUs count.
        state.placed[_node_key("ties", ev.node)] = (intern(ev.node), 1)
        untied = state.placed.pop(_node_key("untied", ev.node), None)
        if untied is not None:
            tally.requested += untied[1]
    if not tally.bound:
        tally.digits = _DIGITS  # an old snapshot's 4-digit tally, empty: widen it now
    width = tally.digits
    short = _short(gpu, width)
    chunks = [tally.bound[i : i + width] for i in range(0, len(tally.bound), width)]
    bound = short in chunks
    if ev.pods and not bound:
        tally.bound = "".join(sorted((*chunks, short)))
    elif not ev.pods and bound:
        tally.bound = "".join(c for c in chunks if c != short)
    _changed(step, ev.node, before, evidence.binding(ev, gpu))


def _settle(state: ClusterState, now: float, config: CoreSettings) -> None:
    """Move the nodes that have now disagreed for ``mismatch_after_seconds`` to ``settled``."""
    after = config.mismatch_after_seconds
    due = [(node, since) for node, since in state.disagree.items() if now - since >= after]
    for node, since in due:
        del state.disagree[node]
        tally = state.tallies.get(node)
        share = contribution(tally) if tally is not None else 0
        if share:
            state.settled_from[node] = since
            state.settled[node] = share
            state.settled_total += share
            state.settled_changed = True
    if due:
        state.timers_dirty = True


def evaluate(step: ClusterStep, *, timer: bool = False) -> None:
    """Open, update or resolve the incident from the nodes that disagree for long enough.

    Cheap per record: the running total decides; the nodes are walked only when the set
    of settled nodes changed, which is also the only time the incident is revised
    (counts move with every pod that starts or ends, and a revision per pod would bury
    the one that matters)."""
    state = step.state
    config = step.config
    if timer:
        _settle(state, step.now, config)
    inc = step.find(MISMATCH, _SUBJECT)
    after = config.mismatch_after_seconds
    if state.settled_total <= config.mismatch_threshold:
        if inc is None:
            state.settled_changed = False
            state.agreed_since = NEVER
            return
        if state.agreed_since == NEVER:
            state.agreed_since = step.now
            state.timers_dirty = True
        if step.now >= state.agreed_since + after:
            step.resolve(inc, state.agreed_since + after, "the counts agree again")
            state.agreed_since = NEVER
            state.settled_changed = False
        return
    if state.agreed_since != NEVER:
        state.agreed_since = NEVER
        state.timers_dirty = True
    if inc is not None and not state.settled_changed:
        return
    if inc is not None and step.now < state.revised_at + after:
        return  # at most one revision per mismatch_after_seconds: a timer brings it
    state.settled_changed = False
    nodes = sorted(state.settled.items(), key=lambda x: (-x[1], x[0]))
    names = ",".join(sorted(state.settled))  # by name: the set, not the order
    if inc is not None and inc.attributes.get("nodes") == names:
        return
    total = state.settled_total
    if inc is None:
        began = min(min(state.settled_from.values(), default=step.now), step.now)
        inc = step.open(MISMATCH, _SUBJECT, f"{names}@{began}", began)
    tallies = [(name, state.tallies[name]) for name, _ in nodes]
    requested = sum(t.requested for _, t in tallies)
    bound = sum(bound_count(t) for _, t in tallies)
    shown = ", ".join(
        f"{name} ({t.requested} requested, {bound_count(t)} bound)"
        for name, t in tallies[:_NODES_SHOWN]
    )
    if len(tallies) > _NODES_SHOWN:
        shown += f" and {len(tallies) - _NODES_SHOWN} more"
    inc.summary = (
        f"Kubernetes and dcgm-exporter disagree by {total} GPUs on {len(tallies)} "
        f"node{'s' if len(tallies) != 1 else ''}: {shown}"
    )
    inc.attributes = {
        "nodes": names,
        "difference": str(total),
        "requested": str(requested),
        "bound": str(bound),
    }
    inc.action = (
        "On each node named: is dcgm-exporter running and does it see the kubelet's "
        "pod-resources socket (kubectl -n gpu-operator get ds nvidia-dcgm-exporter)? "
        "On DRA nodes it also needs --kubernetes-enable-dra (KUBERNETES_ENABLE_DRA). "
        "A GPU that fell off the bus under a running pod shows here too."
    )
    for name, _ in tallies[:_NODES_SHOWN]:
        witness = state.witness.get(name)
        if witness is not None:
            step.add_evidence(inc, witness)
    state.revised_at = step.now
    step.touch(inc)


def deadline(state: ClusterState, config: CoreSettings) -> float:
    """When the next disagreeing node has disagreed for ``mismatch_after_seconds``, a
    held-back revision is due, or the open incident's counts have agreed long enough."""
    # Read once: a state or config field is a generic attribute read from compiled code,
    # and a cluster's disagreeing nodes are many (this runs after every cluster event).
    after, checked = config.mismatch_after_seconds, state.checked_at
    found = NEVER
    agreed = state.agreed_since
    if agreed != NEVER:
        at = agreed + after
        if checked < at:
            found = at
    if state.settled_changed:
        at = state.revised_at + after
        if checked < at < found:
            found = at
    for since in state.disagree.values():
        at = since + after
        if checked < at < found:
            found = at
    return found


def check(step: ClusterStep, timer: bool) -> None:
    evaluate(step, timer=timer)


SPEC: ClusterRule = ClusterRule(
    name="mismatch",
    emits=((MISMATCH, "ticket"),),
    reads=(PodEvent, NodeEvent, GpuBindingEvent),
    state=(
        "placed",
        "tallies",
        "witness",
        "revised_at",
        "disagree",
        "settled",
        "settled_total",
        "settled_from",
        "agreed_since",
        "settled_changed",
    ),
    settings=("mismatch_threshold", "mismatch_after_seconds", "mismatch_ignore_namespaces"),
    deadline=deadline,
    evaluate=check,
)
"""``allocation_mismatch``: Kubernetes' and dcgm-exporter's GPU counts disagree."""
