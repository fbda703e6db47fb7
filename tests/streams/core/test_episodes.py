"""XIDs are counted as fault episodes, not log lines (docs/detection.md).

The driver logs one fault as several lines: one XID 13 as a Warp, a Global and an ESR
line in the same second; a hung GSP as an XID 119 every few minutes until the GPU is
reset; and the same occurrence reaches us from the kernel log and from dcgm-exporter.
Counting lines turned one burst into an ``xid_repeat`` page recommending an RMA
(NVIDIA/NVSentinel#1710: 672 fatal events of application churn in three hours). Lines
of one code on one GPU less than ``xid_episode_gap_seconds`` (600 s) apart are one
episode; ``xid_repeat`` and ``gpu_app_fault`` count episodes. NVLink5 XIDs 144-150
carry their own severity word: a ``Nonfatal`` line is recorded evidence only.

Each test says which fact it pins and how the old core (counting lines, 1 s coalescing,
NVLink codes always fatal) broke it.
"""

from __future__ import annotations

from tests.core_helpers import config, of_type, run
from tests.factories import T0, Cluster
from tests.xid_lines import GSP, WARP, dcgm, kmsg

MIN = 60.0
HOUR = 3600.0
T0_S = T0.timestamp()
BUS = "0000:4c:00.0"
UUID = "GPU-c3d4e5f6-0a1b-4c2d-8e9f-000000000005"
GLOBAL = (
    "NVRM: Xid (PCI:0000:4c:00): 13, pid=9151, name=python3, Graphics SM Global Exception on "
    "(GPC 7, TPC 7, SM 0): Multiple Warp Errors"
)
ESR = (
    "NVRM: Xid (PCI:0000:4c:00): 13, pid=9151, name=python3, Graphics Exception: ESR "
    "0x51e730=0x1c000f 0x51e734=0x0 0x51e728=0x4c1eb72 0x51e72c=0x174"
)
"""One XID 13 as the driver logs it: three lines in one second (tests/data/kmsg)."""
RLW_NONFATAL = (
    "NVRM: Xid (PCI:0018:01:00): 145, RLW_RXPIPE Nonfatal XC0 i0 Link 13 (0x0409a0c2 "
    "0x00000008 0x00000001 0x00000000 0x00100000 0x00000004)"
)
"""leptonai/gpud#1174 ("fix NVLink Non-fatal events incorrectly reported as Fatal")."""
NETIR_FATAL = (
    "NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 "
    "0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"
)
"""leptonai/gpud#1160 ("separate sub-code fatality for XID 144-150")."""


def render_node(c: Cluster, node: str = "n5") -> None:
    c.node(node, 0)
    c.pod(node, "render", 1)
    c.bind(node, 2, UUID, BUS, ["render"])


def one_xid13(c: Cluster, t: float) -> None:
    for k, line in enumerate((WARP, GLOBAL, ESR)):
        kmsg(c, "n5", t + 0.001 * k, line)


def test_one_xid_13_logged_as_three_lines_is_one_episode() -> None:
    """The Warp, Global and ESR lines of one exception are one application fault: the
    incident counts 1 episode and stays ``info``, every line is evidence. The old core
    counted three XIDs and escalated to ``ticket`` on the first fault."""
    c = Cluster()
    render_node(c)
    one_xid13(c, 6 * MIN)
    [inc] = of_type(run(c.events), "gpu_app_fault")
    assert (inc.severity, inc.attributes["count"]) == ("info", "1")
    assert len(inc.evidence) == 3
    assert "1 episode:" in inc.summary


def test_app_faults_escalate_on_the_third_episode() -> None:
    """Three separate faults (each three lines) an hour apart are three episodes: the
    incident goes to ``ticket`` at the third, not at the third line."""
    c = Cluster()
    render_node(c)
    one_xid13(c, 6 * MIN)
    one_xid13(c, 66 * MIN)
    [inc] = of_type(run(list(c.events)), "gpu_app_fault")
    assert (inc.severity, inc.attributes["count"]) == ("info", "2")
    one_xid13(c, 126 * MIN)
    [inc] = of_type(run(c.events), "gpu_app_fault")
    assert (inc.severity, inc.attributes["count"]) == ("ticket", "3")


def test_the_episode_boundary_is_the_gap_to_the_previous_line() -> None:
    """A line less than the gap after the previous line of its code continues the
    episode, even when the episode has lasted longer than the gap (a fault that keeps
    logging); a line at the gap or later starts a new one. 0, 599 and 1198 s is one
    episode; 1798 s (600 s after 1198) is a second. The old core counted four."""
    c = Cluster()
    render_node(c)
    for t in (0.0, 599.0, 1198.0, 1798.0):
        kmsg(c, "n5", 6 * MIN + t, WARP)
    [inc] = of_type(run(c.events), "gpu_app_fault")
    assert (inc.severity, inc.attributes["count"]) == ("info", "2")
    assert len(inc.evidence) == 4


def test_a_gsp_hang_logging_five_xid_119_in_six_minutes_is_not_a_repeat() -> None:
    """One hung GSP writes an XID 119 every ~90 s until reset: one episode, so no
    ``xid_repeat`` and no RMA. The GPU still needs the catalog's action for one burst
    (reset): with no pod failure it is a ``gpu_degraded`` ticket saying so. The old core
    paged ``xid_repeat`` with "open a hardware case (RMA)"."""
    c = Cluster()
    c.node("n6", 0)
    for k in range(5):
        kmsg(c, "n6", HOUR + k * 90, GSP, uuid="GPU-6")
    c.tick(2 * HOUR)
    revisions = run(c.events)
    assert of_type(revisions, "xid_repeat") == []
    [inc] = of_type(revisions, "gpu_degraded")
    assert inc.severity == "ticket"
    assert "Reset the GPU" in inc.action
    assert "RMA" not in inc.action
    assert len(inc.evidence) == 5


def test_five_episodes_in_a_day_repeat_and_say_rma() -> None:
    """The same GSP fault coming back in five episodes (2 h apart, each a few lines) is
    failing hardware: ``xid_repeat`` counts 5 episodes (not 15 lines), its evidence
    is each episode's first line (the memory is per episode, not per line), and it says
    RMA. Under the gap, lines 599 s apart would be one episode: the old core paged the
    5-line burst as a repeat."""
    c = Cluster()
    c.node("n6", 0)
    for e in range(5):
        for k in range(3):
            kmsg(c, "n6", HOUR + e * 2 * HOUR + k * 60, GSP, uuid="GPU-6")
    [inc] = of_type(run(c.events), "xid_repeat")
    assert inc.attributes["occurrences"] == "5"
    assert "5 separate fault episodes" in inc.summary
    assert "RMA" in inc.action
    times = sorted(e.time.timestamp() for e in inc.evidence)
    # each episode's first line, then the lines of the fifth episode while it is open
    assert [round(t - times[0]) for t in times] == [0, 7200, 14400, 21600, 28800, 28860, 28920]
    burst = Cluster()
    burst.node("n6", 0)
    for k in range(5):
        kmsg(burst, "n6", HOUR + k * 599, GSP, uuid="GPU-6")
    assert of_type(run(burst.events), "xid_repeat") == []


def test_one_occurrence_seen_by_kmsg_and_dcgm_counts_once() -> None:
    """dcgm-exporter reports the kernel's XID at its next scrape, tens of seconds later:
    three real faults seen by both sources are three episodes, not six occurrences (the
    old core coalesced only within 1 s and paged ``xid_repeat`` at the fifth line)."""
    c = Cluster()
    c.node("n6", 0)
    for e in range(3):
        t = HOUR + e * 2 * HOUR
        kmsg(c, "n6", t, GSP, uuid="GPU-6")
        dcgm(c, "n6", t + 40, 119, "GPU-6", bus="0000:cb:00.0", was=e)
    assert of_type(run(c.events), "xid_repeat") == []


def test_episodes_are_per_gpu() -> None:
    """Two GPUs of one node: GPU A's burst of five lines is one episode, GPU B's five
    faults two hours apart are five. Only B repeats (the old core repeated both)."""
    c = Cluster()
    c.node("n6", 0)
    for k in range(5):
        kmsg(c, "n6", HOUR + k * 60, GSP.replace("0000:cb:00", "0000:1b:00"), uuid="GPU-A")
        kmsg(c, "n6", HOUR + k * 2 * HOUR, GSP, uuid="GPU-B")
    [inc] = of_type(run(c.events), "xid_repeat")
    assert [g.uuid for g in inc.gpus] == ["GPU-B"]


def test_the_episode_gap_is_configurable_and_zero_counts_every_line() -> None:
    """``xid_episode_gap_seconds`` = 0 counts each line (the old behaviour) while
    ``xid_coalesce_seconds`` still takes a line seen twice within 1 s as one."""
    c = Cluster()
    c.node("n6", 0)
    for k in range(5):
        kmsg(c, "n6", HOUR + k * 90, GSP, uuid="GPU-6")
        dcgm(c, "n6", HOUR + k * 90 + 0.2, 119, "GPU-6", bus="0000:cb:00.0", was=k)
    assert of_type(run(c.events), "xid_repeat") == []
    [inc] = of_type(run(c.events, config(xid_episode_gap_seconds=0)), "xid_repeat")
    assert inc.attributes["occurrences"] == "5"


def test_a_nonfatal_nvlink_xid_never_pages() -> None:
    """XID 145 ``RLW_RXPIPE Nonfatal`` five times (hours apart) and an eviction after one
    of them: a Nonfatal NVLink line is recorded, it never arms the eviction chain nor
    counts toward ``xid_repeat``. The old core took every 145 as fatal: an xid_repeat
    page with an RMA recommendation and a device chain for the evicted pod."""
    c = Cluster()
    c.node("n8", 0)
    c.pod("n8", "a", 1)
    for k in range(5):
        kmsg(c, "n8", HOUR + k * 2 * HOUR, RLW_NONFATAL)
    c.pod("n8", "a", HOUR + 30, phase="Failed", reason="Evicted")
    c.tick(24 * HOUR)
    assert run(c.events) == []


def test_a_fatal_nvlink_line_is_fatal() -> None:
    """The same family's ``NETIR_LINK_EVT Fatal`` line is a fatal fault: it arms the chain,
    and a pod evicted right after it is one device_unhealthy_eviction (a Nonfatal 145 on
    the same GPU just before it changes nothing)."""
    c = Cluster()
    c.node("n8", 0)
    c.pod("n8", "a", 1)
    kmsg(c, "n8", HOUR - 30, RLW_NONFATAL)
    kmsg(c, "n8", HOUR, NETIR_FATAL)
    c.pod("n8", "a", HOUR + 30, phase="Failed", reason="Evicted")
    [inc] = of_type(run(c.events), "device_unhealthy_eviction")
    assert inc.attributes["xids"] == "149"
    assert of_type(run(c.events), "xid_repeat") == []


def test_dcgm_repeating_a_nonfatal_nvlink_line_is_not_fatal() -> None:
    """dcgm-exporter and NVML report only the code, not the driver's Fatal/Nonfatal word.
    Within the episode gap of a ``Nonfatal`` line of that code on that GPU, a wordless
    report is that same line seen by a second source: info too. Alone (no kernel line),
    a wordless 145 takes the catalog's class (fatal). The old core armed the chain on
    both, so the eviction after the kmsg + dcgm pair paged."""
    c = Cluster()
    c.node("n8", 0)
    c.pod("n8", "a", 1)
    c.bind("n8", 2, "GPU-8", "0018:01:00.0", ["a"])
    kmsg(c, "n8", HOUR, RLW_NONFATAL)
    dcgm(c, "n8", HOUR + 40, 145, "GPU-8", bus="0018:01:00.0")
    c.pod("n8", "a", HOUR + 50, phase="Failed", reason="Evicted")
    assert of_type(run(c.events), "device_unhealthy_eviction") == []
    alone = Cluster()
    alone.node("n8", 0)
    alone.pod("n8", "a", 1)
    alone.bind("n8", 2, "GPU-8", "0018:01:00.0", ["a"])
    dcgm(alone, "n8", HOUR + 40, 145, "GPU-8", bus="0018:01:00.0")
    alone.pod("n8", "a", HOUR + 50, phase="Failed", reason="Evicted")
    assert len(of_type(run(alone.events), "device_unhealthy_eviction")) == 1


def test_the_repeat_page_supersedes_the_single_burst_ticket() -> None:
    """The first episode is a ticket saying "reset the GPU"; when the fifth makes it an
    ``xid_repeat`` ("RMA, resets will not hold") the ticket is resolved as superseded by
    that page, and a sixth episode or the driver asking for a reset again open no new
    ticket: one open incident, with one action, for the GPU. (The old core had no ticket
    and paged at the fifth line.)"""
    c = Cluster()
    c.node("n6", 0)
    for e in range(6):
        kmsg(c, "n6", HOUR + e * 2 * HOUR, GSP, uuid="GPU-6")
    reset = (
        "NVRM: Xid (PCI:0000:cb:00): 154, GPU recovery action changed from 0x0 (None) to "
        "0x1 (GPU Reset Required)"
    )
    kmsg(c, "n6", HOUR + 10 * HOUR + 1, reset, uuid="GPU-6")  # just after the sixth
    c.tick(14 * HOUR)
    revisions = run(c.events)
    [repeat] = of_type(revisions, "xid_repeat")
    [ticket] = of_type(revisions, "gpu_degraded")
    assert ticket.status == "resolved"
    assert ticket.attributes["superseded_by"] == repeat.id
    assert ticket.resolved_at is not None
    assert ticket.resolved_at.timestamp() == T0_S + HOUR + 4 * 2 * HOUR  # the fifth episode
    assert repeat.status != "resolved"
    assert repeat.attributes["occurrences"] == "6"


def test_a_repeat_page_of_one_code_does_not_hide_a_new_fault_of_another() -> None:
    """GPU-6's XID 119 came back five times: its ``xid_repeat`` page is open (RMA). Hours
    later the same GPU logs its first XID 48 (a double-bit ECC error): a fault the page
    does not tell ("XID 119 in 5 episodes"). It gets its ticket; the repeat's own code
    again does not (seen in a simulated fleet: a flaky GPU's XID 79 page, its XID 48s at 22:40
    told by nothing)."""
    c = Cluster()
    c.node("n6", 0)
    for e in range(5):
        kmsg(c, "n6", HOUR + e * 2 * HOUR, GSP, uuid="GPU-6")
    c.xid("n6", 11 * HOUR, 48, bus="0000:cb:00.0", uuid="GPU-6")
    c.tick(12 * HOUR)
    revisions = run(c.events)
    assert [r.status for r in of_type(revisions, "xid_repeat")][-1] != "resolved"
    tickets = {i.id: i for i in of_type(revisions, "gpu_degraded")}
    assert len(tickets) == 2  # the first episode's (superseded) and the XID 48's
    [dbe] = [i for i in tickets.values() if i.status != "resolved"]
    assert dbe.first_seen.timestamp() == T0_S + 11 * HOUR
    assert dbe.attributes["xids"] == "48"
