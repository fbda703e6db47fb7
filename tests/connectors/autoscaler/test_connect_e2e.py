"""``connect autoscaler`` end to end: kmock (pods, pods/log, the status ConfigMap) ->
connector -> Tansu (Kafka); the state file holds the delivered position."""

from __future__ import annotations

import asyncio
from pathlib import Path

import msgspec
import pytest

from connectors.autoscaler.cursor import FollowState
from connectors.autoscaler.run import run_connect_autoscaler
from connectors.kafka.admin import ensure_topics
from connectors.state import load_state
from schemas.codec import decode_event
from schemas.events import AutoscalerEvent
from tests.connectors.autoscaler.log_server import log_server, stamp
from tests.connectors.autoscaler.test_follow import FAST, NOISE, options, setting
from tests.connectors.autoscaler.test_status_watch import YAML, configmap
from tests.kafka_helpers import KafkaTestEnv, consume_events, eventually


@pytest.mark.asyncio
@pytest.mark.timeout(40)
async def test_lines_and_status_facts_reach_the_autoscaler_topic(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    state_path = tmp_path / "autoscaler.json"
    async with log_server() as (server, api):
        server.add("ca-1")
        server.write("ca-1", stamp(0), setting(1))
        server.write("ca-1", stamp(1), NOISE)
        server.write("ca-1", stamp(2), setting(2))
        server.configmaps.put(configmap("10", YAML))
        await ensure_topics(kafka.kwargs, kafka.layout)
        stop = asyncio.Event()
        settings = msgspec.structs.replace(options(), state_path=str(state_path), metrics_port=None)
        task = asyncio.create_task(
            run_connect_autoscaler(
                settings, api, kafka.kwargs, kafka.layout, stop=stop, backoff=FAST
            )
        )
        topic = kafka.layout.raw["autoscaler"].name
        records = await consume_events(kafka.bootstrap, [topic], 3)

        def saved_at_last_line() -> bool:
            state = load_state(state_path, FollowState) if state_path.exists() else None
            return state is not None and state.cursors[0].time_ns == 1796119202000000000

        await eventually(saved_at_last_line, what="the state file at the last line")
        stop.set()
        assert await asyncio.wait_for(task, 10) == 0
    events = [decode_event(r.value) for r in records]
    assert all(isinstance(e, AutoscalerEvent) for e in events)
    got = sorted((e.action, e.size_to or 0, e.reason) for e in events)  # type: ignore[union-attr]
    assert got == [
        ("backoff", 0, "quota"),
        ("scale_up_planned", 1, ""),
        ("scale_up_planned", 2, ""),
    ]
    assert {r.key for r in records} == {b"c1"}
