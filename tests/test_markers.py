"""The ``e2e`` and ``slow`` marks of tests/conftest.py: what starts a process is found by
following a test's code, and every test :data:`tests.conftest.SLOW` names exists."""

from __future__ import annotations

import functools
import importlib
import subprocess
import sys

from tests import conftest
from tests.conftest import SLOW, _does, _starts_a_process


def _spawns() -> None:
    subprocess.run([sys.executable, "-c", "pass"], check=True)


@functools.cache
def _cached() -> None:
    _spawns()


class _Runner:
    def go(self) -> None:
        _cached()


def _pure() -> int:
    return sum(range(3))


def _through_a_class() -> None:
    _Runner().go()


SAMPLES = {
    "spawns": _spawns,
    "cached": _cached,
    "through a class": _through_a_class,
    "pure": _pure,
    "broker": conftest.broker,
}
"""Held in a dict, which the marking does not look into (its trap), so the test below is
not marked e2e itself for naming them."""


def starts(sample: str) -> bool:
    return _does(SAMPLES[sample], _starts_a_process, set())


def test_a_process_is_found_through_helpers_caches_and_classes() -> None:
    assert starts("spawns")
    assert starts("cached")
    assert starts("through a class")
    assert not starts("pure")
    assert starts("broker"), "the session broker's fixture starts the broker"


def test_every_test_slow_names_exists() -> None:
    for name in SLOW:
        path, function = name.split("::")
        module = importlib.import_module(path.removesuffix(".py").replace("/", "."))
        assert callable(getattr(module, function, None)), name
