"""Serving a Prometheus registry on ``/metrics``, and the health endpoints: one function
every process uses.

Each process (the processor, each connector, each bridge) keeps its metrics on its own
``CollectorRegistry`` (so tests can run several in one process without the default
registry's duplicate-name errors) and serves it here, with its
:class:`~connectors.health.Health` on ``/healthz`` (liveness) and ``/readyz``
(readiness) when it has one: one port per process for Prometheus and the kubelet's
probes alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

if TYPE_CHECKING:  # prometheus-client is imported when serving: the CLI imports this module
    from prometheus_client import CollectorRegistry

    from connectors.health import Health

Start = Callable[[str, list[tuple[str, str]]], Any]
WsgiApp = Callable[[dict[str, Any], Start], Iterable[bytes]]


MetricsPort = Annotated[
    int,
    msgspec.Meta(
        ge=0, le=65535, description="Port of the Prometheus /metrics endpoint (0 picks a free one)."
    ),
]
"""The port a process serves ``/metrics`` on: every settings struct with one uses this type."""
MetricsAddr = Annotated[str, msgspec.Meta(description="Address the /metrics endpoint listens on.")]


class MetricsUnavailable(RuntimeError):
    """The ``/metrics`` listener could not be bound (the port taken, an address not this
    host's); one line for the user, reported by the CLI (:func:`gputriage.cli.run`)."""


def serve_metrics(
    registry: CollectorRegistry, port: int, addr: str = "0.0.0.0", health: Health | None = None
) -> int:
    """Expose ``registry`` on ``http://addr:port/metrics`` (0 picks a free port), and
    ``health`` on ``/healthz`` and ``/readyz`` (404 without one); the port.

    The server runs in a daemon thread: it needs no supervision and dies with the
    process (a probe answered by a dead process's thread cannot happen: the thread goes
    with it). Raises :class:`MetricsUnavailable` (not the ``OSError`` deep in
    ``socketserver``, which callers took for a file error, or did not catch).
    """
    from wsgiref.simple_server import WSGIRequestHandler, make_server  # noqa: PLC0415

    from prometheus_client import make_wsgi_app  # noqa: PLC0415 - see the imports
    from prometheus_client.exposition import ThreadingWSGIServer  # noqa: PLC0415

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            """No access log on stderr: a probe every 10 s is not news."""

    class Server(ThreadingWSGIServer):
        address_family = _family(addr, port)

    app = _app(make_wsgi_app(registry), health)
    try:
        server = make_server(addr, port, app, server_class=Server, handler_class=Quiet)
    except OSError as exc:
        raise MetricsUnavailable(
            f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc} "
            "(is another process using it? --metrics-port 0 picks a free port)"
        ) from None
    if health is not None:
        # Every process serves from inside its loop: probe that one (outside a loop, as
        # a test may serve, the conditions alone answer).
        with contextlib.suppress(RuntimeError):
            health.watch_loop(asyncio.get_running_loop())
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    return int(server.server_address[1])


def _family(addr: str, port: int) -> socket.AddressFamily:
    """IPv6 for an IPv6 address (``::``), else IPv4; an unresolvable one fails at bind."""
    try:
        infos = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return socket.AF_INET
    return infos[0][0] if infos else socket.AF_INET


def _app(metrics: WsgiApp, health: Health | None) -> WsgiApp:
    """``/healthz`` and ``/readyz`` from ``health``; everything else is prometheus-client's."""

    def app(environ: dict[str, Any], start: Start) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path in ("/healthz", "/livez", "/readyz"):
            if health is None:
                start("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
                return [b"no health checks in this process\n"]
            report = health.ready() if path == "/readyz" else health.live()
            body = report.text(path.lstrip("/")).encode("utf-8")
            status = "200 OK" if report.ok else "503 Service Unavailable"
            start(
                status,
                [
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("Content-Length", str(len(body))),
                    ("Cache-Control", "no-store"),
                ],
            )
            return [body] if environ.get("REQUEST_METHOD") != "HEAD" else []
        return metrics(environ, start)

    return app
