"""Serving a Prometheus registry on ``/metrics``: one function every process uses.

Each process (the processor, each connector) keeps its metrics on its own
``CollectorRegistry`` (so tests can run several in one process without the
default registry's duplicate-name errors) and serves it here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # prometheus-client is imported when serving: the CLI imports this module
    from prometheus_client import CollectorRegistry


class MetricsUnavailable(RuntimeError):
    """The ``/metrics`` listener could not be bound (the port taken, an address not this
    host's); one line for the user, reported by the CLI (:func:`gputriage.cli.run`)."""


def serve_metrics(registry: CollectorRegistry, port: int, addr: str = "0.0.0.0") -> int:
    """Expose ``registry`` on ``http://addr:port/metrics`` (0 picks a free port); the port.

    The server runs in a daemon thread: it needs no supervision and dies with
    the process. Raises :class:`MetricsUnavailable` (not the ``OSError`` deep in
    ``socketserver``, which callers took for a file error, or did not catch).
    """
    from prometheus_client import start_http_server  # noqa: PLC0415 - see the imports

    try:
        server, _thread = start_http_server(port, addr=addr, registry=registry)
    except OSError as exc:
        raise MetricsUnavailable(
            f"cannot serve metrics on {addr}:{port}: {exc.strerror or exc} "
            "(is another process using it? --metrics-port 0 picks a free port)"
        ) from None
    return int(server.server_address[1])
