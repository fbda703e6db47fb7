"""What ``/healthz`` and ``/readyz`` answer: named conditions a process keeps, and its loop.

Each long-running process keeps a :class:`Health` of named :class:`Condition` objects its code
sets, served beside ``/metrics`` in the API server's own ``[+]name ok`` form. Live: the
loop answers (nothing outside the process fails liveness by default: a restart fixes no
broker outage and drops the connectors' buffers); ``affects="live"`` is for a failure a
restart does fix. Ready: every readiness condition holds now. ``affects="none"``: listed,
failing neither (an unready DaemonSet pod would stall rollouts).

Traps: the loop is probed, not trusted (a no-op handed over with
``call_soon_threadsafe``; a blocked loop sets no flag); conditions are set on the loop and
read by HTTP threads, so each set replaces one immutable :class:`State` in one assignment.
In full: docs/connectors.md, design notes: connectors/health.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

FAIL_AFTER_SECONDS: Final = 300.0
"""A condition with ``affects="live"`` failing this long makes the process not live."""
Affects = Literal["live", "ready", "none"]
"""Which answers a failing condition fails (see the module)."""
LOOP_TIMEOUT_SECONDS: Final = 5.0
"""How long the loop may take to run a no-op before it counts as stalled."""
FETCH_STALE_SECONDS: Final = 30.0
"""No fetch response from any assigned partition for this long: Kafka counts as lost.
A connected aiokafka consumer gets one per long poll (``fetch_max_wait_ms``, 0.5 s) even
when nothing is new, so 30 s is an outage, not a quiet topic."""


@dataclass(frozen=True)
class State:
    """One condition's value: whether it holds, why not, and since when (monotonic)."""

    ok: bool
    detail: str
    since: float


class Condition:
    """A named fact the process's own code keeps true (set it from the event loop)."""

    def __init__(
        self,
        name: str,
        *,
        ok: bool,
        detail: str,
        affects: Affects = "ready",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self.affects: Affects = affects
        self._clock = clock
        self.state = State(ok, detail, clock())

    def set(self, ok: bool, detail: str = "") -> None:
        """Record the condition; ``since`` moves only when ``ok`` changes (a failure that
        goes on with a new reason is still the same failure, as old as its first)."""
        current = self.state
        if current.ok == ok and current.detail == detail:
            return
        since = current.since if current.ok == ok else self._clock()
        self.state = State(ok, detail, since)


@dataclass(frozen=True)
class Report:
    """One answer: the verdict and a line per check."""

    ok: bool
    lines: tuple[str, ...]

    def text(self, endpoint: str) -> str:
        """The body: the checks, then ``<endpoint> check passed|failed``."""
        verdict = "passed" if self.ok else "failed"
        return "".join(f"{line}\n" for line in self.lines) + f"{endpoint} check {verdict}\n"


class Health:
    """A process's conditions and its loop (the module says what each answer means)."""

    def __init__(
        self,
        *,
        fail_after_seconds: float = FAIL_AFTER_SECONDS,
        loop_timeout_seconds: float = LOOP_TIMEOUT_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.fail_after_seconds = fail_after_seconds
        self.loop_timeout_seconds = loop_timeout_seconds
        self._clock = clock
        self._conditions: dict[str, Condition] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()  # guards the dict while a check iterates it

    def condition(
        self, name: str, *, ok: bool = False, detail: str = "starting", affects: Affects = "ready"
    ) -> Condition:
        """The condition called ``name``, created with these arguments if new.

        Starts failing by default: a process is not ready before it has shown it can
        reach what it needs (a worker before its first assignment, a watch before its
        first list). ``affects``: see the module.
        """
        with self._lock:
            found = self._conditions.get(name)
            if found is None:
                found = Condition(name, ok=ok, detail=detail, affects=affects, clock=self._clock)
                self._conditions[name] = found
            return found

    def watch_loop(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        """Probe ``loop`` (default: the running one) on every answer from now on."""
        self._loop = loop or asyncio.get_running_loop()

    def ready(self) -> Report:
        """``/readyz``: the loop answers, and every condition but the reported-only holds."""
        return self._report(lambda condition, state, now: state.ok or condition.affects == "none")

    def live(self) -> Report:
        """``/healthz``: the loop answers, and no ``affects="live"`` condition has been
        failing for ``fail_after_seconds``."""
        return self._report(
            lambda condition, state, now: (
                state.ok
                or condition.affects != "live"
                or now - state.since < self.fail_after_seconds
            )
        )

    def _report(self, passes: Callable[[Condition, State, float], bool]) -> Report:
        lines = [self._loop_line()] if self._loop is not None else []
        ok = not lines or lines[0].startswith("[+]")
        now = self._clock()
        with self._lock:
            conditions = list(self._conditions.values())
        for condition in conditions:
            state = condition.state
            good = passes(condition, state, now)
            ok = ok and good
            lines.append(_line(condition.name, state, now, good))
        return Report(ok, tuple(lines))

    def _loop_line(self) -> str:
        loop = self._loop
        assert loop is not None
        if loop.is_closed():
            return "[-]loop failed: the event loop is closed"
        answered = threading.Event()
        try:
            loop.call_soon_threadsafe(answered.set)
        except RuntimeError:  # closed between the check and the call
            return "[-]loop failed: the event loop is closed"
        if answered.wait(self.loop_timeout_seconds):
            return "[+]loop ok"
        return f"[-]loop failed: no answer in {self.loop_timeout_seconds:g} s (blocked)"


def _line(name: str, state: State, now: float, good: bool) -> str:
    age = max(0.0, now - state.since)
    if state.ok:
        return f"[+]{name} ok" + (f": {state.detail}" if state.detail else "")
    sign = "+" if good else "-"
    return f"[{sign}]{name} failing for {age:.0f} s: {state.detail or 'no detail'}"


def fetched_ago(consumer: Any, now: float) -> float | None:
    """Seconds since the freshest fetch response of any partition ``consumer`` (an
    ``AIOKafkaConsumer``) owns, at wall-clock ``now``; None before the first one.

    ``last_poll_timestamp`` is aiokafka's public record of when a partition's
    highwater was last updated (each fetch response, empty ones included).
    """
    polled = [consumer.last_poll_timestamp(tp) for tp in consumer.assignment()]
    newest = max((ms for ms in polled if ms is not None), default=None)
    return None if newest is None else max(0.0, now - newest / 1000)


def observe_consumer(
    condition: Condition, assigned: int, fetched_ago_seconds: float | None
) -> None:
    """Set a consumer's ``kafka`` condition: partitions owned, fetch responses fresh.

    ``assigned`` 0 (joining, rebalancing) is not ready: no record is being read.
    ``fetched_ago_seconds`` None (none yet, or an engine that cannot tell) passes.
    """
    if not assigned:
        condition.set(False, "no partitions assigned (joining or rebalancing)")
    elif fetched_ago_seconds is not None and fetched_ago_seconds > FETCH_STALE_SECONDS:
        condition.set(False, f"no fetch response for {fetched_ago_seconds:.0f} s")
    else:
        condition.set(True, f"{assigned} partitions assigned")
