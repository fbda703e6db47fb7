"""``nvlink_domain_fault``: one fault in a multi-node NVLink domain is one incident.

GB200 / GB300 NVL72 trays share one NVLink fabric; GPU feature discovery labels them
``nvidia.com/gpu.clique=<clusterUUID>.<cliqueId>`` (NVIDIA/k8s-device-plugin
internal/lm/imex.go:39@dd78f3d42c8b1782e5dbc54893b7b2caf832826b). One GPU's link going
down logs XID 149 there and XID 145 on the other trays' GPUs within seconds
(marin-community/marin#9086: "s9jvxs64 GPU 0 was the only GPU reporting Xid 149, the
other 63 reported the downstream Xid 145"). Before this rule each tray paged its own
"reset or replace the GPU".

Real lines (copied verbatim, see ``tests/data/fabric/SOURCES.md``): the 149 from
leptonai/gpud#1160, the fatal 145s and the ``NETIR_LINK_EVT/NETIR_LINK_DOWN`` 149 from
gpud's components/accelerator/nvidia/xid/nvlink_logs_test.go@e97b44a0, the Nonfatal 145
from gpud#1174. The clique value is the one NVIDIA's DRA driver docs show
(``9277d399-0674-44a9-b64e-d85bb19ce2b0.32766``).
"""

from __future__ import annotations

import math
import random

import msgspec
import pytest

from schemas.codec import AnyEvent
from schemas.events import XidEvent
from schemas.incidents import Incident
from schemas.keys import FABRIC_XIDS, Router
from streams.core import Correlator
from streams.core.rules.fabric import domain_of
from streams.core.snapshot import decode_state, encode_state
from streams.core.state import ClusterState
from tests.core_helpers import config, final, of_type, run
from tests.factories import Cluster, term
from tests.xid_lines import kmsg

KIND = "nvlink_domain_fault"
CHAIN = "device_unhealthy_eviction"
DOMAIN_A = "9277d399-0674-44a9-b64e-d85bb19ce2b0.32766"
DOMAIN_B = "6a130f54-faaa-4b8f-847f-be44ab70f917.32766"
PARTITION_A2 = "9277d399-0674-44a9-b64e-d85bb19ce2b0.1"
"""Another NVLink partition of DOMAIN_A's fabric: another domain."""
CLIQUE = "nvidia.com/gpu.clique"

NETIR_FATAL = (
    "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 "
    "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"
)
LINK_DOWN = (
    "NVRM: Xid (PCI:0000:04:00): 149, NETIR_LINK_EVT/NETIR_LINK_DOWN Fatal XC0 i0 Link 00 "
    "(0x00000011 0x00000000 0x00000000 0x00000000)"
)
RLW_FATAL = (
    "NVRM: Xid (PCI:0000:04:00): 145, RLW_REMAP Fatal XC0 i0 Link 00 (0x00000004 0x00000040 "
    "0x00000000 0x00000000)",
    "NVRM: Xid (PCI:0000:04:00): 145, RLW_RSPCOL Fatal XC0 i0 Link 00 (0x00000005 0x00000002 "
    "0x00000000 0x00000000)",
    "NVRM: Xid (PCI:0000:04:00): 145, RLW_SRC_TRACK Fatal XC0 i0 Link 00 (0x00000007 "
    "0x00000001 0x00000000 0x00000000)",
)
RLW_NONFATAL = (
    "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 "
    "0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)"
)
ROOT_BUS = "0000:00:00.0"
TRAY_BUS = "0000:04:00.0"
CRASH = "RuntimeError: CUDA error: unspecified launch failure"


def clique(domain: str) -> dict[str, str]:
    return {CLIQUE: domain}


def trays(c: Cluster, nodes: dict[str, str | None]) -> None:
    """GPU nodes (name -> domain, None: no clique label), each with a pod on one GPU (the
    first node's GPU at the 149 line's bus, the others at the 145 lines')."""
    for node, domain in nodes.items():
        c.node(node, 0, labels=clique(domain) if domain else None)
    for node in nodes:
        c.pod(node, f"rank-{node}", 1)
    for k, node in enumerate(nodes):
        c.bind(node, 2, f"GPU-{node}", ROOT_BUS if k == 0 else TRAY_BUS, [f"rank-{node}"])


def link_down(c: Cluster, nodes: list[str], t: float, *, root: bool = True) -> None:
    """The root tray's XID 149 at ``t`` (unless ``root`` is False: its log is missing), a
    fatal XID 145 on each other tray within the next seconds, then every rank crashes."""
    if root:
        kmsg(c, nodes[0], t, NETIR_FATAL)
    for k, node in enumerate(nodes[1:]):
        kmsg(c, node, t + 1 + k, RLW_FATAL[k % len(RLW_FATAL)])
    for node in nodes:
        c.pod(node, f"rank-{node}", t + 40, restarts=1, last=term(t + 39, code=134, message=CRASH))


def pages(revisions: list[Incident]) -> list[Incident]:
    return [inc for inc in final(revisions).values() if inc.severity == "page"]


FOUR = ["tray-1", "tray-2", "tray-3", "tray-4"]


def test_four_trays_one_link_down_is_one_page() -> None:
    """One XID 149 and three XID 145s within four seconds on four trays of one domain:
    one page, naming the domain, the root GPU (the 149's) and the four nodes. The trays'
    own eviction chains stay, as ``info`` naming the domain, and none says to reset or
    replace its GPU."""
    c = Cluster()
    trays(c, dict.fromkeys(FOUR, DOMAIN_A))
    link_down(c, FOUR, 100)
    c.tick(600)
    revisions = run(c.events)
    [page] = pages(revisions)
    assert page.type == KIND
    assert page.node == ""
    attrs = page.attributes
    assert attrs["nvlink_domain"] == DOMAIN_A
    assert (attrs["root_node"], attrs["root_gpu"], attrs["root_xid"]) == ("tray-1", ROOT_BUS, "149")
    assert attrs["root_seen"] == "true"
    assert attrs["nodes"].split(",") == FOUR
    assert page.gpus[0].pci_bus_id == ROOT_BUS
    assert DOMAIN_A in page.summary
    assert "tray-1" in page.summary
    assert page.first_seen.timestamp() == c.events[0].time.timestamp() + 100
    chains = of_type(revisions, CHAIN)
    assert sorted(inc.node for inc in chains) == FOUR
    for inc in chains:
        assert inc.severity == "info"
        assert inc.attributes["nvlink_domain"] == DOMAIN_A
        assert inc.action.startswith(f"Follow the {KIND} incident of NVLink domain {DOMAIN_A}")
        assert "Do not reset or replace this GPU" in inc.action


def test_nodes_without_the_label_page_as_before() -> None:
    """The same lines on four nodes without the clique label: four chain pages, no domain
    incident, nothing names a domain. The label alone decides."""
    c = Cluster()
    trays(c, dict.fromkeys(FOUR))
    link_down(c, FOUR, 100)
    c.tick(600)
    revisions = run(c.events)
    assert of_type(revisions, KIND) == []
    chains = pages(revisions)
    assert sorted((inc.type, inc.node) for inc in chains) == [(CHAIN, n) for n in FOUR]
    assert not any("nvlink_domain" in inc.attributes for inc in final(revisions).values())


@pytest.mark.parametrize("other", [DOMAIN_B, PARTITION_A2], ids=["racks", "partitions"])
def test_two_domains_at_once_are_two_incidents(other: str) -> None:
    """Two racks (or two NVLink partitions of one rack's fabric, whose traffic never
    crosses) whose links go down in the same second: two incidents, each naming its own
    root and its own nodes; a node of one is never named by the other."""
    c = Cluster()
    a, b = ["a-1", "a-2"], ["b-1", "b-2", "b-3"]
    trays(c, {**dict.fromkeys(a, DOMAIN_A), **dict.fromkeys(b, other)})
    kmsg(c, "a-1", 100, NETIR_FATAL)
    kmsg(c, "b-1", 100, LINK_DOWN)
    kmsg(c, "a-2", 101, RLW_FATAL[0])
    kmsg(c, "b-2", 101, RLW_FATAL[1])
    kmsg(c, "b-3", 102, RLW_FATAL[2])
    c.tick(600)
    found = {inc.attributes["nvlink_domain"]: inc for inc in of_type(run(c.events), KIND)}
    assert sorted(found) == sorted((DOMAIN_A, other))
    assert found[DOMAIN_A].attributes["nodes"].split(",") == a
    assert found[other].attributes["nodes"].split(",") == b
    assert found[other].attributes["root_node"] == "b-1"
    assert found[DOMAIN_A].id != found[other].id


def _incidents(events: list[AnyEvent], grace: float) -> list[bytes]:
    correlator = Correlator(config(grace_seconds=grace))
    router = Router()
    out: list[Incident] = []
    for event in events:
        for copy in router.route(event):
            out.extend(correlator.ingest(copy))
    out.extend(correlator.flush())
    return sorted(msgspec.json.encode(inc) for inc in final(out).values())


def test_any_arrival_order_gives_the_same_incidents() -> None:
    """The trays' logs reach the processor in any order (each node's connector is its own
    stream) and the root line's clock is a second behind the first follow-up's: within
    grace, every arrival order gives byte-identical incidents, rooted at the 149."""
    c = Cluster()
    trays(c, dict.fromkeys(FOUR, DOMAIN_A))
    setup = list(c.events)
    kmsg(c, "tray-2", 99, RLW_FATAL[0])
    kmsg(c, "tray-1", 100, NETIR_FATAL)
    kmsg(c, "tray-3", 100, RLW_FATAL[1])
    kmsg(c, "tray-4", 100.5, RLW_FATAL[2])
    lines = c.events[len(setup) :]
    tick = c.tick(600)
    expected = _incidents([*setup, *lines, tick], 5.0)
    orders = {tuple(e.id for e in lines)}
    for seed in range(8):
        shuffled = list(lines)
        random.Random(seed).shuffle(shuffled)
        orders.add(tuple(e.id for e in shuffled))
        assert _incidents([*setup, *shuffled, tick], 5.0) == expected
    assert len(orders) > 4
    decoded = [msgspec.json.decode(b, type=Incident) for b in expected]
    [domain] = [inc for inc in decoded if inc.type == KIND]
    assert (domain.attributes["root_node"], domain.attributes["root_xid"]) == ("tray-1", "149")
    assert domain.attributes["nodes"].split(",") == ["tray-1", "tray-2", "tray-3", "tray-4"]


def test_a_missing_root_log_still_gives_one_incident() -> None:
    """The root tray's kernel log never arrives: the three follow-up 145s are still one
    incident (not three pages), rooted at the earliest, saying the originating XID was not
    seen."""
    c = Cluster()
    trays(c, dict.fromkeys(FOUR, DOMAIN_A))
    link_down(c, FOUR, 100, root=False)
    c.tick(600)
    revisions = run(c.events)
    [page] = pages(revisions)
    attrs = page.attributes
    assert page.type == KIND
    assert (attrs["root_seen"], attrs["root_node"], attrs["root_xid"]) == ("false", "tray-2", "145")
    assert attrs["nodes"].split(",") == FOUR[1:]
    assert "149" in page.summary
    assert "missing" in page.summary


def test_a_second_fault_long_after_is_a_new_incident() -> None:
    """Two link-downs in one domain an hour apart are two faults: two incidents, two ids;
    lines of one fault a few seconds apart never are."""
    c = Cluster()
    trays(c, dict.fromkeys(FOUR, DOMAIN_A))
    link_down(c, FOUR, 100)
    kmsg(c, "tray-3", 3 * 3600, LINK_DOWN)
    kmsg(c, "tray-4", 3 * 3600 + 2, RLW_FATAL[0])
    c.tick(4 * 3600)
    found = sorted(of_type(run(c.events), KIND), key=lambda inc: inc.first_seen)
    assert len(found) == 2
    assert [inc.attributes["root_node"] for inc in found] == ["tray-1", "tray-3"]
    assert found[1].attributes["nodes"].split(",") == ["tray-3", "tray-4"]
    assert found[0].status == "resolved"


def test_a_nonfatal_line_starts_no_domain_fault() -> None:
    """NVIDIA's catalog and gpud#1174: a ``Nonfatal`` 145 needs no action; on a labelled
    node it opens nothing, in the domain or on the node."""
    c = Cluster()
    trays(c, dict.fromkeys(FOUR, DOMAIN_A))
    kmsg(c, "tray-2", 100, RLW_NONFATAL)
    c.tick(600)
    revisions = run(c.events)
    assert of_type(revisions, KIND) == []
    assert pages(revisions) == []


def test_only_fabric_xids_are_copied_to_the_cluster_key() -> None:
    """The producer copies XIDs 144-149 (a domain's fault spreads as these) to the cluster
    key, never 150 (MSE: NVIDIA says "Remote: None"), another code, or an SXid."""
    assert frozenset(range(144, 150)) == FABRIC_XIDS
    c = Cluster()
    for code in (79, 144, 145, 149, 150, 154):
        ev = c.xid("n1", 1, code)
        copies = Router().route(ev)
        assert len(copies) == (2 if code in FABRIC_XIDS else 1), code
        if len(copies) == 2:
            assert isinstance(copies[1], XidEvent)
            assert copies[1].scope == "cluster"
    assert len(Router().route(c.xid("n1", 2, 145, sxid=True))) == 1


def test_domain_of_the_clique_label() -> None:
    assert domain_of(clique(DOMAIN_A)) == DOMAIN_A
    assert domain_of(clique(PARTITION_A2)) != domain_of(clique(DOMAIN_A))
    assert domain_of({}) == ""


@pytest.mark.parametrize("at", [110.0, 135.0])
def test_cluster_state_mid_fault_survives_a_snapshot(at: float) -> None:
    """A worker that restarts while a domain's window is open (110) or after its root was
    chosen (135) resumes from its snapshot and gives the same incidents."""
    c = Cluster()
    trays(c, dict.fromkeys(FOUR, DOMAIN_A))
    link_down(c, FOUR, 100)
    c.tick(600)
    expected = _incidents(c.events, 0.5)
    start = c.events[0].time.timestamp()
    correlator = Correlator(config())
    router = Router()
    out: list[Incident] = []
    switched = False
    for event in c.events:
        if not switched and event.time.timestamp() - start >= at:
            switched = True
            # Past the newest event: the watermark releases strictly before itself.
            out.extend(correlator.advance_watermark(math.nextafter(correlator.max_time, math.inf)))
            restored = Correlator(config())
            for state in correlator.keys.values():
                restored.restore(decode_state(encode_state(state)))
            restored.advance_watermark(correlator.watermark)
            correlator = restored
        for copy in router.route(event):
            out.extend(correlator.ingest(copy))
    out.extend(correlator.flush())
    assert switched
    assert sorted(msgspec.json.encode(i) for i in final(out).values()) == expected
    cluster = correlator.keys["c1"]
    assert isinstance(cluster, ClusterState)
    assert cluster.cliques == dict.fromkeys(FOUR, DOMAIN_A)


def test_trays_whose_gpus_went_unhealthy_defer_their_tickets_to_the_domain() -> None:
    """No pod fails, but the device plugin marks each tray's GPU unhealthy after the XIDs
    (allocatable 8 -> 7): each tray's ``gpu_degraded`` names the domain, ``info``, and
    the one page is the domain's. An XID 79 on a labelled node still pages on its own:
    only NVLink fabric faults defer."""
    c = Cluster()
    trays(c, dict.fromkeys(FOUR, DOMAIN_A))
    kmsg(c, "tray-1", 100, NETIR_FATAL)
    for k, node in enumerate(FOUR[1:]):
        kmsg(c, node, 101 + k, RLW_FATAL[k])
    for node in FOUR:
        c.node(node, 110, alloc=7, labels=clique(DOMAIN_A))
    c.xid("tray-4", 2000, 79, bus="0000:9b:00.0", uuid="GPU-other")
    c.tick(3000)
    revisions = run(c.events)
    tickets = of_type(revisions, "gpu_degraded")
    assert sorted(inc.node for inc in tickets) == FOUR
    deferred = [inc for inc in tickets if inc.attributes.get("nvlink_domain") == DOMAIN_A]
    assert sorted(inc.node for inc in deferred) == FOUR[:3]
    assert all(inc.severity == "info" for inc in deferred)
    [own] = [inc for inc in tickets if inc.node == "tray-4"]
    assert "79" in own.attributes["xids"].split(",")
    assert own.severity != "info"
    [page] = [inc for inc in pages(revisions) if inc.type == KIND]
    assert page.attributes["nodes"].split(",") == FOUR


def test_a_follow_up_code_repeating_defers_its_repeat_but_a_root_repeat_pages() -> None:
    """Five link-downs in a day rooted at tray-1's GPU: tray-1's XID 149 ``xid_repeat``
    pages (a link that keeps going down is that GPU's: marin#9086), tray-2's repeat of the
    downstream 145 is the domain's share (``info``); each fault is its own domain incident."""
    c = Cluster()
    trays(c, dict.fromkeys(FOUR[:2], DOMAIN_A))
    for k in range(5):
        kmsg(c, "tray-1", 100 + k * 3600, NETIR_FATAL)
        kmsg(c, "tray-2", 101 + k * 3600, RLW_FATAL[k % 3])
    c.tick(6 * 3600)
    revisions = run(c.events)
    repeats = {inc.node: inc for inc in of_type(revisions, "xid_repeat")}
    assert repeats["tray-1"].severity == "page"
    assert "nvlink_domain" not in repeats["tray-1"].attributes
    assert repeats["tray-2"].severity == "info"
    assert repeats["tray-2"].attributes["nvlink_domain"] == DOMAIN_A
    assert len(of_type(revisions, KIND)) == 5
