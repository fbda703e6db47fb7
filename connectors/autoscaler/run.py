"""``gputriage connect autoscaler``: the autoscaler's pod logs into the ``autoscaler.v1`` topic.

A :class:`~connectors.autoscaler.follow.LogFollower` feeds an :class:`AutoscalerLogSource` under
the one publish loop. Each line goes through
:func:`connectors.autoscaler.lines.parse_line`: its records are published, a line stating
no fact is counted (``outcome="unrecognised"``) and dropped, a
:class:`~schemas.codec.RecordError` becomes a dead letter.

Trap: every line is one batch carrying the cursors after it, saved once the batch is
acknowledged, so a restart resumes after the last *delivered* line (lines read but not
delivered are read again). In full: docs/connectors.md, design notes:
connectors/autoscaler/run.py.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Final

from kubernetes_asyncio.client import ApiClient

from connectors.autoscaler.cursor import FollowState, LogCursor, stamp_time
from connectors.autoscaler.follow import BACKOFF, Forget, LogFollower, LogLine
from connectors.autoscaler.lines import LineContext, parse_line
from connectors.autoscaler.metrics import AutoscalerMetrics
from connectors.autoscaler.settings import AutoscalerSettings
from connectors.autoscaler.status_watch import StatusUpdate, StatusWatcher
from connectors.backoff import Backoff
from connectors.kafka.producer import KafkaTarget
from connectors.publish import PublishOptions
from connectors.run import Served, run_source
from connectors.settings import required
from connectors.source import Batch, DeadLine
from connectors.state import StateFile
from schemas.codec import RecordError
from schemas.topics import TopicLayout

log = logging.getLogger("gputriage.connect.autoscaler")


class AutoscalerLogSource:
    """The followed logs (and status updates) as a :class:`connectors.source.Source`: one
    line, one batch, carrying every container's cursor as of that line.

    Trap (caught up): an idle batch (nothing for ``idle_seconds``) makes the publish loop claim
    "delivered up to now", also while a stream is reconnecting; a line read after the
    reconnect is then late by up to the backoff (30 s at most) plus the time the kubelet
    took to serve it, which the processor's grace must cover. Unlike a list, a log
    stream never says it has caught up, so nothing better is known here.
    """

    name = "autoscaler"
    key: bytes | None = None
    idle_seconds = 1.0

    def __init__(
        self,
        follower: LogFollower,
        state: StateFile[FollowState] | None = None,
        status: StatusWatcher | None = None,
    ) -> None:
        self.follower = follower
        self.status = status
        self.settings = follower.settings
        self.cluster = required(follower.settings.cluster, "cluster")
        self.state = state
        self.metrics = follower.metrics
        self._handed: dict[tuple[str, str], LogCursor] = dict(follower.saved)
        """The cursors as of the last line handed out (what a batch's state saves); the
        saved ones until their pod is followed again or found gone (:class:`Forget`), so
        a pod not running at start keeps its position."""
        self._task: asyncio.Task[None] | None = None

    async def next_batch(self) -> Batch | None:
        """The next line as a batch; an idle batch after ``idle_seconds`` without one."""
        if self._task is None:
            self._task = asyncio.create_task(self._run_all(), name="autoscaler-follow")
        get = asyncio.ensure_future(self.follower.queue.get())
        try:
            await asyncio.wait(
                {get, self._task}, timeout=self.idle_seconds, return_when="FIRST_COMPLETED"
            )
        finally:
            if not get.done():
                get.cancel()
        if get.done() and not get.cancelled():
            return self._batch(get.result())
        if self._task.done():
            self._task.result()  # a crashed follower ends the connector, loudly
            return None
        return Batch()

    async def _run_all(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self.follower.run())
            if self.status is not None:
                group.create_task(self._pump_status(self.status))

    async def _pump_status(self, status: StatusWatcher) -> None:
        async for update in status.items():
            await self.follower.queue.put(update)

    def _batch(self, item: LogLine | Forget | StatusUpdate) -> Batch:
        if isinstance(item, StatusUpdate):
            if item.error is not None:
                self.metrics.status_updates.labels("dead_letter").inc()
                dead = DeadLine(item.raw, item.error, None)
                return Batch(dead=[dead], state=self._state(), records=1)
            self.metrics.status_updates.labels("parsed").inc()
            return Batch(events=list(item.events), state=self._state(), records=1)
        if isinstance(item, Forget):
            self._handed.pop((item.pod, item.container), None)
            return Batch(state=self._state())
        cursor = item.cursor
        self._handed[(cursor.pod, cursor.container)] = cursor
        stamp = stamp_time(cursor.time_ns) if cursor.time_ns else datetime.now(UTC)
        ctx = LineContext(
            cluster=self.cluster,
            reference=stamp,
            source=f"{cursor.pod}/{cursor.container}",
            cloud=self.settings.cloud,
            fmt=self.settings.format,
        )
        result = parse_line(item.raw, ctx, f"{cursor.restart_count}:{cursor.time_ns}:{item.index}")
        if isinstance(result, RecordError):
            self.metrics.lines.labels("dead_letter").inc()
            return Batch(dead=[DeadLine(item.raw, result, None)], state=self._state(), records=1)
        self.metrics.lines.labels("parsed" if result else "unrecognised").inc()
        return Batch(events=list(result), state=self._state(), records=1, progress=stamp)

    def _state(self) -> FollowState:
        return FollowState(cursors=tuple(self._handed.values()))

    def commit(self, batch: Batch) -> None:
        """Save the batch's cursors (it was acknowledged)."""
        if self.state is not None:
            self.state.save(batch.state, published=bool(batch.events or batch.dead))

    async def close(self) -> None:
        """Stop following; release the state file."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.state is not None:
            self.state.close()


PUBLISH: Final = PublishOptions(chunk=500, drain_timeout_seconds=10.0)
"""The publish loop's chunk and drain bound (capacity and heartbeat: the settings')."""


def autoscaler_source(
    api: ApiClient,
    settings: AutoscalerSettings,
    metrics: AutoscalerMetrics,
    *,
    backoff: Backoff = BACKOFF,
) -> AutoscalerLogSource:
    """The follower, its state file and the status watcher, as one source.

    ``settings`` as given: the Karpenter preset is applied here. A state file another
    process holds is :class:`~connectors.state.StateInUse`, before anything starts.
    """
    settings = settings.preset()
    required(settings.cluster, "cluster")  # before the state file is locked
    path = settings.state_path
    state = StateFile(Path(path), FollowState) if path else None
    saved = state.load() if state is not None else None
    if state is not None and state.error is not None:
        log.warning("%s; following from the start of each container", state.error)
    follower = LogFollower(api, settings, saved, metrics=metrics, backoff=backoff)
    status = None
    if settings.status_configmap:
        status = StatusWatcher(api, settings, backoff=backoff, metrics=metrics)
    return AutoscalerLogSource(follower, state, status)


async def run_connect_autoscaler(
    settings: AutoscalerSettings,
    api: ApiClient,
    kafka_kwargs: Mapping[str, Any],
    layout: TopicLayout,
    *,
    stop: asyncio.Event | None = None,
    backoff: Backoff = BACKOFF,
    metrics_addr: str = "0.0.0.0",
    err: IO[str] | None = None,
) -> int:
    """Serve metrics, follow and deliver until stopped; the exit status.

    ``api`` comes from the caller (the CLI builds it with :func:`connectors.kube.kube_client`,
    tests with a fake API server); it is closed here.
    """
    try:
        metrics = AutoscalerMetrics()
        source = autoscaler_source(api, settings, metrics, backoff=backoff)
        follow = source.settings
        log.info("following pods %s in namespace %s", follow.selector, follow.namespace)
        return await run_source(
            source,
            KafkaTarget(kafka_kwargs, layout),
            name="connect autoscaler",
            served=Served(metrics=metrics.delivery, port=settings.metrics_port, addr=metrics_addr),
            err=err or sys.stderr,
            publish=replace(
                PUBLISH, capacity=settings.buffer_size, heartbeat_seconds=settings.heartbeat_seconds
            ),
            stop=stop,
            source_id=f"{source.name}@{source.cluster}",
        )
    finally:
        await api.close()
