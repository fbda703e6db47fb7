"""Differential tests of the core's speed-ups (issue 14.1): the same incidents, byte for byte.

A shortcut on the hot path (skipping work a rule would find to change nothing) must
never change a result, and neither may compiling the core (:mod:`streams.native`). Each
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
from collections.abc import Iterable

import pytest

from bench.generate import StreamSpec, generate_lines
from schemas.codec import decode_event, encode
from schemas.events import PodEvent
from schemas.keys import routed
from streams import native
from streams.config import default_core_config
from streams.core import Correlator, shortcuts
from streams.core import cluster as cluster_rules
from streams.core import node as node_rules
from streams.core.state import ClusterState, NodeState
from tests.factories import Cluster, at
from tests.paths import EXAMPLES, ROOT


def incidents(lines: Iterable[bytes]) -> list[bytes]:
    correlator = Correlator(default_core_config())
    out: list[bytes] = []
    for line in lines:
        for event in routed(decode_event(line)):
            out.extend(encode(i) for i in correlator.ingest(event))
    out.extend(encode(i) for i in correlator.flush())
    return out


def _generated(events: int, nodes: int, seed: int, clusters: int = 2) -> list[bytes]:
    spec = StreamSpec(events=events, nodes=nodes, seed=seed, clusters=clusters)
    return list(generate_lines(spec))


STREAMS = {
    "generated, 200 nodes, 2 clusters": lambda: _generated(40_000, 200, 3),
    "generated, 50 nodes, 1 cluster": lambda: _generated(40_000, 50, 11, clusters=1),
    "the example scenario": lambda: (EXAMPLES / "scenario.jsonl").read_bytes().splitlines(),
}


@pytest.mark.parametrize("name", STREAMS)
def test_the_shortcuts_change_no_incident(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lines = STREAMS[name]()
    fast = incidents(lines)
    monkeypatch.setattr(shortcuts, "ENABLED", False)  # the full path
    reference = incidents(lines)
    assert reference == fast
    assert len(fast) > 0


def _copy(pod: PodEvent) -> PodEvent:
    copy = routed(pod)[-1]
    assert isinstance(copy, PodEvent)
    assert copy.scope == "cluster"
    return copy


def test_a_routine_copy_is_recognised_and_a_placement_change_is_not() -> None:
    """The shortcut is taken where it should be (a repeat of the same placement) and not
    where a rule must look (the pod stopped running): without this, the differential
    test above could pass with a shortcut that never fires."""
    c = Cluster()
    pod = c.pod("gpu-node-01", "train-0", 0, gpus=2)
    config = default_core_config()
    state = ClusterState(cluster=pod.cluster)
    copy = _copy(pod)
    assert not cluster_rules._routine(state, copy, config), "first sight: a placement"
    cluster_rules.apply_event(state, copy, at(0).timestamp(), config)
    again = _copy(c.pod("gpu-node-01", "train-0", 5, gpus=2, restarts=1))
    assert cluster_rules._routine(state, again, config)
    stopped = _copy(c.pod("gpu-node-01", "train-0", 9, gpus=2, phase="Succeeded"))
    assert not cluster_rules._routine(state, stopped, config)


_DIGEST = """
import hashlib, sys
from tests.streams.core.test_differential import STREAMS, incidents
from streams import native
print(native.active(), hashlib.sha256(b"".join(incidents(STREAMS[sys.argv[1]]()))).hexdigest())
"""


@pytest.mark.skipif(not native.built(), reason="no compiled core built (`make native`)")
@pytest.mark.parametrize("name", ["generated, 200 nodes, 2 clusters", "the example scenario"])
def test_the_compiled_core_gives_the_python_sources_incidents(name: str) -> None:
    if native.active() != "compiled (mypyc)":
        pytest.skip(f"this interpreter runs the Python core ({native.stale_reason()})")
    here = hashlib.sha256(b"".join(incidents(STREAMS[name]()))).hexdigest()
    env = {**os.environ, native.PURE_ENV: "1"}
    done = subprocess.run(
        [sys.executable, "-c", _DIGEST, name],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert done.stdout.split() == ["Python", here]


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
