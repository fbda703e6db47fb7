"""The core orders copies of a pod or node by the typed ``resource_version`` field, and
by the version inside the id only where the field is 0 (a record of an older release).

The connector fills the field from ``metadata.resourceVersion``; the id keeps the
version as a string, because ids are identity. Each test feeds events in arrival order
through :class:`Correlator`, so a copy behind the key's position is *late*.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import msgspec

from schemas.codec import AnyEvent, decode_event, encode, loads
from schemas.events import NodeEvent, PodEvent
from streams.core import Correlator
from tests.core_helpers import config as make_config
from tests.factories import Cluster

NODE = "gpu-node-01"
KEY = f"prod/{NODE}"


def feed(events: Sequence[AnyEvent]) -> Correlator:
    correlator = Correlator(make_config())
    for event in events:
        correlator.ingest(event)
    correlator.flush()
    return correlator


def old_shape(event: PodEvent | NodeEvent) -> PodEvent | NodeEvent:
    """``event`` as a release before the field wrote it (no ``resource_version`` key)."""
    wire = loads(encode(event))
    del wire["resource_version"]
    decoded = decode_event(json.dumps(wire).encode())
    assert isinstance(decoded, PodEvent | NodeEvent)
    return decoded


def typed(event: PodEvent | NodeEvent, version: int, id_version: str) -> PodEvent | NodeEvent:
    """``event`` with its version in the field, and ``id_version`` in the id."""
    uid = event.id.split(":")[1]
    return msgspec.structs.replace(event, id=f"k8s:{uid}:{id_version}", resource_version=version)


def test_a_record_written_before_the_field_decodes_and_is_ordered_by_its_id() -> None:
    c = Cluster("prod")
    c.node(NODE, 0)
    newer = c.pod(NODE, "trainer-0", 50, phase="Failed", reason="Evicted", version=30)
    older = c.pod(NODE, "trainer-0", 60, phase="Running", version=20)
    records = [old_shape(e) for e in c.events if isinstance(e, PodEvent | NodeEvent)]
    assert all(r.resource_version == 0 for r in records)
    assert records[1] == newer
    correlator = feed(records)
    track = correlator.keys[KEY].pods["ns/trainer-0"]  # type: ignore[union-attr]
    assert (track.phase, track.version) == ("Failed", 30)
    assert correlator.stats.stale == 1, older


def test_the_field_orders_copies_whose_id_names_no_number() -> None:
    """An opaque version string in the id reads as "unknown"; the field still orders."""
    c = Cluster("prod")
    c.node(NODE, 0)
    newer = typed(c.pod(NODE, "trainer-0", 50, phase="Failed", reason="Evicted"), 30, "v30")
    older = typed(c.pod(NODE, "trainer-0", 60, phase="Running"), 20, "v20")
    correlator = feed([c.events[0], newer, older])
    track = correlator.keys[KEY].pods["ns/trainer-0"]  # type: ignore[union-attr]
    assert (track.phase, track.version) == ("Failed", 30)
    assert correlator.stats.stale == 1


def test_the_field_wins_over_the_id() -> None:
    """The field is what the core reads: a copy whose id says newer but whose field says
    older is stale, and a late copy of the node newer by its field is applied."""
    c = Cluster("prod")
    node = typed(c.node(NODE, 0), 40, "40")
    newer = typed(c.pod(NODE, "trainer-0", 50, phase="Failed", reason="Evicted"), 30, "30")
    older = typed(c.pod(NODE, "trainer-0", 60, phase="Running"), 20, "99")
    late_node = typed(c.node(NODE, 10, alloc=7), 41, "1")
    correlator = feed([node, newer, older, late_node])
    state = correlator.keys[KEY]
    assert state.pods["ns/trainer-0"].phase == "Failed"  # type: ignore[union-attr]
    assert state.node_version == 41  # type: ignore[union-attr]
    assert (correlator.stats.stale, correlator.stats.late_applied) == (1, 1)
