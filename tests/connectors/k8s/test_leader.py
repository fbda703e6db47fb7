"""Lease leader election against kmock's emulator (it stores the Lease; we read it back).

Trap for these tests: kmock does not enforce resourceVersion preconditions, so
two candidates racing on the very same expired Lease could both "win" here
(the real API server answers the loser 409). The tests therefore start the
second candidate once the first holds the lease, which is the situation that
matters in production (a running leader and a waiting replica).

The last tests pin what kubernetes_asyncio.leaderelection gets wrong (see the
module docstring): a hung API server, a cancelled elector and failing work
must never leave work running without a renewed lease, nor block a stop.

Lease durations, renew deadlines and retry periods pass on the loop's fake
clock (looptime): kmock serves from this same event loop, so looptime sees
every request and answer as socket I/O and moves its clock only while both
ends wait (see tests/connectors/k8s/test_watch.py). Each elector measures
expiry and deadlines with that same clock (its default: the running loop's), not
the wall clock, so the timings asserted below are the elector's, exactly.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import kmock
import pytest
from kubernetes_asyncio.client import CoordinationV1Api

from connectors.k8s.leader import LeadershipLost, LeaseElector, LeaseOptions
from connectors.k8s.metrics import ConnectorMetrics
from connectors.k8s.settings import K8sSettings
from tests.k8s_helpers import Fail, FakeCluster, fake_cluster
from tests.kafka_helpers import eventually

FAST: dict[str, Any] = {
    "namespace": "gputriage",
    "name": K8sSettings().lease_name,
    "lease_duration_seconds": 1.0,
    "renew_deadline_seconds": 0.6,
    "retry_period_seconds": 0.05,
}


def elector(
    cluster: FakeCluster, identity: str, *, metrics: ConnectorMetrics | None = None, **timings: Any
) -> LeaseElector:
    """A candidate on its default clock, the running loop's (looptime's fake one here)."""
    options = LeaseOptions(identity=identity, **{**FAST, **timings})
    return LeaseElector(cluster.api, options, metrics=metrics)


class EndlessWork:
    """The leader's work: runs until cancelled, and says that it started and was cancelled."""

    def __init__(self) -> None:
        self.working = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def __call__(self) -> None:
        self.working.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise


def lease_spec(cluster: Any) -> dict[str, Any]:
    obj = cluster.server.objects[
        cluster.server.resource("coordination.k8s.io", "v1", "leases"),
        "gputriage",
        "gputriage-connect-k8s",
    ]
    spec: dict[str, Any] = obj["spec"]
    return spec


@asynccontextmanager
async def hung_leases(cluster: FakeCluster) -> AsyncIterator[list[str]]:
    """From now on lease requests get no answer (until exit); yields their methods so far."""
    seen: list[str] = []
    gate = asyncio.Event()

    async def hang(request: kmock.Request) -> Any:
        seen.append(str(request.method))
        await gate.wait()
        return Fail(503).response()

    cluster.server[kmock.resource("coordination.k8s.io", "v1", "leases")] << hang
    try:
        yield seen
    finally:
        gate.set()


def test_options_must_order_the_timings() -> None:
    with pytest.raises(ValueError, match="retry period < renew deadline < lease duration"):
        LeaseOptions(
            namespace="ns",
            name="l",
            identity="a",
            lease_duration_seconds=5,
            renew_deadline_seconds=5,
        )
    with pytest.raises(ValueError, match="identity"):
        LeaseOptions(namespace="ns", name="l", identity="")


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_one_leader_and_the_other_takes_over_when_it_releases() -> None:
    """b's 25 attempts (longer than a lease duration) pass on the fake clock."""
    async with fake_cluster() as cluster:
        a_metrics = ConnectorMetrics()
        a = elector(cluster, "a", metrics=a_metrics)
        b = elector(cluster, "b")
        a_working = asyncio.Event()
        a_stop = asyncio.Event()
        b_working = asyncio.Event()

        async def work_a() -> None:
            a_working.set()
            await a_stop.wait()

        async def work_b() -> None:
            b_working.set()
            await asyncio.Event().wait()

        task_a = asyncio.create_task(a.run(work_a))
        await asyncio.wait_for(a_working.wait(), 5)
        assert lease_spec(cluster)["holderIdentity"] == "a"
        assert a_metrics.value("gputriage_connector_leader") == 1
        task_b = asyncio.create_task(b.run(work_b))
        # b keeps trying for longer than a lease duration, and never wins: a renews.
        await eventually(lambda: b.attempts >= 25, what="b's attempts")
        assert not b_working.is_set()
        assert not b.is_leader
        a_stop.set()  # a finishes its work: it releases the lease
        await asyncio.wait_for(task_a, 5)
        assert a_metrics.value("gputriage_connector_leader") == 0
        await asyncio.wait_for(b_working.wait(), 2)
        spec = lease_spec(cluster)
        assert spec["holderIdentity"] == "b"
        assert spec["leaseTransitions"] == 1
        task_b.cancel()
        await asyncio.gather(task_b, return_exceptions=True)


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_a_crashed_leader_is_replaced_after_the_lease_duration() -> None:
    """The lease duration b waits out is fake-clock time, measured on that clock."""
    async with fake_cluster() as cluster:
        a = elector(cluster, "a")
        b = elector(cluster, "b")
        await a.acquire()  # a holds it and then dies: no renewals, no release
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(b.acquire(), 5)
        waited = loop.time() - started
        assert lease_spec(cluster)["holderIdentity"] == "b"
        assert waited >= FAST["lease_duration_seconds"] * 0.9  # not before the lease expired


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_an_abandoned_lease_expires_on_the_loops_clock_by_default() -> None:
    """No clock passed: the elector measures expiry on the loop's clock, the one its
    retries sleep on. On the wall clock, b waited out the lease duration in real time
    while its retries raced through the fake one (5.6 s of it, measured)."""
    async with fake_cluster() as cluster:
        options = LeaseOptions(identity="a", **FAST)
        a = LeaseElector(cluster.api, options)
        b = LeaseElector(cluster.api, LeaseOptions(identity="b", **FAST))
        assert await a.try_acquire_or_renew()  # one write, then a dies: never renewed
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(b.acquire(), 30)
        waited = loop.time() - started
        duration, retry = FAST["lease_duration_seconds"], FAST["retry_period_seconds"]
        assert lease_spec(cluster)["holderIdentity"] == "b"
        assert duration <= waited <= duration + 2 * retry, waited
        assert b.attempts <= duration / retry + 2, b.attempts


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_a_leader_that_cannot_renew_steps_down_and_stops_working() -> None:
    """The renew deadline runs out on the fake clock."""
    async with fake_cluster() as cluster:
        a = elector(cluster, "a")
        work = EndlessWork()
        task = asyncio.create_task(a.run(work))
        await asyncio.wait_for(work.working.wait(), 5)
        # Another identity takes the lease behind a's back (an operator, a split brain).
        await CoordinationV1Api(cluster.api).patch_namespaced_lease(
            "gputriage-connect-k8s",
            "gputriage",
            {"spec": {"holderIdentity": "intruder", "renewTime": "2099-01-01T00:00:00Z"}},
        )
        with pytest.raises(LeadershipLost):
            await asyncio.wait_for(task, 5)
        assert work.cancelled.is_set()
        assert not a.is_leader


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_a_leader_whose_api_server_hangs_steps_down_before_the_lease_expires() -> None:
    """The client sends requests without any timeout: a renewal that never gets an
    answer must still end at the renew deadline, or the others take over after the
    lease duration while this one keeps working. The hung request is kmock's handler
    waiting on this loop, so the deadline passes on the fake clock."""
    async with fake_cluster() as cluster:
        a = elector(cluster, "a", lease_duration_seconds=3.0)
        work = EndlessWork()
        task = asyncio.create_task(a.run(work))
        await asyncio.wait_for(work.working.wait(), 5)
        loop = asyncio.get_running_loop()
        async with hung_leases(cluster) as seen:
            await eventually(lambda: seen, what="a hung lease request")
            hung_at = loop.time()
            with pytest.raises(LeadershipLost):
                await asyncio.wait_for(task, 5)
            stepped_down_after = loop.time() - hung_at
        assert work.cancelled.is_set()
        assert not a.is_leader
        assert stepped_down_after < a.options.lease_duration_seconds


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_a_stop_while_the_api_server_hangs_does_not_hang() -> None:
    """The release gives up at the renew deadline, on the fake clock."""
    async with fake_cluster() as cluster:
        metrics = ConnectorMetrics()
        a = elector(cluster, "a", metrics=metrics)
        working = asyncio.Event()
        stop = asyncio.Event()

        async def work() -> None:
            working.set()
            await stop.wait()

        task = asyncio.create_task(a.run(work))
        await asyncio.wait_for(working.wait(), 5)
        loop = asyncio.get_running_loop()
        async with hung_leases(cluster) as seen:
            stopped_at = loop.time()
            stop.set()  # the work ends: the release gets no answer, and gives up
            await asyncio.wait_for(task, 5)
            took = loop.time() - stopped_at
            assert seen  # it did try
        # After the renew deadline (0.6 s), not when wait_for cancelled it at 5 s
        # (a cancel that run() swallowed would also "return" here).
        assert took < 2.5
        assert not a.is_leader
        assert metrics.value("gputriage_connector_leader") == 0


@pytest.mark.asyncio
@pytest.mark.timeout(20)
async def test_cancelling_the_elector_cancels_the_work_and_releases() -> None:
    async with fake_cluster() as cluster:
        a = elector(cluster, "a")
        working = asyncio.Event()
        finished: list[str] = []

        async def work() -> None:
            working.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                await asyncio.sleep(0)  # some cleanup that awaits
                finished.append("cancelled")
                raise

        task = asyncio.create_task(a.run(work))
        await asyncio.wait_for(working.wait(), 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert finished == ["cancelled"]  # done before run() returned, not orphaned
        assert lease_spec(cluster)["holderIdentity"] in ("", None)


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_a_leader_whose_work_fails_releases_the_lease_and_raises() -> None:
    """The released lease is taken at once: less than a lease duration on the fake clock."""
    async with fake_cluster() as cluster:
        a = elector(cluster, "a")
        b = elector(cluster, "b")

        async def work() -> None:
            raise RuntimeError("boom")

        with pytest.raises(RuntimeError, match="boom"):
            await asyncio.wait_for(a.run(work), 5)
        assert not a.is_leader
        assert lease_spec(cluster)["holderIdentity"] in ("", None)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(b.acquire(), 5)
        assert loop.time() - started < FAST["lease_duration_seconds"]  # released: no expiry wait


@pytest.mark.asyncio
@pytest.mark.looptime
@pytest.mark.timeout(20)
async def test_a_leader_that_stepped_down_on_slow_renewals_still_clears_its_record() -> None:
    """Renewals fail (a loaded API server answers them 503) until the renew deadline:
    the leader steps down, but the Lease still names it. Its release must clear that
    record, or the next replica waits out a whole lease duration for nobody."""
    async with fake_cluster() as cluster:
        a = elector(cluster, "a", lease_duration_seconds=30.0, renew_deadline_seconds=0.6)
        refused: list[str] = []
        refusing = [True]

        def refuse_renewals(request: kmock.Request) -> Any:
            spec = (request.data or {}).get("spec") if isinstance(request.data, dict) else None
            patch = str(request.method).upper().endswith("PATCH")
            if refusing[0] and patch and spec and spec.get("renewTime"):
                refused.append("renewal")
                return Fail(503).response()
            # Anything else (the release's read and patch) goes on to the emulator: kmock
            # reads NotImplementedError as "matched, nothing to answer" and tries the next
            # reaction, where a None answer would disable this one for good (apps.py:347).
            raise NotImplementedError

        work = EndlessWork()
        task = asyncio.create_task(a.run(work))
        await asyncio.wait_for(work.working.wait(), 5)
        assert lease_spec(cluster)["holderIdentity"] == "a"
        cluster.server[kmock.resource("coordination.k8s.io", "v1", "leases")] << refuse_renewals
        with pytest.raises(LeadershipLost):
            await asyncio.wait_for(task, 5)
        assert refused  # it did step down for the refused renewals
        assert work.cancelled.is_set()
        assert lease_spec(cluster)["holderIdentity"] in ("", None)
        refusing[0] = False  # the API server recovers: the next replica's writes go through
        b = elector(cluster, "b", lease_duration_seconds=30.0, renew_deadline_seconds=0.6)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.wait_for(b.acquire(), 5)
        assert loop.time() - started < 1.0  # not the 30 s lease duration
