"""A flaky GPU is one fault: its first episode's incident, then its ``xid_repeat``.

The rules of :mod:`streams.core.rules.degraded` and :mod:`streams.core.rules.chain` that
keep a fault that comes back from paging again, and a new fault on the same GPU from
hiding inside the old one's ticket (seen in a simulated fleet, 1,000 nodes 24 h). Driven through
the real engine with real-shaped events from :mod:`tests.factories`.
"""

from __future__ import annotations

from schemas.codec import AnyEvent
from tests.core_helpers import of_type, run
from tests.factories import T0, Cluster, term

MIN = 60.0
T0_S = T0.timestamp()
BUS = "0000:20:00.0"
UUID = "GPU-20"
CHAIN = "device_unhealthy_eviction"


def _flaky_start(c: Cluster) -> None:
    """Node n1 with pod ``a`` bound to GPU-20."""
    c.node("n1", 0)
    c.pod("n1", "a", 1)
    c.bind("n1", 1, UUID, BUS, ["a"])


def _crash(c: Cluster, t: float, restarts: int) -> None:
    """Pod ``a`` crashes the way a dying GPU kills a CUDA process."""
    message = "RuntimeError: CUDA error: unspecified launch failure"
    c.pod("n1", "a", t, restarts=restarts, last=term(t - 1, code=134, message=message))


def test_the_same_code_after_its_page_resolved_opens_no_ticket() -> None:
    """An XID 48 and its casualty page as a chain. The chain resolves ten minutes later:
    every GPU is allocatable, and a GPU reset is invisible to Kubernetes. The same GPU's
    next XID 48, a quarter of an hour after, is the fault come back: no ticket, it is
    counted toward the xid_repeat. The same line with no earlier fault drafts a ticket:
    the rule is the memory, not silence."""
    c = Cluster()
    _flaky_start(c)
    c.xid("n1", 2 * MIN, 48, bus=BUS, uuid=UUID)
    _crash(c, 2 * MIN + 40, restarts=1)
    c.xid("n1", 17 * MIN, 48, bus=BUS, uuid=UUID)
    c.tick(40 * MIN)
    revisions = run(c.events)
    [page] = of_type(revisions, CHAIN)
    assert page.first_seen.timestamp() == T0_S + 2 * MIN
    assert of_type(revisions, "gpu_degraded") == []

    alone = Cluster()
    _flaky_start(alone)
    alone.xid("n1", 17 * MIN, 48, bus=BUS, uuid=UUID)
    alone.tick(40 * MIN)
    [ticket] = of_type(run(alone.events), "gpu_degraded")
    assert ticket.first_seen.timestamp() == T0_S + 17 * MIN


def test_a_casualty_after_the_repeat_opened_joins_the_repeat_page() -> None:
    """Five XID 119 episodes on one GPU open the xid_repeat page (RMA). The GPU's pod
    crashes half a minute after the fifth: a casualty of the hardware that page names,
    not a second page."""
    c = Cluster()
    _flaky_start(c)
    for k in range(5):
        c.xid("n1", (5 + 20 * k) * MIN, 119, bus=BUS, uuid=UUID)
    _crash(c, 85 * MIN + 30, restarts=1)
    c.tick(100 * MIN)
    revisions = run(c.events)
    [repeat] = of_type(revisions, "xid_repeat")
    assert of_type(revisions, CHAIN) == []
    assert [p.role for p in repeat.pods] == ["failed"]
    assert any(e.schema == "pod.v1" for e in repeat.evidence)


def test_a_new_fatal_code_with_a_casualty_on_a_ticketed_gpu_pages_on_its_own() -> None:
    """An XID 119 with no pod harmed opens the GPU's ticket. Forty minutes later the same
    GPU logs an XID 48 and its pod dies: a new fault, paged as its own chain dated from
    the XID 48, and the page supersedes the ticket (its action covers the GPU). The same
    code again (a second XID 119 and the crash) is the ticket's fault: it escalates the
    ticket, as before."""

    def history(code: int) -> list[AnyEvent]:
        c = Cluster()
        _flaky_start(c)
        c.xid("n1", 5 * MIN, 119, bus=BUS, uuid=UUID)
        c.xid("n1", 45 * MIN, code, bus=BUS, uuid=UUID)
        _crash(c, 45 * MIN + 40, restarts=1)
        c.tick(60 * MIN)
        return c.events

    revisions = run(history(48))
    [page] = of_type(revisions, CHAIN)
    assert page.first_seen.timestamp() == T0_S + 45 * MIN
    assert page.attributes["xids"] == "48"
    [ticket] = of_type(revisions, "gpu_degraded")
    assert ticket.first_seen.timestamp() == T0_S + 5 * MIN
    assert ticket.status == "resolved"
    assert ticket.attributes["superseded_by"] == page.id

    same = run(history(119))
    assert of_type(same, CHAIN) == []
    [escalated] = of_type(same, "gpu_degraded")
    assert escalated.severity == "page"
    assert escalated.attributes["escalated"] == "pod failure"


def test_a_drop_of_a_gpu_whose_repeat_is_open_joins_the_page() -> None:
    """Five XID 74 episodes open the GPU's xid_repeat page; after the fifth the device
    plugin marks that GPU unhealthy for good (8 -> 7 for half an hour). The page tells
    that GPU already (drain, RMA): the drop is its evidence, no "1 of 8 unallocatable"
    ticket. The same drop with no XID near it names no GPU, and opens its ticket."""

    def history(with_xids: bool) -> list[AnyEvent]:
        c = Cluster()
        _flaky_start(c)
        if with_xids:
            for k in range(5):
                c.xid("n1", (5 + 20 * k) * MIN, 74, bus=BUS, uuid=UUID)
        c.node("n1", 85 * MIN + 30, alloc=7)
        c.tick(120 * MIN)
        return c.events

    revisions = run(history(True))
    [repeat] = of_type(revisions, "xid_repeat")
    [first] = of_type(revisions, "gpu_degraded")  # the first episode's, superseded
    assert first.first_seen.timestamp() == T0_S + 5 * MIN
    assert first.attributes["superseded_by"] == repeat.id
    assert any(e.schema == "node.v1" for e in repeat.evidence)
    [ticket] = of_type(run(history(False)), "gpu_degraded")
    assert ticket.first_seen.timestamp() == T0_S + 85 * MIN + 30
