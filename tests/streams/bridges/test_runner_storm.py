"""Storms: 200 evictions on one node are at most 3 pages, listing every pod.

First what the core makes of such a storm (the real correlator on the tests'
factories): ONE ``device_unhealthy_eviction`` incident, the chain anchored at the
XID, with a revision per evicted pod. Then the bridge on the real broker, those
revisions arriving live: coalescing and ``min_update_seconds`` make them an open and
at most two updates, and the last one lists all 200 pods. Then many *incidents* of
one node (the storm group), folded past the page budget into the group's latest
page, the grouping surviving a restart.
"""

from __future__ import annotations

from collections import Counter

import msgspec
import pytest

from schemas.incidents import Incident
from tests.bridge_helpers import FAST, bridging, incident, publish, read_ledger, receiving, route
from tests.core_helpers import config, final, run
from tests.factories import Cluster
from tests.kafka_helpers import KafkaTestEnv, eventually

MIN = 60.0
PODS = 200


def eviction_storm() -> list[Incident]:
    """An XID 79 on one node, the GPU dropped, then 200 GPU pods evicted (every revision
    the core publishes, in order)."""
    c = Cluster()
    c.node("n1", 0)
    for i in range(PODS):
        c.pod("n1", f"p{i:03d}", 1, namespace=f"team-{i % 3}")
    c.bind("n1", 2, "GPU-1", "0000:9b:00.0", ["p000"])
    c.xid("n1", 5 * MIN, 79)
    c.node("n1", 5 * MIN + 9, alloc=7)
    for i in range(PODS):
        c.pod(
            "n1",
            f"p{i:03d}",
            5 * MIN + 10 + i * 0.5,
            phase="Failed",
            reason="Evicted",
            namespace=f"team-{i % 3}",
        )
    c.tick(60 * MIN)
    # Every change published (revision_interval_seconds = 0): the bridge's own storm
    # folding must hold when the core is configured not to coalesce.
    return run(c.events, config(revision_interval_seconds=0))


def test_the_core_makes_one_chain_incident_of_the_storm_with_every_pod() -> None:
    revisions = eviction_storm()
    pages = [r for r in revisions if r.severity == "page"]
    assert Counter(r.id for r in pages).most_common() == [(pages[0].id, PODS)]
    [chain] = [i for i in final(revisions).values() if i.severity == "page"]
    assert chain.type == "device_unhealthy_eviction"
    assert len(chain.pods) == PODS
    assert chain.evidence_omitted > 0, "the evidence is capped (the pods are not)"


@pytest.mark.asyncio
@pytest.mark.timeout(120)
async def test_a_storm_of_200_evictions_is_at_most_3_pages_listing_every_pod(
    kafka: KafkaTestEnv,
) -> None:
    revisions = eviction_storm()
    settings = msgspec.structs.replace(FAST, min_update_seconds=5.0)
    async with receiving() as receiver:
        pages = route("oncall", receiver, severities={"page"})
        async with bridging(kafka, [pages], settings) as bridge:
            for start in range(0, len(revisions), 25):  # live, in the processor's batches
                await publish(kafka, revisions[start : start + 25])
            newest = max(r.revision for r in revisions if r.severity == "page")
            await eventually(
                lambda: any(r.body["revision"] == newest for r in receiver.got),
                timeout=60,
                what="the newest revision delivered",
            )
            await eventually(lambda: bridge.runner._queued == 0, timeout=10, what="idle")
    assert 1 <= len(receiver.got) <= 3, [r.key for r in receiver.got]
    assert receiver.got[0].body["status"] == "open"
    assert len({r.body["id"] for r in receiver.got}) == 1, "grouped by the chain incident"
    assert len(receiver.got[-1].body["pods"]) == PODS, "every pod still listed"
    assert bridge.count("coalesced", "oncall") >= PODS - 3


@pytest.mark.asyncio
@pytest.mark.timeout(120)
async def test_incidents_of_one_node_past_the_page_budget_fold_into_its_latest_page(
    kafka: KafkaTestEnv,
) -> None:
    """12 incidents of one node: 3 pages, the other 9 folded into the third, whose
    update lists every pod; after a restart the group is remembered (no new page)."""
    settings = msgspec.structs.replace(FAST, storm_pages=3, min_update_seconds=0.5)
    many = [
        incident(f"inc-{n:02d}", 1, node="n1", pods=[("ns", f"pod-{n:02d}")]) for n in range(12)
    ]
    async with receiving() as receiver:
        r = route("r", receiver)
        async with bridging(kafka, [r], settings) as bridge:
            await publish(kafka, many)  # a burst: lanes of one group run side by side
            await eventually(
                lambda: len(bridge.runner.ledger.deliveries) == 12 and bridge.runner._queued == 0,
                timeout=30,
                what="all twelve handled",
            )
        opened = [x for x in receiver.got if x.body["status"] == "open"]
        assert len(opened) == 3
        group = bridge.runner.ledger.group("r", "c1/n1")
        assert group is not None
        lead = group.lead
        assert lead in {x.body["id"] for x in opened}, "the lead is one of the three pages"
        pods = {p for x in receiver.got for p in x.body["pods"]}
        assert pods == {f"ns/pod-{n:02d}" for n in range(12)}, "every pod listed"
        latest = receiver.got[-1].body
        assert latest["id"] == lead
        assert latest["attributes"]["grouped_incidents"] == "9"
        assert len(latest["pods"]) == 10  # the lead's own and the 9 folded
        revisions = [x.body["revision"] for x in receiver.got if x.body["id"] == lead]
        assert revisions == sorted(set(revisions)), "each merged view a new revision"
        ledger = await read_ledger(kafka)
        folded = [e for e in ledger.entries() if e.folded_into]
        assert len(folded) == 9
        assert all(e.folded_into == lead for e in folded)

        before = len(receiver.got)
        async with bridging(kafka, [r], settings) as bridge:
            await publish(kafka, [incident("inc-late", 1, node="n1", pods=[("ns", "pod-late")])])
            await eventually(lambda: len(receiver.got) > before, timeout=30, what="the fold")
            await eventually(lambda: bridge.runner._queued == 0, timeout=10, what="idle")
    late = receiver.got[before:]
    assert [x.body["id"] for x in late] == [lead], "folded after the restart, no new page"
    assert "ns/pod-late" in late[-1].body["pods"]
    assert len(late[-1].body["pods"]) == 11
