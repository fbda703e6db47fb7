"""Six SIGKILLs at different points of a 30k-event backlog, then a seventh worker to the end.

Workers of one consumer group run in turn over the same backlog; each but the last is
killed (SIGKILL: no flush, no commit, no goodbye) at another point of its cycle and at
another depth of the backlog. The last one runs to the end. Then every incident's final
revision on the incident topic must be the one the pure core reaches over the same
events with every window closed (:func:`tests.processor_helpers.reference`), and no id
may appear that the core does not make.

No ``(id, revision)`` may appear twice either, and this test makes sure its kills
would make some: a worker publishes a batch's incident revisions as soon as the batch
is applied, but writes the key state and commits only at the next flush; killed in
between, its successor restores the older state, re-reads the records behind it and
makes the same revisions again (38 to 231 copies per run before the marks). It must not
publish them: each flush writes a mark of the incident topic's offsets, and a worker
given a partition scans the incident topic from the mark it inherits
(:mod:`streams.app.published`). The kill in the restore and the one of a worker that
never committed check that the mark is inherited, not replaced, until the successor
has caught up.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from schemas.codec import AnyEvent, decode_incident, encode
from schemas.incidents import Incident
from schemas.topics import DEFAULT_PARTITIONS
from tests.kafka_helpers import KafkaTestEnv, wait_until
from tests.processor_helpers import (
    DEFAULT_GROUP,
    SLOW_STEPS,
    GroupOffsets,
    TopicReader,
    Worker,
    await_settled,
    final,
    generated,
    produce_events,
    produce_signed,
    reference,
    restored_keys,
)

KillPoint = Callable[[Worker, int], object]
"""When to kill a worker, given it and the group's committed count when it started."""

KILL_PARTITIONS = DEFAULT_PARTITIONS
"""The default partition count: a killed member's partitions are spread over several lanes."""

SLOW = {**SLOW_STEPS, **DEFAULT_GROUP}
"""A slow worker (:data:`SLOW_STEPS`) with the default session: a killed member keeps its
partitions for the whole of it, so its successor first gets only some of them, and gains
the rest (with their backlog) once the session ends."""

SLOWER = {**SLOW, "GPUTRIAGE_PROCESSOR__BATCH_MAX": "1"}
"""Slower still: one record per batch, a commit after nearly each, so a kill finds its
last commit close behind what it read."""

NO_COMMIT = {**SLOW, "GPUTRIAGE_PROCESSOR__SNAPSHOT_SECONDS": "3600"}
"""A worker that publishes every batch's revisions but never snapshots or commits."""


@pytest.mark.timeout(400)
def test_six_kills_at_different_points_lose_nothing_and_invent_nothing(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    started = time.monotonic()
    kafka = dataclasses.replace(kafka, partitions=KILL_PARTITIONS)
    events = generated(30_000, 300)
    kafka.create_topics()
    # Kill points watch the topic and the group's commit closely (a fetch held the
    # default 500 ms would let a worker run thousands of records past them).
    incidents = TopicReader(kafka, kafka.layout.incidents.name, fetch_max_wait_ms=10)
    count = GroupOffsets(kafka, f"{kafka.prefix}-app")
    try:
        _kills(kafka, incidents, tmp_path, events, count)
    finally:
        count.close()
        incidents.close()
    print(f"{time.monotonic() - started:.1f} s")


def _kills(
    kafka: KafkaTestEnv,
    incidents: TopicReader,
    tmp_path: Path,
    events: list[AnyEvent],
    count: GroupOffsets,
) -> None:
    expected = reference(events)
    total = produce_events(kafka, events)
    assert total >= 30_000
    app = count.group

    def grown(since: int) -> bool:
        """The incident topic has more than ``since`` records."""
        incidents.poll()
        return len(incidents.records) > since

    def passed(fraction: float) -> KillPoint:
        """Right after a commit: the group's commit has passed ``fraction`` of the
        backlog, and moved since this worker started (its predecessor may have been
        killed past that point already)."""
        return lambda _, start: (now := count()) >= total * fraction and now > start

    revisions = sum(inc.revision for inc in expected.values())
    out: set[tuple[str, int]] = set()
    decoded: list[Incident] = []

    def distinct() -> int:
        """The ``(id, revision)`` pairs on the incident topic (duplicates once)."""
        incidents.poll()
        for incident in incidents.incidents()[len(decoded) :]:
            decoded.append(incident)
            out.add((incident.id, incident.revision))
        return len(out)

    def publishing(fraction: float) -> KillPoint:
        """While publishing: as soon as ``fraction`` of all revisions are out, counting
        only new ones (a successor first publishes again what its predecessor had
        published past the last commit). Commits come in bursts, each right after the
        revisions of its batches: a point after a commit would miss the burst."""
        first: list[int] = []

        def point(worker: Worker, start: int) -> bool:
            now = distinct()
            if not first:
                first.append(now)
            return now >= revisions * fraction and now > first[0]

        return point

    def restored(worker: Worker, start: int) -> bool:
        """In its restore, just after start: as soon as its log says it restored keys."""
        return restored_keys(worker.log()) > 0

    def published(worker: Worker, start: int) -> bool:
        """Before its first commit: it has published revisions (and commits never)."""
        return grown(at_start[0])

    log: list[str] = []
    at_start: list[int] = []

    def run(name: str, env: dict[str, str], kill_when: KillPoint) -> None:
        start, began = count(), time.monotonic()
        incidents.poll()
        at_start[:] = [len(incidents.records)]
        worker = Worker(kafka, app, tmp_path / f"{name}.log", env)
        try:
            wait_until(lambda: kill_when(worker, start), timeout=60, what=f"kill point {name}")
        except AssertionError as late:
            raise AssertionError(f"{late}; {count()} of {total} committed; {log}") from None
        finally:
            worker.kill()
        incidents.poll()
        log.append(
            f"{name}: committed {start} -> {count()} of {total}, incident records "
            f"{at_start[0]} -> {len(incidents.records)}, {time.monotonic() - began:.1f} s"
        )

    run("after-commit", SLOW, passed(1 / 7))
    run("restore", SLOW, restored)
    run("publishing", SLOW, publishing(2 / 7))
    run("publishing-2", SLOW, publishing(3 / 7))
    run("after-commit-2", SLOW, passed(4 / 7))
    # Last: never committing, it never waits on the broker either, and may publish
    # the rest of the backlog at once; its successor publishes all that again.
    before = count()
    run("before-first-commit", NO_COMMIT, published)
    assert count() == before, "the no-commit worker committed nothing"
    assert count() < total, f"the kills landed mid-backlog: {log}"

    last = Worker(kafka, app, tmp_path / "last.log", DEFAULT_GROUP)
    try:
        await_settled(incidents, expected, 90)
        wait_until(lambda: count() == total, timeout=30, what="all committed")
    finally:
        assert last.stop() == 0, last.log()
    incidents.poll()  # what its clean stop may have flushed, for the count below

    _as_replay(incidents, expected, log)
    suppressed = sum(_suppressed(tmp_path / f"{name}.log") for name in KILLED)
    assert suppressed > 0, f"no worker made a revision again: the kills prove nothing; {log}"


def _as_replay(incidents: TopicReader, expected: dict[str, Incident], log: list[str]) -> None:
    """Every incident's final revision is the replay's, none is invented, and no
    ``(id, revision)`` was published twice (a bridge would drop the second as a copy,
    even with other bytes)."""
    got = final(incidents.incidents())
    lost = [i for i in expected if i not in got]
    differ = [i for i in expected if i in got and encode(got[i]) != encode(expected[i])]
    invented = [i for i in got if i not in expected]
    copies: dict[tuple[str, int], set[bytes]] = defaultdict(set)
    records = [r.value for r in incidents.records if r.value is not None]
    per_revision: dict[tuple[str, int], int] = defaultdict(int)
    for value in records:
        incident = decode_incident(value)
        copies[incident.id, incident.revision].add(value)
        per_revision[incident.id, incident.revision] += 1
    duplicated = sum(n - 1 for n in per_revision.values())
    differing = {k: v for k, v in copies.items() if len(v) > 1}
    print(
        f"\n{len(records)} records, {len(expected)} incidents: {len(lost)} lost, "
        f"{len(differ)} differing, {len(invented)} invented, {duplicated} duplicated "
        f"(id, revision), {len(differing)} of them with different bytes\n" + "\n".join(log)
    )
    assert (lost, differ, invented) == ([], [], []), log
    assert not differing, next(iter(differing.items()))
    assert duplicated == 0, log


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signed", [False, True], ids=["header-less", "signed"])
def test_a_survivor_takes_over_a_killed_members_backlog_as_a_replay_would(
    kafka: KafkaTestEnv, tmp_path: Path, signed: bool
) -> None:
    """Two workers share a backlog; the slow one is killed mid-way through its half, and
    the survivor reads its own half to the end. After the session timeout it gains the dead
    member's partitions, whose backlog (from the dead member's last commit) lies far behind
    everything the survivor has decided: each lane keeps its own watermark, so that backlog
    is applied in event order (one shared watermark found it late, and lost incidents).

    Both kinds of records: header-less (the partitions' newest event times hold a lane),
    and signed by a connector's publish loop (its progress holds it).

    The dead member must be killed with records of its half unread. Signed, the backlog
    comes in two stages, the second after the kill: the source's progress holds every lane
    through the pause, so that is the same stream, and the precondition holds however fast
    the dead member was. Header-less, a pause would end the stream (with nothing busy the
    clock drives a lane), so both workers start at once and the dead member is killed as
    soon as it has its half: it has had a fraction of a second of a half that takes it
    seconds (started after its first commit, the survivor's start-up was as long as the
    half, and the precondition failed in some runs)."""
    kafka = dataclasses.replace(kafka, partitions=KILL_PARTITIONS)
    events = generated(30_000, 300)
    kafka.create_topics()
    expected = reference(events)
    second = threading.Event()
    pool = ThreadPoolExecutor(1)
    produced = pool.submit(
        lambda: (
            produce_signed(kafka, events, chunks=60, held=(30, second))  # half, then half
            if signed
            else produce_events(kafka, events)
        )
    )
    if not signed:
        produced.result(timeout=120)
    incidents = TopicReader(kafka, kafka.layout.incidents.name, fetch_max_wait_ms=10)
    count = GroupOffsets(kafka, f"{kafka.prefix}-app")
    log: list[str] = []
    slow = Worker(kafka, count.group, tmp_path / "slow.log", SLOWER)
    survivor: Worker | None = None
    try:
        if signed:
            wait_until(count, timeout=60, what="the slow worker's first commit")
        survivor = Worker(kafka, count.group, tmp_path / "survivor.log", DEFAULT_GROUP)
        halves = wait_until(
            lambda: _halves(count, survivor.log(), slow.log()), timeout=60, what="two halves"
        )
        assert halves is not None
        slow.kill()
        killed_at = count()
        second.set()
        total = produced.result(timeout=120)
        log.append(
            f"survivor owns {halves[0]}, slow owns {halves[1]}: killed the slow worker at "
            f"{killed_at} of {total} committed"
        )
        assert not count.done(halves[1]), f"the slow half is mid-way: {log}"
        # The dead member keeps its partitions for the session: the survivor reads its own
        # half to the end meanwhile, and its watermark with it (the case that lost pages).
        wait_until(lambda: count.done(halves[0]), timeout=60, what="the survivor's half done")
        log.append(f"survivor's half done, taken over: {len(_owned(survivor.log())) > 1}")
        await_settled(incidents, expected, 120)
        wait_until(lambda: count() == total, timeout=30, what="all committed")
        assert survivor.stop() == 0, survivor.log()
        assert _owned(survivor.log())[-1] == sorted(halves[0] + halves[1]), "it took over"
        incidents.poll()
        _as_replay(incidents, expected, log)
    finally:
        second.set()
        pool.shutdown()
        for worker in (slow, survivor):
            if worker is not None and worker.process.poll() is None:
                worker.kill()
        count.close()
        incidents.close()


def _owned(log: str) -> list[list[int]]:
    """The partitions of each assignment a worker's log reports, in order."""
    out = []
    for line in log.splitlines():
        if "partitions [" in line and ": restored " in line:
            listed = line.split("partitions [", 1)[1].split("]", 1)[0]
            out.append([int(p) for p in listed.split(",") if p.strip()])
    return out


def _halves(count: GroupOffsets, survivor: str, slow: str) -> tuple[list[int], list[int]] | None:
    """The two workers' partitions once both report an assignment of their own and they
    split the partitions between them (the range assignor: half each)."""
    mine, theirs = _owned(survivor), _owned(slow)
    if not mine or not theirs:
        return None
    if sorted(mine[-1] + theirs[-1]) != list(range(count.kafka.partitions)):
        return None
    return mine[-1], theirs[-1]


KILLED = (
    "after-commit",
    "restore",
    "publishing",
    "publishing-2",
    "after-commit-2",
    "before-first-commit",
    "last",
)


def _suppressed(log: Path) -> int:
    """Revisions a worker's log says it did not publish again (its last count)."""
    told = 0
    for line in log.read_text(errors="replace").splitlines():
        if "not published again: " in line:
            told = int(line.split("not published again: ", 1)[1].split()[0])
    return told
