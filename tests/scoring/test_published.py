"""The replay's seam for scoring: when, on the stream's clock, each incident first came out."""

from __future__ import annotations

import io
from datetime import timedelta
from pathlib import Path

from connectors.files import FileReader
from gputriage.replay import correlate
from gputriage.settings import load_settings
from schemas.events import PodEvent, Tick
from tests.cli_helpers import host_oom_events, write_jsonl

CONFIG = load_settings(None, environ={}).core_config()


def test_an_incident_released_by_an_event_is_published_at_that_events_time(
    tmp_path: Path,
) -> None:
    pod, tick = host_oom_events()
    assert isinstance(tick, Tick)
    source = FileReader(str(write_jsonl(tmp_path / "e.jsonl", [pod, tick])))
    with source:
        result = correlate([source], CONFIG, io.StringIO())
    assert {r.type for r in result.revisions} == {"host_oom_kill"}
    (first,) = {r.id for r in result.revisions}
    assert result.first_published[first] == tick.time, "the tick, the latest event ingested"


def test_an_incident_only_the_flush_releases_is_published_a_grace_after_the_last_event(
    tmp_path: Path,
) -> None:
    """With no later event, the incident waits in the grace until the end of input; a live
    processor would have released it when its clock passed the grace, not before."""
    pod, _ = host_oom_events()
    assert isinstance(pod, PodEvent)
    source = FileReader(str(write_jsonl(tmp_path / "e.jsonl", [pod])))
    with source:
        result = correlate([source], CONFIG, io.StringIO())
    assert result.revisions, "the flush releases it"
    (first,) = {r.id for r in result.revisions}
    assert CONFIG.grace_seconds > 0
    grace = timedelta(seconds=CONFIG.grace_seconds)
    assert result.first_published[first] == pod.time + grace
