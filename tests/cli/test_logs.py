"""Repeated warnings and errors are one line per interval with a count (gputriage.logs).

A broker outage made aiokafka log every refused connection, metadata update, fetch and
coordinator request at ERROR: ~2,000 lines in 30 s from one idle processor. The burst
here comes through the loop's clock (looptime), at aiokafka's pace, so 30 s of outage
take no real time; the filter is the one ``configure_logging`` installs.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from gputriage.logs import NOISY as LIBRARIES
from gputriage.logs import LogSettings, RepeatFilter, configure_logging
from gputriage.settings import SettingsError
from tests.cli_helpers import load_tables

NOISY = ("aiokafka", "aiokafka.consumer.fetcher", "aiokafka.consumer.group_coordinator")


def _log(name: str, level: int, msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, args, None)


@pytest.mark.asyncio
@pytest.mark.looptime
async def test_a_30_s_outage_at_aiokafkas_pace_is_a_few_lines(looptime: float) -> None:
    loop = asyncio.get_running_loop()
    repeats = RepeatFilter(30.0, clock=loop.time)
    passed: list[str] = []
    started = float(looptime)
    while float(looptime) - started < 30.5:  # ~70 records a second, as measured
        for name in NOISY:
            record = _log(name, logging.ERROR, 'Unable connect to "%s:%s": %s', "k", 1, "refused")
            if repeats.filter(record):
                passed.append(record.getMessage())
        await asyncio.sleep(0.04)
    assert len(passed) == 2, passed
    assert passed[0] == 'Unable connect to "k:1": refused'
    assert passed[1].startswith('Unable connect to "k:1": refused (')
    assert passed[1].endswith(" more from aiokafka in the last 30 s)")
    held = int(passed[1].rsplit("(", 1)[1].split()[0])
    assert 2200 <= held <= 2300, "every record held back is counted"


def test_our_own_repeats_are_kinds_by_their_text() -> None:
    now = [0.0]
    repeats = RepeatFilter(30.0, clock=lambda: now[0])
    failed = _log("gputriage.kafka", logging.WARNING, "commit failed (%s)", "refused")
    other = _log("gputriage.kafka", logging.WARNING, "commit failed (%s)", "timed out")
    again = _log("gputriage.kafka", logging.WARNING, "commit failed (%s)", "refused")
    as_error = _log("gputriage.kafka", logging.ERROR, "commit failed (%s)", "refused")
    info = _log("gputriage.kafka", logging.INFO, "commit failed (%s)", "refused")
    passed = [repeats.filter(r) for r in (failed, other, again, as_error, info, info)]
    assert passed == [True, True, False, True, True, True]
    now[0] = 31.0
    later = _log("gputriage.kafka", logging.WARNING, "commit failed (%s)", "refused")
    assert repeats.filter(later)
    assert later.getMessage() == "commit failed (refused) (1 more like it in the last 31 s)"
    assert later.args is None, "formatted once: the arguments are in the message"


def test_a_warning_about_each_item_is_written_for_each() -> None:
    repeats = RepeatFilter(30.0, clock=lambda: 0.0)
    resent = [
        _log("gputriage.bridge", logging.WARNING, "sending %s revision %d again", f"inc-{n}", 1)
        for n in range(4)
    ]
    assert all(repeats.filter(record) for record in resent)


def test_zero_writes_every_one() -> None:
    repeats = RepeatFilter(0.0, clock=lambda: 0.0)
    record = _log("aiokafka", logging.ERROR, "x")
    assert all(repeats.filter(record) for _ in range(5))


def test_configure_logging_installs_it(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    libraries = {name: logging.getLogger(name).level for name in LIBRARIES}
    try:
        configure_logging(LogSettings(repeat_seconds=60))
        for _ in range(50):
            logging.getLogger("aiokafka.conn").error("Unable connect to node %s", 1)
        logging.getLogger("gputriage.test").warning("once")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, was in libraries.items():
            logging.getLogger(name).setLevel(was)
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 2, lines
    assert lines[0].endswith("ERROR aiokafka.conn: Unable connect to node 1")
    assert lines[1].endswith("WARNING gputriage.test: once")


@pytest.mark.parametrize("value", ["-1", "nan", "1e9"])
def test_repeat_seconds_is_a_checked_setting(value: str) -> None:
    with pytest.raises(SettingsError, match=r"log\.repeat_seconds"):
        load_tables({}, {"GPUTRIAGE_LOG__REPEAT_SECONDS": value})
