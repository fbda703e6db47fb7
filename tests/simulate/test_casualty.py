"""The truth's reading of a crash near a GPU fault (:mod:`gputriage.simulate.casualty`):
the eviction chain's rule (docs/detection.md) applied to what was emitted, whatever
scenario drew the crash."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gputriage.simulate.casualty import Casualties

T0 = datetime(2025, 3, 3, 16, 36, 47, tzinfo=UTC)
GPU6, GPU0 = "GPU-e2ebb716", "GPU-0e5e2d0c"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def faulty() -> Casualties:
    c = Casualties()
    c.fatal(fault="fatal_xid-02863", cluster="c", node="n", gpu=GPU6, time=at(0))
    return c


def crash(c: Casualties, seconds: float, message: str = "", **kw: object) -> str | None:
    args: dict[str, object] = {
        "pod": "ray/worker",
        "gpus": [GPU0, GPU6],
        "time": at(seconds),
        "exit_code": 1,
        "oom_killed": False,
        "message": message,
        "degraded": False,
    }
    args.update(kw)
    found = c.crash(**args)  # type: ignore[arg-type]
    return None if found is None else found.fault


def test_a_wordless_crash_on_the_faulty_gpu_within_the_window_is_the_faults() -> None:
    """Seed 2: an XID 48 on GPU 6, then the 8-GPU ray worker's exit 1 two minutes later."""
    assert crash(faulty(), 136) == "fatal_xid-02863"
    assert crash(faulty(), 136, "RuntimeError: CUDA error: unspecified launch failure")


def test_the_domains_exceptions_are_not_casualties() -> None:
    assert crash(faulty(), 700) is None  # past the 10 min window
    assert crash(faulty(), -30) is None  # before the fault: it was not there yet
    assert crash(faulty(), 60, gpus=[GPU0]) is None  # another GPU
    assert crash(faulty(), 60, "torch.OutOfMemoryError: CUDA out of memory.") is None
    assert crash(faulty(), 60, "ValueError: checkpoint shard model-00003 is truncated") is None
    assert crash(faulty(), 60, exit_code=143) is None  # SIGTERM: a deletion
    assert crash(faulty(), 60, exit_code=137, oom_killed=True) is None


def test_a_crash_an_app_xid_explains_is_the_workloads_unless_the_fault_is_as_near() -> None:
    c = faulty()
    c.app_xid(GPU6, at(170))
    assert crash(c, 180) is None  # 3 min after the XID 48, 10 s after its own XID 31
    c = faulty()
    c.app_xid(GPU6, at(20))
    assert crash(c, 30) == "fatal_xid-02863"  # the fatal line is as near


def test_the_chain_holds_the_pod_while_its_gpus_are_unallocatable() -> None:
    """The loop's later crashes are the chain's (the core's holds_pod), even with words
    that alone would not join: until the window closes and the GPUs are back."""
    c = faulty()
    assert crash(c, 136) == "fatal_xid-02863"
    assert crash(c, 900, "torch.OutOfMemoryError: CUDA out of memory.", degraded=True)
    assert crash(c, 1500, degraded=False) is None
