"""``gputriage demo --bridge slack-stub``: the demo's incident lines become Slack calls."""

from __future__ import annotations

import io
import json
import re

from click.testing import CliRunner

from connectors.bridges.slack import Settings
from gputriage.cli.demo import demo_command
from gputriage.demo.slack_stub import CHANNEL, SlackStub
from schemas.codec import encode
from tests.core_helpers import run
from tests.factories import Cluster, term
from tests.receivers.slack import message_violations

MIN = 60.0


def test_each_revision_prints_the_calls_the_slack_bridge_would_make() -> None:
    c = Cluster()
    c.node("n2", 0)
    c.pod("n2", "<!here>", 1)
    c.pod("n2", "<!here>", 2 * MIN, restarts=1, last=term(2 * MIN - 1, "OOMKilled", 137))
    c.pod("n2", "<!here>", 4 * MIN, restarts=2, last=term(4 * MIN - 1, "OOMKilled", 137))
    c.tick(60 * MIN)
    revisions = [r for r in run(c.events) if r.type == "host_oom_kill"]
    out = io.BytesIO()
    stub = SlackStub(out)
    data = b"".join(encode(r) + b"\n" for r in revisions)
    stub.write(data[:7])  # the demo may split a line across writes
    stub.write(data[7:])
    stub.flush()

    text = out.getvalue().decode()
    titles = re.findall(r"^── (r\d \w+ · [\w.]+)", text, flags=re.M)
    assert titles == [
        "r1 open · chat.postMessage",
        "r2 updated · chat.update",
        "r2 updated · chat.postMessage",
        "r3 resolved · chat.update",
        "r3 resolved · chat.postMessage",
    ]
    payloads = [json.loads(chunk) for chunk in re.split(r"^── .*\n", text, flags=re.M)[1:]]
    assert [p.get("ts") for p in payloads[1::2]] == [payloads[2]["thread_ts"]] * 2
    assert all(p["channel"] == CHANNEL for p in payloads)
    assert all(message_violations(p, webhook=False) == [] for p in payloads)
    assert "<!here>" not in text


def test_the_demo_offers_the_slack_stub() -> None:
    result = CliRunner().invoke(demo_command, ["--help"])
    assert result.exit_code == 0
    assert "--bridge [slack-stub]" in result.output


def test_the_stub_honours_the_endpoints_options() -> None:
    """The stub prints what the endpoint's own plan says: no thread replies when they
    are switched off."""
    c = Cluster()
    c.node("n2", 0)
    c.pod("n2", "srv", 1)
    c.pod("n2", "srv", 2 * MIN, restarts=1, last=term(2 * MIN - 1, "OOMKilled", 137))
    c.tick(60 * MIN)
    revisions = [r for r in run(c.events) if r.type == "host_oom_kill"]
    out = io.BytesIO()
    stub = SlackStub(out, Settings(thread_replies=False))
    stub.write(b"".join(encode(r) + b"\n" for r in revisions))
    titles = re.findall(r"^── r\d \w+ · ([\w.]+)", out.getvalue().decode(), flags=re.M)
    assert titles == ["chat.postMessage"] + ["chat.update"] * (len(revisions) - 1)
