"""Differential tests of the core's speed-ups: the same incidents, byte for byte.

A shortcut on the hot path (skipping work a rule would find to change nothing) must
never change a result, and neither may compiling the core (:mod:`schemas.native`). Each
test runs the same stream two ways and compares every revision's encoded bytes, in
order: with the shortcuts and without them (:data:`streams.core.shortcuts.ENABLED`, the
engine as it was), and in this interpreter against the Python sources in a subprocess
(when a compiled core is what this interpreter runs). The streams are the bench's
generator (seeded: thousands of nodes' worth of pod churn, XIDs, bindings, autoscaler
records, routed to the cluster key as the producer routes them) and the example
scenario (every incident type).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zlib
from collections.abc import Callable, Iterable
from typing import Any

import msgspec
import pytest

from gputriage.simulate import StreamSpec, generate_lines
from schemas import native
from schemas.codec import AnyEvent, decode_event, encode
from schemas.events import CORDON_TAINT, NodeEvent, PodClaim, PodEvent, Taint
from schemas.keys import Router
from streams.config import default_core_config
from streams.core import Correlator, shortcuts
from streams.core import cluster as cluster_rules
from streams.core import node as node_rules
from streams.core.config import CoreSettings
from streams.core.rules import mismatch
from streams.core.state import ClusterState, NodeState
from tests.factories import Cluster, at, term
from tests.paths import EXAMPLES, ROOT


def plain(value: Any) -> Any:
    """A state as plain data, every field included: msgspec's ``omit_defaults`` compares
    a float with its default by identity, and compiled code boxes new floats, so encoded
    bytes may differ where the values do not (schemas/native.py)."""
    if isinstance(value, msgspec.Struct):
        return {name: plain(getattr(value, name)) for name in value.__struct_fields__}
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    return value


def run(events: Iterable[AnyEvent], *, every_copy: bool = False) -> tuple[list[bytes], bytes]:
    """Every revision's bytes, in order, and every key's final state. ``every_copy``: a
    router that remembers nothing routes each record (the cluster key gets a copy of every
    GPU pod, node and binding record, as after a producer's restart), else one router
    routes them all, as one producer does."""
    correlator = Correlator(default_core_config())
    router = Router()
    out: list[bytes] = []
    for event in events:
        for routed_event in (Router() if every_copy else router).route(event):
            out.extend(encode(i) for i in correlator.ingest(routed_event))
    out.extend(encode(i) for i in correlator.flush())
    return out, msgspec.msgpack.encode(plain(sorted(correlator.keys.items())))


def incidents(lines: Iterable[bytes], *, every_copy: bool = False) -> list[bytes]:
    return run((decode_event(line) for line in lines), every_copy=every_copy)[0]


def _generated(events: int, nodes: int, seed: int, clusters: int = 2) -> list[bytes]:
    spec = StreamSpec(events=events, nodes=nodes, seed=seed, clusters=clusters)
    return list(generate_lines(spec))


_STATES = ("", "quarantined", "draining", "remediating")


def _churned(lines: list[bytes]) -> list[bytes]:
    """``lines`` with every GPU node record also moving what no cluster rule reads: a
    remediation controller's state label, a cordon, on and off (the router must not
    copy them, and the incidents must not change)."""
    out = []
    for n, line in enumerate(lines):
        event = decode_event(line)
        if isinstance(event, NodeEvent) and event.capacity:
            state = {"dgxc.nvidia.com/nvsentinel-state": _STATES[n % 4]}
            cordon = (Taint(key=CORDON_TAINT, effect="NoSchedule"),) if n % 3 else ()
            event = msgspec.structs.replace(
                event, labels={**event.labels, **state}, taints=(*event.taints, *cordon)
            )
            out.append(encode(event))
        else:
            out.append(line)
    return out


def _claimed(lines: list[bytes]) -> list[bytes]:
    """``lines`` with most GPU pods asking for their GPUs by DRA claim instead (a mixed
    cluster): a claim made for the pod from a template, or, for a quarter of them, one
    ResourceClaim the pods of an owner all name (a claim several pods reserve)."""
    out = []
    for line in lines:
        event = decode_event(line)
        if isinstance(event, PodEvent) and event.gpu_requests:
            kind = zlib.crc32(event.name.encode()) % 4
            gpus = sum(event.gpu_requests.values())
            if kind == 1:  # a device-plugin pod
                out.append(line)
                continue
            if kind == 0:
                owner = event.owner_name or event.name
                claim = PodClaim(name="gpu", claim=f"{owner}-shared", gpus=gpus)
            else:
                claim = PodClaim(
                    name="gpu", claim=f"{event.name}-gpu-h6vrt", template="single-gpu", gpus=gpus
                )
            claim = msgspec.structs.replace(claim, device_class="gpu.nvidia.com")
            event = msgspec.structs.replace(event, gpu_requests={}, gpu_limits={}, claims=(claim,))
            out.append(encode(event))
        else:
            out.append(line)
    return out


STREAMS = {
    "generated, 200 nodes, 2 clusters": lambda: _generated(40_000, 200, 3),
    "generated, 50 nodes, 1 cluster": lambda: _generated(40_000, 50, 11, clusters=1),
    "generated, 50 nodes, 1 cluster, node churn": lambda: _churned(
        _generated(40_000, 50, 11, clusters=1)
    ),
    "the example scenario": lambda: (EXAMPLES / "scenario.jsonl").read_bytes().splitlines(),
    "generated, 50 nodes, 1 cluster, GPUs by DRA claim": lambda: _claimed(
        _generated(40_000, 50, 11, clusters=1)
    ),
}

_N = "gpu-node-01"


def _edges() -> dict[str, list[AnyEvent]]:
    """One pod's history per guard of the node key's shortcut (``node._routine_pod``):
    each is a case where a repeat looks routine but one field says otherwise."""
    cases: dict[str, list[AnyEvent]] = {}

    def case(name: str, build: Callable[[Cluster], object]) -> None:
        c = Cluster()
        build(c)
        cases[name] = c.events

    case(
        "deleted with the same phase",
        lambda c: [
            c.pod(_N, "p", 0),
            c.pod(_N, "p", 10),
            c.pod(_N, "p", 20, deleted_at=20),
            c.pod(_N, "p", 30, deleted_at=20),
            c.pod(_N, "p", 40, op="deleted", deleted_at=20),
        ],
    )
    case(
        "evicted, then running again",
        lambda c: [
            c.pod(_N, "p", 0),
            c.pod(_N, "p", 10, reason="Evicted"),
            c.pod(_N, "p", 20),
            c.pod(_N, "p", 30),
        ],
    )
    case(
        "succeeded, repeated",
        lambda c: [
            c.pod(_N, "p", 0),
            c.pod(_N, "p", 10, phase="Succeeded"),
            c.pod(_N, "p", 20, phase="Succeeded"),
            c.pod(_N, "p", 30),
        ],
    )
    case(
        "restart count jumps",
        lambda c: [
            c.pod(_N, "p", 0),
            c.pod(_N, "p", 10, restarts=1, last=term(9)),
            c.pod(_N, "p", 20, restarts=1, last=term(9)),
            c.pod(_N, "p", 30, restarts=6, last=term(29)),
            c.pod(_N, "p", 40, restarts=6, last=term(29)),
        ],
    )
    case(
        "a crash window passes",
        lambda c: [
            *[c.pod(_N, "p", i * 10, restarts=i, last=term(i * 10 - 1)) for i in range(1, 5)],
            c.pod(_N, "p", 100_000, restarts=4, last=term(39)),
            c.pod(_N, "p", 100_010, restarts=4, last=term(39)),
            *[
                c.pod(_N, "p", 100_010 + i * 10, restarts=i, last=term(100_009 + i * 10))
                for i in range(5, 9)
            ],
        ],
    )
    case(
        "an older termination, then a current one",
        lambda c: [
            c.pod(_N, "p", 0, restarts=2, last=term(-5)),
            c.pod(_N, "p", 10, restarts=2, last=term(-50)),
            c.pod(_N, "p", 20, restarts=2, current=term(19), last=term(-5)),
            c.pod(_N, "p", 30, restarts=2, current=term(19), last=term(-5)),
            c.pod(_N, "p", 40, restarts=3, last=term(19)),
        ],
    )
    case(
        "unknown and pending phases",
        lambda c: [
            c.pod(_N, "p", 0, phase="Unknown"),
            c.pod(_N, "p", 10, phase="Unknown"),
            c.pod(_N, "p", 20, phase="Pending"),
            c.pod(_N, "p", 30, phase="Pending"),
            c.pod(_N, "p", 40),
        ],
    )
    case(
        "failure reasons on a running pod",
        lambda c: [
            c.pod(_N, "p", 0),
            c.pod(_N, "p", 10, reason="OOMKilled"),
            c.pod(_N, "p", 20, reason="NodeLost"),
            c.pod(_N, "p", 30),
        ],
    )
    case(
        "an OOM kill, then its repeats",
        lambda c: [
            c.pod(_N, "p", 0, current=term(0, "OOMKilled", 137)),
            c.pod(_N, "p", 10, restarts=1, last=term(0, "OOMKilled", 137)),
            c.pod(_N, "p", 20, restarts=1, last=term(0, "OOMKilled", 137)),
        ],
    )
    case(
        "the watch's deletion alone",
        lambda c: [
            c.pod(_N, "p", 0),
            c.pod(_N, "p", 10),
            c.pod(_N, "p", 20, op="deleted"),
        ],
    )
    case(
        "a deletion begun, not finished",
        lambda c: [
            c.pod(_N, "p", 0),
            c.pod(_N, "p", 10),
            c.pod(_N, "p", 20, deleted_at=20),
        ],
    )
    case(
        "restarts unseen behind the same termination",
        lambda c: [
            c.pod(_N, "p", 0, restarts=1, last=term(-5)),
            c.pod(_N, "p", 10, restarts=1, last=term(-5)),
            c.pod(_N, "p", 20, restarts=3, last=term(-5)),
        ],
    )
    case(
        "a crash window passes, then quiet",
        lambda c: [
            *[c.pod(_N, "p", i * 10, restarts=i, last=term(i * 10 - 1)) for i in range(1, 4)],
            c.pod(_N, "p", 100_000, restarts=3, last=term(29)),
        ],
    )
    case(
        "a newer termination at the same count",
        lambda c: [
            c.pod(_N, "p", 0, restarts=1, last=term(-5)),
            c.pod(_N, "p", 10, restarts=1, last=term(-5)),
            c.pod(_N, "p", 20, restarts=1, last=term(15)),
        ],
    )
    case(
        "back-off, then the next instance",
        lambda c: [
            # The kubelet's shape: waiting CrashLoopBackOff at the crashed
            # instance's count k with the exit in lastState, repeated while it backs
            # off, then running at k + 1 behind the same exit, then the next crash.
            c.pod(_N, "p", 0),
            *[
                step
                for k in range(1, 6)
                for step in (
                    c.pod(
                        _N,
                        "p",
                        k * 100,
                        restarts=k - 1,
                        last=term(k * 100 - 1),
                        waiting="CrashLoopBackOff",
                    ),
                    c.pod(
                        _N,
                        "p",
                        k * 100 + 10,
                        restarts=k - 1,
                        last=term(k * 100 - 1),
                        waiting="CrashLoopBackOff",
                    ),
                    c.pod(_N, "p", k * 100 + 20, restarts=k, last=term(k * 100 - 1)),
                    c.pod(_N, "p", k * 100 + 30, restarts=k, last=term(k * 100 - 1)),
                )
            ],
        ],
    )
    return cases


EDGES = _edges()


@pytest.mark.parametrize("name", STREAMS)
def test_the_shortcuts_change_no_incident_and_no_state(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = [decode_event(line) for line in STREAMS[name]()]
    fast = run(events)
    monkeypatch.setattr(shortcuts, "ENABLED", False)  # the full path
    assert run(events) == fast
    assert len(fast[0]) > 0


@pytest.mark.parametrize("name", STREAMS)
def test_copies_only_on_change_give_what_every_copy_gives(name: str) -> None:
    """The router sends the cluster key a copy only when what it reads changed; a
    producer that restarted (or a stateless one) sends a copy of every record. The
    cluster key must absorb the repeats: the same incidents, byte for byte, either way.
    Both halves matter: no copy the router skips was news, and no repeat is."""
    events = [decode_event(line) for line in STREAMS[name]()]
    some, every = run(events)[0], run(events, every_copy=True)[0]
    assert some == every
    assert len(some) > 0


def test_node_churn_no_cluster_rule_reads_costs_the_cluster_key_no_copy() -> None:
    """The churned stream's node records are copied exactly as often as the plain one's:
    a label or a taint no cluster rule reads is no news to the cluster key."""

    def node_copies(lines: list[bytes]) -> int:
        router = Router()
        routed = (router.route(decode_event(line)) for line in lines)
        return sum(1 for out in routed for ev in out[1:] if isinstance(ev, NodeEvent))

    plain = _generated(40_000, 50, 11, clusters=1)
    churned = _churned(plain)
    assert churned != plain
    assert node_copies(churned) == node_copies(plain) > 0


@pytest.mark.parametrize("name", EDGES)
def test_each_guard_of_the_pod_shortcut_keeps_the_full_path(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast = run(EDGES[name])
    monkeypatch.setattr(shortcuts, "ENABLED", False)
    assert run(EDGES[name]) == fast


def _on_the_sources(script: str, *args: str) -> list[str]:
    """Run ``script`` on the core's Python sources in a subprocess; its output's words."""
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env={**os.environ, native.PURE_ENV: "1"},
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    return done.stdout.split()


_HITS = """
import sys
from streams.core import cluster, node
from tests.streams.core.test_differential import STREAMS, incidents
hits = {"node": 0, "cluster": 0}
def counting(name, function):
    def wrapper(*args):
        taken = function(*args)
        hits[name] += taken
        return taken
    return wrapper
node._routine_track = counting("node", node._routine_track)
cluster._routine = counting("cluster", cluster._routine)
incidents(STREAMS[sys.argv[1]](), every_copy=True)  # a copy of every record: repeats
print(hits["node"], hits["cluster"])
"""


def test_the_shortcuts_are_taken_on_a_generated_stream() -> None:
    """Without this the tests above could pass with shortcuts that never fire. Counted on
    the Python sources in a subprocess: compiled callers cannot be wrapped."""
    node_hits, cluster_hits = map(int, _on_the_sources(_HITS, "generated, 200 nodes, 2 clusters"))
    assert node_hits > 1000
    assert cluster_hits > 1000


def _copy(pod: PodEvent) -> PodEvent:
    copy = Router().route(pod)[-1]  # a router that remembers nothing: always a copy
    assert isinstance(copy, PodEvent)
    assert copy.scope == "cluster"
    return copy


def _routine(state: ClusterState, pod: PodEvent, config: CoreSettings) -> bool:
    key = f"{pod.namespace}/{pod.name}"
    return cluster_rules._routine(state, pod, key, mismatch.pod_hash(key), config)


def test_a_routine_copy_is_recognised_and_a_placement_change_is_not() -> None:
    """The shortcut is taken where it should be (a repeat of the same placement) and not
    where a rule must look (the pod stopped running): without this, the differential
    test above could pass with a shortcut that never fires."""
    c = Cluster()
    pod = c.pod("gpu-node-01", "train-0", 0, gpus=2)
    config = default_core_config()
    state = ClusterState(cluster=pod.cluster)
    copy = _copy(pod)
    assert not _routine(state, copy, config), "first sight: a placement"
    cluster_rules.apply_event(state, copy, at(0).timestamp(), config)
    again = _copy(c.pod("gpu-node-01", "train-0", 5, gpus=2, restarts=1))
    assert _routine(state, again, config)
    stopped = _copy(c.pod("gpu-node-01", "train-0", 9, gpus=2, phase="Succeeded"))
    assert not _routine(state, stopped, config)


_DIGEST = """
import hashlib, sys
from tests.streams.core.test_differential import STREAMS, incidents
from schemas import native
print(native.active(), hashlib.sha256(b"".join(incidents(STREAMS[sys.argv[1]]()))).hexdigest())
"""


@pytest.mark.parametrize("name", ["generated, 200 nodes, 2 clusters", "the example scenario"])
def test_the_compiled_core_gives_the_python_sources_incidents(name: str) -> None:
    if native.active() != "compiled (mypyc)":
        why = native.forced() or native.stale_reason() or "no compiled core built"
        if os.environ.get("GPUTRIAGE_REQUIRE_NATIVE") == "1":
            pytest.fail(f"GPUTRIAGE_REQUIRE_NATIVE=1 but this runs the Python core: {why}")
        pytest.skip(f"this interpreter runs the Python core: {why}")
    here = hashlib.sha256(b"".join(incidents(STREAMS[name]()))).hexdigest()
    assert _on_the_sources(_DIGEST, name) == ["Python", here]


def test_a_routine_pod_update_is_recognised_and_a_restart_is_not() -> None:
    """The node key's shortcut (``node._routine_pod``) fires on a repeat of a running
    pod and leaves a restart, a phase change and a first sight to the full path."""
    c = Cluster()
    config = default_core_config()
    correlator = Correlator(config)
    first = c.pod("gpu-node-01", "train-0", 0, gpus=2)
    correlator.ingest(first)
    correlator.flush()
    state = correlator.keys["c1/gpu-node-01"]
    assert isinstance(state, NodeState)
    now = at(5).timestamp()
    assert node_rules._routine_pod(
        state, c.pod("gpu-node-01", "train-0", 5, gpus=2), now, 0, config
    )
    restarted = c.pod("gpu-node-01", "train-0", 6, gpus=2, restarts=1)
    assert not node_rules._routine_pod(state, restarted, now, 0, config)
    done = c.pod("gpu-node-01", "train-0", 7, gpus=2, phase="Succeeded")
    assert not node_rules._routine_pod(state, done, now, 0, config)
    other = c.pod("gpu-node-01", "train-1", 8, gpus=2)
    assert not node_rules._routine_pod(state, other, now, 0, config)
