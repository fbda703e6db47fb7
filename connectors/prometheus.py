"""Serving a Prometheus registry on ``/metrics``: one function every process uses.

Each process (the processor, each connector) keeps its metrics on its own
``CollectorRegistry`` (so tests can run several in one process without the
default registry's duplicate-name errors) and serves it here.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server


def serve_metrics(registry: CollectorRegistry, port: int, addr: str = "0.0.0.0") -> int:
    """Expose ``registry`` on ``http://addr:port/metrics`` (0 picks a free port); the port.

    The server runs in a daemon thread: it needs no supervision and dies with
    the process.
    """
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return int(server.server_address[1])
