"""Missed pages: a device fault that kills pods must page, even where a narrower rule
keeps simulator-shaped workload crashes out of the eviction chain.

Each test is a real-world sequence a review found the core would now miss (earlier
exemptions were too broad), driven through the real engine with real-shaped events
from :mod:`tests.factories`; the docstring says the rule of the domain.
"""

from __future__ import annotations

from tests.core_helpers import of_type, run
from tests.factories import Cluster, term

MIN = 60.0
CHAIN = "device_unhealthy_eviction"


def healthy(c: Cluster, node: str, pods: list[str]) -> None:
    c.node(node, 0)
    for name in pods:
        c.pod(node, name, 1)


def test_a_kernel_fault_after_a_fatal_xid_is_the_gpus() -> None:
    """No dcgm binding for the pod; XID 119 (GSP RPC timeout, fatal) on GPU 3b; the pod
    dies three minutes later with ``CUDA error: unspecified launch failure``. The cause
    table says a kernel fault is "sometimes a failing GPU" and "a fatal XID (48, 79, 95,
    119...) means the GPU": its words say device against a fatal XID, so it pages (it
    is too far from the XID to join by nearness alone). Against a drop alone the same
    crash is judged as an ordinary one (test_false_pages)."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.xid("n1", 5 * MIN, 119, bus="0000:3b:00.0", uuid="GPU-3b")
    msg = "RuntimeError: CUDA error: unspecified launch failure"
    c.pod("n1", "a", 8 * MIN + 1, restarts=1, last=term(8 * MIN, message=msg))
    c.tick(20 * MIN)
    revisions = run(c.events)
    [chain] = of_type(revisions, CHAIN)
    assert chain.severity == "page"
    assert [p.name for p in chain.pods] == ["a"]
    assert of_type(revisions, "gpu_degraded") == []


def test_a_kernel_fault_after_an_app_xid_on_its_own_gpu_is_the_workloads() -> None:
    """The exemption that stays: a fatal XID on GPU 3b, and pod a on GPU-20 whose own GPU
    logged XID 13 just before its ``illegal memory access``: its kernel faulted on its
    own GPU, the fatal XID elsewhere does not claim it."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
    c.xid("n1", 5 * MIN, 119, bus="0000:3b:00.0", uuid="GPU-3b")
    c.xid("n1", 8 * MIN - 5, 13, bus="0000:20:00.0", uuid="GPU-20")
    msg = "RuntimeError: CUDA error: an illegal memory access was encountered"
    c.pod("n1", "a", 8 * MIN + 1, restarts=1, last=term(8 * MIN, message=msg))
    c.tick(20 * MIN)
    revisions = run(c.events)
    assert of_type(revisions, CHAIN) == []
    [degraded] = of_type(revisions, "gpu_degraded")
    assert degraded.severity == "ticket"


def test_a_cleanup_xid_45_after_an_app_xid_names_no_gpu_degraded() -> None:
    """A drop that names no GPU opens a gpu_degraded ticket; then XID 13 on GPU-20 and
    its cleanup XID 45; then pod a on GPU-20 crashes with an illegal memory access. The
    45 takes the class of the XID it follows, the workload's, and the device
    plugin skips it too (k8s-device-plugin health.go): it names no GPU degraded and is
    no fault time, so the crash stays the workload's: a ticket, as without the 45."""

    def history(cleanup: bool) -> Cluster:
        c = Cluster()
        healthy(c, "n1", ["a"])
        c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
        c.node("n1", 5 * MIN, alloc=7)
        c.xid("n1", 12 * MIN, 13, bus="0000:20:00.0", uuid="GPU-20")
        if cleanup:
            c.xid("n1", 12 * MIN + 1, 45, bus="0000:20:00.0", uuid="GPU-20")
        msg = "RuntimeError: CUDA error: an illegal memory access was encountered"
        c.pod("n1", "a", 12 * MIN + 10, restarts=1, last=term(12 * MIN + 9, message=msg))
        c.tick(20 * MIN)
        return c

    for cleanup in (False, True):
        revisions = run(history(cleanup).events)
        assert of_type(revisions, CHAIN) == [], cleanup
        [degraded] = of_type(revisions, "gpu_degraded")
        assert degraded.severity == "ticket", cleanup
        assert "GPU-20" not in [g.uuid for g in degraded.gpus], cleanup


def test_a_cleanup_xid_45_before_a_drop_names_no_gpu() -> None:
    """XID 13 and its 45 on GPU-20 just before a drop: the GPU's newest line is the 45,
    which is the workload's like the 13 it follows: the drop's ticket does not name
    GPU-20 (the device plugin marks no GPU unhealthy for either)."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
    c.xid("n1", 4 * MIN, 13, bus="0000:20:00.0", uuid="GPU-20")
    c.xid("n1", 4 * MIN + 1, 45, bus="0000:20:00.0", uuid="GPU-20")
    c.node("n1", 5 * MIN, alloc=7)
    c.tick(11 * MIN)
    [inc] = of_type(run(c.events), "gpu_degraded")
    assert "GPU-20" not in [g.uuid for g in inc.gpus]


def test_a_cleanup_xid_45_after_a_fatal_xid_is_the_faults() -> None:
    """The other side: a 45 after an XID 79 is that fault's cleanup: the ticket names
    the GPU (the 79 named it) and a crash of its pod near the fault pages."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    c.bind("n1", 1, "GPU-20", "0000:20:00.0", ["a"])
    c.xid("n1", 5 * MIN, 79, bus="0000:20:00.0", uuid="GPU-20")
    c.xid("n1", 5 * MIN + 1, 45, bus="0000:20:00.0", uuid="GPU-20")
    c.pod("n1", "a", 5 * MIN + 10, restarts=1, last=term(5 * MIN + 9))
    c.tick(20 * MIN)
    [chain] = of_type(run(c.events), CHAIN)
    assert chain.severity == "page"
    assert "GPU-20" in [g.uuid for g in chain.gpus]


def test_a_crash_loops_next_crash_right_after_a_fatal_xid_is_the_gpus() -> None:
    """A pod with no dcgm binding has been crash-looping for ten minutes (its
    suspected_cuda_oom open); then XID 79 ("fallen off the bus") on GPU 3b, a drop, and
    the pod's next crash 2 s later; it keeps crashing on the dead GPU. A loop's next
    crash near a drop that names no GPU is the loop's (test_false_pages), but a fatal
    XID names a GPU and kills its processes at once: the crash joins, and it pages."""
    c = Cluster()
    healthy(c, "n1", ["a"])
    for k in range(5):
        t = (k + 1) * 2 * MIN
        c.pod("n1", "a", t + 1, restarts=k + 1, last=term(t))
    c.xid("n1", 11 * MIN, 79, bus="0000:3b:00.0", uuid="GPU-3b")
    c.node("n1", 11 * MIN + 1, alloc=7)
    c.pod("n1", "a", 11 * MIN + 3, restarts=6, last=term(11 * MIN + 2))
    c.tick(25 * MIN)
    revisions = run(c.events)
    [chain] = of_type(revisions, CHAIN)
    assert chain.severity == "page"
    assert [p.name for p in chain.pods] == ["a"]


def test_a_crash_near_a_drop_whose_message_may_be_the_gpus_still_joins() -> None:
    """An application-error message no longer joins by nearness (test_false_pages), but
    a message cut short (the CUDA error of a long traceback may be what was cut), or
    one with any GPU word in it, in whatever case (an uncorrectable ECC error, an Xid,
    a lost GPU, NVML, NCCL's unhandled cuda error), is no application error: the crash
    30 s before a drop that names no GPU still joins the chain."""

    def history(message: str) -> Cluster:
        c = Cluster()
        healthy(c, "n1", ["a"])
        c.pod("n1", "a", 5 * MIN - 29, restarts=1, last=term(5 * MIN - 30, message=message))
        c.node("n1", 5 * MIN, alloc=7)
        c.tick(12 * MIN)
        return c

    long_traceback = "Traceback (most recent call last): " + "  File 'train.py', line 1\n" * 8
    for message in (
        long_traceback + "RuntimeError: CUDA error: unspecified launch failure",
        "Detected Uncorrectable ECC error on the device, aborting",
        "NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.",
        "Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.",
        "pynvml.NVMLError_Unknown: Unknown Error",
        "torch.distributed.DistBackendError: NCCL error: unhandled cuda error",
    ):
        [chain] = of_type(run(history(message).events), CHAIN)
        assert [p.name for p in chain.pods] == ["a"], message
