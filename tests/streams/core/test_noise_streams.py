"""Noise: a GPU node taken away on purpose, or its device plugin restarted, raises nothing.

Four streams of Kubernetes working as designed (:mod:`tests.disruption_streams`), each
run through the real engine as the producer routes it, then ticked a day on so every
timer has fired. Not a page, not a ticket, not an ``info`` row: no incident at all.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.core_helpers import run
from tests.disruption_streams import (
    autoscaler_scale_down,
    gpu_node,
    karpenter_consolidation,
    kubectl_drain,
    plugin_restart,
    timeline,
)
from tests.factories import Cluster

HOUR = 3600.0
STREAMS: dict[str, Callable[[Cluster, float], None]] = {
    "karpenter consolidation": karpenter_consolidation,
    "kubectl drain": kubectl_drain,
    "cluster-autoscaler scale-down": autoscaler_scale_down,
    "device-plugin restart": plugin_restart,
}


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_a_planned_disruption_raises_nothing(name: str) -> None:
    c = Cluster()
    gpu_node(c)
    gpu_node(c, "ip-10-0-12-35.ec2.internal", ("other-0",))  # a bystander, untouched
    STREAMS[name](c, HOUR)
    c.tick(HOUR + 86400)
    # The stream is what it claims: the node loses every GPU from allocatable (a drop the
    # rules must read), and nothing is raised for it.
    assert any(getattr(e, "allocatable", {}).get("nvidia.com/gpu") == 0 for e in c.events)
    assert [(i.type, i.summary) for i in run(timeline(c))] == []
