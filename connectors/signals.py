"""Stopping long-running commands on SIGINT/SIGTERM, in one place.

Every long-running command turns both signals into an :class:`asyncio.Event` its loop
checks, so it finishes the batch in flight, delivers and commits instead of dying
mid-write.

Traps: ``loop.add_signal_handler`` works only in a Unix main thread (elsewhere the default
handlers stay); a stop can hang, so ``give_up_after_seconds`` exits 1 after that long, and
a second signal *of the same kind* exits at once (nothing undelivered was committed); a
signal of the other kind is not "the user means it": Ctrl-C reaches the whole process
group and a parent then sends SIGTERM, which, counted as a second Ctrl-C, made the demo's
worker skip its clean stop. In full: docs/connectors.md, design notes: connectors/signals.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

log = logging.getLogger("gputriage")


def stop_on_signals(
    stop: asyncio.Event, *, give_up_after_seconds: float | None = None
) -> Callable[[], None]:
    """Set ``stop`` on SIGINT or SIGTERM (call from the running loop's thread).

    Returns a function that puts the previous handlers back (for callers that
    go on running after their loop, such as tests embedding the demo).
    """

    first: list[signal.Signals] = []

    def on_signal(signum: signal.Signals) -> None:
        if first and give_up_after_seconds is not None:
            if signum == first[0]:  # the same signal again: the user means it
                _give_up(0.0)
            return  # the other kind: a parent forwarding the stop (see the module docs)
        first.append(signum)
        stop.set()
        if give_up_after_seconds is not None:
            watchdog = threading.Timer(give_up_after_seconds, _give_up, [give_up_after_seconds])
            watchdog.daemon = True
            watchdog.start()

    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)

    def restore() -> None:
        for signum in installed:
            loop.remove_signal_handler(signum)

    return restore


def ignore_late_signals() -> None:
    """After a clean stop (the loop has returned): ignore SIGINT and SIGTERM while the
    process exits.

    Trap: ``asyncio.run`` closing its loop puts the default handlers back, and the
    interpreter's exit (flushing logs, finalising aiokafka's and msgspec's modules)
    still takes a moment. A parent forwarding the stop (``gputriage demo`` sends its
    worker SIGTERM after the terminal's Ctrl-C reached both) then kills a process that
    had already stopped cleanly: exit status -15 instead of 0, and the parent reports
    an unclean stop. Only for a command's main path, once its work is done.
    """
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            signal.signal(signum, signal.SIG_IGN)


def _give_up(seconds: float) -> None:
    if seconds:
        log.error(
            "did not stop within %g s; exiting (what was not delivered is read again)", seconds
        )
    logging.shutdown()
    sys.stderr.flush()
    os._exit(1)
