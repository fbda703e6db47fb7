"""A cordon reaches the core as the taint it is mirrored as, whichever the API shows first.

``kubectl cordon`` sets ``spec.unschedulable``; the node lifecycle controller mirrors it
as the ``node.kubernetes.io/unschedulable:NoSchedule`` taint a moment later. The core
reads planned disruption from taints (:mod:`streams.core.rules.disruption`), so slim
gives both shapes the one taint, and never twice.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson

from connectors.k8s.slim import slim_watch_event
from schemas.events import NodeEvent
from tests import paths

CORDON = "node.kubernetes.io/unschedulable"


def node() -> dict[str, Any]:
    raw: dict[str, Any] = orjson.loads((paths.DATA / "k8s" / "node_gpu.json").read_bytes())
    return copy.deepcopy(raw)


def slim(raw: dict[str, Any]) -> NodeEvent:
    result = slim_watch_event({"type": "MODIFIED", "object": raw}, cluster="c1")
    assert isinstance(result, NodeEvent)
    return result


def test_a_cordon_reads_as_its_taint_once_whichever_shape_the_api_shows() -> None:
    raw = node()
    raw["spec"]["unschedulable"] = True
    taints = slim(raw).taints
    assert [(t.key, t.effect) for t in taints if t.key == CORDON] == [(CORDON, "NoSchedule")]
    assert taints[0].key == "nvidia.com/gpu"  # the node's own taints stay, first
    # Mirrored already: one taint, not two; uncordoned: none.
    raw = node()
    raw["spec"]["unschedulable"] = True
    raw["spec"]["taints"].append({"key": CORDON, "effect": "NoSchedule"})
    assert [t.key for t in slim(raw).taints].count(CORDON) == 1
    raw = node()
    raw["spec"]["unschedulable"] = False
    assert CORDON not in [t.key for t in slim(raw).taints]
