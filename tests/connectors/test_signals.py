"""``connectors.signals``: which second signal gives up on a clean stop.

Each case runs in a subprocess of its own: signal handlers belong to a process's
main thread, and giving up is ``os._exit``.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import asyncio, os, signal, sys
from connectors.signals import stop_on_signals

async def main() -> None:
    stop = asyncio.Event()
    stop_on_signals(stop, give_up_after_seconds=60)
    for name in sys.argv[1:]:
        os.kill(os.getpid(), getattr(signal, name))
        await asyncio.sleep(0)  # let the loop run the handler
    await asyncio.wait_for(stop.wait(), 10)
    print("clean stop", flush=True)

asyncio.run(main())
"""


@pytest.mark.parametrize(
    ("signals", "clean"),
    [
        (["SIGINT", "SIGTERM"], True),  # Ctrl-C to the group, then the parent's SIGTERM
        (["SIGTERM", "SIGINT"], True),
        (["SIGINT"], True),
        (["SIGINT", "SIGINT"], False),  # Ctrl-C twice: the user means it
        (["SIGTERM", "SIGTERM"], False),
    ],
)
def test_only_a_repeat_of_the_same_signal_gives_up(signals: list[str], clean: bool) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, *signals],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (proc.returncode == 0) is clean, proc.stderr
    assert ("clean stop" in proc.stdout) is clean, proc.stdout
