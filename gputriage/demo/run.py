"""``gputriage demo``: the whole live pipeline on one machine, on a simulated cluster.

Starts the embedded broker (unless ``kafka.brokers`` is set), creates the topics, starts
one processor worker (a child that dies with this one), plays the packaged scenario at
``--speed`` (30x: 45 minutes in ~90 s, windows scaled alike, :mod:`gputriage.demo.player`)
and prints every incident revision read back from the incident topic.

It stops once the scenario has played and the incident topic has been quiet for
``--linger-seconds`` (or not, with ``--follow``). Trap: every task is supervised: if the
worker or the feeder dies the demo says so and exits 1; worker and broker always stop.
docs/development.md, design notes: ``gputriage demo``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import IO

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from connectors.files import FileReader, read_error
from connectors.kafka.admin import TopicError, ensure_topics
from connectors.kafka.config import KafkaUnreachable, client_kwargs, error_reason
from connectors.kafka.producer import EventProducer
from connectors.publish import Publisher, PublishOptions
from connectors.signals import stop_on_signals
from gputriage import render
from gputriage.demo.broker import BrokerError, EmbeddedBroker, die_with_parent
from gputriage.demo.player import ScenarioSource, scaled_core_settings
from gputriage.demo.settings import DemoSettings
from gputriage.errors import error
from gputriage.settings import Settings
from schemas.codec import AnyEvent, RecordError, decode_event, decode_incident, encode
from schemas.incidents import Incident
from schemas.topics import TopicLayout, topic_layout

WORKER_STOP_SECONDS = 20.0
FEED = PublishOptions(capacity=1000, chunk=50, heartbeat_seconds=0.5)
"""The scenario's publish loop: a heartbeat every half second of scenario silence, so the
worker's watermark follows the simulated clock closely (its windows are scaled down)."""


class DemoFailed(RuntimeError):
    """A supervised part of the demo died; the message says which and why."""


def incident_line(incident: Incident, previous: Incident | None = None) -> str:
    """One line per revision: status and revision, severity, type, node, GPUs, pods, and
    what this revision says: the first evidence for an opening, else what changed
    since ``previous`` (a severity change, the newest evidence, the resolution).

    Two revisions of one incident used to print the same line (same status, same first
    evidence): on-call could not tell an update from a repeat.
    """
    gpus = render.listing([render.gpu_label(g) for g in incident.gpus])
    pods = render.listing([render.pod_label(p) for p in incident.pods])
    return (
        f"{time.strftime('%H:%M:%S')}  {incident.status:<8} r{incident.revision:<3} "
        f"{incident.severity:<6} {incident.type:<26} {incident.node or '-':<12} "
        f"gpus={gpus} pods={pods}  | {render.one_line(_what_changed(incident, previous))}"
    )


def _what_changed(incident: Incident, previous: Incident | None) -> str:
    if previous is None or not incident.evidence:
        return incident.evidence[0].text if incident.evidence else incident.summary
    notes = []
    if previous.severity != incident.severity:
        notes.append(f"{previous.severity} -> {incident.severity}")
    if incident.status == "resolved":
        notes.append(incident.summary)
    else:
        seen = {e.event_id for e in previous.evidence}
        new = [e.text for e in incident.evidence if e.event_id not in seen]
        notes.append(f"+ {new[-1]}" if new else incident.summary)
    return "; ".join(notes)


def run_demo(settings: Settings, options: DemoSettings, out: IO[bytes], err: IO[str]) -> int:
    """Run the demo to its end (or Ctrl-C); the exit status (1: a supervised part died)."""
    return asyncio.run(_run_demo(settings, options, out, err))


async def _run_demo(settings: Settings, options: DemoSettings, out: IO[bytes], err: IO[str]) -> int:
    try:
        events = read_scenario(options.scenario_path)
    except RecordError as exc:
        error(f"demo: {exc}", err)
        return 1
    except (OSError, EOFError, zlib.error) as exc:  # a broken gzip, a read error
        error(f"demo: {options.scenario_path}: {read_error(exc)}", err)
        return 1
    kafka = settings.kafka_settings()
    broker: EmbeddedBroker | None = None
    if kafka.embedded:
        try:
            broker = await EmbeddedBroker().start_async()
        except BrokerError as exc:  # not installed (the demo extra), or it would not start
            error(f"demo: {exc}", err)
            return 1
        servers = broker.bootstrap
        print(f"gputriage demo: embedded broker on {servers} (pid {broker.pid})", file=err)
    else:
        servers = ",".join(kafka.brokers)
    worker: subprocess.Popen[bytes] | None = None
    # The worker's log lives in a private directory (mkdtemp: 0700, an unpredictable
    # name), removed on exit unless something failed: then its path is the one thing
    # worth printing. (A fixed /tmp/gputriage-demo-worker-<pid>.log, 0644, was left
    # behind by every run.)
    scratch = Path(tempfile.mkdtemp(prefix="gputriage-demo-"))
    status = 1
    try:
        kwargs = client_kwargs(kafka, servers)
        layout = topic_layout(settings.topics)
        try:
            await ensure_topics(kwargs, layout)  # KafkaUnreachable within the connect timeout
        except KafkaUnreachable as exc:
            error(f"demo: {exc}", err)
            return 1
        except (KafkaError, OSError, TopicError) as exc:
            error(f"demo: cannot reach Kafka at {servers}: {error_reason(exc)}", err)
            return 1
        worker = _start_worker(settings, servers, options, scratch / "worker.log")
        print(f"gputriage demo: processor worker pid {worker.pid}", file=err)
        status = await _supervise(kwargs, layout, events, worker, options, out, err)
    finally:
        if worker is not None:
            stopped = _stop_worker(worker, err)
            if stopped != 0:
                status = status or 1
        if broker is not None:
            await broker.stop_async()
        if status == 0 or worker is None:  # no worker, no log to keep
            shutil.rmtree(scratch, ignore_errors=True)
        else:
            print(f"gputriage demo: the worker's log is kept in {scratch / 'worker.log'}", file=err)
    return status


def _start_worker(
    settings: Settings, servers: str, options: DemoSettings, log: Path
) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    for name, value in scaled_core_settings(settings.core_config(), options.speed).items():
        env.setdefault(f"GPUTRIAGE_CORE__{name.upper()}", repr(value))
    # The demo's worker is alone in its group, and Tansu holds a join for half the
    # session timeout: 2 s starts it in ~1 s (the default 10 s would cost 5 s).
    env.setdefault("GPUTRIAGE_PROCESSOR__SESSION_TIMEOUT_SECONDS", "2")
    env.setdefault("GPUTRIAGE_PROCESSOR__REBALANCE_TIMEOUT_SECONDS", "2")
    env.setdefault("GPUTRIAGE_PROCESSOR__APP_ID", f'"gputriage-demo-{os.getpid()}"')
    # A demo's listeners are for this machine only.
    env.setdefault("GPUTRIAGE_PROCESSOR__METRICS_ADDR", '"127.0.0.1"')
    args = [sys.executable, "-m", "gputriage"]
    if settings.origin:
        args += ["--config", settings.origin]
    args += ["process", "--brokers", servers, "--metrics-port", str(options.metrics_port)]
    with log.open("wb") as handle:
        return subprocess.Popen(
            args,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent(),  # noqa: PLW1509 - fork-safe, see its docs
        )


def _stop_worker(worker: subprocess.Popen[bytes], err: IO[str]) -> int:
    """Stop the worker (SIGTERM; SIGKILL after ``WORKER_STOP_SECONDS``); its exit status.

    Trap: after a terminal Ctrl-C the worker (same process group) has its own SIGINT
    already; this SIGTERM is a second signal, which the worker must not take for the
    user's second Ctrl-C (``connectors.signals``: only a repeat of the same signal
    gives up). A non-zero status means it did not stop cleanly: said, and the log kept.
    """
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(WORKER_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            print("gputriage demo: the worker did not stop; killing it", file=err)
            worker.kill()
            worker.wait()
    if worker.returncode != 0:
        print(f"gputriage demo: the worker exited with status {worker.returncode}", file=err)
    return worker.returncode


async def _supervise(
    kwargs: dict[str, object],
    layout: TopicLayout,
    events: list[AnyEvent],
    worker: subprocess.Popen[bytes],
    options: DemoSettings,
    out: IO[bytes],
    err: IO[str],
) -> int:
    stop = asyncio.Event()
    restore_signals = stop_on_signals(stop)
    loop_time = asyncio.get_running_loop().time
    last_seen = [loop_time()]
    fed = asyncio.Event()
    feeder = asyncio.create_task(_feed(kwargs, layout, events, options, fed), name="feeder")
    printer = asyncio.create_task(
        _print_incidents(kwargs, layout, options, out, last_seen), name="printer"
    )
    try:
        while not stop.is_set():
            for task in (feeder, printer):
                if task.done() and (task is printer or task.exception() is not None):
                    raise DemoFailed(f"the {task.get_name()} stopped: {task.exception()!r}")
            if worker.poll() is not None:
                raise DemoFailed(f"the processor worker exited with status {worker.returncode}")
            quiet = loop_time() - last_seen[0]
            if fed.is_set() and not options.follow and quiet > options.linger_seconds:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.2)
    except DemoFailed as exc:
        error(f"demo: {exc}", err)
        return 1
    finally:
        for task in (feeder, printer):
            task.cancel()
        await asyncio.gather(feeder, printer, return_exceptions=True)
        restore_signals()
    return 0


def read_scenario(path: Path) -> list[AnyEvent]:
    """Every event of the scenario file, or :class:`RecordError` ``FILE:LINE: reason`` at
    the first bad line. Read before anything starts (a bad file costs no broker), through
    the bounded reader: ``--scenario /dev/zero`` ends in ~2 s, in bounded memory."""
    events = []
    with FileReader(str(path)) as scenario:
        for number, line in scenario.lines():
            try:
                if isinstance(line, RecordError):  # over-long
                    raise line
                events.append(decode_event(line))
            except RecordError as exc:
                where = f" (at {exc.field})" if exc.field else ""
                raise RecordError(f"{scenario.name}:{number}: {exc.reason}{where}") from None
    return events


async def _feed(
    kwargs: dict[str, object],
    layout: TopicLayout,
    events: list[AnyEvent],
    options: DemoSettings,
    fed: asyncio.Event,
) -> None:
    """Publish the scenario through the one publish loop (the player is a source: its
    records carry its progress, and it heartbeats); runs until cancelled."""
    source = ScenarioSource(events, options.speed)
    producer = EventProducer(kwargs, layout)
    await producer.start()
    try:
        publisher = Publisher(source, producer, options=FEED)
        publishing = asyncio.create_task(publisher.run(asyncio.Event()), name="publish")
        finished = asyncio.create_task(source.finished.wait())
        try:
            await asyncio.wait({publishing, finished}, return_when=asyncio.FIRST_COMPLETED)
            if publishing.done():
                publishing.result()  # it only ends by failing
            fed.set()
            await publishing  # idle on: the scenario's clock goes on (see the player)
        finally:
            for task in (publishing, finished):
                task.cancel()
            await asyncio.gather(publishing, finished, return_exceptions=True)
    finally:
        await producer.stop()


async def _print_incidents(
    kwargs: dict[str, object],
    layout: TopicLayout,
    options: DemoSettings,
    out: IO[bytes],
    last_seen: list[float],
) -> None:
    consumer = AIOKafkaConsumer(**kwargs)
    await consumer.start()
    shown: dict[str, Incident] = {}
    """The last revision printed of each incident, to say what the next one changed."""
    try:
        topic = layout.incidents.name
        await consumer.topics()
        parts = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        while True:
            batches = await consumer.getmany(timeout_ms=200)
            for record in (r for batch in batches.values() for r in batch):
                if record.value is None:
                    continue
                incident = decode_incident(record.value)
                last_seen[0] = asyncio.get_running_loop().time()
                if options.output == "json":
                    out.write(encode(incident) + b"\n")
                else:
                    line = incident_line(incident, shown.get(incident.id))
                    out.write((line + "\n").encode())
                shown[incident.id] = incident
            out.flush()
    finally:
        await consumer.stop()
