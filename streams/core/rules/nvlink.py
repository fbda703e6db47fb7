"""``multi_gpu_pod_without_nvlink``: a running pod whose GPUs cannot talk over NVLink.

A multi-GPU job runs at NVLink speed or limps over PCIe and the CPU sockets, and the
scheduler does not know which it gets. This rule joins the node's topology snapshot, the
bindings and the pod. Connected means the pod's own GPUs, with the NVLinks among them, form
one group (a DGX-1 mesh's 8-GPU job is connected though not every pair is direct). It
judges once the bindings cover the request (they arrive together; no settle timer, no
guess). MIG instances ask no link question (no peer-to-peer between MIG devices);
time-sliced replicas are their physical GPUs. One incident per pod instance, anchored on
its uid; it resolves when the pod ends or a new topology shows its GPUs connected.

Traps: GPUs are matched to the topology by bus id, then NVML index, and a GPU or pair it
cannot place leaves the pod unjudged; ``NODE`` is not NVLink (``NV#`` is).
docs/detection.md, design notes.
"""

from __future__ import annotations

from sys import intern

import msgspec

from schemas.events import GpuBindingEvent, GpuTopologyEvent, PodEvent
from schemas.ids import hashed_id
from schemas.incidents import Evidence, GpuRef
from schemas.keys import claim_gpus
from streams.core.lifecycle import Step
from streams.core.rules.gpuids import split_gpu_key
from streams.core.rules.pods import pod_info
from streams.core.rules.spec import NodeRule
from streams.core.state import NodeState, NodeTopology, OpenIncident, bound_pods, gpu_ref
from streams.core.timeconv import to_datetime, to_seconds

KIND = "multi_gpu_pod_without_nvlink"
_SCHEMA = "gpu_topology.v1"
_LINK_WORDS = {
    "PIX": "one PCIe switch",
    "PXB": "several PCIe bridges",
    "PHB": "a PCIe host bridge (the CPU)",
    "NODE": "PCIe across host bridges within a NUMA node",
    "SYS": "PCIe across the CPU sockets",
    "SOC": "PCIe across the CPU sockets",
}
"""The matrix legend of ``nvidia-smi topo -m`` (reference §4.1), for the summary."""


class TopologyLink(msgspec.Struct, frozen=True, gc=False):
    """One GPU pair of :attr:`NodeTopology.links`, read back (``src < dst``)."""

    src: int
    dst: int
    link_type: str


class TopologyGpu(msgspec.Struct, frozen=True, gc=False):
    """One GPU of :attr:`NodeTopology.gpus`, read back (``numa_node`` -1: unknown)."""

    index: int
    numa_node: int
    pci_bus_id: str


def is_nvlink(link: TopologyLink) -> bool:
    """An NVLink pair: the matrix's ``NV#`` (``NODE`` starts with N, not NV)."""
    return link.link_type.startswith("NV")


def links_of(topo: NodeTopology) -> tuple[TopologyLink, ...]:
    out = []
    for item in topo.links.split():
        pair, _, code = item.partition(":")
        src, _, dst = pair.partition("-")
        out.append(TopologyLink(int(src), int(dst), code))
    return tuple(out)


def gpus_of(topo: NodeTopology) -> tuple[TopologyGpu, ...]:
    out = []
    for item in topo.gpus.split():
        index, numa, bus = item.split(":", 2)
        out.append(TopologyGpu(int(index), int(numa), bus))
    return tuple(out)


def islands_of(topo: NodeTopology) -> tuple[tuple[int, ...], ...]:
    """The node's NVLink islands (:attr:`NodeTopology.islands`) as index tuples."""
    return tuple(tuple(int(i) for i in group.split("-")) for group in topo.islands.split())


def _code(link_type: str, nvlinks: int) -> str:
    """The pair's code as stored: as printed (no blanks); a count of NVLinks a source gave
    under another word is ``NV<count>``."""
    code = "_".join(link_type.split()) or "?"
    return code if nvlinks <= 0 or code.startswith("NV") else f"NV{nvlinks}"


def topology_of(ev: GpuTopologyEvent) -> NodeTopology:
    """The node state's view of one snapshot, NVLink islands derived; the strings are
    interned, so nodes of one board share them."""
    links: dict[tuple[int, int], str] = {}
    for link in ev.links:
        src, dst = sorted((link.src_gpu, link.dst_gpu))
        if src != dst and src >= 0:
            links[(src, dst)] = _code(link.link_type, link.nvlinks)
    ordered = tuple(TopologyLink(a, b, links[(a, b)]) for a, b in sorted(links))
    gpus = {
        g.gpu: f"{g.gpu}:{-1 if g.numa_node is None else g.numa_node}:{g.pci_bus_id.strip()}"
        for g in ev.gpus
        if g.gpu >= 0
    }
    members = set(gpus) | {i for pair in links for i in pair}
    return NodeTopology(
        links=intern(" ".join(f"{x.src}-{x.dst}:{x.link_type}" for x in ordered)),
        gpus=intern(" ".join(gpus[i] for i in sorted(gpus))),
        islands=intern(" ".join("-".join(map(str, g)) for g in islands(members, ordered))),
        source=ev.source,
        event_id=ev.id,
        time=to_seconds(ev.time),
    )


def islands(members: set[int], links: tuple[TopologyLink, ...]) -> tuple[tuple[int, ...], ...]:
    """Connected components of ``members`` over the NVLink pairs among them."""
    parent = {i: i for i in sorted(members)}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for link in links:
        if is_nvlink(link) and link.src in parent and link.dst in parent:
            a, b = root(link.src), root(link.dst)
            if a != b:
                parent[max(a, b)] = min(a, b)
    groups: dict[int, list[int]] = {}
    for i in parent:
        groups.setdefault(root(i), []).append(i)
    return tuple(tuple(g) for _, g in sorted(groups.items()))


def _packed(requested: int, ev: PodEvent) -> int:
    """A multi-GPU pod's entry (:attr:`PodTrack.multi`): its request (low 8 bits)
    under a 56-bit hash of what names this pod instance (its uid: in the event, or in
    its ``k8s:`` id; else the record's id). 64 bits in all: MessagePack snapshots carry
    no larger int. The hash only tells successors of one pod name apart (the incident id
    also hashes the pod's key), so 56 bits are plenty."""
    uid = ev.uid or (ev.id.split(":")[1] if ev.id.startswith("k8s:") else ev.id)
    return int(hashed_id("pod", uid)[4:18], 16) << 8 | min(requested, 255)


def entry_of(state: NodeState, key: str) -> int:
    """The pod's multi-GPU entry (:attr:`PodTrack.multi`, or an older snapshot's
    :attr:`NodeState.multi_gpu`); 0 for a pod that is not tracked as multi-GPU."""
    track = state.pods.get(key)
    if track is not None and track.multi:
        return track.multi
    return state.multi_gpu.get(key, 0) if state.multi_gpu else 0


def _multi_pods(state: NodeState) -> list[str]:
    """The keys of the multi-GPU pods: an older snapshot's first, then the tracks'."""
    keys = dict.fromkeys(state.multi_gpu or ())
    keys.update((k, None) for k, t in state.pods.items() if t.multi)
    return list(keys)


def _requested(entry: int) -> int:
    return entry & 0xFF


def _anchor(entry: int) -> str:
    return f"pod-{entry >> 8:014x}"


# -- events ------------------------------------------------------------------------
def on_topology(step: Step, ev: GpuTopologyEvent) -> None:
    """A new snapshot replaces the node's topology; every multi-GPU pod is judged again."""
    step.state.topology = topology_of(ev)
    for key in _multi_pods(step.state):
        check(step, key)


def on_pod(step: Step, key: str, ev: PodEvent) -> None:
    """A tracked pod's update (the full path of ``node._on_pod``): remember a multi-GPU
    request, then judge the pod (a phase change may start or end its incident). GPU
    requests are immutable in a pod's spec, so the first record that shows it says it."""
    state = step.state
    track = state.pods.get(key)
    if track is None:
        return
    if not track.multi:
        legacy = state.multi_gpu.get(key, 0) if state.multi_gpu else 0
        if legacy:  # an older snapshot's entry moves onto the track
            track.multi = legacy
            forget(state, key)
        else:
            requested = (
                sum(ev.gpu_requests.values())
                or sum(ev.gpu_limits.values())
                or claim_gpus(ev.claims)
            )
            if requested <= 1:
                return
            track.multi = _packed(requested, ev)
    check(step, key)


def forget(state: NodeState, key: str) -> None:
    """Drop an older snapshot's entry of the pod (forgotten, or its entry moved onto its
    track; the track's own goes with the track; its incident was resolved with the
    pod's others, ``node._resolve_pod_incidents``)."""
    if state.multi_gpu and key in state.multi_gpu:
        kept = {k: v for k, v in state.multi_gpu.items() if k != key}
        state.multi_gpu = kept or None


def on_binding(step: Step, before: str | tuple[str, ...], now: str | tuple[str, ...]) -> None:
    """A GPU's binding (``GpuTrack.pods`` before and now): judge the multi-GPU pods it
    had and has. A pod-less binding (NVML's identity) may name what made a pod
    judgeable: the GPU's bus id or index."""
    old = (before,) if isinstance(before, str) else before
    new = (now,) if isinstance(now, str) else now
    for key in dict.fromkeys((*old, *new)):
        if entry_of(step.state, key):
            check(step, key)


# -- the judgement -------------------------------------------------------------------
def check(step: Step, key: str) -> None:
    """Open, update or resolve the pod's incident from what the node state says now."""
    state = step.state
    inc = step.find(KIND, key)
    track = state.pods.get(key)
    multi = entry_of(state, key)
    if track is None or not multi or track.phase != "Running" or track.failed:
        if inc is not None and track is not None and track.phase in ("Succeeded", "Failed"):
            step.resolve(inc, step.now, f"pod {track.phase.lower()}")
        return
    verdict = _judge(state, key, multi, step.config.nvlink_cross_numa)
    if verdict is None:
        return  # not judgeable yet (bindings, topology): an open incident stays
    gpus, bad = verdict
    if not bad:
        if inc is not None:
            step.resolve(inc, step.now, "the topology shows its GPUs NVLink-connected")
        return
    if inc is None:
        inc = step.open(KIND, key, _anchor(multi), step.now)
    topo = state.topology
    assert topo is not None  # _judge returned a verdict
    step.add_pod(inc, pod_info(key, track, "bound"))
    for gpu_key, ref in gpus:
        step.add_gpu(inc, gpu_key, ref)
    item = _evidence(state.node, topo, bad)
    step.add_evidence(inc, item, context=True)
    _describe(step, inc, key, gpus, bad, topo)


def _judge(
    state: NodeState, key: str, multi: int, cross_numa: bool
) -> tuple[list[tuple[str, GpuRef]], list[str]] | None:
    """``(the pod's GPUs, the problems)``: empty problems when they are connected; None
    when it cannot be judged (no topology, bindings short of the request, a MIG
    instance, a GPU or pair the topology does not place)."""
    topo = state.topology
    if topo is None:
        return None
    held = [(k, g) for k, g in state.gpus.items() if key in bound_pods(g)]
    if not held or any(split_gpu_key(k)[1] is not None for k, _ in held):
        return None  # nothing bound yet, or MIG: no peer-to-peer between instances
    if len(held) < _requested(multi) and not state.sharing:
        return None  # the rest of its bindings are on their way
    known = gpus_of(topo)
    by_bus = {g.pci_bus_id: g for g in known if g.pci_bus_id}
    by_index = {g.index: g for g in known}
    placed: dict[int, tuple[str, GpuRef]] = {}
    for gpu_key, gpu in held:
        ref = gpu_ref(gpu_key, gpu, state)
        where = by_bus.get(ref.pci_bus_id)
        if where is None and ref.index is not None:
            where = by_index.get(ref.index)
        index = where.index if where is not None else ref.index
        if index is None:
            return None
        bus = ref.pci_bus_id or (where.pci_bus_id if where is not None else "")
        placed.setdefault(index, (gpu_key, GpuRef(uuid=ref.uuid, pci_bus_id=bus, index=index)))
    if len(placed) < 2:
        return [], []  # one physical GPU (time-sliced replicas of it): no link question
    indices = sorted(placed)
    links = {(link.src, link.dst): link for link in links_of(topo)}
    pairs = [(a, b) for n, a in enumerate(indices) for b in indices[n + 1 :]]
    if any(pair not in links for pair in pairs):
        return None
    bad: list[str] = []
    group = islands(set(indices), tuple(links[p] for p in pairs))
    if len(group) > 1:
        bad.extend(
            f"GPU{a}-GPU{b} {links[(a, b)].link_type}"
            for a, b in pairs
            if not is_nvlink(links[(a, b)])
        )
    if cross_numa and _cross_numa(known, indices):
        numa = {g.index: g.numa_node for g in known}
        bad.append("NUMA " + ", ".join(f"GPU{i}:{numa[i]}" for i in indices))
    return [placed[i] for i in indices], bad


def _cross_numa(known: tuple[TopologyGpu, ...], indices: list[int]) -> bool:
    numa = {g.index: g.numa_node for g in known}
    return len({numa[i] for i in indices if numa.get(i, -1) >= 0}) > 1


def _evidence(node: str, topo: NodeTopology, bad: list[str]) -> Evidence:
    return Evidence(
        event_id=topo.event_id,
        schema=_SCHEMA,
        time=to_datetime(topo.time),
        text=f"topology of {node} ({topo.source or 'unknown source'}): " + "; ".join(bad),
    )


def _link_text(link: TopologyLink) -> str:
    words = _LINK_WORDS.get(link.link_type)
    return f"GPU{link.src}-GPU{link.dst} {link.link_type}" + (f" ({words})" if words else "")


def _describe(
    step: Step,
    inc: OpenIncident,
    key: str,
    gpus: list[tuple[str, GpuRef]],
    bad: list[str],
    topo: NodeTopology,
) -> None:
    """Summary, action and attributes from the current verdict (rewritten each time, so
    they say what the latest topology says)."""
    before = (inc.summary, inc.action, inc.count, dict(inc.attributes))
    node = step.state.node
    indices = [ref.index for _, ref in gpus if ref.index is not None]
    wanted = set(indices)
    pod_links = [link for link in links_of(topo) if link.src in wanted and link.dst in wanted]
    slow = [link for link in pod_links if not is_nvlink(link)]
    track = step.state.pods.get(key)
    owner = f" ({track.owner_kind}/{track.owner_name})" if track and track.owner_name else ""
    named = ", ".join(_link_text(link) for link in slow[:3])
    more = f" and {len(slow) - 3} more pairs" if len(slow) > 3 else ""
    what = (
        f"that are not NVLink-connected: {named}{more}"
        if slow
        else "on different NUMA nodes: " + bad[-1].removeprefix("NUMA ")
    )
    inc.summary = f"pod {key}{owner} holds {len(gpus)} GPUs on {node} {what}"
    shown = topo.islands
    if all(len(island) == 1 for island in islands_of(topo)):
        where = f"{node} has no NVLink between its GPUs: run it on a node whose GPUs are"
    else:
        where = f"On {node} the NVLink islands are {shown}; or run it on a node whose GPUs are"
    inc.action = (
        "Its GPU-to-GPU traffic (NCCL all-reduce, peer copies) goes over PCIe and the CPU "
        "instead of NVLink: roughly 64 GB/s instead of up to 900 GB/s. Reschedule it onto "
        f"NVLink-connected GPUs. {where} one NVLink island (HGX/NVSwitch), with a "
        "topology-aware scheduler or DRA driver, or the kubelet Topology Manager's "
        "single-numa-node policy for the NUMA case."
    )
    inc.count = len(gpus)
    inc.attributes["gpus"] = ",".join(f"GPU{i}" for i in indices)
    inc.attributes["links"] = ", ".join(
        f"GPU{link.src}-GPU{link.dst}:{link.link_type}" for link in pod_links
    )
    inc.attributes["nvlink_islands"] = shown
    numa = {g.index: g.numa_node for g in gpus_of(topo)}
    if any(numa.get(i, -1) >= 0 for i in indices):
        inc.attributes["numa"] = ",".join(f"GPU{i}:{numa.get(i, -1)}" for i in indices)
    if (inc.summary, inc.action, inc.count, inc.attributes) != before:
        step.touch(inc)


SPEC: NodeRule = NodeRule(
    name="nvlink",
    emits=((KIND, "ticket"),),
    reads=(PodEvent, GpuBindingEvent, GpuTopologyEvent),
    state=("multi_gpu",),
    settings=("nvlink_cross_numa",),
)
"""``multi_gpu_pod_without_nvlink``: a multi-GPU pod whose GPUs no NVLink joins."""
