"""Where a report's figures come from: the machine, the commit, the command, the load.

Every figure and table names these: these machines are shared and noisy, so a figure
without its machine and commit cannot be compared with anything.

Traps: ``platform.processor()`` is empty on most Linux (read ``/proc/cpuinfo``); both the
machine's and this process's usable cores are stated; the dirty flag ignores the report's
own outputs, is read at the start, and ignores untracked files (a new untracked module is
the case it misses, said in the report); a 1-minute load above the core count at start or
end means the figures were shared. bench/README.md, design notes: report/provenance.py.
"""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import streams.core  # noqa: F401 - imported for its guard: native.active() reads the result
from schemas import native

ROOT = Path(__file__).resolve().parents[2]
OWN_OUTPUTS = ("bench/REPORT.md", "bench/figures")
"""Paths whose changes do not make the tree dirty (the report writes them)."""


@dataclass(frozen=True)
class Machine:
    cpu: str
    cores: int
    usable: int
    memory_gib: float
    system: str
    python: str
    core: str
    """``compiled (mypyc)`` or ``Python``: which correlation core the benches import."""

    def line(self) -> str:
        return (
            f"{self.cpu}, {self.cores} cores ({self.usable} usable), {self.memory_gib:.1f} GiB; "
            f"{self.system}; Python {self.python}; core {self.core}"
        )


@dataclass(frozen=True)
class Commit:
    short: str
    dirty: bool

    def line(self) -> str:
        return f"{self.short}{' (dirty)' if self.dirty else ''}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def memory_gib() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return float("nan")


def core_kind() -> str:
    """What the benches' subprocesses will import: the compiled core or the sources
    (``streams.core``'s import is where the guard decides, hence imported here)."""
    return native.active()


def machine() -> Machine:
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    return Machine(
        cpu=cpu_model(),
        cores=os.cpu_count() or 0,
        usable=usable or (os.cpu_count() or 0),
        memory_gib=memory_gib(),
        system=f"{platform.system()} {platform.release()}",
        python=platform.python_version(),
        core=core_kind(),
    )


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def commit() -> Commit:
    """``git rev-parse --short HEAD`` and whether tracked files differ from it."""
    short = _git("rev-parse", "--short", "HEAD")
    if short is None:
        return Commit(short="unknown (not a git checkout)", dirty=False)
    excluded = [f":(exclude){path}" for path in OWN_OUTPUTS]
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", *excluded)
    return Commit(short=short, dirty=bool(status))


def load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


@dataclass(frozen=True)
class Provenance:
    machine: Machine
    commit: Commit
    command: str
    """The command that made the report (``make bench`` and what it ran)."""
    started: str
    """UTC, ISO 8601."""
    mode: str
    """``default`` (the report's sizes) or ``quick`` (tiny sizes, for development)."""
    load_start: float | None

    def caption(self, made_from: str) -> str:
        """The line every figure carries: machine, commit, the command."""
        return (
            f"Machine: {self.machine.line()}. Commit: {self.commit.line()}. "
            f"Made by `{self.command}` from `{made_from}` ({self.mode} sizes, {self.started})."
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Provenance:
        return cls(
            machine=Machine(**data["machine"]),
            commit=Commit(**data["commit"]),
            command=data["command"],
            started=data["started"],
            mode=data["mode"],
            load_start=data["load_start"],
        )


def python_command(module: str, args: list[str]) -> str:
    """How a bench subprocess is shown: ``python -m bench.x --flag``, quoted for a shell
    (the interpreter is the venv's, shown as ``python`` so the line reads anywhere)."""
    return shlex.join(["python", "-m", module, *args])
