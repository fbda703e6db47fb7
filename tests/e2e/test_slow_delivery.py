"""Live results must not depend on how fast events arrive.

A recorded stream (``examples/scenario.jsonl``, moved to end three days ago) is
delivered slowly, in bursts with pauses, through the real publish loop
(:class:`connectors.publish.Publisher`) and the real broker to a real
``gputriage process`` worker that was already running and caught up: what a
connector catching up after an outage, a backfill or a slow relist does. The
incidents must be exactly those of a replay of the same file
(:func:`tests.processor_helpers.reference`, with every window closed at the end,
as the existing live-vs-replay tests compare them).

Before the watermark followed the sources, the worker's clock moved it to "now
minus grace" in every pause, three days past the stream: every later burst was
late, windows closed before their evidence arrived, and the incidents differed.
Now each record carries its source's progress and the publisher heartbeats in
the pauses, so the watermark waits for the stream; once the stream has ended and
its source has been silent for ``source_idle_seconds``, the clock closes the
last windows, as the replay's final flush does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from connectors.publish import Publisher, PublishOptions
from schemas.codec import AnyEvent, decode_event, encode
from schemas.events import Tick
from tests.demo.test_scenario import ALL_TYPES
from tests.kafka_helpers import KafkaTestEnv, wait_until
from tests.paths import EXAMPLES
from tests.processor_helpers import (
    ChunkedSource,
    TopicReader,
    Worker,
    ending_days_ago,
    final,
    publish,
    reference,
)

SCENARIO = EXAMPLES / "scenario.jsonl"
BURSTS = 15
PAUSE_S = 0.3
"""Between bursts: far longer than the worker's tick (0.1 s), so it is caught up and ticks
through every pause, and far shorter than its source idle timeout (below)."""
IDLE_S = 30.0
"""The worker's ``source_idle_seconds``: far longer than any stall of the publisher on a
loaded machine (at 2 s, one run in a busy full suite aged the source out mid-stream, the
clock took over and the incidents differed: a flaky test). The stream's end does not
wait for it: the publish loop's ``end`` heartbeat retires the source at once."""


async def deliver_slowly(kafka: KafkaTestEnv, events: Sequence[AnyEvent]) -> Publisher:
    # A replay of the past: its pauses say nothing about the present (no "caught up"),
    # and it heartbeats well within every pause.
    options = PublishOptions(chunk=1, heartbeat_seconds=0.1, idle_is_caught_up=False)
    source = ChunkedSource(events, BURSTS, pause_s=PAUSE_S, name="slow-replay")
    return await publish(kafka, source, options)


def test_a_recorded_stream_delivered_slowly_gives_exactly_the_incidents_of_replay(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    lines = SCENARIO.read_bytes().splitlines()
    events = [
        e
        for e in ending_days_ago([decode_event(line) for line in lines])
        if not isinstance(e, Tick)
    ]
    expected = reference(events)
    assert {i.type for i in expected.values()} == ALL_TYPES  # cluster key included
    kafka.create_topics()
    reader = TopicReader(kafka, kafka.layout.incidents.name)
    worker = Worker(
        kafka,
        f"{kafka.prefix}-app",
        tmp_path / "worker.log",
        {"GPUTRIAGE_PROCESSOR__SOURCE_IDLE_SECONDS": str(IDLE_S)},
    )
    try:
        # Caught up before the first burst: assigned, with nothing to read.
        wait_until(lambda: "partitions [" in worker.log(), timeout=60, what="the assignment")
        publisher = asyncio.run(deliver_slowly(kafka, events))
        assert publisher.heartbeats >= BURSTS - 1, "a heartbeat in every pause"

        def settled() -> bool:
            reader.poll()
            got = final(reader.incidents())
            return all(i in got and encode(got[i]) == encode(inc) for i, inc in expected.items())

        try:
            wait_until(settled, timeout=60, what="the incidents of replay")
        except AssertionError:
            got = final(reader.incidents())
            missing = sorted(i for i in expected if i not in got)
            extra = sorted(i for i in got if i not in expected)
            differ = sorted(
                i for i in expected if i in got and encode(got[i]) != encode(expected[i])
            )
            raise AssertionError(
                f"live gave {len(got)} incidents where replay gives {len(expected)}: "
                f"{len(missing)} missing, {len(extra)} extra, {len(differ)} differ "
                f"(missing {[expected[i].type for i in missing]}, "
                f"extra {[got[i].type for i in extra]}); the worker's log ends:\n"
                + worker.log()[-4000:]
            ) from None
        got = final(reader.incidents())
        assert set(got) == set(expected), "no incident replay does not have"
        assert {i: (g.type, g.revision, g.status) for i, g in got.items()} == {
            i: (e.type, e.revision, e.status) for i, e in expected.items()
        }
    finally:
        reader.close()
        assert worker.stop() == 0, worker.log()
