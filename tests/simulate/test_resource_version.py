"""The simulated stream carries pods' and nodes' versions as the connector does: in the
id and in ``resource_version``, the same number, one per write in a cluster."""

from __future__ import annotations

from gputriage.simulate import Simulation, StreamSpec
from schemas.codec import decode_event
from schemas.events import NodeEvent, PodEvent


def test_every_pod_and_node_record_has_its_ids_version_as_a_field() -> None:
    records = [decode_event(line) for line in Simulation(StreamSpec(events=3000, nodes=30)).lines()]
    objects = [r for r in records if isinstance(r, PodEvent | NodeEvent)]
    assert {type(r) for r in objects} == {PodEvent, NodeEvent}
    for record in objects:
        assert record.resource_version > 0, record.id
        assert record.id == f"k8s:{record.id.split(':')[1]}:{record.resource_version}"
    # One version per write in a cluster: a repeated version is a copy of the same record
    # (a relisted object), never another object's.
    named: dict[tuple[str, int], str] = {}
    for record in objects:
        assert named.setdefault((record.cluster, record.resource_version), record.id) == record.id
