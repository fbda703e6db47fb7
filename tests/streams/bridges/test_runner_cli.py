"""``gputriage bridge <kind>`` as a user runs it: secrets, errors, SIGTERM, /metrics.

The tests' endpoint (``jsonpost``, :mod:`tests.bridge_helpers`) is served through
``[bridge] modules``, in a real subprocess, against the real broker.
"""

from __future__ import annotations

import asyncio
import re
import signal
import urllib.request
from pathlib import Path

import click
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from gputriage.cli import cli
from tests.bridge_helpers import bridge_env, incident, publish, receiving, start_bridge
from tests.cli_helpers import gputriage
from tests.kafka_helpers import KafkaTestEnv, consume_all, eventually

pytestmark = pytest.mark.timeout(120)

SECRET = "s3cr3t-T0KEN-4f9d2c7e"


@pytest.mark.asyncio
async def test_a_secret_from_the_environment_appears_nowhere(
    kafka: KafkaTestEnv, tmp_path: Path
) -> None:
    """The route's token reaches the receiver (it checks it) and nothing else: not stdout,
    stderr (debug logs, JSON), the dead-letter topic (the vendor echoed it in its 400),
    the ledger or /metrics. Then SIGTERM: exit 0, every offset committed."""
    await kafka.acreate_topics()
    out = tmp_path / "bridge"
    async with receiving() as receiver:
        receiver.token = SECRET
        receiver.answer(
            (503, {}, f"upstream said {SECRET}"),
            (400, {}, f'{{"errors": ["invalid routing key {SECRET}"]}}'),
        )
        env = {
            **bridge_env(kafka, receiver, token_env="ROUTE_TOKEN"),
            "ROUTE_TOKEN": SECRET,
            "GPUTRIAGE_LOG__LEVEL": "debug",
            "GPUTRIAGE_LOG__FORMAT": "json",
        }
        bridge = await start_bridge(env, out)
        try:
            await publish(kafka, [incident("inc-1", 1)])
            await eventually(lambda: len(receiver.got) >= 2, timeout=60, what="503 then 400")
            await publish(kafka, [incident("inc-2", 1)])
            await eventually(lambda: len(receiver.got) >= 3, timeout=30, what="the next one")
            letters = await consume_all(
                kafka.bootstrap, [kafka.layout.dead_letters.name], 1, timeout=20
            )
            metrics = await asyncio.to_thread(_scrape, out.with_suffix(".stderr"))
        finally:
            bridge.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(bridge.wait(), 30)
    assert code == 0
    assert receiver.violations == []
    assert [r.token for r in receiver.got] == [SECRET] * 3, "the endpoint did get the secret"
    stdout = out.with_suffix(".stdout").read_bytes()
    stderr = out.with_suffix(".stderr").read_bytes()
    ledger = await consume_all(
        kafka.bootstrap, [f"{kafka.prefix}.bridge.gputriage-bridge-jsonpost.ledger"], 4
    )
    for name, data in [
        ("stdout", stdout),
        ("stderr", stderr),
        ("metrics", metrics.encode()),
        *((f"dead letter {n}", r.value) for n, r in enumerate(letters)),
        *((f"ledger {n}", r.value) for n, r in enumerate(ledger)),
    ]:
        assert SECRET.encode() not in data, f"the secret leaked into {name}"
    assert b"invalid routing key ***" in letters[0].value, "the echo was scrubbed"
    assert b'"level":"debug"' in stderr, "debug logging was on (the test looked)"
    assert "gputriage_bridge_deliveries_total" in metrics
    committed = await _committed(kafka, "gputriage-bridge-jsonpost")
    assert committed == await _ends(kafka), "SIGTERM drained and committed everything"


def _scrape(stderr: Path) -> str:
    """The bridge's /metrics, at the port its log line names."""
    text = stderr.read_text()
    match = re.search(r"metrics on http://[0-9.]+:(\d+)/metrics", text)
    assert match, text[-2000:]
    with urllib.request.urlopen(f"http://127.0.0.1:{match[1]}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


async def _committed(kafka: KafkaTestEnv, group: str) -> dict[int, int | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=group)
    await consumer.start()
    try:
        topic = kafka.layout.incidents.name
        return {
            p: await consumer.committed(TopicPartition(topic, p))
            for p in range(kafka.layout.incidents.partitions)
        }
    finally:
        await consumer.stop()


async def _ends(kafka: KafkaTestEnv) -> dict[int, int | None]:
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka.bootstrap, group_id=None)
    await consumer.start()
    try:
        topic = kafka.layout.incidents.name
        tps = [TopicPartition(topic, p) for p in range(kafka.layout.incidents.partitions)]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: (ends[tp] or None) for tp in tps}
    finally:
        await consumer.stop()


def test_a_missing_secret_stops_the_bridge_with_one_line(kafka: KafkaTestEnv) -> None:
    env = bridge_env(kafka, _FakeReceiver(), token_env="ROUTE_TOKEN")  # ROUTE_TOKEN unset
    result = gputriage("bridge", "jsonpost", "--metrics-port", "0", env=env)
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert stderr.count("\n") == 1, stderr
    assert stderr.startswith("gputriage: error: invalid configuration: bridge.jsonpost.routes[0]")
    assert "environment variable ROUTE_TOKEN is not set" in stderr
    assert "Traceback" not in stderr


def test_a_secret_in_the_config_itself_is_refused(kafka: KafkaTestEnv) -> None:
    env = bridge_env(kafka, _FakeReceiver())
    env["GPUTRIAGE_BRIDGE__JSONPOST__ROUTES"] = (
        f'[{{name = "r", target = {{url = "http://x", token = "{SECRET}"}}}}]'
    )
    result = gputriage("bridge", "jsonpost", "--metrics-port", "0", env=env)
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert "give token_env or token_file, never the secret itself" in stderr
    assert SECRET not in stderr


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        (
            "GPUTRIAGE_BRIDGE__JSONPOST__ROUTES",
            '[{name = "r", severity = ["page"]}]',
            "bridge.jsonpost.routes[0]: unknown key `severity`",
        ),
        (
            "GPUTRIAGE_BRIDGE__JSONPOST__ROUTES",
            "[]",
            "bridge.jsonpost.routes: no routes configured",
        ),
        ("GPUTRIAGE_BRIDGE__JSONPOST__USER_AGNT", '"x"', "bridge.jsonpost.user_agnt: unknown key"),
        ("GPUTRIAGE_BRIDGE__STORM_PAGES", "0", "bridge.storm_pages: must be at least 1"),
    ],
)
def test_a_bad_configuration_is_one_line_and_exit_2(
    kafka: KafkaTestEnv, variable: str, value: str, message: str
) -> None:
    env = {**bridge_env(kafka, _FakeReceiver()), variable: value, "TEST_BRIDGE_TOKEN": "t"}
    result = gputriage("bridge", "jsonpost", env=env)
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert stderr.count("\n") == 1, stderr
    assert message in stderr, stderr


def test_an_unknown_kind_names_the_kinds() -> None:
    result = gputriage("bridge", "pagerdty")
    stderr = result.stderr.decode()
    assert result.returncode == 2
    assert "unknown bridge kind 'pagerdty' (expected one of: pagerduty, slack" in stderr


def test_no_option_takes_a_secret() -> None:
    command = cli.commands["bridge"]
    assert isinstance(command, click.Command)
    names = {
        name for p in command.params for name in (p.opts if isinstance(p, click.Option) else ())
    }
    assert {"--brokers", "--metrics-port", "--group-id", "--storm-pages"} <= names
    assert not any(re.search("token|key|secret|password|url", n) for n in names)


def test_help_names_the_kinds() -> None:
    result = gputriage("bridge", "--help")
    assert result.returncode == 0
    assert b"pagerduty, slack, alertmanager, webhook" in result.stdout


class _FakeReceiver:
    url = "http://127.0.0.1:9/deliver"
