"""The truth's reading of fatal XIDs across faults: a flaky GPU whose code another fault
already logged within the repeat window is a recurrence (the core's ``degraded.recurrence``
opens no ticket for it; the repeat counts it). Seen in a simulated fleet: a fatal_xid XID 48 at
23:26, then a flaky_gpu XID 48 on the same GPU at 00:51, for which the truth wrongly
expected a new ticket."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gputriage.simulate import StreamSpec
from gputriage.simulate.truth import XID_REPEAT_WINDOW, TruthRecorder

T0 = datetime(2025, 3, 3, 23, 26, tzinfo=UTC)
GPU = "GPU-aaaaaaaa-0000-4000-8000-000000000001"


def line(truth: TruthRecorder, at: datetime, code: int = 48, fault: str = "f-1") -> None:
    truth.fatal_xid(cluster="c1", node="n1", gpu=GPU, code=code, time=at, fault=fault)


def recurs(truth: TruthRecorder, at: datetime, code: int = 48, gpu: str = GPU) -> bool:
    return truth.recurs(cluster="c1", node="n1", gpu=gpu, code=code, time=at)


def ticket(truth: TruthRecorder, fault: str, at: datetime, **subject: object) -> None:
    """A gpu_degraded ticket expected from ``at``, due 5 min later (``TruthRecorder.expect``)."""
    truth.expect(
        fault_id=fault,
        kind="gpu_degraded",
        cluster="c1",
        start=at,
        first=at,
        last=at,
        due=at + timedelta(minutes=5),
        severity="ticket",
        **subject,
    )


def test_the_same_code_on_the_same_gpu_within_the_window_recurs() -> None:
    truth = TruthRecorder(StreamSpec(nodes=1))
    line(truth, T0, fault="fatal_xid-00001")
    assert not recurs(truth, T0), "a fault's own first line is no earlier one"
    later = T0 + timedelta(hours=1, minutes=25)
    line(truth, later, fault="flaky_gpu-00002")
    assert recurs(truth, later)
    assert not recurs(truth, later, code=79), "another code is a new fault"
    assert not recurs(truth, later, gpu="GPU-other"), "another GPU is a new fault"


def test_a_line_older_than_the_repeat_window_is_no_recurrence() -> None:
    truth = TruthRecorder(StreamSpec(nodes=1))
    line(truth, T0)
    after = T0 + XID_REPEAT_WINDOW
    line(truth, after)
    assert not recurs(truth, after), "the core's horizon is strict: now - window < t"
    assert recurs(truth, after - timedelta(seconds=1))


def test_a_fault_due_where_the_stream_ends_is_an_optional_truth() -> None:
    """Seed 3: a drop 5 min 3 s before the end; the core's watermark passed its 5 min,
    and the truth had left it out (a false positive that was the truth's horizon)."""
    truth = TruthRecorder(StreamSpec(nodes=1))
    end = T0 + timedelta(hours=1)
    for fault, due in (("drop-1", end - timedelta(minutes=1)), ("drop-2", end)):
        ticket(truth, fault, due - timedelta(minutes=5), node=f"n-{fault}")
    truth.finish(end)
    assert [(x.id, x.optional) for x in truth.expected] == [
        ("drop-1/gpu_degraded", False),
        ("drop-2/gpu_degraded", True),
    ]


def _flaky_then_drop(escalated_at: datetime | None) -> list[str]:
    """A flaky GPU's ticket, 5 episodes of its XID 48 (its xid_repeat), then a drop of
    allocatable on the node three hours later: the truths' ids."""
    truth = TruthRecorder(StreamSpec(nodes=1))
    fault = "flaky_gpu-00001"
    for k in range(5):
        line(truth, T0 + timedelta(minutes=15 * k), fault=fault)
    ticket(truth, fault, T0, node="n1", gpus=(GPU,))
    if escalated_at is not None:
        truth.escalated(f"{fault}/gpu_degraded", escalated_at)
    drop = T0 + timedelta(hours=3)
    ticket(truth, "allocatable_drop-00002", drop, node="n1")
    truth.ends("allocatable_drop-00002/gpu_degraded", drop + timedelta(minutes=40))
    truth.finish(T0 + timedelta(hours=6))
    return [x.id for x in truth.expected]


def test_a_repeat_supersedes_a_flaky_ticket_unless_a_casualty_escalated_it_first() -> None:
    """Seed 1: the flaky GPU's bound pod crashed 229 s after an XID 48 (the chain rule's
    casualty): the core escalated the ticket, kept it open past the repeat, and the drop
    hours later joined it; the truth expected the drop as a ticket of its own."""
    alone = _flaky_then_drop(None)
    assert "allocatable_drop-00002/gpu_degraded" in alone, "superseded: the drop is new"
    assert "flaky_gpu-00001/xid_repeat" in alone
    joined = _flaky_then_drop(T0 + timedelta(minutes=20))
    assert "allocatable_drop-00002/gpu_degraded" not in joined, "the open ticket takes it"
    assert "flaky_gpu-00001/gpu_degraded" in joined
    late = _flaky_then_drop(T0 + timedelta(hours=2))
    assert "allocatable_drop-00002/gpu_degraded" in late, "escalated after the repeat: gone"
