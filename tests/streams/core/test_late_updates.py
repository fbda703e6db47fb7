"""A late Kubernetes update is evidence, not a duplicate.

After a relist (410 Gone, a connector restart, a reconnect) the objects that changed
while the watch was down arrive stamped with their *own* times (the newest status
timestamp in the object, ``connectors/k8s/slim.py``), which are older than what the
node's key has already applied from other objects. The old core took every event
behind the key's position for a redelivery and skipped it as stale: the three pods
killed by an XID 79 vanished and on-call got ``gpu_degraded`` "no pod failure yet".

The rule now (``streams.core.node.admits``): behind the key's position, an event of
a Kubernetes object is applied when its resourceVersion is newer than the version of
that object already applied; an older or equal version (a true duplicate, a
redelivery) is skipped, even in order; a pod deleted lately is not brought back.

Each test feeds events in *arrival* order through :class:`Correlator` with the
default grace (0.5 s), so anything older than the watermark is applied at once.
"""

from __future__ import annotations

from schemas.codec import AnyEvent
from schemas.incidents import Incident
from streams.core import Correlator
from tests.core_helpers import config as make_config
from tests.core_helpers import of_type
from tests.factories import Cluster, term

NODE = "gpu-node-01"
BUS = "0000:9b:00.0"
UUID = "GPU-00000000-0000-0000-0000-000000000001"
PODS = ("trainer-0", "trainer-1", "trainer-2")


def feed(events: list[AnyEvent]) -> tuple[Correlator, list[Incident]]:
    """Arrival order is the list's order; the run ends with a flush."""
    correlator = Correlator(make_config())
    out: list[Incident] = []
    for event in events:
        out.extend(correlator.ingest(event))
    out.extend(correlator.flush())
    return correlator, out


def running_node() -> Cluster:
    """Three training pods on an 8-GPU node, watched live."""
    c = Cluster("prod")
    c.node(NODE, 0)
    for i, name in enumerate(PODS):
        c.pod(NODE, name, 1 + i)
    return c


def relisted_failures(c: Cluster, at: float) -> list[AnyEvent]:
    """The relist's copies of the three pods: Failed, stamped with their own finish time
    ``at`` (their newest status timestamp), each a newer resourceVersion."""
    return [
        c.pod(NODE, name, at, phase="Failed", current=term(at - 1, "Error", 1)) for name in PODS
    ]


def xid_and_drop_then_watch_moves_on(c: Cluster) -> None:
    """XID 79 at 100 s, allocatable 8 -> 7 at 105 s, then the node's key moves past 250 s
    (node status updates) while the pod watch is down."""
    c.xid(NODE, 100, 79, bus=BUS, uuid=UUID)
    c.node(NODE, 105, alloc=7)
    for t in (250, 260):
        c.node(NODE, t, alloc=7, labels={"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"})


def test_relisted_pod_failures_behind_the_keys_position_join_the_device_chain() -> None:
    """The issue's case: the failures at 130 s arrive after the key applied 250 s.

    Old core: all three skipped as stale (``stats.stale == 3``), and the chain never
    opened. Now: one device_unhealthy_eviction with the three pods, counted late.
    """
    c = running_node()
    xid_and_drop_then_watch_moves_on(c)
    relisted_failures(c, 130)
    correlator, out = feed(c.events)
    chains = of_type(out, "device_unhealthy_eviction")
    assert len(chains) == 1
    assert sorted(p.name for p in chains[0].pods) == sorted(PODS)
    assert correlator.stats.late_applied == 3
    assert correlator.stats.stale == 0
    assert not of_type(out, "gpu_degraded")


def test_a_second_delivery_of_the_relisted_copies_changes_nothing() -> None:
    """Kafka is at-least-once: the same relisted copies delivered again (same ids, same
    versions) are true duplicates, skipped; the incidents are those of one delivery."""
    c = running_node()
    xid_and_drop_then_watch_moves_on(c)
    copies = relisted_failures(c, 130)
    _, once = feed(c.events)
    correlator, twice = feed([*c.events, *copies])
    assert twice == once
    assert correlator.stats.stale == len(copies)


def test_an_older_version_of_a_pod_is_skipped_even_in_event_time_order() -> None:
    """A watch cache lagging behind can hand out an older version of an object after a
    newer one. Ordered by event time alone, the older copy (stamped later, when it was
    received) would overwrite the newer state: the pod Failed would be Running again
    and a later crash would be counted against a pod that is gone. Versions decide."""
    c = Cluster("prod")
    c.node(NODE, 0)
    c.pod(NODE, "trainer-0", 1, version=10)
    c.pod(NODE, "trainer-0", 50, phase="Failed", reason="Evicted", version=30)
    stale = c.pod(NODE, "trainer-0", 60, phase="Running", version=20)
    correlator, _ = feed(c.events)
    track = correlator.keys[f"prod/{NODE}"].pods["ns/trainer-0"]  # type: ignore[union-attr]
    assert track.phase == "Failed"
    assert track.version == 30
    assert correlator.stats.stale == 1, stale


def test_a_late_copy_of_a_deleted_pod_does_not_bring_it_back() -> None:
    """A redelivery after a crash can carry a pod's earlier update after its deletion.
    Without the node's tombstones (``NodeState.gone``) the pod would be tracked again,
    and its next unrelated event could join incidents it has no part in."""
    c = Cluster("prod")
    c.node(NODE, 0)
    early = c.pod(NODE, "trainer-0", 1)
    c.pod(NODE, "trainer-0", 40, op="deleted", phase="Succeeded")
    c.node(NODE, 60)
    correlator, _ = feed([*c.events, early])
    state = correlator.keys[f"prod/{NODE}"]
    assert "ns/trainer-0" not in state.pods  # type: ignore[union-attr]
    assert correlator.stats.stale == 1


def test_a_gpu_pod_seen_only_in_the_relist_is_news() -> None:
    """A pod created *and* killed while the watch was down appears only in the relist,
    behind the key's position, and was never tracked. Its failure is evidence: it joins
    the chain (an unversioned late event would still be skipped)."""
    c = running_node()
    xid_and_drop_then_watch_moves_on(c)
    c.pod(NODE, "late-joiner", 131, phase="Failed", current=term(130, "Error", 1))
    _, out = feed(c.events)
    chains = of_type(out, "device_unhealthy_eviction")
    assert [p.name for p in chains[0].pods] == ["late-joiner"]


def test_a_late_eviction_event_joins_once() -> None:
    """Kubernetes Events carry no version of the pod. A late ``Evicted`` Event is news
    only while its pod has not failed yet: it joins the chain; the same Event again
    (or a second Event about the same failed pod) is skipped."""
    c = running_node()
    xid_and_drop_then_watch_moves_on(c)
    evicted = c.kube(NODE, 140, "Evicted", name="trainer-1", message="DeviceUnhealthy")
    correlator, out = feed([*c.events, evicted])
    chains = of_type(out, "device_unhealthy_eviction")
    assert [p.name for p in chains[0].pods] == ["trainer-1"]
    assert correlator.stats.late_applied == 1
    assert correlator.stats.stale == 1


def test_a_relisted_node_with_a_newer_version_is_applied_and_an_older_one_is_not() -> None:
    """The node object too: after a relist, the node's newer version (the drop that
    happened while the watch was down) is stamped with its heartbeat time, which can be
    behind pods' events already applied. It must count (the drop persists, and a pod
    the kubelet could not admit to the device joins the chain); an older copy must not
    undo the drop."""
    c = Cluster("prod")
    c.node(NODE, 0, version=100)
    for i, name in enumerate(PODS):
        c.pod(NODE, name, 1 + i)
    c.pod(NODE, "trainer-0", 200, phase="Failed", reason="UnexpectedAdmissionError")
    c.pod(NODE, "trainer-1", 210)  # the key has applied 200 s
    c.node(NODE, 110, alloc=7, version=500)  # relisted: newer version, older time
    older = c.node(NODE, 120, alloc=8, version=300)  # a lagging cache's older copy
    correlator, out = feed(c.events)
    state = correlator.keys[f"prod/{NODE}"]
    assert state.allocatable == 7  # type: ignore[union-attr]
    assert correlator.stats.late_applied == 1
    assert correlator.stats.stale == 1, older
    assert of_type(out, "device_unhealthy_eviction")


def test_restart_counts_in_a_relisted_copy_count_as_crashes() -> None:
    """Class 9's neighbour: the relisted copy shows restartCount 6 where the watch last
    saw 0, behind the key's position. Its restarts are counted (a crash loop), not lost
    with the skipped event. (Restarts found this way are stamped at the previous
    sighting, the earliest they can have happened: the window still holds them.)"""
    c = Cluster("prod")
    c.node(NODE, 0)
    c.pod(NODE, "trainer-0", 1, restarts=0)
    c.node(NODE, 900)
    c.node(NODE, 901)
    c.pod(NODE, "trainer-0", 600, restarts=6, last=term(590, "Error", 1))
    _, out = feed(c.events)
    assert of_type(out, "suspected_cuda_oom")


def test_failures_relisted_after_the_chain_window_escalate_the_open_ticket() -> None:
    """The relist can come later still: the key is past the chain's window (700 s) and
    gpu_degraded has opened ("no eviction chain followed") when the three failures of
    130 s arrive. They are still evidence: the ticket escalates to a page naming the
    three pods (class 11's rule), one incident, nothing lost."""
    c = running_node()
    c.xid(NODE, 100, 79, bus=BUS, uuid=UUID)
    c.node(NODE, 105, alloc=7)
    for t in (900, 910):
        c.node(NODE, t, alloc=7)
    relisted_failures(c, 130)
    correlator, out = feed(c.events)
    (degraded,) = of_type(out, "gpu_degraded")
    assert degraded.severity == "page"
    assert sorted(p.name for p in degraded.pods) == sorted(PODS)
    assert not of_type(out, "device_unhealthy_eviction")
    assert correlator.stats.late_applied == 3


def test_a_tight_advance_moves_the_watermark_only_as_far_as_what_it_released() -> None:
    """A clock-made limit (streams/app/pipeline.py) is not a promise about events to come."""
    c = Cluster()
    c.node("n", 0)
    c.pod("n", "p", 1)
    c.pod("n", "p", 60, restarts=1, last=term(59, "OOMKilled", 137))
    correlator = Correlator(make_config())
    assert correlator.advance_watermark(4e9, tight=True) == []
    assert correlator.watermark == float("-inf"), "nothing to release: unmoved"
    for event in c.events:
        correlator.ingest(event, hold=True)
    out = correlator.advance_watermark(4e9, tight=True)
    assert of_type(out, "host_oom_kill")
    last = max(e.time for e in c.events).timestamp()
    assert last <= correlator.watermark < 4e9
    later = Cluster()
    later.node("m", 86_400)  # after what fired (a day on), long before the limit: in order
    correlator.ingest(later.events[0], hold=True)
    assert correlator.stats.late == 0
