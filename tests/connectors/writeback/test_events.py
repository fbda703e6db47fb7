"""Pod and node Events through the real kubernetes-asyncio client and kmock's API server.

What kmock records is what the API server would have received: the tests count Event
objects and write requests there, never in the writer.
"""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import pytest

from connectors.writeback.api import Gate
from connectors.writeback.metrics import WritebackMetrics
from connectors.writeback.runner import Writeback, build
from connectors.writeback.settings import WritebackSettings
from schemas.incidents import PodInfo
from tests.connectors.writeback.cluster import Cluster, cluster, gpu_node
from tests.connectors.writeback.incidents import eviction, resolved
from tests.paths import DATA

FAST = WritebackSettings(writes_per_second=1000, write_burst=1000, metrics_port=None)


def writer(c: Cluster, settings: WritebackSettings = FAST, out: Any = None) -> Writeback:
    return build(settings, c.api, identity="gputriage-writeback-7c9d8f6b5-x2k4q", out=out)


def seeded(c: Cluster) -> None:
    c.add_pod("ml", "train-0")
    c.add_pod("ml", "train-1")
    c.add_node(gpu_node("gpu-1"))


def pod_events(c: Cluster) -> list[dict[str, Any]]:
    return [e for e in c.events() if e["regarding"]["kind"] == "Pod"]


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_one_event_per_pod_in_the_flyte_contract() -> None:
    [fixture] = json.loads((DATA / "writeback" / "flyte_event_xid79_eventsv1.json").read_text())[
        "items"
    ]
    async with cluster() as c:
        seeded(c)
        await writer(c).handle(eviction())
        events = sorted(pod_events(c), key=lambda e: e["regarding"]["name"])
        assert [e["regarding"]["name"] for e in events] == ["train-0", "train-1"]
        for event in events:
            assert event["regarding"]["uid"] == f"uid-{event['regarding']['name']}"
            assert set(event) == set(fixture) - {"series"}, "the fixture's fields, no more"
            for key in ("reportingController", "reportingInstance", "action", "reason", "type"):
                assert event[key] == fixture[key]
            assert event["note"].startswith("[gpu-health] [CRITICAL] Xid 79 ")
            assert event["metadata"]["namespace"] == "ml"
        [node] = [e for e in c.events() if e["regarding"]["kind"] == "Node"]
        assert node["regarding"] == {
            "apiVersion": "v1",
            "kind": "Node",
            "name": "gpu-1",
            "uid": "uid-gpu-1",
            "resourceVersion": "1",
        }
        assert node["metadata"]["namespace"] == "default"


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_a_newer_revision_bumps_the_series_and_a_restart_writes_nothing() -> None:
    async with cluster() as c:
        seeded(c)
        first = eviction()
        await writer(c).handle(first)
        [event] = [e for e in pod_events(c) if e["regarding"]["name"] == "train-0"]
        name = event["metadata"]["name"]
        before = len(c.event_writes())

        restarted = writer(c)  # a new process: nothing in memory, same revision again
        restarted.latest = {first.id: first}
        await restarted.converge()
        assert len(c.event_writes()) - before == 3, "three creates answered 409, nothing else"
        assert len(c.event_history("ml", name)) == 1

        await restarted.handle(eviction(revision=2))
        assert len(pod_events(c)) == 2, "updated, not duplicated"
        history = c.event_history("ml", name)
        assert len(history) == 2
        assert history[-1]["series"]["count"] == 2
        assert history[-1]["metadata"]["annotations"]["gputriage.io/revision"] == "2"
        assert history[-1]["note"] == event["note"]


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_resolve_deletes_the_pod_events_and_says_so_on_the_node() -> None:
    async with cluster() as c:
        seeded(c)
        w = writer(c)
        incident = eviction()
        await w.handle(incident)
        await w.handle(resolved(incident))
        assert pod_events(c) == []
        nodes = [e for e in c.events() if e["regarding"]["kind"] == "Node"]
        assert sorted(e["reason"] for e in nodes) == ["GPUIncidentResolved", "GPUXidError"]


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_keep_events_keeps_them_and_a_gone_pod_gets_none() -> None:
    async with cluster() as c:
        c.add_pod("ml", "train-0")  # train-1 is gone
        c.add_node(gpu_node("gpu-1"))
        w = writer(c, WritebackSettings(keep_events=True, metrics_port=None))
        incident = eviction()
        await w.handle(incident)
        await w.handle(resolved(incident))
        assert [e["regarding"]["name"] for e in pod_events(c)] == ["train-0"]
        assert w.metrics.writes.labels("event", "skipped")._value.get() == 1


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_changed_words_replace_the_event_under_the_same_name() -> None:
    """events.k8s.io makes note and reason immutable: a ticket escalated to a page is a
    new Event, not a patch the API server would refuse."""
    async with cluster() as c:
        seeded(c)
        w = writer(c)
        await w.handle(eviction(attributes={}, summary="GPU 2 left allocatable"))
        await w.handle(eviction(revision=2))
        names = sorted(e["metadata"]["name"] for e in pod_events(c))
        assert len(names) == 2
        assert all(e["reason"] == "GPUXidError" for e in pod_events(c))


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_dry_run_prints_each_write_and_writes_nothing() -> None:
    out = io.StringIO()
    async with cluster() as c:
        seeded(c)
        settings = WritebackSettings(dry_run=True, mark_nodes=True, metrics_port=None)
        w = writer(c, settings, out)
        incident = eviction()
        w.latest = {incident.id: incident}
        await w.converge()
        await w.handle(resolved(incident))
        assert c.writes() == []
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("event/pod ml/train-0 reason=GPUXidError note=[gpu-health] [CRIT")
    assert "condition/node gpu-1 GPUHealthy=False reason=GPUXid79" in lines
    assert any(line.startswith("delete event/pod ml/train-0.") for line in lines)


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_a_pod_recreated_under_the_same_name_gets_no_event() -> None:
    """A StatefulSet or training job recreates ``train-0`` after the XID (the incident's
    last evidence is 14:00:30): the new pod is healthy and must not be told it was hit."""
    async with cluster() as c:
        c.add_pod("ml", "train-0", uid="uid-new", created="2026-11-30T14:05:00Z")
        c.add_pod("ml", "train-1", created="2026-11-30T13:10:00Z")
        c.add_node(gpu_node("gpu-1"))
        w = writer(c)
        await w.handle(eviction())
        assert [e["regarding"]["name"] for e in pod_events(c)] == ["train-1"]
        assert w.metrics.writes.labels("event", "recreated")._value.get() == 1


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_a_tombstone_deletes_the_pod_events_live() -> None:
    async with cluster() as c:
        seeded(c)
        w = writer(c)
        incident = eviction()
        await w.handle(incident)
        assert len(pod_events(c)) == 2
        await w.forget(incident.id)
        assert pod_events(c) == []


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_a_restart_keeps_the_events_of_an_incident_absent_from_the_topic() -> None:
    """Absent is not resolved (a time-retained topic drops a quiet open incident); a
    resolved revision or a tombstone deletes."""
    async with cluster() as c:
        seeded(c)
        incident = eviction()
        await writer(c).handle(incident)
        restarted = writer(c)  # reads a topic without the incident
        await restarted.converge()
        assert len(pod_events(c)) == 2
        restarted.gone[incident.id] = incident.node  # its tombstone was read
        await restarted.converge()
        assert pod_events(c) == []


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_a_revision_with_the_same_words_and_pods_bumps_at_most_every_refresh() -> None:
    """A fleet-wide XID wave is many revisions that say nothing new: each bump costs four
    API calls per pod. New pods or words are written at once."""
    async with cluster() as c:
        seeded(c)
        c.add_pod("ml", "train-2")
        w = writer(c, WritebackSettings(event_refresh_seconds=600, metrics_port=None))
        await w.handle(eviction())
        before = len(list(c.server))
        await w.handle(eviction(revision=2))
        assert len(list(c.server)) == before, "nothing read, nothing written"

        more = (*eviction().pods, PodInfo(namespace="ml", name="train-2", role="failed"))
        await w.handle(eviction(revision=3, pods=more))
        assert sorted(e["regarding"]["name"] for e in pod_events(c)) == [
            "train-0",
            "train-1",
            "train-2",
        ]
        writes = len(c.event_writes())
        await w.handle(eviction(revision=4, pods=more))
        assert len(c.event_writes()) == writes

        await asyncio.sleep(601)
        await w.handle(eviction(revision=5, pods=more))
        [event] = [e for e in pod_events(c) if e["regarding"]["name"] == "train-0"]
        assert event["metadata"]["annotations"]["gputriage.io/revision"] == "5"


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_node_marks_are_not_queued_behind_event_writes() -> None:
    """One write a second, a burst of one: an Event took the token, a clear goes at once."""
    gate = Gate(writes_per_second=1, burst=1, dry_run=False, metrics=WritebackMetrics())
    loop = asyncio.get_running_loop()

    async def send() -> tuple[int, Any]:
        return 200, None

    await gate.write("event", "event 1", send)
    started = loop.time()
    await gate.write("condition", "clear", send)
    assert loop.time() - started < 0.01
    await gate.write("event", "event 2", send)
    assert loop.time() - started >= 0.5, "Events still keep their rate"
