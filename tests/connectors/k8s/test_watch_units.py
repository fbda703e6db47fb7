"""The pure pieces of the live Kubernetes connector: relist diff, backoff, GPU filter, delivery."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from connectors.backoff import Backoff, retry_after_seconds
from connectors.delivery import BoundedDelivery
from connectors.k8s.gpu_filter import GpuFilter
from connectors.k8s.metrics import ConnectorMetrics
from connectors.k8s.relist import Known, deletion, diff
from connectors.k8s.slim import slim_object
from schemas.events import KubeEvent, ObjectRef, PodEvent
from tests.k8s_helpers import pod
from tests.kafka_helpers import eventually

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def slimmed(obj: dict[str, object]) -> PodEvent:
    event = slim_object(obj, cluster="c1")
    assert isinstance(event, PodEvent)
    return event


# -- diff ------------------------------------------------------------------------------
def test_diff_reports_added_modified_and_deleted_but_not_unchanged() -> None:
    a, b, c = pod("a", "1"), pod("b", "2"), pod("c", "3")
    known = {
        "uid-a": Known("1", slimmed(a)),
        "uid-b": Known("2", slimmed(b)),
        "uid-gone": Known("9", slimmed(pod("gone", "9"))),
    }
    new_b = pod("b", "5")
    changes = diff(known, [a, new_b, c])
    assert [(ch.op, ch.uid) for ch in changes] == [
        ("modified", "uid-b"),
        ("added", "uid-c"),
        ("deleted", "uid-gone"),
    ]
    assert changes[0].obj is new_b
    assert changes[0].last is known["uid-b"]
    assert changes[2].last is known["uid-gone"]


def test_diff_identity_is_the_uid_a_recreated_name_is_a_deletion_and_an_addition() -> None:
    old = pod("worker-0", "1", uid="old")
    new = pod("worker-0", "7", uid="new")
    changes = diff({"old": Known("1", slimmed(old))}, [new])
    assert [(ch.op, ch.uid) for ch in changes] == [("added", "new"), ("deleted", "old")]


def test_diff_passes_items_without_uid_on_as_added_so_they_are_reported() -> None:
    broken = {"metadata": {"name": "x"}}
    changes = diff({}, [broken, "not an object"])
    assert [(ch.op, ch.uid) for ch in changes] == [("added", ""), ("added", "")]
    assert changes[0].obj is broken


def test_deletion_keeps_the_last_state_with_a_newer_id_and_time() -> None:
    last = slimmed(pod("a", "1", phase="Running"))
    gone = deletion(last, "uid-a", "77", T0)
    assert (gone.op, gone.id, gone.time) == ("deleted", "k8s:uid-a:77", T0)
    assert isinstance(gone, PodEvent)
    assert (gone.name, gone.phase, gone.gpu_requests) == ("a", "Running", {"nvidia.com/gpu": 1})


# -- backoff ---------------------------------------------------------------------------
def test_backoff_grows_exponentially_up_to_the_cap_with_full_jitter() -> None:
    policy = Backoff(initial_seconds=0.5, max_seconds=4.0, factor=2.0)
    assert [policy.delay(n, lambda: 1.0) for n in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert policy.delay(3, lambda: 0.25) == 1.0
    assert policy.delay(10_000, lambda: 0.5) == 2.0  # no overflow for long outages


def test_retry_after_wins_but_is_capped() -> None:
    policy = Backoff(max_retry_after_seconds=60.0)
    assert policy.after(5, 3.0, lambda: 0.0) == 3.0
    assert policy.after(0, 86_400.0) == 60.0
    assert policy.after(2, None, lambda: 1.0) == policy.delay(2, lambda: 1.0)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("1", 1.0),
        (" 7 ", 7.0),
        ("Mon, 30 Nov 2026 10:00:30 GMT", 30.0),
        ("Mon, 30 Nov 2026 09:00:00 GMT", 0.0),
        ("soon", None),
    ],
)
def test_retry_after_header_forms(header: str, expected: float | None) -> None:
    assert retry_after_seconds({"Retry-After": header}, now=T0) == expected


def test_no_retry_after_header() -> None:
    assert retry_after_seconds({}) is None


# -- live GPU filter ---------------------------------------------------------------------
def event_about(name: str, when: datetime, message: str = "x") -> KubeEvent:
    return KubeEvent(
        id=f"k8s:e-{name}:1",
        cluster="c1",
        time=when,
        reason="Killing",
        message=message,
        involved=ObjectRef(kind="Pod", name=name, namespace="ml"),
    )


def test_live_filter_forgets_a_deleted_pod_only_after_the_grace() -> None:
    keep = GpuFilter(forget_after=timedelta(hours=1))
    trainer = slim_object(pod("trainer", "1"), cluster="c1", observed=T0)
    assert isinstance(trainer, PodEvent)
    assert keep.keep(trainer)
    assert not keep.keep(slimmed(pod("web", "2", gpus=0)))
    keep.keep(
        slim_object(pod("trainer", "3"), "deleted", cluster="c1", observed=T0)  # type: ignore[arg-type]
    )
    assert keep.keep(event_about("trainer", T0 + timedelta(minutes=59)))
    assert not keep.keep(event_about("trainer", T0 + timedelta(minutes=61)))
    assert len(keep) == 0
    assert keep.keep(event_about("web", T0, message="0/3 nodes: Insufficient nvidia.com/gpu"))


def test_live_filter_a_recreated_name_is_not_forgotten_by_its_predecessor() -> None:
    keep = GpuFilter(forget_after=timedelta(minutes=10))
    deleted = slim_object(pod("w-0", "1"), "deleted", cluster="c1", observed=T0)
    recreated = slim_object(pod("w-0", "2", uid="u2"), cluster="c1", observed=T0)
    assert isinstance(deleted, PodEvent)
    assert isinstance(recreated, PodEvent)
    keep.keep(deleted)
    keep.keep(recreated)
    assert keep.keep(event_about("w-0", T0 + timedelta(hours=5)))


# -- bounded delivery --------------------------------------------------------------------
class FlakySink:
    """Fails while ``down`` is set, records every batch it accepted."""

    def __init__(self) -> None:
        self.down = False
        self.batches: list[list[int]] = []
        self.attempts = 0

    async def send(self, batch: Sequence[int]) -> None:
        self.attempts += 1
        if self.down:
            raise ConnectionError("broker down")
        self.batches.append(list(batch))


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(10)
async def test_delivery_applies_backpressure_and_loses_nothing_while_the_sink_is_down() -> None:
    """The retry backoffs pass on the loop's fake clock (looptime): the sink is in-process,
    there is no socket at all, so nothing can be on its way while the clock jumps. The
    delivery times its backpressure on that clock too: the backoffs the put waited out."""
    sink = FlakySink()
    metrics = ConnectorMetrics()
    delivery: BoundedDelivery[int] = BoundedDelivery(
        sink.send,
        capacity=3,
        batch_size=2,
        backoff=Backoff(initial_seconds=0.01, max_seconds=0.02),
        metrics=metrics.delivery,  # the connector's delivery metrics, on its registry
    )
    runner = asyncio.create_task(delivery.run())
    sink.down = True
    producer_done = asyncio.Event()

    async def produce() -> None:
        for n in range(10):
            await delivery.put(n)
        producer_done.set()

    task = asyncio.create_task(produce())
    # Bounded: the in-flight batch (2) plus a full buffer (3); the producer waits.
    await eventually(lambda: len(delivery) == 3 and sink.attempts >= 3, what="backpressure")
    assert not producer_done.is_set()
    assert metrics.value("gputriage_connector_buffered_events") == 3
    assert delivery.failing_since is not None
    sink.down = False
    await asyncio.wait_for(task, 5)
    assert await delivery.close(5)
    runner.cancel()
    await asyncio.gather(runner, return_exceptions=True)
    delivered = [n for batch in sink.batches for n in batch]
    assert delivered == list(range(10))  # everything, in order
    assert all(len(batch) <= 2 for batch in sink.batches)
    assert metrics.value("gputriage_connector_backpressure_seconds_total") > 0
    assert metrics.value("gputriage_connector_delivery_failures_total") >= 3
    assert delivery.failing_since is None


def test_delivery_rejects_nonsense_sizes() -> None:
    async def send(batch: Sequence[int]) -> None:
        return None

    with pytest.raises(ValueError, match="at least 1"):
        BoundedDelivery(send, capacity=0)
