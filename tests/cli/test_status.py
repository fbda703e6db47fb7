"""``gputriage status`` against the real broker (and a local HTTP stand-in for Prometheus's
query API): the latest revision per id, the FLEET lines, the incidents by pool, filters,
the three outputs, and the one-line errors."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import msgspec
import pytest

from gputriage.cli import run
from schemas.codec import encode
from schemas.incidents import GpuRef, Incident, PodInfo
from tests.kafka_helpers import KafkaTestEnv, produce

NOW = datetime.now(UTC)
FIRST = NOW - timedelta(hours=2, minutes=5)
BASE = Incident(
    id="",
    type="device_unhealthy_eviction",
    status="open",
    revision=1,
    severity="page",
    cluster="c1",
    node="n1",
    first_seen=FIRST,
    last_seen=FIRST,
    summary="XID 79 on n1 then 1 GPU pod evicted",
)
BUS_A, BUS_B = "0000:9b:00.0", "0000:9c:00.0"


def incident(incident_id: str, **changes: Any) -> Incident:
    return msgspec.structs.replace(BASE, id=incident_id, **changes)


REVISIONS = [
    incident("inc-a", gpus=(GpuRef(pci_bus_id=BUS_A),), attributes={"pool": "p1"}),
    incident(
        "inc-a",
        revision=2,
        status="updated",
        gpus=(GpuRef(pci_bus_id=BUS_A), GpuRef(pci_bus_id=BUS_B)),
        pods=(PodInfo(namespace="ml", name="trainer-0"),),
        summary="XID 79 on n1 then 2 GPU pods evicted",
        attributes={"pool": "p1"},
    ),
    incident(
        "inc-b",
        type="gpu_degraded",
        severity="ticket",
        node="n2",
        gpus=(GpuRef(pci_bus_id=BUS_A),),
        summary="1 of 8 GPUs not allocatable on n2",
        attributes={"pool": "p1"},
    ),
    incident(
        "inc-c",
        type="xid_repeat",
        status="resolved",
        revision=3,
        node="n3",
        gpus=(GpuRef(pci_bus_id=BUS_A),),
        resolved_at=NOW,
        attributes={"pool": "p2"},
    ),
    incident("inc-d", type="gpu_node_not_ready", node="n4", summary="n4 went Ready=Unknown"),
    incident(
        "inc-e",
        type="scale_up_failure",
        node="",
        severity="ticket",
        summary="gpu-group failed to scale up: quota",
        attributes={"node_group": "gpu-group"},
    ),
    incident("inc-f", cluster="c2", node="m1", gpus=(GpuRef(uuid="GPU-1"),)),
    incident(
        "inc-g",
        type="xid_repeat",
        node="n5",
        summary="XID 79 repeated on n5 (bus id not resolved)",
        attributes={"pool": "p1"},
    ),
    incident("inc-deleted", node="n6", gpus=(GpuRef(pci_bus_id=BUS_A),), attributes={"pool": "p3"}),
]
DELETED = "inc-deleted"
"""Its one revision is followed by a tombstone: deleted, never shown."""


@pytest.fixture
def topic(kafka: KafkaTestEnv, monkeypatch: pytest.MonkeyPatch) -> str:
    kafka.create_topics()
    name = kafka.layout.incidents.name
    records: list[tuple[bytes | None, bytes | None]] = [
        (i.id.encode(), encode(i)) for i in REVISIONS
    ]
    records.append((b"inc-gone", None))  # a tombstone of an id never seen
    records.append((DELETED.encode(), None))  # deletes inc-deleted
    asyncio.run(produce(kafka.bootstrap, name, records))
    for key, value in kafka.env.items():
        monkeypatch.setenv(key, value)
    return name


def status(capfd: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(["status", *args])
    out, err = capfd.readouterr()
    return code, out, err


def test_the_table_shows_the_fleet_and_the_open_incidents_by_pool(
    topic: str, capfd: pytest.CaptureFixture[str]
) -> None:
    code, out, err = status(capfd)
    assert (code, err) == (0, "")
    fleet, table = out.split("\n\n")
    assert fleet.splitlines() == [
        "FLEET c1/(none): 0 GPUs and every GPU of 1 node out of service; "
        "total unknown, healthy unknown",
        "FLEET c1/p1: 2 GPUs and every GPU of 1 node out of service; "
        "total unknown, healthy unknown",
        "FLEET c2/(none): 1 GPUs out of service; total unknown, healthy unknown",
    ]
    rows = [line.split()[:5] for line in table.splitlines()]
    assert rows == [
        ["POOL", "TYPE", "SEVERITY", "NODE", "AGE"],
        ["(none)", "gpu_node_not_ready", "page", "n4", "2h"],
        ["gpu-group", "scale_up_failure", "ticket", "<none>", "2h"],
        ["p1", "device_unhealthy_eviction", "page", "n1", "2h"],
        ["p1", "gpu_degraded", "ticket", "n2", "2h"],
        ["p1", "xid_repeat", "page", "n5", "2h"],
        ["(none)", "device_unhealthy_eviction", "page", "m1", "2h"],
    ]
    assert "XID 79 on n1 then 2 GPU pods evicted" in table, "the latest revision"
    assert "n3" not in out, "inc-c is resolved: not open"


def test_a_tombstone_deletes_the_revisions_of_its_id(
    topic: str, capfd: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = status(capfd, "-o", "json")
    assert code == 0
    shown = json.loads(out)
    assert DELETED not in {i["id"] for i in shown["incidents"]}
    assert "p3" not in {row["pool"] for row in shown["fleet"]}, "its GPU is not out either"
    assert {i["id"] for i in shown["incidents"]} == {
        "inc-a", "inc-b", "inc-d", "inc-e", "inc-f", "inc-g",
    }  # fmt: skip


def test_wide_adds_id_gpus_and_pods_and_filters_narrow_both_parts(
    topic: str, capfd: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = status(capfd, "-o", "wide", "--pool", "p1", "--cluster", "c1")
    assert code == 0
    fleet, table = out.split("\n\n")
    assert fleet == (
        "FLEET c1/p1: 2 GPUs and every GPU of 1 node out of service; total unknown, healthy unknown"
    )
    header, *rows = table.splitlines()
    assert header.split()[5:8] == ["ID", "GPUS", "PODS"]
    assert [r.split()[5:8] for r in rows] == [
        ["inc-a", f"{BUS_A},{BUS_B}", "ml/trainer-0"],
        ["inc-b", BUS_A, "<none>"],
        ["inc-g", "<none>", "<none>"],
    ]
    code, out, _ = status(capfd, "--type", "gpu_degraded")
    assert [line.split()[1] for line in out.split("\n\n")[1].splitlines()[1:]] == ["gpu_degraded"]
    code, out, _ = status(capfd, "--cluster", "nowhere")
    assert out == "FLEET: no GPU out of service\n\nNo open incidents.\n"


def test_json_has_stable_keys_and_the_totals_from_prometheus(
    topic: str, capfd: pytest.CaptureFixture[str], prometheus: Prometheus
) -> None:
    code, out, err = status(capfd, "-o", "json", "--prometheus", prometheus.url)
    assert (code, err) == (0, "")
    shown = json.loads(out)
    assert set(shown) == {"fleet", "incidents"}
    assert shown["fleet"] == [
        {
            "cluster": "c1",
            "pool": "(none)",
            "out_of_service": 0,
            "nodes_out_of_service": 1,
            "gpus": 8,
            "healthy_ratio": 0.0,
        },
        {
            "cluster": "c1",
            "pool": "p1",
            "out_of_service": 2,
            "nodes_out_of_service": 1,
            "gpus": 16,
            "healthy_ratio": 0.875,
        },
        {
            "cluster": "c2",
            "pool": "(none)",
            "out_of_service": 1,
            "nodes_out_of_service": 0,
            "gpus": None,
            "healthy_ratio": None,
        },
    ]
    first = shown["incidents"][2]
    assert set(first) == {
        "id", "cluster", "pool", "type", "severity", "node", "first_seen", "revision",
        "summary", "gpus", "pods",
    }  # fmt: skip
    assert (first["id"], first["revision"], first["gpus"]) == ("inc-a", 2, [BUS_A, BUS_B])
    assert sorted(prometheus.queries) == [
        "sum by (cluster, pool) (gputriage_fleet_gpus)",
        'sum by (cluster, pool) (gputriage_fleet_gpus{state="healthy"})',
    ]
    code, out, _ = status(capfd, "--prometheus", prometheus.url, "--pool", "p1")
    assert out.splitlines()[0] == (
        "FLEET c1/p1: 2 GPUs and every GPU of 1 node out of service; total 16, healthy 87.5%"
    )


def test_an_unreachable_prometheus_is_a_warning_and_the_rest_is_printed(
    topic: str, capfd: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    code, out, err = status(capfd, "--prometheus", url)
    assert code == 0
    [line] = err.splitlines()
    assert line.startswith(f"gputriage: warning: cannot query Prometheus at {url}: "), line
    assert line.endswith("; GPU totals unknown"), line
    assert out.splitlines()[1].startswith("FLEET c1/p1: 2 GPUs and every GPU of 1 node out")


def test_one_line_errors_for_a_bad_output_and_an_unreachable_broker(
    capfd: pytest.CaptureFixture[str],
) -> None:
    code, out, err = status(capfd, "-o", "yaml")
    assert (code, out) == (2, "")
    [line] = err.splitlines()
    assert line.startswith("gputriage: error: "), line
    assert "'yaml' is not one of" in line, line
    broker = f"127.0.0.1:{_free_port()}"
    code, out, err = status(capfd, "--brokers", broker, "--connect-timeout-seconds", "1")
    assert (code, out) == (1, "")
    [line] = err.splitlines()
    assert line.startswith(f"gputriage: error: cannot reach Kafka at {broker} within 1 s"), line


def _free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class Prometheus:
    """A local stand-in for Prometheus's ``/api/v1/query``: it answers the two fleet
    queries with fixed vectors and records what it was asked."""

    ANSWERS: ClassVar[dict[str, list[dict[str, Any]]]] = {
        "sum by (cluster, pool) (gputriage_fleet_gpus)": [
            {"metric": {"cluster": "c1", "pool": "p1"}, "value": [0, "16"]},
            {"metric": {"cluster": "c1"}, "value": [0, "8"]},
        ],
        'sum by (cluster, pool) (gputriage_fleet_gpus{state="healthy"})': [
            {"metric": {"cluster": "c1", "pool": "p1"}, "value": [0, "14"]},
            {"metric": {"cluster": "c1"}, "value": [0, "0"]},
        ],
    }

    def __init__(self) -> None:
        self.queries: list[str] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parsed = urllib.parse.urlparse(self.path)
                [query] = urllib.parse.parse_qs(parsed.query)["query"]
                owner.queries.append(query)
                found = owner.ANSWERS.get(query) if parsed.path == "/api/v1/query" else None
                body = json.dumps(
                    {"status": "success", "data": {"resultType": "vector", "result": found}}
                ).encode()
                self.send_response(200 if found is not None else 400)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def prometheus() -> Iterator[Prometheus]:
    stand_in = Prometheus()
    yield stand_in
    stand_in.close()
