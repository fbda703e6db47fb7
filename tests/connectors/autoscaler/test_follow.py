"""Following the autoscaler's pod logs: kubernetes-asyncio against kmock over HTTP.

The connection drops mid-stream, lines are written while it is down, the container
restarts with lines of the old one not yet read, and the connector restarts from its
saved state: every fact is published exactly once, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import pytest

from connectors.autoscaler.cursor import FollowState, LogCursor
from connectors.autoscaler.follow import LogFollower
from connectors.autoscaler.metrics import AutoscalerMetrics
from connectors.autoscaler.run import AutoscalerLogSource
from connectors.autoscaler.settings import AutoscalerSettings
from connectors.backoff import Backoff
from connectors.source import Batch, DeadLine
from connectors.state import StateFile
from schemas.events import AutoscalerEvent
from tests.connectors.autoscaler.log_server import LogServer, log_server, stamp
from tests.kafka_helpers import eventually

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(30)]

GROUP = "eks-gpu-02c6fc6f"
NOISE = "I1201 10:00:00.000000       1 static_autoscaler.go:289] Starting main loop"


def setting(size: int) -> str:
    """A real cluster-autoscaler line shape (tests/data/autoscaler/ca_klog.log line 1)."""
    head = "I1201 10:00:00.470823       1 executor.go:147]"
    return f"{head} Scale-up: setting group {GROUP} size to {size}"


FAST: Final = Backoff(initial_seconds=0.01, max_seconds=0.05)


def options(silence_timeout_seconds: float = 5.0) -> AutoscalerSettings:
    return AutoscalerSettings(
        cluster="c1",
        poll_interval_seconds=0.05,
        silence_timeout_seconds=silence_timeout_seconds,
    )


def fast_follower(api: Any, *args: Any, **kwargs: Any) -> LogFollower:
    """A :class:`LogFollower` of :func:`options` with a fast backoff."""
    return LogFollower(api, options(), *args, backoff=FAST, **kwargs)


class Collector:
    """Runs a source's ``next_batch`` loop, committing every batch (as the publish loop does
    once a batch is acknowledged)."""

    def __init__(self, source: AutoscalerLogSource) -> None:
        self.source = source
        self.batches: list[Batch] = []

    @property
    def events(self) -> list[AutoscalerEvent]:
        return [e for b in self.batches for e in b.events if isinstance(e, AutoscalerEvent)]

    @property
    def sizes(self) -> list[int | None]:
        return [e.size_to for e in self.events]

    async def pump(self) -> None:
        while True:
            batch = await self.source.next_batch()
            assert batch is not None
            if not batch.empty:
                self.batches.append(batch)
                self.source.commit(batch)


@asynccontextmanager
async def collecting(source: AutoscalerLogSource) -> AsyncIterator[Collector]:
    collector = Collector(source)
    task = asyncio.create_task(collector.pump())
    try:
        yield collector
        if task.done():
            task.result()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await source.close()


def follow_requests(server: LogServer) -> list[dict[str, str]]:
    return [
        {k: v.lower() for k, v in r.items() if k in ("follow", "previous", "sinceTime")}
        for r in server.log_requests
    ]


async def test_drop_and_restart_lose_nothing_and_repeat_nothing(tmp_path: Path) -> None:
    state_path = tmp_path / "autoscaler.json"
    async with log_server() as (server, api):
        server.add("ca-1")
        server.add("other", labels={"app": "something-else"})
        server.write("ca-1", stamp(0, 100_000_000), setting(1))
        server.write("ca-1", stamp(0, 200_000_000), NOISE)
        server.write("ca-1", stamp(1, 1), setting(2))  # two lines in one second:
        server.write("ca-1", stamp(1, 500_000_000), setting(3))  # sinceTime repeats both
        state = StateFile(state_path, FollowState)
        metrics = AutoscalerMetrics()
        follower = fast_follower(api, metrics=metrics)
        source = AutoscalerLogSource(follower, state)
        async with collecting(source) as got:
            await eventually(lambda: got.sizes == [1, 2, 3], what="the first three facts")
            server.drop()  # the connection breaks mid-stream ...
            server.write("ca-1", stamp(1, 500_000_000), setting(4))  # ... same instant, new line
            server.write("ca-1", stamp(2), setting(5))
            await eventually(lambda: got.sizes == [1, 2, 3, 4, 5], what="resumed after the drop")
            # The old container logs one more line, the connection breaks and the container
            # restarts before it was read: it comes from previous=true, then the new one.
            server.write("ca-1", stamp(3), setting(6))
            server.restart("ca-1")
            server.drop()
            server.write("ca-1", stamp(5), setting(7))
            server.write("ca-1", stamp(5), setting(7))  # the same line twice: two lines
            await eventually(lambda: got.sizes == [1, 2, 3, 4, 5, 6, 7, 7], what="new container")
        state.close()
        assert got.sizes == [1, 2, 3, 4, 5, 6, 7, 7]
        assert len({e.id for e in got.events}) == 8
        assert all(e.action == "scale_up_planned" and e.node_group == GROUP for e in got.events)
        assert got.events[0].line == f"{stamp(0, 100_000_000)} {setting(1)}"
        assert follow_requests(server) == [
            {"follow": "true"},
            {"follow": "true", "sinceTime": "2026-12-01t10:00:01z"},
            {"previous": "true", "sinceTime": "2026-12-01t10:00:02z"},
            # The new container's lines come after the old one's: the filter carries over.
            {"follow": "true", "sinceTime": "2026-12-01t10:00:03z"},
        ]
        assert metrics.value("gputriage_autoscaler_lines_total", outcome="parsed") == 8
        assert metrics.value("gputriage_autoscaler_lines_total", outcome="unrecognised") == 1
        assert metrics.value("gputriage_autoscaler_log_streams_total", reason="broken") == 2

        # The connector restarts from its state file: only what is new is published.
        saved = StateFile(state_path, FollowState)
        cursor = saved.load()
        assert cursor is not None
        assert [(c.pod, c.restart_count) for c in cursor.cursors] == [("kube-system/ca-1", 1)]
        server.write("ca-1", stamp(6), setting(8))
        again = AutoscalerLogSource(fast_follower(api, cursor), saved)
        async with collecting(again) as more:
            await eventually(lambda: more.sizes == [8], what="the line after the restart")
            server.write("ca-1", stamp(7), setting(9))
            await eventually(lambda: more.sizes == [8, 9], what="following on")
        saved.close()
        assert server.log_requests[-1]["sinceTime"] == "2026-12-01T10:00:05Z"


async def test_a_new_replica_is_followed_and_a_deleted_one_forgotten(tmp_path: Path) -> None:
    async with log_server() as (server, api):
        server.add("ca-1")
        server.write("ca-1", stamp(0), setting(1))
        follower = fast_follower(api)
        source = AutoscalerLogSource(follower)
        async with collecting(source) as got:
            await eventually(lambda: got.sizes == [1])
            replica = server.add("ca-2")
            replica.instances[0].lines.append((stamp(1), setting(2)))
            await eventually(lambda: got.sizes == [1, 2], what="the second replica")
            del server.pods["ca-1"]
            await eventually(
                lambda: (
                    [c.pod for c in (got.batches[-1].state or FollowState()).cursors]  # type: ignore[attr-defined]
                    == ["kube-system/ca-2"]
                ),
                what="ca-1 forgotten",
            )


async def test_a_saved_cursor_of_a_pod_that_is_gone_leaves_the_state() -> None:
    old = LogCursor(pod="kube-system/ca-0", uid="uid-ca-0", container="c", restart_count=0)
    async with log_server() as (server, api):
        server.add("ca-1")
        server.write("ca-1", stamp(0), setting(1))
        follower = fast_follower(api, FollowState(cursors=(old,)))
        async with collecting(AutoscalerLogSource(follower)) as got:
            await eventually(lambda: got.sizes == [1])

            def pods() -> list[str]:
                state = got.batches[-1].state
                assert isinstance(state, FollowState)
                return [c.pod for c in state.cursors]

            await eventually(lambda: pods() == ["kube-system/ca-1"], what="ca-0 forgotten")


async def test_an_unreadable_line_is_a_dead_letter_and_silence_reconnects() -> None:
    bad = "I0231 10:00:00.470823       1 executor.go:147] Scale-up: setting group g size to 3"
    async with log_server() as (server, api):
        server.add("ca-1")
        server.write("ca-1", stamp(0), bad)
        server.write("ca-1", stamp(1), setting(1))
        metrics = AutoscalerMetrics()
        quiet = LogFollower(api, options(0.3), metrics=metrics, backoff=FAST)
        source = AutoscalerLogSource(quiet)
        async with collecting(source) as got:
            await eventually(lambda: got.sizes == [1])
            await eventually(
                lambda: metrics.value("gputriage_autoscaler_log_streams_total", reason="silent"),
                what="a silent stream reconnected",
            )
            server.write("ca-1", stamp(2), setting(2))
            await eventually(lambda: got.sizes == [1, 2], what="the line after the silence")
        (letter,) = [d for b in got.batches for d in b.dead]
        assert isinstance(letter, DeadLine)
        assert letter.raw == f"{stamp(0)} {bad}".encode()
        assert letter.error.reason == "klog header has an impossible date 0231"
        assert metrics.value("gputriage_autoscaler_lines_total", outcome="dead_letter") == 1
        assert got.sizes == [1, 2]  # the reconnect after silence repeated nothing
        assert server.log_requests[1]["sinceTime"].upper() == "2026-12-01T10:00:01Z"
