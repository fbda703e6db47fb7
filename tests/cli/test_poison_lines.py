"""Records written to do harm are bad lines like any other in ``replay`` and ``ingest``.

Before the codec turned them into errors, a record nested 10,000 deep gave a
``RecursionError`` traceback, and a lone surrogate in ``ingest k8s`` input a
``UnicodeEncodeError`` one. Now each is one ``FILE:LINE: reason`` line on stderr, the
good lines are processed, and the exit status is 1, as for every bad line.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import orjson

from schemas.codec import decode_event
from schemas.events import PodEvent
from tests import paths
from tests.cli_helpers import gputriage, host_oom_events, incidents_of, jsonl

NESTED = "[" * 10_000 + "]" * 10_000
XID = {
    "schema": "xid.v1",
    "id": "k/1",
    "cluster": "c1",
    "time": "2024-05-01T12:00:00Z",
    "node": "gpu-node-1",
    "code": 79,
}


def _xid(**fields: Any) -> str:
    return json.dumps({**XID, **fields})  # json: orjson cannot write 10**23


POISON = [
    (_xid()[:-1] + f', "not_in_the_schema": {NESTED}}}', "nested too deep to decode"),
    (
        _xid(schema="pod.v1", namespace="ml", name="p")[:-1]
        + f', "containers": [{{"name": "c", "later": {NESTED}}}]}}',
        "nested too deep to decode",
    ),
    (_xid(time="0001-01-01T00:00:00+14:00"), "is before the Unix epoch"),
    (_xid(time="0001-01-01Z"), "Invalid RFC3339 encoded datetime (at $.time)"),
    (_xid(code=-79), "Expected `int` >= 0 (at $.code)"),
    (_xid(code=10**23), "Expected `int` <= 65535 (at $.code)"),
    (_xid(id="i" * 1_000_000), "Expected `str` of length <= 8192 (at $.id)"),
    (
        json.dumps(
            {
                **XID,
                "schema": "gpu_binding.v1",
                "gpu_uuid": "GPU-1",
                "pods": [{"namespace": "ml", "name": f"p-{i}"} for i in range(100_000)],
            }
        ),
        "Expected `array` of length <= 1024 (at $.pods)",
    ),
    (_xid(node="gpu-node-\\ud800").replace("\\\\ud800", "\\ud800"), "surrogate"),
]


def _stderr(result: subprocess.CompletedProcess[bytes]) -> list[str]:
    stderr = result.stderr.decode(errors="replace")
    assert "Traceback" not in stderr, stderr[-3000:]
    return stderr.splitlines()


def test_replay_reports_each_poison_record_on_one_line_and_replays_the_rest(
    tmp_path: Path,
) -> None:
    good = jsonl(host_oom_events())
    path = tmp_path / "events.jsonl"
    path.write_bytes("".join(line + "\n" for line, _ in POISON).encode() + good)
    result = gputriage("replay", "-o", "json", str(path))
    lines = _stderr(result)
    assert result.returncode == 1, lines
    for number, (line, reason) in enumerate(POISON, start=1):
        assert lines[number - 1].startswith(f"{path}:{number}: "), lines[number - 1][:300]
        assert reason in lines[number - 1], (line[:80], lines[number - 1][:300])
    assert lines[len(POISON) :] == [
        f"gputriage: {len(POISON)} bad lines of {len(POISON) + 2} skipped"
    ]
    (incident,) = {i.id: i for i in incidents_of(result.stdout)}.values()
    assert incident.type == "host_oom_kill"


def test_ingest_k8s_reports_each_poison_object_on_one_line(tmp_path: Path) -> None:
    good: dict[str, Any] = orjson.loads((paths.DATA / "k8s" / "pod_training.json").read_bytes())
    named = orjson.dumps({**good, "metadata": {**good["metadata"], "name": "@@"}})
    aged = {
        **good,
        "metadata": {**good["metadata"], "creationTimestamp": "0001-01-01T00:00:00+14:00"},
    }
    lines = [
        orjson.dumps(good),  # first: a first line that is no JSON makes it pretty-printed input
        named.replace(b'"@@"', b'"trainer-\\ud800"'),  # a lone surrogate, escaped
        b'{"kind": "Pod", "x": ' + NESTED.encode() + b"}",
        orjson.dumps(aged),
        orjson.dumps(good),
    ]
    path = tmp_path / "pods.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    result = gputriage("ingest", "k8s", "--file", str(path), "--cluster", "c1")
    stderr = _stderr(result)
    assert result.returncode == 1, stderr
    assert stderr[0].startswith(f"{path}:2: invalid JSON: no low surrogate in string")
    assert stderr[1].startswith(f"{path}:3: invalid JSON: depth limit exceeded")
    assert stderr[2] == (
        f"{path}:4: time 0001-01-01T00:00:00+14:00 is before the Unix epoch "
        "(1970-01-01T00:00:00Z) (at $.metadata.creationTimestamp)"
    )
    assert stderr[3:] == ["gputriage: 3 bad objects of 5 skipped"]
    events = [decode_event(line) for line in result.stdout.splitlines()]
    assert [e.name for e in events if isinstance(e, PodEvent)] == ["trainer-0", "trainer-0"]


def test_ingest_kmsg_reports_xid_codes_no_driver_prints_as_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "dmesg.txt"
    path.write_text(
        "[ 1.0] NVRM: Xid (PCI:0000:9b:00): -79, pid=1, GPU has fallen off the bus.\n"
        "[ 2.0] NVRM: Xid (PCI:0000:9b:00): 100000000000000000000000, pid=1, x\n"
        "[ 3.0] NVRM: Xid (PCI:0000:9b:00): 79, pid=1, GPU has fallen off the bus.\n",
        encoding="utf-8",
    )
    result = gputriage(
        "ingest", "kmsg", "--node", "n1", "--file", str(path), "--boot-time", "1764576000"
    )
    stderr = _stderr(result)
    assert result.returncode == 1, stderr
    assert stderr[0].startswith(f"{path}:1: unrecognised XID line")
    assert stderr[1].startswith(f"{path}:2: XID code out of range")
    assert stderr[2:] == ["gputriage: 2 bad XID lines of 3 skipped"]
    (event,) = [decode_event(line) for line in result.stdout.splitlines()]
    assert event.code == 79  # type: ignore[union-attr]
