"""How much of the engine's input lands on the cluster key, and on its partition.

The cluster key is one key, so one partition, so one worker: what is routed there is the
ceiling of a whole deployment. This counts engine events per key and per partition for
four ways of feeding the cluster key: ``every copy``, ``(a) router`` (what the producer and
the replay do), and two estimates, ``(b) node summaries`` and ``(b') node settles``.
Rates are per second of event time; partitions are placed by murmur2, as the producer does.

    python -m bench.cluster_share [--file day.jsonl] [--why]

Trap: (b) and (b') are estimates, not implementations. ``--why`` breaks the router's input
down by schema and by what changed since the object's previous copy.
bench/README.md, design notes: cluster_share.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

if __package__ in {None, ""}:  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.core_bench import load_stream
from connectors.kafka.producer import partition_of
from gputriage.simulate import StreamSpec
from schemas.codec import AnyEvent, decode_event
from schemas.events import GpuBindingEvent, NodeEvent, PodEvent, XidEvent
from schemas.keys import (
    Router,
    correlation_key,
    finished,
    gpu_devices,
    holds_gpus,
    is_copy,
    key_node,
)
from schemas.topics import DEFAULT_PARTITIONS
from schemas.wellknown import SHUTTING_DOWN
from streams.core.config import CoreSettings

DESIGNS = ("every copy", "(a) router", "(b) node summaries", "(b') node settles")
SETTLE_SECONDS = CoreSettings().mismatch_after_seconds
"""How long a node's counts must disagree to count (the core's default)."""


class Tally:
    """Engine events of one design: per key kind and per partition."""

    def __init__(self, partitions: int) -> None:
        self.partitions = partitions
        self.cluster = 0
        self.node = 0
        self.by_partition: Counter[int] = Counter()
        self.cluster_partitions: set[int] = set()
        self._where: dict[str, int] = {}

    def add(self, event: AnyEvent) -> None:
        key = correlation_key(event)
        partition = self._where.get(key)
        if partition is None:
            partition = self._where[key] = partition_of(key.encode(), self.partitions)
        self.by_partition[partition] += 1
        if key_node(event):
            self.node += 1
        else:
            self.cluster += 1
            self.cluster_partitions.add(partition)

    def row(self, seconds: float) -> dict[str, Any]:
        total = self.cluster + self.node
        others = [n for p, n in self.by_partition.items() if p not in self.cluster_partitions] or [
            0
        ]
        busiest = max((self.by_partition[p] for p in self.cluster_partitions), default=0)
        return {
            "engine_events": total,
            "cluster_key_events": self.cluster,
            "cluster_key_share": self.cluster / total if total else 0.0,
            "cluster_key_per_s": self.cluster / seconds,
            "cluster_partition_per_s": busiest / seconds,
            "node_partition_per_s_mean": sum(others) / len(others) / seconds,
            "node_partition_per_s_max": max(others) / seconds,
        }


class NodeSummaries:
    """Designs (b) and (b'), estimated: one record per change of a node's summary, or of
    its settled disagreement."""

    def __init__(self) -> None:
        self._requested: dict[str, dict[str, int]] = {}
        self._bound: dict[str, dict[str, bool]] = {}
        self._node: dict[str, object] = {}
        self._last: dict[str, object] = {}
        self._counted: dict[str, bool] = {}
        self._clique: dict[str, str] = {}
        self._disagree: dict[str, tuple[int, float]] = {}
        self._settled: dict[str, int] = {}
        self._left: set[str] = set()
        """Pods seen pending (no node) and not yet on a node."""

    def settles(self, copy: AnyEvent) -> bool:
        """Design (b'): does this copy change what the node would tell the cluster key?
        (Call after :meth:`changed`, which keeps the node's counts.)"""
        node = f"{copy.cluster}/{getattr(copy, 'node', '')}"
        news = False
        if isinstance(copy, PodEvent):
            pod = f"{copy.cluster}/{copy.namespace}/{copy.name}"
            news = pod in self._left  # the cluster key holds it pending: it must learn
            self._left.discard(pod)
        elif isinstance(copy, NodeEvent):
            clique = copy.labels.get("nvidia.com/gpu.clique", "")
            news = self._clique.get(node, "") != clique
            self._clique[node] = clique
        elif not isinstance(copy, GpuBindingEvent):
            return True  # a fabric XID
        now = copy.time.timestamp()
        share = (
            abs(
                sum(self._requested.get(node, {}).values())
                - sum(self._bound.get(node, {}).values())
            )
            if self._counted.get(node, True) and node in self._bound
            else 0
        )
        was, since = self._disagree.get(node, (0, now))
        if share != was:
            since = now
        self._disagree[node] = (share, since)
        settled = share if now - since >= SETTLE_SECONDS else 0
        if self._settled.get(node, 0) != settled:
            self._settled[node] = settled
            news = True
        return news

    def saw_pending(self, event: PodEvent) -> None:
        self._left.add(f"{event.cluster}/{event.namespace}/{event.name}")

    def changed(self, copy: AnyEvent) -> bool:
        """Does this copy change its node's summary (one record for design (b))?"""
        node = f"{copy.cluster}/{getattr(copy, 'node', '')}"
        if isinstance(copy, PodEvent):
            held = gpu_devices(copy.gpu_requests)[0] if holds_gpus(copy) else 0
            self._requested.setdefault(node, {})[f"{copy.namespace}/{copy.name}"] = held
        elif isinstance(copy, GpuBindingEvent):
            gpu = f"{copy.gpu_uuid or copy.pci_bus_id}/{copy.gpu_instance}"
            self._bound.setdefault(node, {})[gpu] = bool(copy.pods)
        elif isinstance(copy, NodeEvent):
            ready = [(c.status, c.message) for c in copy.conditions if c.type == "Ready"]
            self._node[node] = (copy.op, sorted(copy.labels.items()), ready, copy.taints)
            self._counted[node] = (
                all(status == "True" for status, _ in ready)
                and "nvidia.com/gpu.sharing-strategy" not in copy.labels
                and not copy.taints
            )
        else:
            return True  # a fabric XID: sent as it is
        summary = (
            sum(self._requested.get(node, {}).values()),
            sorted(g for g, b in self._bound.get(node, {}).items() if b),
            self._node.get(node),
        )
        if self._last.get(node) == summary:
            return False
        self._last[node] = summary
        return True


class Composition:
    """The cluster key's input under the router, by schema and reason (``--why``).

    Reasons are read from the records themselves, against the object's previous record on
    the cluster key (not from the router's memory), so they say what the cluster key
    learned from each one."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._pods: dict[tuple[str, str, str], tuple[str, int]] = {}
        self._pending: dict[tuple[str, str, str], object] = {}
        self._nodes: dict[tuple[str, str], tuple[object, ...]] = {}
        self._gpus: dict[tuple[str, str, str, int | None], bool] = {}

    def add(self, event: AnyEvent) -> None:
        """Count one record the router sent the cluster key."""
        if isinstance(event, PodEvent):
            what, why = self._pod(event)
        elif isinstance(event, NodeEvent):
            what, why = "node copy", self._node(event)
        elif isinstance(event, GpuBindingEvent):
            key = (
                event.cluster,
                event.node,
                event.gpu_uuid or event.pci_bus_id,
                event.gpu_instance,
            )
            bound = bool(event.pods)
            was = self._gpus.get(key)
            self._gpus[key] = bound
            what = "binding copy"
            if was is None:
                why = "first of its GPU"
            elif was == bound:
                why = "unchanged (refresh, or after a stale record)"
            else:
                why = "GPU bound" if bound else "GPU freed"
        elif isinstance(event, XidEvent):
            what, why = "XID copy", f"fabric XID {event.code}"
        else:
            what, why = type(event).__name__, "the cluster key's own"
        self.counts[what, why] += 1

    def _pod(self, ev: PodEvent) -> tuple[str, str]:
        key = (ev.cluster, ev.namespace, ev.name)
        if not is_copy(ev):  # a pending pod's own record
            cond = ev.scheduled
            view = (
                ev.owner_kind,
                ev.owner_name,
                sorted(ev.gpu_requests.items()),
                ev.gpu_share,
                ev.phase,
                ev.deleted_at is not None or ev.op == "deleted",
                (cond.status, cond.reason, cond.message) if cond is not None else None,
            )
            was = self._pending.get(key)
            self._pending[key] = view
            self._pods[key] = ("", 0)
            if was is None:
                return "pending pod", "first of its pod"
            return "pending pod", "repeat of what the rules read" if was == view else "changed"
        held = gpu_devices(ev.gpu_requests)[0] if holds_gpus(ev) else 0
        now = (ev.node, held)
        placed = self._pods.get(key)
        self._pods[key] = now
        self._pending.pop(key, None)
        if placed is None:
            why = "first of its pod"
        elif placed == now:
            why = "unchanged (refresh, or after a stale record)"
        elif not placed[0]:
            why = "left pending (scheduled)" if not held else "left pending, holding GPUs"
        elif placed[0] != ev.node:
            why = "moved to another node"
        elif held and not placed[1]:
            why = "started holding GPUs"
        elif placed[1] and not held:
            deleting = finished(ev) and ev.phase == "Running"
            why = f"stopped holding GPUs ({'deleted' if deleting else ev.phase or ev.op})"
        else:
            why = "GPU count changed"
        return "pod copy", why

    def _node(self, ev: NodeEvent) -> str:
        key = (ev.cluster, ev.node)
        ready = tuple(  # the router's view of Ready: its status, and a graceful shutdown
            (c.status, SHUTTING_DOWN in c.message.lower())
            for c in ev.conditions
            if c.type == "Ready"
        )
        view: tuple[object, ...] = (ev.op == "deleted", ev.labels, ready, ev.taints)
        was = self._nodes.get(key)
        self._nodes[key] = view
        if was is None:
            return "first of its node"
        changed = [
            name
            for name, before, after in zip(
                ("deleted", "labels", "ready", "taints"), was, view, strict=True
            )
            if before != after
        ]
        return "+".join(changed) or "unchanged (refresh, or after a stale record)"

    def table(self, engine_events: int) -> str:
        """The composition, largest first, as shares of the engine's events."""
        total = sum(self.counts.values())
        lines = [
            f"the cluster key's input under the router: {total:,} of {engine_events:,} "
            f"engine events ({100 * total / max(engine_events, 1):.2f}%)",
            "",
            f"{'records':>10}{'share':>8}  what: why",
        ]
        for (what, why), count in sorted(self.counts.items(), key=lambda x: (-x[1], x[0])):
            lines.append(f"{count:10,}{100 * count / max(engine_events, 1):7.2f}%  {what}: {why}")
        return "\n".join(lines)


def measure(
    events: Iterable[AnyEvent], partitions: int, composition: Composition | None = None
) -> dict[str, Any]:
    tallies = {name: Tally(partitions) for name in DESIGNS}
    router = Router()
    summaries = NodeSummaries()
    first = last = None
    for event in events:
        when = event.time.timestamp()
        first = when if first is None else min(first, when)
        last = when if last is None else max(last, when)
        every = Router().route(event)  # remembers nothing: a copy of every record
        if isinstance(event, PodEvent) and not event.node and event.gpu_requests:
            summaries.saw_pending(event)
        for routed in every:
            tallies["every copy"].add(routed)
            if not is_copy(routed):
                tallies["(b) node summaries"].add(routed)
                tallies["(b') node settles"].add(routed)
                continue
            if summaries.changed(routed):
                tallies["(b) node summaries"].add(routed)
            if summaries.settles(routed):
                tallies["(b') node settles"].add(routed)
        for routed in router.route(event):
            tallies["(a) router"].add(routed)
            if composition is not None and not key_node(routed):
                composition.add(routed)
    seconds = max((last or 0.0) - (first or 0.0), 1.0)
    return {
        "hours": seconds / 3600,
        "partitions": partitions,
        "designs": {name: tally.row(seconds) for name, tally in tallies.items()},
    }


def report(result: dict[str, Any], source: str) -> str:
    lines = [
        f"cluster key share: {source} ({result['hours']:.1f} h of event time, "
        f"{result['partitions']} partitions)",
        "",
        f"{'design':22}{'engine events':>15}{'cluster key':>13}{'share':>8}"
        f"{'cluster part./s':>17}{'node part./s mean':>19}{'max':>8}",
    ]
    for name, row in result["designs"].items():
        lines.append(
            f"{name:22}{row['engine_events']:15,}{row['cluster_key_events']:13,}"
            f"{100 * row['cluster_key_share']:7.2f}%{row['cluster_partition_per_s']:17.1f}"
            f"{row['node_partition_per_s_mean']:19.1f}{row['node_partition_per_s_max']:8.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    defaults = StreamSpec()
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n", 1)[0])
    parser.add_argument("--file", type=Path, help="a stream of raw records (JSON lines)")
    parser.add_argument("--events", type=int, default=defaults.events)
    parser.add_argument("--nodes", type=int, default=defaults.nodes)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--why", action="store_true", help="also break the router's cluster key input down"
    )
    args = parser.parse_args(argv)
    composition = Composition() if args.why else None
    if args.file is not None:
        source = str(args.file)
        with args.file.open("rb") as lines:
            result = measure((decode_event(line) for line in lines), args.partitions, composition)
    else:
        spec = StreamSpec(events=args.events, nodes=args.nodes, seed=args.seed)
        lines, _ = load_stream(spec, cache=True)
        source = f"{spec.events:,} events, {spec.nodes:,} nodes, seed {spec.seed}"
        result = measure((decode_event(line) for line in lines), args.partitions, composition)
    if composition is not None:
        engine = result["designs"]["(a) router"]["engine_events"]
        result["composition"] = {
            f"{what}: {why}": n for (what, why), n in composition.counts.items()
        }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(report(result, source))
        if composition is not None:
            print()
            print(composition.table(engine))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
