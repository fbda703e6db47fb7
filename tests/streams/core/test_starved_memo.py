"""``gpu_pods_starved`` skips describing an incident whose inputs did not change
(``starved._unchanged``): every revision must be byte for byte what describing every
open incident on every walk gives (the memo emptied before each use, ``_SAID_MAX = 0``).

A stale description would show here: an owner whose pods or failing groups changed (or
whose groups' attempts aged out of the window) while the memo said "unchanged" keeps its
old summary, attributes or evidence, and its revisions differ from the reference run's.
The streams are the bench's generator (pending GPU pods, autoscaler failures, owners
with several pods) and a hand-made one where attempts age out while the pods still wait.
"""

from __future__ import annotations

import random
from collections.abc import Iterable

import msgspec
import pytest

from gputriage.simulate import StreamSpec, generate_lines
from schemas.codec import AnyEvent, decode_event, encode
from schemas.keys import Router
from streams.config import default_core_config
from streams.core import Correlator
from streams.core.rules import starved
from tests.factories import Cluster


def _revisions(events: Iterable[AnyEvent], max_evidence: int = 0) -> list[bytes]:
    config = default_core_config()
    if max_evidence:
        config = msgspec.structs.replace(config, max_evidence=max_evidence)
    correlator = Correlator(config)
    router = Router()
    out: list[bytes] = []
    for event in events:
        for routed in router.route(event):
            out.extend(encode(i) for i in correlator.ingest(routed))
    out.extend(encode(i) for i in correlator.flush())
    return out


def _lines(events: int, nodes: int, seed: int, clusters: int) -> list[bytes]:
    spec = StreamSpec(events=events, nodes=nodes, seed=seed, clusters=clusters)
    return list(generate_lines(spec))


@pytest.mark.parametrize(
    ("events", "nodes", "seed", "clusters"),
    [(40_000, 200, 3, 2), (60_000, 1000, 1, 2)],
)
def test_memo_changes_no_revision(
    monkeypatch: pytest.MonkeyPatch, events: int, nodes: int, seed: int, clusters: int
) -> None:
    lines = _lines(events, nodes, seed, clusters)
    starved._SAID.clear()
    fast = _revisions(decode_event(line) for line in lines)
    monkeypatch.setattr(starved, "_SAID_MAX", 0)
    starved._SAID.clear()
    reference = _revisions(decode_event(line) for line in lines)
    assert fast == reference
    starving = [r for r in reference if b'"gpu_pods_starved"' in r]
    assert len(starving) >= 5, "the stream must exercise gpu_pods_starved"


def _churn(seed: int) -> list[AnyEvent]:
    """Owners with several pending pods over five hours: scheduler messages that change,
    pods that come, go and come back, groups failing for different reasons (some tied to
    pods by a plan), and quiet stretches longer than ``scale_up_window_seconds`` in which
    the attempts age out while the pods still wait."""
    rng = random.Random(seed)
    c = Cluster()
    groups = ["gpu-a100-pool", "gpu-h100-pool", "gpu-l4-pool"]
    causes = [
        ("quota", "QUOTA_EXCEEDED"),
        ("capacity", "ZONE_RESOURCE_POOL_EXHAUSTED"),
        ("max_size", ""),
    ]
    pods = [(f"job{j}-{i}", (("Job", f"job{j}"))) for j in range(4) for i in range(3)]
    t = 0.0
    while t < 5 * 3600:
        t += rng.choice((5.0, 30.0, 61.0, 300.0, 1500.0))
        roll = rng.random()
        name, owner = rng.choice(pods)
        if roll < 0.45:
            free = rng.randint(0, 9)
            c.pending(
                name,
                t,
                owner=owner,
                gpus=rng.choice((1, 2)),
                created=0.0,
                message=f"0/{free + 4} nodes are available: {free} Insufficient nvidia.com/gpu.",
            )
        elif roll < 0.55:
            c.pending(name, t, owner=owner, op="deleted", deleted_at=t)
        elif roll < 0.6:
            c.autoscaler(t, "scale_up_planned", rng.choice(groups), pods=(name,))
        else:
            reason, code = rng.choice(causes)
            action = "max_size_reached" if reason == "max_size" else "scale_up_failed"
            c.autoscaler(t, action, rng.choice(groups), reason=reason, code=code)
    return c.events


@pytest.mark.parametrize("max_evidence", [0, 4])
@pytest.mark.parametrize("seed", range(6))
def test_memo_changes_no_revision_under_churn(
    monkeypatch: pytest.MonkeyPatch, seed: int, max_evidence: int
) -> None:
    """``max_evidence`` 4: incidents whose evidence is full, where every description
    counts the lines it cannot keep (the default: 0, the configured 50)."""
    events = _churn(seed)
    starved._SAID.clear()
    fast = _revisions(events, max_evidence)
    monkeypatch.setattr(starved, "_SAID_MAX", 0)
    starved._SAID.clear()
    reference = _revisions(events, max_evidence)
    assert fast == reference
    assert sum(b'"gpu_pods_starved"' in r for r in reference) >= 5
