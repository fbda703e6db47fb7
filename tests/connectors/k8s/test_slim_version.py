"""Slimming fills ``resource_version`` of pods and nodes from ``metadata.resourceVersion``;
the id keeps the version as the API sent it."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from connectors.k8s.slim import slim_object, slim_watch_line
from schemas.codec import decode_event, encode
from schemas.events import KubeEvent, NodeEvent, PodEvent
from schemas.ids import k8s_version, resource_version_number
from schemas.types import MAX_RESOURCE_VERSION
from tests import paths

DATA = paths.DATA / "k8s"


def load(name: str) -> dict[str, Any]:
    obj: dict[str, Any] = orjson.loads((DATA / f"{name}.json").read_bytes())
    return obj


@pytest.mark.parametrize(
    "name", ["pod_training", "pod_pending", "node_gpu", "node_gpu_operator_mig"]
)
def test_the_version_is_a_field_as_well_as_part_of_the_id(name: str) -> None:
    raw = load(name)
    version = raw["metadata"]["resourceVersion"]
    event = slim_object(raw, cluster="c1")
    assert isinstance(event, PodEvent | NodeEvent)
    assert event.id == f"k8s:{raw['metadata']['uid']}:{version}"
    assert event.resource_version == int(version) > 0
    assert decode_event(encode(event)) == event
    line = orjson.dumps({"type": "MODIFIED", "object": raw})
    assert slim_watch_line(line, cluster="c1") == slim_object(raw, "modified", cluster="c1")


@pytest.mark.parametrize(
    ("version", "number"),
    [
        ("1001", 1001),
        ("0", 0),
        (str(MAX_RESOURCE_VERSION), MAX_RESOURCE_VERSION),
        (str(MAX_RESOURCE_VERSION + 1), 0),  # no etcd revision; no MessagePack integer
        ("9" * 30, 0),
        ("opaque-v2", 0),
        ("²", 0),  # str.isdigit() is true of it and int() refuses it
        ("١٢", 0),  # Arabic-Indic digits: int() reads them, the API never sends them
        ("-5", 0),
        ("", 0),
    ],
)
def test_only_a_decimal_etcd_revision_is_a_number(version: str, number: int) -> None:
    assert resource_version_number(version) == number
    assert k8s_version(f"k8s:uid-1:{version}") == number
    raw = copy.deepcopy(load("pod_training"))
    raw["metadata"]["resourceVersion"] = version or "x"
    event = slim_object(raw, cluster="c1")
    assert isinstance(event, PodEvent), event  # an odd version is still a pod, never a dead letter
    assert event.resource_version == number
    assert event.id == f"k8s:{raw['metadata']['uid']}:{version or 'x'}"


def test_kube_events_have_no_such_field() -> None:
    event = slim_object(load("event_evicted"), cluster="c1")
    assert isinstance(event, KubeEvent)
    assert not hasattr(event, "resource_version")
