"""The bridges, end to end: each shipped bridge kind, run as a user runs it
(``python -m gputriage bridge <kind>`` with a TOML configuration and its secret in the
environment), on the real broker, against its vendor's *validating* receiver: PagerDuty's
Events API v2 (:mod:`tests.receivers.pagerduty`), Slack's Web API
(:mod:`tests.receivers.slack`), a CloudEvents 1.0 webhook (:mod:`tests.receivers.cloudevents`)
and a real Alertmanager (:mod:`tests.alertmanager_helpers`), read back through its
``/api/v2/alerts``.

The incidents are the example scenario's, every revision the core publishes for it, in
order (``examples/scenario.jsonl`` moved to end three days ago, through the
:class:`~streams.core.Correlator` as :func:`tests.processor_helpers.reference` runs it,
windows closed): opens, updates and resolves of eleven incidents, published at once, so the
runner's coalescing decides what each vendor sees. Whatever it decides, each vendor must
end up reflecting every incident's final revision, with nothing doubled, nothing out of
order and nothing off the vendor's format.

Each vendor's test also runs *stepwise* (:data:`MODES`): one revision at a time, the next
published only once the bridge's ledger says it handled the one before, so nothing
coalesces and every ``updated`` revision reaches the endpoint, whose rule for each is
then checked against the vendor: PagerDuty re-triggers every update a responder would
see on the incident's one alert, Slack updates the parent to every revision and threads
what changed, the webhook sends one CloudEvent per revision, and Alertmanager (read back
after each revision) keeps the alert's labels while its annotations follow.

Completion is not guessed from the receiver (PagerDuty and Alertmanager legitimately see
nothing for an update that changed nothing they show): the bridge is done when its
ledger, read back as a restart reads it, holds every incident's final revision as
delivered (accepted or skipped). Trap: not "committed offsets == end offsets": the test
broker's ListOffsets answers less than the real end after a batched produce (Tansu,
memory storage), so such a wait never ends.

Secrets: each route's secret is in an environment variable of the bridge only; with
debug logging on it must not appear in stdout or stderr, nor anywhere a receiver sees it
but where the vendor's protocol puts it (PagerDuty's body carries its routing key;
Slack's token and the webhook's token only go in ``Authorization``; the HMAC key never
leaves the process).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import re
import signal
import time
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from connectors.kafka.admin import ensure_topics
from schemas.bridges import KEY_SEPARATOR, BridgeDelivery
from schemas.codec import decode_event, encode, loads, typed_decoder
from schemas.events import Tick
from schemas.incidents import Incident
from streams.bridges.ledger import Ledger, ledger_topic
from streams.core import Correlator
from tests import alertmanager_helpers
from tests.alertmanager_helpers import RunningAlertmanager
from tests.bridge_helpers import publish, start_bridge
from tests.core_helpers import config, feed
from tests.kafka_helpers import KafkaTestEnv, eventually
from tests.paths import EXAMPLES
from tests.processor_helpers import ending_days_ago
from tests.receivers import pagerduty, slack
from tests.receivers.cloudevents import CloudEventsReceiver
from tests.tools import skip_missing_tool

pytestmark = pytest.mark.timeout(150)

SCENARIO = EXAMPLES / "scenario.jsonl"
ROUTE = "r"
SETTLE_SECONDS = 60.0
"""How long the bridge may take to deliver the whole scenario (seconds, normally)."""
STEP_SECONDS = 15.0
"""How long the bridge may take to deliver one revision published on its own."""

PD_KEY = "e2eRoutingKey0a1b2c3d4e5f6a7b8c9"
SLACK_TOKEN = "xoxb-e2e-5ecret-7oken-0a1b2c3d"
HOOK_TOKEN = "hook-bearer-5ecret-9f8e7d6c"
HOOK_HMAC = "hook-hmac-5ecret-1a2b3c4d"
AM_TOKEN = "am-bearer-5ecret-5e6f7a8b"
CHANNEL = "C0ALERTS1"

CLOUDEVENT_TYPES = {
    "open": "io.gputriage.incident.opened",
    "updated": "io.gputriage.incident.updated",
    "resolved": "io.gputriage.incident.resolved",
}
"""The types docs/bridges.md promises, written here again (not imported from the module)."""
AM_SEVERITY = {"page": "critical", "ticket": "warning", "info": "info"}


# -- the incidents ---------------------------------------------------------------------------
@functools.cache
def lifecycle() -> tuple[Incident, ...]:
    """Every revision the core publishes for the scenario, in publishing order: what a
    live worker puts on the incident topic, windows closed by the wall clock."""
    events = [decode_event(line) for line in SCENARIO.read_bytes().splitlines() if line.strip()]
    correlator = Correlator(config())
    out: list[Incident] = []
    for event in ending_days_ago(events):
        if not isinstance(event, Tick):  # ticks have no topic: the live worker's clock
            out.extend(feed(correlator, event))
    out.extend(correlator.flush())
    out.extend(correlator.advance(time.time() + 365 * 86400))
    return tuple(out)


def finals() -> dict[str, Incident]:
    last: dict[str, Incident] = {}
    for inc in lifecycle():
        last[inc.id] = inc
    return last


def test_the_scenario_is_worth_bridging() -> None:
    """The other tests prove something only if the scenario has a real lifecycle."""
    revisions = lifecycle()
    last = finals()
    statuses = Counter(inc.status for inc in last.values())
    assert len(last) >= 8
    assert statuses["resolved"] >= 3, statuses
    assert len(last) - statuses["resolved"] >= 2, statuses
    assert max(Counter(inc.id for inc in revisions).values()) >= 4, "an incident with updates"
    for inc_id in last:  # every incident's revisions are numbered 1, 2, ... in order
        numbers = [inc.revision for inc in revisions if inc.id == inc_id]
        assert numbers == list(range(1, len(numbers) + 1)), (inc_id, numbers)
        assert next(inc.status for inc in revisions if inc.id == inc_id) == "open"


def is_open(inc: Incident) -> bool:
    return inc.status != "resolved"


# -- the bridge, as a user runs it -----------------------------------------------------------
def toml(value: Any) -> str:
    """A TOML value for plain data (strings, numbers, booleans, lists, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # an ASCII JSON string is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    assert isinstance(value, dict), value
    return "{ " + ", ".join(f"{k} = {toml(v)}" for k, v in value.items()) + " }"


def configuration(
    group: str, kind: str, options: Mapping[str, Any], target: Mapping[str, str]
) -> str:
    """``[bridge]`` with fast settings (as :func:`tests.bridge_helpers.bridge_env` uses),
    ``[bridge.<kind>]`` with ``options`` and one route ``r`` to ``target``."""
    common = {
        "group_id": group,
        "min_update_seconds": 0,
        "retry_initial_seconds": 0.05,
        "retry_max_seconds": 0.2,
        "commit_seconds": 0.2,
        "session_timeout_seconds": 2,
        "stop_timeout_seconds": 5,
    }
    lines = ["[bridge]", *(f"{k} = {toml(v)}" for k, v in common.items()), "", f"[bridge.{kind}]"]
    lines += [f"{k} = {toml(v)}" for k, v in options.items()]
    lines += [
        "",
        f"[[bridge.{kind}.routes]]",
        f"name = {toml(ROUTE)}",
        f"target = {toml(dict(target))}",
    ]
    return "\n".join(lines) + "\n"


@dataclass
class Running:
    """A ``gputriage bridge`` subprocess and what it wrote."""

    process: asyncio.subprocess.Process
    out: Path
    group: str

    def stderr(self) -> str:
        return self.out.with_suffix(".stderr").read_text(errors="replace")

    def stdout(self) -> str:
        return self.out.with_suffix(".stdout").read_text(errors="replace")


@contextlib.asynccontextmanager
async def bridge(
    kafka: KafkaTestEnv,
    tmp_path: Path,
    kind: str,
    options: Mapping[str, Any],
    target: Mapping[str, str],
    secrets: Mapping[str, str],
) -> AsyncIterator[Running]:
    """``python -m gputriage bridge <kind>``: its own consumer group, its configuration in
    a file, ``secrets`` only in its environment, debug logs; SIGTERM at the end (exit 0
    is asserted: a clean drain and commit)."""
    group = f"{kafka.prefix}-bridge-{kind}"
    # The ledger too: the test reads it from the start, before the bridge would create it.
    await ensure_topics(kafka.kwargs, kafka.layout, extra=(ledger_topic(kafka.layout, group),))
    path = tmp_path / f"{kind}.toml"
    path.write_text(configuration(group, kind, options, target), encoding="utf-8")
    assert not set(secrets.values()) & set(path.read_text().split()), "a secret in the file"
    out = tmp_path / f"bridge-{kind}"
    env = {
        **kafka.env,
        "GPUTRIAGE_CONFIG": str(path),
        "GPUTRIAGE_LOG__LEVEL": "debug",
        **secrets,
    }
    process = await start_bridge(env, out, kind=kind)
    running = Running(process, out, group)
    try:
        yield running
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()
    assert process.returncode == 0, f"exit {process.returncode}:\n{running.stderr()[-3000:]}"


async def until(probe: Callable[[], Awaitable[bool]], *, timeout: float, what: str) -> None:
    """:func:`tests.kafka_helpers.eventually` for a condition that must await (Kafka)."""
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        await asyncio.sleep(0.1)  # the poll interval of a deadline wait


def ledger_of(kafka: KafkaTestEnv, running: Running) -> Ledger:
    return Ledger(kafka.kwargs, ledger_topic(kafka.layout, running.group).name)


def unfinished(ledger: Ledger) -> list[str]:
    """Incidents whose final revision the ledger does not hold as delivered. Revisions of
    one incident are on one partition in order, so once the final one is done, every
    earlier one was done too (delivered, skipped or superseded)."""
    missing = []
    for inc_id, inc in finals().items():
        entry = ledger.get(ROUTE, inc_id)
        if entry is None or (entry.revision, entry.state) != (inc.revision, "delivered"):
            missing.append(inc_id)
    return missing


async def settle(kafka: KafkaTestEnv, running: Running, reflects: Callable[[], bool]) -> None:
    """Wait until the bridge has finished every incident (its ledger, read as a restart
    reads it) and the vendor shows the end state."""
    ledger = ledger_of(kafka, running)

    async def finished() -> bool:
        if running.process.returncode is not None:
            raise AssertionError(f"the bridge exited:\n{running.stderr()[-3000:]}")
        await ledger.restore(30)
        return not unfinished(ledger)

    try:
        await until(finished, timeout=SETTLE_SECONDS, what="the bridge to deliver every incident")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}: {unfinished(ledger)} unfinished; the bridge's log ends:\n"
            f"{running.stderr()[-4000:]}"
        ) from None
    await eventually(reflects, timeout=10, what="the vendor to show every final revision")


def metrics_text(running: Running) -> str:
    """The bridge's ``/metrics`` (at the port its log names)."""
    with urllib.request.urlopen(
        f"http://127.0.0.1:{metrics_port(running)}/metrics", timeout=10
    ) as answer:
        return str(answer.read().decode())


def scrape(running: Running) -> dict[str, float]:
    """The bridge's ``/metrics``, summed by sample name."""
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text(running)):
        for sample in family.samples:
            sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    return sums


def delivery_outcomes(running: Running) -> dict[str, float]:
    """``gputriage_bridge_deliveries_total`` by its ``outcome`` label."""
    outcomes: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text(running)):
        for sample in family.samples:
            if sample.name == "gputriage_bridge_deliveries_total":
                name = sample.labels["outcome"]
                outcomes[name] = outcomes.get(name, 0.0) + sample.value
    return outcomes


def metrics_port(running: Running) -> str:
    """The port the bridge's log line names (logged at the start, before Kafka)."""
    found = re.search(r"metrics on http://[0-9.]+:(\d+)/metrics", running.stderr())
    assert found, running.stderr()[-2000:]
    return found[1]


async def clean_run(running: Running) -> None:
    """What every kind must show while it still runs: no retries (every vendor answered
    success the first time), no endpoint bugs, no dead letters."""
    metrics = await asyncio.to_thread(scrape, running)
    for name in (
        "gputriage_bridge_retries_total",
        "gputriage_bridge_endpoint_errors_total",
        "gputriage_bridge_dead_letters_total",
        "gputriage_bridge_resends_total",
    ):
        assert metrics.get(name, 0.0) == 0.0, f"{name} = {metrics.get(name)}"
    assert metrics.get("gputriage_bridge_deliveries_total", 0.0) >= len(finals())


async def ledger_is_final(kafka: KafkaTestEnv, running: Running) -> None:
    """After the stop: the ledger (as a restart reads it) holds every incident's final
    revision, delivered, and nothing else."""
    ledger = ledger_of(kafka, running)
    await ledger.restore(30)
    assert unfinished(ledger) == []
    for inc_id, inc in finals().items():
        entry = ledger.get(ROUTE, inc_id)
        assert entry is not None, inc_id
        assert (entry.revision, entry.status, entry.state) == (
            inc.revision,
            inc.status,
            "delivered",
        )
        assert entry.outcome in {"accepted", "skipped"}, (inc_id, entry.outcome)
    assert {e.incident_id for e in ledger.entries()} == set(finals())


def no_secret_in_output(running: Running, *secrets: str) -> None:
    output = running.stdout() + running.stderr()
    assert "DEBUG" in output or '"level":"debug"' in output, "debug logging was on"
    for secret in secrets:
        assert secret not in output, "a secret in the bridge's stdout or stderr"


def ordered(revisions: list[int]) -> bool:
    """Strictly increasing: in order, none twice."""
    return all(a < b for a, b in itertools.pairwise(revisions))


# -- one revision at a time ------------------------------------------------------------------
MODES = pytest.mark.parametrize("stepwise", [False, True], ids=["burst", "stepwise"])
"""Each vendor's test runs twice. *burst*: the whole scenario published at once, so the
runner's coalescing decides what the vendor sees (mostly each open, then the final
revision). *stepwise*: one revision at a time in publishing order, the next only once
the bridge's ledger says it handled the one before, so nothing coalesces and every
``updated`` revision reaches the endpoint (which may still skip it, by its own rule)."""

_delivery = typed_decoder(BridgeDelivery)


class LedgerTail:
    """Every *delivered* entry a bridge writes to its ledger, as it writes them: a consumer
    without a group on the ledger topic from its start. Unlike :meth:`Ledger.restore`
    (the newest entry per key, read up to an end) it keeps the history, one entry per
    revision handled with its outcome, and needs no end offset (see the module's trap).
    Intents (``state = "sending"``) and storm groups (keyed ``route NUL "group" NUL
    key``) are left out."""

    def __init__(self, kafka: KafkaTestEnv, running: Running) -> None:
        self.topic = ledger_topic(kafka.layout, running.group).name
        self.running = running
        self.consumer = AIOKafkaConsumer(
            **kafka.kwargs,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=20,
        )
        self.entries: list[BridgeDelivery] = []
        self.changed = asyncio.Condition()
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> LedgerTail:
        await self.consumer.start()
        await self.consumer.topics()
        partitions = sorted(self.consumer.partitions_for_topic(self.topic) or ())
        assert partitions, f"no ledger topic {self.topic}"
        tps = [TopicPartition(self.topic, p) for p in partitions]
        self.consumer.assign(tps)
        await self.consumer.seek_to_beginning(*tps)
        self.task = asyncio.create_task(self._read(), name="ledger-tail")
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task
        await self.consumer.stop()

    async def _read(self) -> None:
        try:
            while True:
                batches = await self.consumer.getmany(timeout_ms=200)
                fresh = [
                    _delivery(record.value)
                    for records in batches.values()
                    for record in records
                    if record.key is not None
                    and record.value is not None
                    and record.key.count(KEY_SEPARATOR.encode()) == 1
                ]
                fresh = [e for e in fresh if e.state == "delivered"]
                if fresh:
                    async with self.changed:
                        self.entries.extend(fresh)
                        self.changed.notify_all()
        finally:  # a reader that died wakes the waiter, which then says so
            async with self.changed:
                self.changed.notify_all()

    def handled(self, inc: Incident) -> BridgeDelivery | None:
        """The first delivered entry of ``inc``'s incident at or past its revision."""
        return next(
            (
                e
                for e in self.entries
                if e.route == ROUTE and e.incident_id == inc.id and e.revision >= inc.revision
            ),
            None,
        )

    async def wait(self, inc: Incident) -> BridgeDelivery:
        """The entry that says the bridge handled ``inc`` (a deadline, not a sleep)."""
        assert self.task is not None
        task = self.task
        try:
            async with asyncio.timeout(STEP_SECONDS), self.changed:
                await self.changed.wait_for(lambda: task.done() or self.handled(inc) is not None)
        except TimeoutError:
            raise AssertionError(
                f"timed out after {STEP_SECONDS:g} s waiting for the bridge to handle "
                f"{inc.id} revision {inc.revision}; its log ends:\n"
                f"{self.running.stderr()[-4000:]}"
            ) from None
        if task.done():
            raise AssertionError(f"the ledger reader stopped: {task.exception()!r}")
        entry = self.handled(inc)
        assert entry is not None
        return entry


@dataclass
class Steps:
    """What the ledger said of each revision published on its own."""

    outcomes: dict[tuple[str, int], str] = field(default_factory=dict)
    """``(incident id, revision)`` -> ``accepted`` or ``skipped``."""

    def taken(self, inc: Incident) -> bool:
        """Whether the endpoint sent this revision (not skipped it)."""
        return self.outcomes[(inc.id, inc.revision)] == "accepted"


Check = Callable[[Incident, str], Awaitable[None]]
"""Called after each stepwise revision was handled, with its outcome."""


async def step_through(kafka: KafkaTestEnv, running: Running, check: Check | None) -> Steps:
    """Publish the scenario's revisions one at a time, in order, each once the bridge
    handled the one before it (its ledger's delivered entry for exactly that revision:
    a later one would mean it was coalesced, which one at a time must never be)."""
    steps = Steps()
    producer = AIOKafkaProducer(**kafka.kwargs, acks="all")
    await producer.start()
    try:
        async with LedgerTail(kafka, running) as tail:
            for inc in lifecycle():
                await producer.send_and_wait(
                    kafka.layout.incidents.name, encode(inc), key=inc.id.encode()
                )
                entry = await tail.wait(inc)
                assert (entry.revision, entry.status) == (inc.revision, inc.status), (
                    f"{inc.id} revision {inc.revision} published alone was not delivered "
                    f"as itself: the ledger says {entry.revision} ({entry.status})"
                )
                assert entry.outcome in {"accepted", "skipped"}, (inc.id, entry.outcome)
                steps.outcomes[(inc.id, inc.revision)] = entry.outcome
                if check is not None:
                    await check(inc, entry.outcome)
    finally:
        await producer.stop()
    return steps


async def deliver_scenario(
    kafka: KafkaTestEnv,
    running: Running,
    stepwise: bool,
    reflects: Callable[[], bool],
    check: Check | None = None,
) -> Steps:
    """Publish the scenario (at once, or one revision at a time: :data:`MODES`), wait
    until the bridge finished it, and check the run was clean. Stepwise, every revision
    was handled as itself (none coalesced), as the bridge's own metrics say too. The
    steps are empty for a burst."""
    if stepwise:
        steps = await step_through(kafka, running, check)
    else:
        await publish(kafka, list(lifecycle()))
        steps = Steps()
    await settle(kafka, running, reflects)
    await clean_run(running)
    if stepwise:
        outcomes = await asyncio.to_thread(delivery_outcomes, running)
        assert outcomes.get("coalesced", 0.0) == 0.0, outcomes
        assert outcomes.get("duplicate_skipped", 0.0) == 0.0, outcomes
        assert outcomes.get("accepted", 0.0) == sum(
            o == "accepted" for o in steps.outcomes.values()
        ), outcomes
        assert outcomes.get("accepted", 0.0) + outcomes.get("skipped", 0.0) == len(lifecycle())
    return steps


def revisions_of(inc_id: str) -> list[Incident]:
    return [inc for inc in lifecycle() if inc.id == inc_id]


def updates() -> list[Incident]:
    return [inc for inc in lifecycle() if inc.status == "updated"]


# -- PagerDuty -------------------------------------------------------------------------------
def pd_reflects(receiver: pagerduty.PagerDutyReceiver) -> bool:
    for inc_id, inc in finals().items():
        alert = receiver.alerts.get((PD_KEY, inc_id))
        if alert is None or (alert.status == "resolved") == is_open(inc):
            return False
    return True


def pd_summary(inc: Incident) -> str:
    return f"[{inc.cluster}] {inc.summary}"[:1024]


def pd_severity(inc: Incident) -> str:
    return {"page": "critical", "ticket": "warning"}.get(inc.severity, "info")


def responder_sees(inc: Incident) -> tuple[Any, ...]:
    """Part of what a responder reads in PagerDuty (docs/bridges.md, PagerDuty: an update
    that changes any of it is a re-trigger). The endpoint may re-trigger on more (the
    head of the evidence), never on less."""
    pods = sorted((p.namespace, p.name) for p in inc.pods)
    return (inc.summary, inc.severity, inc.action, inc.node, pods)


@MODES
@pytest.mark.asyncio
async def test_pagerduty_pages_each_incident_once_and_resolves_what_resolved(
    kafka: KafkaTestEnv, tmp_path: Path, stepwise: bool
) -> None:
    async with pagerduty.serving() as receiver:
        options = {"url": receiver.url, "calls_per_minute": 1000}
        target = {"routing_key_env": "E2E_PD_KEY"}
        async with bridge(
            kafka, tmp_path, "pagerduty", options, target, {"E2E_PD_KEY": PD_KEY}
        ) as running:
            steps = await deliver_scenario(kafka, running, stepwise, lambda: pd_reflects(receiver))
    await ledger_is_final(kafka, running)
    no_secret_in_output(running, PD_KEY)

    assert receiver.violations == []
    assert receiver.dropped == [], "a follow-up PagerDuty would drop"
    assert receiver.answered == [202] * len(receiver.events)
    assert sorted(receiver.alerts) == sorted((PD_KEY, i) for i in finals()), "one alert each"
    for inc_id, inc in finals().items():
        events = [e for e in receiver.events if e["dedup_key"] == inc_id]
        actions = [e["event_action"] for e in events]
        assert actions[0] == "trigger", (inc_id, actions)
        if "resolve" in actions:  # nothing after a resolve: the alert stays resolved
            assert actions.index("resolve") == len(actions) - 1, (inc_id, actions)
        assert (actions[-1] == "resolve") == (inc.status == "resolved"), (inc_id, actions)
        triggers = [
            e["payload"]["custom_details"] for e in events if e["event_action"] == "trigger"
        ]
        assert ordered([d["revision"] for d in triggers]), (inc_id, triggers)
        assert triggers[0]["revision"] == 1, "the open is never coalesced away"
        alert = receiver.alerts[(PD_KEY, inc_id)]
        assert alert.status == ("resolved" if inc.status == "resolved" else "triggered")
        assert alert.triggers == len(triggers)
        if is_open(inc):  # what a responder reads now is the final revision's
            payload = alert.last["payload"]
            assert payload["summary"] == pd_summary(inc)
            assert payload["severity"] == pd_severity(inc)
            assert payload["class"] == inc.type
            pods = [(p["namespace"], p["name"]) for p in payload["custom_details"]["pods"]]
            assert pods == [(p.namespace, p.name) for p in inc.pods]
    for event in receiver.events:  # the routing key is in the body where it belongs only
        assert event["routing_key"] == PD_KEY
        rest = {k: v for k, v in event.items() if k != "routing_key"}
        assert PD_KEY not in json.dumps(rest)
    if stepwise:
        pd_followed_every_revision(receiver, steps)


def pd_followed_every_revision(receiver: pagerduty.PagerDutyReceiver, steps: Steps) -> None:
    """One revision at a time: PagerDuty got exactly the revisions the ledger says were
    sent, in publishing order; every update that changed what a responder sees was
    re-triggered on the incident's one alert, with that revision's summary and severity."""
    sent = [inc for inc in lifecycle() if steps.taken(inc)]
    assert [(e["dedup_key"], e["event_action"]) for e in receiver.events] == [
        (inc.id, "resolve" if inc.status == "resolved" else "trigger") for inc in sent
    ], "PagerDuty's events are not the revisions sent, in order"
    retriggered = 0
    for inc_id in finals():
        revisions = revisions_of(inc_id)
        shown = revisions[0]  # what the alert says now: the open, then each re-trigger
        for inc in revisions[1:]:
            if inc.status == "resolved":
                assert steps.taken(inc), f"{inc_id}: the resolve was skipped"
            elif steps.taken(inc):
                shown = inc
                retriggered += 1
            else:
                assert responder_sees(inc) == responder_sees(shown), (
                    f"{inc_id} revision {inc.revision} changed what a responder sees and "
                    "was skipped"
                )
        mine = [e for e in receiver.events if e["dedup_key"] == inc_id]
        triggers = [e["payload"] for e in mine if e["event_action"] == "trigger"]
        numbers = [t["custom_details"]["revision"] for t in triggers]
        assert numbers == [
            i.revision for i in revisions if i.status != "resolved" and steps.taken(i)
        ]
        for payload in triggers:  # each trigger shows its own revision
            inc = revisions[payload["custom_details"]["revision"] - 1]
            assert payload["custom_details"]["status"] == inc.status
            assert payload["summary"] == pd_summary(inc)
            assert payload["severity"] == pd_severity(inc)
            pods = [(p["namespace"], p["name"]) for p in payload["custom_details"]["pods"]]
            assert pods == [(p.namespace, p.name) for p in inc.pods]
        assert receiver.alerts[(PD_KEY, inc_id)].triggers == len(triggers), "one alert"
    assert retriggered >= 5, f"only {retriggered} updates re-triggered: the scenario changed?"


# -- Slack -----------------------------------------------------------------------------------
def revision_of(payload: Mapping[str, Any]) -> tuple[str, int]:
    meta = payload["metadata"]["event_payload"]
    return str(meta["incident_id"]), int(meta["revision"])


def slack_parents(receiver: slack.SlackReceiver) -> dict[str, slack.Message]:
    return {revision_of(m.versions[0])[0]: m for m in receiver.parents()}


def slack_reflects(receiver: slack.SlackReceiver) -> bool:
    parents = slack_parents(receiver)
    return all(
        inc_id in parents and revision_of(parents[inc_id].current) == (inc_id, inc.revision)
        for inc_id, inc in finals().items()
    )


def reader_sees(inc: Incident) -> tuple[Any, ...]:
    """What a Slack reader sees of a revision but its revision number and ``last_seen``
    (the endpoint's rule: a revision that changed only those updates the parent and posts
    no reply, the thread says what changed)."""
    pods = [(p.namespace, p.name) for p in inc.pods]
    evidence = [e.event_id for e in inc.evidence]
    attributes = sorted(inc.attributes.items())
    return (inc.status, inc.severity, inc.summary, inc.action, attributes, pods, evidence)


@MODES
@pytest.mark.asyncio
async def test_slack_keeps_one_threaded_message_per_incident(
    kafka: KafkaTestEnv, tmp_path: Path, stepwise: bool
) -> None:
    async with slack.serving(slack.SlackReceiver(token=SLACK_TOKEN)) as receiver:
        options = {"api_url": receiver.url, "channel_interval_seconds": 0}
        target = {"channel": CHANNEL, "token_env": "E2E_SLACK_TOKEN"}
        secrets = {"E2E_SLACK_TOKEN": SLACK_TOKEN}
        async with bridge(kafka, tmp_path, "slack", options, target, secrets) as running:
            steps = await deliver_scenario(
                kafka, running, stepwise, lambda: slack_reflects(receiver)
            )
    await ledger_is_final(kafka, running)
    no_secret_in_output(running, SLACK_TOKEN)

    assert receiver.violations == []
    assert all(call.status == 200 for call in receiver.calls)
    parents = slack_parents(receiver)
    assert len(receiver.parents()) == len(finals())
    assert set(parents) == set(finals())
    posts = [c for c in receiver.calls if c.method == "chat.postMessage"]
    assert sum("thread_ts" not in c.payload for c in posts) == len(finals()), "one parent each"
    for inc_id, inc in finals().items():
        message = parents[inc_id]
        assert message.channel == CHANNEL
        versions = [revision_of(v)[1] for v in message.versions]
        assert versions[0] == 1, "the parent is the open"
        assert versions[-1] == inc.revision, "updated to the final revision"
        assert ordered(versions), f"{inc_id}: a revision updated twice or out of order"
        replies = [revision_of(r) for r in message.replies]
        assert all(i == inc_id for i, _ in replies), "a reply in another incident's thread"
        numbers = [n for _, n in replies]
        assert ordered(numbers), f"{inc_id}: a reply posted twice or out of order"
        assert set(numbers) <= set(versions[1:]), "each reply comes with its parent's update"
        if inc.status == "resolved":
            assert numbers, f"{inc_id}: the resolve is said in the thread"
            assert numbers[-1] == inc.revision
            assert "RESOLVED" in json.dumps(message.current).upper()
    assert any(m.replies for m in receiver.parents())
    for call in receiver.calls:
        assert SLACK_TOKEN not in json.dumps(call.payload), "the token in a message"
    if stepwise:
        slack_followed_every_revision(receiver, steps)


def slack_followed_every_revision(receiver: slack.SlackReceiver, steps: Steps) -> None:
    """One revision at a time: each parent went through exactly the revisions delivered
    (bot mode skips none), in order, each version showing its revision's status; the
    thread got a reply for each update that changed what a reader sees, and the resolve."""
    assert all(steps.taken(inc) for inc in lifecycle()), "Slack's bot mode skipped one"
    parents = slack_parents(receiver)
    replied = 0
    for inc_id in finals():
        revisions = revisions_of(inc_id)
        message = parents[inc_id]
        versions = [revision_of(v) for v in message.versions]
        assert versions == [(inc_id, i.revision) for i in revisions], f"{inc_id}: {versions}"
        for version, inc in zip(message.versions, revisions, strict=True):
            assert version["metadata"]["event_payload"]["status"] == inc.status
            assert f"({inc.status}, r{inc.revision})" in version["text"], version["text"]
        expected = [
            inc.revision
            for before, inc in itertools.pairwise(revisions)
            if reader_sees(inc) != reader_sees(before)
        ]
        replies = [revision_of(r) for r in message.replies]
        assert replies == [(inc_id, n) for n in expected], f"{inc_id}: {replies} != {expected}"
        replied += sum(revisions[n - 1].status == "updated" for n in expected)
    assert replied > len(updates()) // 2, "the scenario's updates changed next to nothing?"


# -- CloudEvents webhook ---------------------------------------------------------------------
def webhook_reflects(receiver: CloudEventsReceiver) -> bool:
    ids = {e.get("id") for e in receiver.events}
    return all(f"{i}/{inc.revision}" in ids for i, inc in finals().items())


@MODES
@pytest.mark.asyncio
async def test_webhook_sends_each_revision_as_one_valid_cloudevent(
    kafka: KafkaTestEnv, tmp_path: Path, stepwise: bool
) -> None:
    async with CloudEventsReceiver(hmac_key=HOOK_HMAC.encode(), bearer=HOOK_TOKEN) as receiver:
        target = {
            "url": f"{receiver.url}/events",
            "token_env": "E2E_HOOK_TOKEN",
            "hmac_key_env": "E2E_HOOK_HMAC",
        }
        secrets = {"E2E_HOOK_TOKEN": HOOK_TOKEN, "E2E_HOOK_HMAC": HOOK_HMAC}
        async with bridge(kafka, tmp_path, "webhook", {}, target, secrets) as running:
            steps = await deliver_scenario(
                kafka, running, stepwise, lambda: webhook_reflects(receiver)
            )
    await ledger_is_final(kafka, running)
    no_secret_in_output(running, HOOK_TOKEN, HOOK_HMAC)

    assert receiver.violations == []
    assert len(receiver.requests) == len(receiver.events), "every request taken the first time"
    ids = [e["id"] for e in receiver.events]
    assert len(ids) == len(set(ids)), "an event sent twice"
    published = {(inc.id, inc.revision): inc for inc in lifecycle()}
    for event in receiver.events:
        inc = published[(event["subject"], event["data"]["revision"])]
        assert event["id"] == f"{inc.id}/{inc.revision}"
        assert event["type"] == CLOUDEVENT_TYPES[inc.status]
        assert event["source"] == f"/gputriage/clusters/{inc.cluster}"
        assert event["data"] == loads(encode(inc)), "data is the revision as published"
    for inc_id, inc in finals().items():
        mine = [e for e in receiver.events if e["subject"] == inc_id]
        assert ordered([e["data"]["revision"] for e in mine]), f"{inc_id} out of order"
        assert mine[0]["type"] == CLOUDEVENT_TYPES["open"]
        assert mine[-1]["type"] == CLOUDEVENT_TYPES[inc.status]
        assert mine[-1]["id"] == f"{inc_id}/{inc.revision}"
    for seen in receiver.requests:
        assert seen.path == "/events"
        assert seen.query == ""
        for secret in (HOOK_TOKEN, HOOK_HMAC):
            assert secret.encode() not in seen.body, "a secret in a body"
        assert HOOK_HMAC not in json.dumps(dict(seen.headers)), "the HMAC key itself was sent"
    if stepwise:  # every revision, one event each, in publishing order
        assert all(steps.taken(inc) for inc in lifecycle()), "the webhook skipped one"
        assert ids == [f"{inc.id}/{inc.revision}" for inc in lifecycle()]
        assert [e["type"] for e in receiver.events] == [
            CLOUDEVENT_TYPES[inc.status] for inc in lifecycle()
        ]
        assert sum(e["type"] == CLOUDEVENT_TYPES["updated"] for e in receiver.events) == len(
            updates()
        )


# -- Alertmanager ----------------------------------------------------------------------------
@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[RunningAlertmanager]:
    exe = alertmanager_helpers.binary()
    if exe is None:
        skip_missing_tool(alertmanager_helpers.MISSING)
    running = alertmanager_helpers.start(tmp_path, exe)
    try:
        yield running
    finally:
        running.stop()


def active_ids(am: RunningAlertmanager) -> list[str]:
    return sorted(a["labels"].get("incident_id", "") for a in am.alerts())


def open_ids() -> list[str]:
    return sorted(i for i, inc in finals().items() if is_open(inc))


def am_labels(inc: Incident) -> dict[str, str]:
    """The labels an incident's alert has from its first revision on (empty ones left out,
    as Alertmanager drops them)."""
    namespaces = {p.namespace for p in inc.pods}
    labels = {
        "alertname": "".join(w.capitalize() for w in inc.type.split("_")),
        "severity": AM_SEVERITY[inc.severity],
        "cluster": inc.cluster,
        "node": inc.node,
        "namespace": namespaces.pop() if len(namespaces) == 1 else "",
        "incident_id": inc.id,
    }
    return {k: v for k, v in labels.items() if v}


def am_follower(am: RunningAlertmanager) -> tuple[Check, list[str]]:
    """A stepwise check reading ``/api/v2/alerts`` back after each revision: an open or
    updated incident is one active alert whose labels are its first revision's and whose
    annotations are this revision's; a resolved one is gone. Returns the check and the
    list of revisions it read back as updated (``id/revision``)."""
    labels: dict[str, dict[str, str]] = {}
    followed: list[str] = []

    async def check(inc: Incident, outcome: str) -> None:
        alerts = await asyncio.to_thread(am.alerts)
        mine = [a for a in alerts if a["labels"].get("incident_id") == inc.id]
        if inc.status == "resolved":
            assert mine == [], f"{inc.id}: resolved, still active"
            return
        assert len(mine) == 1, f"{inc.id} revision {inc.revision}: {len(mine)} alerts"
        alert = mine[0]
        first = labels.setdefault(inc.id, am_labels(inc))
        assert alert["labels"] == first, f"{inc.id} revision {inc.revision}: labels moved"
        notes = alert["annotations"]
        assert notes["summary"] == inc.summary[:1024], f"{inc.id} revision {inc.revision}"
        for pod in inc.pods:
            assert f"pod {pod.namespace}/{pod.name} " in notes["description"], (inc.id, pod)
        assert alert["status"]["state"] == "active"
        if inc.status == "updated":
            followed.append(f"{inc.id}/{inc.revision}")

    return check, followed


@MODES
@pytest.mark.asyncio
async def test_alertmanager_shows_exactly_the_incidents_still_open(
    kafka: KafkaTestEnv, tmp_path: Path, alertmanager: RunningAlertmanager, stepwise: bool
) -> None:
    """Read back while the bridge runs: firing alerts live until their ``endsAt``, which
    the bridge's ticks push ahead (every 5 s here, 20 s ahead). Stepwise, every 60 s, so
    none within the test: a tick re-sends the alert as last accepted, and one racing a
    delivery can reach Alertmanager after it and put the previous annotations back until
    the next tick (Alertmanager keeps the annotations it received last), which the
    read-back after each revision would report as an update not followed."""
    interval = 60 if stepwise else 5
    options = {"urls": [alertmanager.url], "resend_interval_seconds": interval}
    target = {"bearer_token_env": "E2E_AM_TOKEN"}
    secrets = {"E2E_AM_TOKEN": AM_TOKEN}
    check, followed = am_follower(alertmanager)
    async with bridge(kafka, tmp_path, "alertmanager", options, target, secrets) as running:
        await deliver_scenario(
            kafka,
            running,
            stepwise,
            lambda: active_ids(alertmanager) == open_ids(),
            check,
        )
        alerts = await asyncio.to_thread(alertmanager.alerts)
    await ledger_is_final(kafka, running)
    no_secret_in_output(running, AM_TOKEN)

    last = finals()
    assert 2 <= len(open_ids()) < len(last), "a test of both kinds"
    assert sorted(a["labels"]["incident_id"] for a in alerts) == open_ids(), "none resolved"
    for alert in alerts:
        labels = alert["labels"]
        inc = last[labels["incident_id"]]
        assert is_open(inc)
        assert labels["alertname"] == "".join(w.capitalize() for w in inc.type.split("_"))
        assert labels["severity"] == AM_SEVERITY[inc.severity]
        assert labels["cluster"] == inc.cluster
        assert labels.get("node", "") == inc.node
        namespaces = {p.namespace for p in inc.pods}
        assert labels.get("namespace", "") == (namespaces.pop() if len(namespaces) == 1 else "")
        assert alert["status"]["state"] == "active"
        assert alert["annotations"]["summary"] == inc.summary[:1024]
        assert alert["annotations"]["incident_type"] == inc.type
        assert alert["generatorURL"], "generatorURL is set"
        starts = alert["startsAt"].replace("Z", "+00:00")
        assert starts.startswith(inc.first_seen.isoformat()[:19]), (starts, inc.first_seen)
        assert AM_TOKEN not in json.dumps(alert), "the token in an alert"
    assert AM_TOKEN not in alertmanager.log()
    if stepwise:
        assert followed == [f"{inc.id}/{inc.revision}" for inc in updates()], "each update"
